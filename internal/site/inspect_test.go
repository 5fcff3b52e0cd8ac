package site

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInspect(t *testing.T) {
	base := t.TempDir()
	mkdir := func(name string) string {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(name, body string) string {
		p := filepath.Join(base, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := mkdir("full")
	write("full/index.html", "hi")
	noIndex := mkdir("noindex")
	write("noindex/app.js", "x")
	dirIndex := mkdir("dirindex/index.html")
	dirIndex = filepath.Dir(dirIndex)
	empty := mkdir("empty")
	file := write("file", "x")
	if err := os.Symlink("../outside-index", filepath.Join(mkdir("escidx"), "index.html")); err != nil {
		t.Fatal(err)
	}
	write("outside-index", "secret")
	escIdx := filepath.Join(base, "escidx")

	yes, no := true, false
	tests := []struct {
		name, root, index string
		want              Status
		hint              string // substring of the hint, "" for none
	}{
		{"ok with index", full, "index.html", Status{Root: full, Status: StatusOK, IndexPresent: &yes}, ""},
		{"ok no index name", full, "", Status{Root: full, Status: StatusOK}, ""},
		{"ok index missing", noIndex, "index.html", Status{Root: noIndex, Status: StatusOK, IndexPresent: &no}, "has no index.html"},
		{"index is a directory", dirIndex, "index.html", Status{Root: dirIndex, Status: StatusOK, IndexPresent: &no}, "has no index.html"},
		{"index escapes", escIdx, "index.html", Status{Root: escIdx, Status: StatusOK, IndexPresent: &no}, "has no index.html"},
		{"missing", filepath.Join(base, "nope"), "index.html", Status{Root: filepath.Join(base, "nope"), Status: StatusMissing}, "does not exist"},
		{"under a file", filepath.Join(file, "x"), "index.html", Status{Root: filepath.Join(file, "x"), Status: StatusMissing}, "does not exist"},
		{"not a directory", file, "index.html", Status{Root: file, Status: StatusNotADirectory}, "regular file, not a directory"},
		{"empty", empty, "index.html", Status{Root: empty, Status: StatusEmpty}, "is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Inspect(tt.root, tt.index)
			hint := got.Hint
			got.Hint = ""
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Inspect(%q, %q) mismatch (-want +got):\n%s", tt.root, tt.index, diff)
			}
			if tt.hint == "" && hint != "" {
				t.Errorf("hint = %q, want none", hint)
			}
			if !strings.Contains(hint, tt.hint) {
				t.Errorf("hint = %q, want it to contain %q", hint, tt.hint)
			}
		})
	}
}

// TestUnreadable needs a user that permission bits apply to; root (as in
// many containers) reads everything.
func TestUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root: permission bits do not stop reads")
	}
	dir := filepath.Join(t.TempDir(), "locked")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })

	if got := Inspect(dir, "index.html"); got.Status != StatusUnreadable || !strings.Contains(got.Hint, "permission") {
		t.Errorf("Inspect = %+v, want unreadable with a permission hint", got)
	}
	rec := do(t, New(config(dir)), "GET", "/")
	if rec.Code != 404 || rec.Header().Get(HeaderSite) != "root-unreadable" {
		t.Errorf("GET / = %d with %s %q, want 404 root-unreadable", rec.Code, HeaderSite, rec.Header().Get(HeaderSite))
	}
}
