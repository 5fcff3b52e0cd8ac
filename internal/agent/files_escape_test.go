//go:build linux

package agent_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/agent"
)

// escapeTree builds base/outside/secret (file) and base/outside/dir (a
// directory holding a file), and a root base/root with symlinks leading
// out of it in every way: relative, absolute, to a directory, and
// through a chain of links inside the root.
func escapeTree(t *testing.T) (base, root string) {
	t.Helper()
	base = t.TempDir()
	root = filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{root, filepath.Join(outside, "dir"), filepath.Join(root, "in")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(outside, "secret"), []byte(secretText), 0o644)
	os.WriteFile(filepath.Join(outside, "dir", "secret"), []byte(secretText), 0o644)
	os.WriteFile(filepath.Join(root, "in", "ok.txt"), []byte("fine\n"), 0o644)
	links := map[string]string{
		"esc":          "../outside/secret",
		"abs":          filepath.Join(outside, "secret"),
		"escdir":       "../outside/dir",
		"absdir":       filepath.Join(outside, "dir"),
		"chain1":       "chain2",
		"chain2":       "in/../chain3",
		"chain3":       "../outside/secret",
		"in/deep":      "../../outside/dir",
		"chaindir":     "in/deep",
		"in/loop":      "../in",
		"in/self":      "self",
		"in/okl":       "ok.txt",
		"in/dangling":  "nowhere",
		"in/updangler": "../../../../../../../../../../tmp",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return base, root
}

// secretText is the content of the files outside the root; no answer may
// ever contain it.
const secretText = "TOP-SECRET-7c1e9d outside the root\n"

// outsideState describes everything under base except the root, so a test
// can check that nothing there changed.
func outsideState(t *testing.T, base string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(base, p)
		if rel == "root" {
			return filepath.SkipDir
		}
		fmt.Fprintf(&b, "%s %v", rel, d.Type())
		if d.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q", data)
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

func TestFileOpsConfinement(t *testing.T) {
	ctx := t.Context()
	escapes := []string{
		"/../outside/secret",
		"/in/../../outside/secret",
		"/esc",
		"/abs",
		"/escdir/secret",
		"/absdir/secret",
		"/chain1",
		"/chaindir/secret",
		"/in/deep/secret",
		"/in/updangler/x",
	}
	edits := []agent.Edit{{Old: "TOP-SECRET", New: "PWNED"}}
	// Each op gets a fresh tree and server, so that one op replacing a
	// link (which is allowed: the link is inside the root) does not take
	// the escape away from the next.
	var c *agent.Client
	ops := []struct {
		name string
		do   func(p string) (string, error) // the answer, for leak checks
		// replacesLinks: writing to a path whose last component is a
		// symlink replaces the link itself, inside the root; that is not
		// an escape, so success is allowed there.
		replacesLinks bool
	}{
		{"read", func(p string) (string, error) {
			r, err := c.ReadText(ctx, agent.ReadTextRequest{Path: p})
			return r.Content, err
		}, false},
		{"readBytes", func(p string) (string, error) {
			b, _, err := c.ReadBytes(ctx, p, 0, -1)
			return string(b), err
		}, false},
		{"write", func(p string) (string, error) {
			_, err := c.Write(ctx, agent.WriteRequest{Path: p, Content: "planted"})
			return "", err
		}, true},
		{"write with parents", func(p string) (string, error) {
			_, err := c.Write(ctx, agent.WriteRequest{Path: p + "/sub/planted", Content: "planted", Parents: true})
			return "", err
		}, false},
		{"put", func(p string) (string, error) {
			_, err := c.WriteFile(ctx, p, strings.NewReader("planted"), 0)
			return "", err
		}, true},
		{"edit", func(p string) (string, error) {
			_, err := c.Edit(ctx, agent.EditRequest{Path: p, Edits: edits})
			return "", err
		}, false},
		{"glob in", func(p string) (string, error) {
			r, err := c.Glob(ctx, agent.GlobRequest{Pattern: "**", Path: p})
			return fmt.Sprint(r), err
		}, false},
		{"grep in", func(p string) (string, error) {
			r, err := c.Grep(ctx, agent.GrepRequest{Pattern: "SECRET", Path: p})
			return fmt.Sprint(r), err
		}, false},
		{"patch", func(p string) (string, error) {
			patch := fmt.Sprintf("--- %s\n+++ %s\n@@ -1 +1 @@\n-%s+PWNED\n", p, p, secretText)
			_, err := c.Patch(ctx, agent.PatchRequest{Patch: patch})
			return "", err
		}, false},
		{"patch create", func(p string) (string, error) {
			patch := fmt.Sprintf("--- /dev/null\n+++ %s/planted\n@@ -0,0 +1 @@\n+x\n", p)
			_, err := c.Patch(ctx, agent.PatchRequest{Patch: patch})
			return "", err
		}, false},
		{"mkdir", func(p string) (string, error) {
			_, err := c.Mkdir(ctx, p+"/made", 0, true)
			return "", err
		}, false},
	}
	lastIsLink := map[string]bool{"/esc": true, "/abs": true, "/chain1": true}
	for _, op := range ops {
		base, root := escapeTree(t)
		c, _ = serve(t, agent.Options{Root: root})
		before := outsideState(t, base)
		for _, p := range escapes {
			got, err := op.do(p)
			switch {
			case err == nil && op.replacesLinks && lastIsLink[p]:
				if fi, err := os.Lstat(filepath.Join(root, p)); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("%s %s: the link was not replaced by a file inside the root: %v", op.name, p, err)
				}
			case err == nil:
				t.Errorf("%s %s succeeded", op.name, p)
			case status(err) < 400 || status(err) >= 500:
				t.Errorf("%s %s: %v, want a 4xx refusal", op.name, p, err)
			}
			if strings.Contains(got, "TOP-SECRET") || (err != nil && strings.Contains(err.Error(), "TOP-SECRET")) {
				t.Errorf("%s %s leaked the secret", op.name, p)
			}
		}
		// A path that is not absolute is refused outright (patch names
		// are relative to its dir by design).
		if !strings.HasPrefix(op.name, "patch") {
			if _, err := op.do("outside/secret"); status(err) != 400 {
				t.Errorf("%s of a relative path: %v, want 400", op.name, err)
			}
		}
		if after := outsideState(t, base); after != before {
			t.Errorf("%s changed what is outside the root:\nbefore:\n%s\nafter:\n%s", op.name, before, after)
		}
	}

	base, root := escapeTree(t)
	c, _ = serve(t, agent.Options{Root: root})
	before := outsideState(t, base)
	// Patch names relative to dir, and a dir outside.
	for _, tt := range []agent.PatchRequest{
		{Patch: "--- a/../outside/secret\n+++ b/../outside/secret\n@@ -1 +1 @@\n-" + secretText + "+x\n"},
		{Patch: "--- /dev/null\n+++ b/escdir/planted\n@@ -0,0 +1 @@\n+x\n"},
		{Patch: "--- /dev/null\n+++ b/planted\n@@ -0,0 +1 @@\n+x\n", Dir: "/../outside"},
		{Patch: "--- /dev/null\n+++ b/planted\n@@ -0,0 +1 @@\n+x\n", Dir: "/escdir"},
	} {
		if _, err := c.Patch(ctx, tt); status(err) != 403 {
			t.Errorf("Patch(%q in %q): %v, want 403", tt.Patch, tt.Dir, err)
		}
	}

	// Walks of the whole root see only what is inside it: the symlinked
	// directories are not entered, links to outside files are skipped,
	// loops do not loop.
	g, err := c.Glob(ctx, agent.GlobRequest{Pattern: "**"})
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, m := range g.Matches {
		found = append(found, m.Path)
	}
	if got, want := strings.Join(found, " "), "in/ok.txt in/okl"; got != want {
		// Same mtime: ordered by path.
		t.Errorf("Glob ** = %q, want %q", got, want)
	}
	gr, err := c.Grep(ctx, agent.GrepRequest{Pattern: "."})
	if err != nil || strings.Contains(fmt.Sprint(gr), "TOP-SECRET") || gr.FilesScanned != 2 {
		t.Errorf("Grep . = %+v, %v; want only the two files inside", gr, err)
	}

	if after := outsideState(t, base); after != before {
		t.Errorf("outside the root changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
