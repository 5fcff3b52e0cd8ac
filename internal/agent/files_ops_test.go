//go:build linux

package agent_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/google/go-cmp/cmp"
)

// status is the HTTP status of an agent error, 0 for nil, -1 for an
// error that is not an answer of the agent.
func status(err error) int {
	if err == nil {
		return 0
	}
	var ae *agent.Error
	if errors.As(err, &ae) {
		return ae.Status
	}
	return -1
}

func sum(b string) string {
	s := sha256.Sum256([]byte(b))
	return hex.EncodeToString(s[:])
}

// rootServer serves a fresh root directory and returns a Client and the
// directory.
func rootServer(t *testing.T) (*agent.Client, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, agent.Options{Root: root})
	return c, root
}

func put(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func content(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReadText(t *testing.T) {
	c, root := rootServer(t)
	ctx := t.Context()
	const five = "one\ntwo\nthree\nfour\nfive"
	put(t, root, "f.txt", five)
	put(t, root, "nl.txt", "a\nb\n")
	put(t, root, "empty", "")
	put(t, root, "bin", "PK\x03\x04\x00\x00")
	put(t, root, "latin1", "caf\xe9\n")

	tests := []struct {
		name string
		req  agent.ReadTextRequest
		want agent.ReadTextResult
	}{
		{"whole", agent.ReadTextRequest{Path: "/f.txt"},
			agent.ReadTextResult{Content: five, TotalLines: 5, StartLine: 1}},
		{"window", agent.ReadTextRequest{Path: "/f.txt", OffsetLine: 2, LimitLines: 2},
			agent.ReadTextResult{Content: "two\nthree\n", TotalLines: 5, StartLine: 2, Truncated: true}},
		{"last line without newline", agent.ReadTextRequest{Path: "/f.txt", OffsetLine: 5, LimitLines: 10},
			agent.ReadTextResult{Content: "five", TotalLines: 5, StartLine: 5}},
		{"past the end", agent.ReadTextRequest{Path: "/f.txt", OffsetLine: 9},
			agent.ReadTextResult{Content: "", TotalLines: 5, StartLine: 9}},
		{"limit only", agent.ReadTextRequest{Path: "/f.txt", LimitLines: 1},
			agent.ReadTextResult{Content: "one\n", TotalLines: 5, StartLine: 1, Truncated: true}},
		{"trailing newline", agent.ReadTextRequest{Path: "/nl.txt", OffsetLine: 2},
			agent.ReadTextResult{Content: "b\n", TotalLines: 2, StartLine: 2}},
		{"empty file", agent.ReadTextRequest{Path: "/empty"},
			agent.ReadTextResult{Content: "", TotalLines: 0, StartLine: 1}},
	}
	for _, tt := range tests {
		got, err := c.ReadText(ctx, tt.req)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		whole := content(t, root, strings.TrimPrefix(tt.req.Path, "/"))
		tt.want.Path, tt.want.Size, tt.want.SHA256 = tt.req.Path, int64(len(whole)), sum(whole)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: ReadText mismatch (-want +got):\n%s", tt.name, diff)
		}
	}

	refused := []struct {
		req    agent.ReadTextRequest
		status int
		msg    string
	}{
		{agent.ReadTextRequest{Path: "/bin"}, 415, "readBytes"},
		{agent.ReadTextRequest{Path: "/latin1"}, 415, "not UTF-8"},
		{agent.ReadTextRequest{Path: "/"}, 400, "is a directory"},
		{agent.ReadTextRequest{Path: "/missing"}, 404, "missing"},
		{agent.ReadTextRequest{Path: "/f.txt", OffsetLine: -1}, 400, "negative"},
		{agent.ReadTextRequest{Path: "f.txt"}, 400, "not absolute"},
	}
	for _, tt := range refused {
		_, err := c.ReadText(ctx, tt.req)
		if status(err) != tt.status || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ReadText(%+v) = %v; want %d mentioning %q", tt.req, err, tt.status, tt.msg)
		}
	}

	big := strings.Repeat("x", agent.MaxTextFile+1)
	put(t, root, "big", big)
	if _, err := c.ReadText(ctx, agent.ReadTextRequest{Path: "/big"}); status(err) != 413 {
		t.Errorf("ReadText of a file over the limit: %v, want 413", err)
	}
}

func TestWriteAndHashes(t *testing.T) {
	c, root := rootServer(t)
	ctx := t.Context()

	fi, err := c.WriteFile(ctx, "/raw", strings.NewReader("raw bytes"), 0)
	if err != nil || fi.SHA256 != sum("raw bytes") || fi.Size != 9 {
		t.Errorf("WriteFile = %+v, %v; want size 9 and the content's sha256", fi, err)
	}
	// The header hashes the whole file even for a range.
	b, h, err := c.ReadBytes(ctx, "/raw", 4, 5)
	if err != nil || string(b) != "bytes" || h != sum("raw bytes") {
		t.Errorf("ReadBytes(4, 5) = %q, %s, %v; want bytes and the whole file's hash", b, h, err)
	}

	res, err := c.Write(ctx, agent.WriteRequest{Path: "/d/e/new.txt", Content: "v1\x00\xff", Parents: true, Mode: "0600"})
	want := agent.WriteResult{Path: "/d/e/new.txt", Bytes: 4, SHA256: sum("v1\x00\xff"), Created: true}
	if err != nil || res != want {
		t.Errorf("Write new = %+v, %v; want %+v", res, err, want)
	}
	if got := content(t, root, "d/e/new.txt"); got != "v1\x00\xff" {
		t.Errorf("written content %q", got)
	}
	if _, err := c.Write(ctx, agent.WriteRequest{Path: "/d/e/new.txt", Content: "v2", ExpectedSHA256: sum("stale")}); status(err) != 412 {
		t.Errorf("Write with a stale hash: %v, want 412", err)
	}
	if got := content(t, root, "d/e/new.txt"); got != "v1\x00\xff" {
		t.Errorf("a failed precondition changed the file to %q", got)
	}
	res, err = c.Write(ctx, agent.WriteRequest{Path: "/d/e/new.txt", Content: "v2", ExpectedSHA256: strings.ToUpper(sum("v1\x00\xff"))})
	if err != nil || res.Created || res.Bytes != 2 {
		t.Errorf("Write with the current hash = %+v, %v", res, err)
	}
	if st, err := os.Stat(filepath.Join(root, "d/e/new.txt")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode after rewrite: %v, %v; want 0600 kept", st.Mode(), err)
	}
	if _, err := c.Write(ctx, agent.WriteRequest{Path: "/x/y", Content: "no parents"}); status(err) != 404 {
		t.Errorf("Write into a missing directory: %v, want 404", err)
	}
	if _, err := c.Write(ctx, agent.WriteRequest{Path: "/nope", ExpectedSHA256: sum("")}); status(err) != 412 {
		t.Errorf("Write expecting a hash of a missing file: %v, want 412", err)
	}
	if _, err := c.Write(ctx, agent.WriteRequest{Path: "/raw", ExpectedSHA256: "abc"}); status(err) != 400 {
		t.Errorf("Write with a malformed hash: %v, want 400", err)
	}
	if _, err := c.Write(ctx, agent.WriteRequest{Path: "/d"}); status(err) != 409 {
		t.Errorf("Write over a directory: %v, want 409", err)
	}
}

func TestGlob(t *testing.T) {
	c, root := rootServer(t)
	ctx := t.Context()
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	files := []struct {
		rel string
		age int // hours before base
	}{
		{"main.go", 5},
		{"src/a.go", 1},
		{"src/b.go", 1},
		{"src/deep/c.go", 3},
		{"src/deep/c.txt", 0},
		{"docs/readme.md", 2},
	}
	for _, f := range files {
		put(t, root, f.rel, f.rel)
		mt := base.Add(-time.Duration(f.age) * time.Hour)
		if err := os.Chtimes(filepath.Join(root, f.rel), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink to a file inside the root is a file; a symlinked
	// directory is not walked.
	os.Symlink("main.go", filepath.Join(root, "link.go"))
	os.Symlink("src", filepath.Join(root, "srclink"))

	paths := func(r agent.GlobResult) string {
		var ps []string
		for _, m := range r.Matches {
			ps = append(ps, m.Path)
		}
		return strings.Join(ps, " ")
	}
	tests := []struct {
		req       agent.GlobRequest
		want      string
		truncated bool
	}{
		// Newest first; equal times by path.
		{agent.GlobRequest{Pattern: "**/*.go"}, "src/a.go src/b.go src/deep/c.go link.go main.go", false},
		{agent.GlobRequest{Pattern: "*.go"}, "link.go main.go", false},
		{agent.GlobRequest{Pattern: "src/*.go"}, "src/a.go src/b.go", false},
		{agent.GlobRequest{Pattern: "src/**"}, "src/deep/c.txt src/a.go src/b.go src/deep/c.go", false},
		{agent.GlobRequest{Pattern: "**/*.{md,txt}"}, "src/deep/c.txt docs/readme.md", false},
		{agent.GlobRequest{Pattern: "**/*.go", Path: "/src"}, "a.go b.go deep/c.go", false},
		{agent.GlobRequest{Pattern: "/src/deep/*"}, "src/deep/c.txt src/deep/c.go", false},
		{agent.GlobRequest{Pattern: "**/*.go", Limit: 2}, "src/a.go src/b.go", true},
		{agent.GlobRequest{Pattern: "**/*.rs"}, "", false},
	}
	for _, tt := range tests {
		got, err := c.Glob(ctx, tt.req)
		if err != nil {
			t.Errorf("Glob(%+v): %v", tt.req, err)
			continue
		}
		if paths(got) != tt.want || got.Truncated != tt.truncated {
			t.Errorf("Glob(%+v) = %q truncated %v; want %q truncated %v", tt.req, paths(got), got.Truncated, tt.want, tt.truncated)
		}
	}
	got, err := c.Glob(ctx, agent.GlobRequest{Pattern: "src/a.go"})
	if err != nil || len(got.Matches) != 1 || got.Matches[0].Size != int64(len("src/a.go")) || !got.Matches[0].ModTime.Equal(base.Add(-time.Hour)) {
		t.Errorf("Glob src/a.go = %+v, %v; want its size and mtime", got, err)
	}
	for _, req := range []agent.GlobRequest{
		{Pattern: "src/[a"},
		{Pattern: ""},
		{Pattern: "/abs", Path: "/src"},
		{Pattern: "*", Limit: -1},
		{Pattern: "*", Path: "/main.go"},
	} {
		if _, err := c.Glob(ctx, req); status(err) != 400 {
			t.Errorf("Glob(%+v): %v, want 400", req, err)
		}
	}
}

func TestGrep(t *testing.T) {
	c, root := rootServer(t)
	ctx := t.Context()
	put(t, root, "a.go", "package a\n\nfunc Alpha() {}\n// TODO: alpha\n")
	put(t, root, "b.txt", "TODO one\nTODO two\nTODO three\n")
	put(t, root, "sub/c.go", "x\ntodo lower\ny\r\n")
	put(t, root, "bin.dat", "TODO\x00binary")

	type hit struct {
		Path string
		Line int
		Text string
	}
	hits := func(r agent.GrepResult) []hit {
		var hs []hit
		for _, m := range r.Matches {
			hs = append(hs, hit{m.Path, m.Line, m.Text})
		}
		return hs
	}
	tests := []struct {
		name      string
		req       agent.GrepRequest
		want      []hit
		truncated bool
		scanned   int
	}{
		{"case sensitive, binary skipped", agent.GrepRequest{Pattern: "TODO"},
			[]hit{{"a.go", 4, "// TODO: alpha"}, {"b.txt", 1, "TODO one"}, {"b.txt", 2, "TODO two"}, {"b.txt", 3, "TODO three"}}, false, 3},
		{"ignore case", agent.GrepRequest{Pattern: "todo", IgnoreCase: true, Glob: "*.go"},
			[]hit{{"a.go", 4, "// TODO: alpha"}, {"sub/c.go", 2, "todo lower"}}, false, 2},
		{"glob with a slash", agent.GrepRequest{Pattern: "o", Glob: "sub/**"},
			[]hit{{"sub/c.go", 2, "todo lower"}}, false, 1},
		{"max per file", agent.GrepRequest{Pattern: "^TODO", MaxPerFile: 1},
			[]hit{{"b.txt", 1, "TODO one"}}, false, 3},
		{"max results", agent.GrepRequest{Pattern: "TODO", MaxResults: 2},
			[]hit{{"a.go", 4, "// TODO: alpha"}, {"b.txt", 1, "TODO one"}}, true, 2},
		{"exactly max results is not truncated", agent.GrepRequest{Pattern: "TODO t", MaxResults: 2},
			[]hit{{"b.txt", 2, "TODO two"}, {"b.txt", 3, "TODO three"}}, false, 3},
		{"one file", agent.GrepRequest{Pattern: "two", Path: "/b.txt"},
			[]hit{{"b.txt", 2, "TODO two"}}, false, 1},
		{"subdirectory, CRLF trimmed", agent.GrepRequest{Pattern: "^y$", Path: "/sub"},
			[]hit{{"c.go", 3, "y"}}, false, 1},
	}
	for _, tt := range tests {
		got, err := c.Grep(ctx, tt.req)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, hits(got)); diff != "" {
			t.Errorf("%s: matches (-want +got):\n%s", tt.name, diff)
		}
		if got.Truncated != tt.truncated || got.FilesScanned != tt.scanned {
			t.Errorf("%s: truncated %v, scanned %d; want %v, %d", tt.name, got.Truncated, got.FilesScanned, tt.truncated, tt.scanned)
		}
	}

	got, err := c.Grep(ctx, agent.GrepRequest{Pattern: "two", Path: "/b.txt", Context: 1})
	if err != nil || len(got.Matches) != 1 || !cmp.Equal(got.Matches[0].Before, []string{"TODO one"}) || !cmp.Equal(got.Matches[0].After, []string{"TODO three"}) {
		t.Errorf("Grep with context = %+v, %v", got, err)
	}
	for _, req := range []agent.GrepRequest{
		{Pattern: "("},
		{Pattern: ""},
		{Pattern: "x", Glob: "[a"},
		{Pattern: "x", MaxResults: -1},
	} {
		if _, err := c.Grep(ctx, req); status(err) != 400 {
			t.Errorf("Grep(%+v): %v, want 400", req, err)
		}
	}
}

func TestEdit(t *testing.T) {
	c, root := rootServer(t)
	ctx := t.Context()
	const orig = "alpha\nbeta\ngamma\nbeta\n"
	reset := func() {
		put(t, root, "f", orig)
		os.Chmod(filepath.Join(root, "f"), 0o640)
	}

	reset()
	res, err := c.Edit(ctx, agent.EditRequest{Path: "/f", Edits: []agent.Edit{{Old: "alpha", New: "ALPHA"}}})
	want := "ALPHA\nbeta\ngamma\nbeta\n"
	if err != nil || res != (agent.EditResult{Path: "/f", Bytes: int64(len(want)), SHA256: sum(want), Replacements: 1}) {
		t.Errorf("Edit = %+v, %v", res, err)
	}
	if got := content(t, root, "f"); got != want {
		t.Errorf("after edit %q, want %q", got, want)
	}
	if st, _ := os.Stat(filepath.Join(root, "f")); st.Mode().Perm() != 0o640 {
		t.Errorf("mode after edit %v, want 0640 kept", st.Mode())
	}

	reset()
	res, err = c.Edit(ctx, agent.EditRequest{Path: "/f", Edits: []agent.Edit{
		{Old: "beta", New: "B", ReplaceAll: true},
		{Old: "gamma\nB", New: "G"}, // sees the first edit's result
	}})
	if err != nil || res.Replacements != 3 || content(t, root, "f") != "alpha\nB\nG\n" {
		t.Errorf("batch = %+v, %v, file %q", res, err, content(t, root, "f"))
	}

	conflicts := []struct {
		name  string
		edits []agent.Edit
		msg   string
	}{
		{"no match", []agent.Edit{{Old: "delta", New: "x"}}, "edit 1 of 1: old text not found"},
		{"two matches", []agent.Edit{{Old: "beta", New: "x"}}, "occurs 2 times"},
		// The first edit applies in memory; the second fails, so the
		// file must stay as it was.
		{"second of a batch", []agent.Edit{{Old: "alpha", New: "A"}, {Old: "zeta", New: "Z"}}, "edit 2 of 2"},
		{"changed by an earlier edit", []agent.Edit{{Old: "gamma", New: "C"}, {Old: "gamma", New: "D"}}, "earlier edit"},
		{"whitespace", []agent.Edit{{Old: "alpha  beta", New: "x"}}, "whitespace"},
	}
	for _, tt := range conflicts {
		reset()
		_, err := c.Edit(ctx, agent.EditRequest{Path: "/f", Edits: tt.edits})
		if status(err) != 409 || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want 409 mentioning %q", tt.name, err, tt.msg)
		}
		if got := content(t, root, "f"); got != orig {
			t.Errorf("%s: file changed to %q", tt.name, got)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(root, ".*tmp*")); len(left) > 0 {
		t.Errorf("temp files left: %v", left)
	}

	reset()
	if _, err := c.Edit(ctx, agent.EditRequest{Path: "/f", Edits: []agent.Edit{{Old: "alpha", New: "x"}}, ExpectedSHA256: sum("other")}); status(err) != 412 {
		t.Errorf("stale hash: %v, want 412", err)
	}
	if _, err := c.Edit(ctx, agent.EditRequest{Path: "/f", Edits: []agent.Edit{{Old: "alpha", New: "x"}}, ExpectedSHA256: sum(orig)}); err != nil {
		t.Errorf("current hash: %v", err)
	}
	os.Symlink("f", filepath.Join(root, "lnk"))
	for _, tt := range []struct {
		req    agent.EditRequest
		status int
	}{
		{agent.EditRequest{Path: "/f"}, 400},
		{agent.EditRequest{Path: "/f", Edits: []agent.Edit{{Old: "", New: "x"}}}, 400},
		{agent.EditRequest{Path: "/missing", Edits: []agent.Edit{{Old: "a", New: "b"}}}, 404},
		{agent.EditRequest{Path: "/lnk", Edits: []agent.Edit{{Old: "a", New: "b"}}}, 409},
		{agent.EditRequest{Path: "/", Edits: []agent.Edit{{Old: "a", New: "b"}}}, 400},
	} {
		if _, err := c.Edit(ctx, tt.req); status(err) != tt.status {
			t.Errorf("Edit(%+v): %v, want %d", tt.req, err, tt.status)
		}
	}
}

// TestEditConcurrentPrecondition has two editors that read the same
// version of a file and then edit it at once, each expecting that
// version: exactly one must win, and the loser must not clobber it.
func TestEditConcurrentPrecondition(t *testing.T) {
	c, root := rootServer(t)
	ctx := t.Context()
	put(t, root, "counter", "value: 0\n")
	for round := range 20 {
		rd, err := c.ReadText(ctx, agent.ReadTextRequest{Path: "/counter"})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, who := range []string{"A", "B"} {
			wg.Go(func() {
				_, errs[i] = c.Edit(ctx, agent.EditRequest{
					Path:           "/counter",
					Edits:          []agent.Edit{{Old: rd.Content, New: rd.Content + who + "\n"}},
					ExpectedSHA256: rd.SHA256,
				})
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch status(err) {
			case 0:
				won++
			case 412:
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		after := content(t, root, "counter")
		if won != 1 || strings.Count(after, "\n") != strings.Count(rd.Content, "\n")+1 {
			t.Fatalf("round %d: %d editors won, file %q; want exactly one line added", round, won, after)
		}
	}
}

func TestPatch(t *testing.T) {
	c, root := rootServer(t)
	ctx := t.Context()
	setup := func() {
		os.RemoveAll(root)
		os.Mkdir(root, 0o755)
		put(t, root, "a.txt", "one\ntwo\nthree\n")
		put(t, root, "b.txt", "keep\nold\n")
		put(t, root, "gone.txt", "bye\n")
		os.Chmod(filepath.Join(root, "a.txt"), 0o600)
	}

	setup()
	const multi = `diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
diff --git a/new/dir/c.txt b/new/dir/c.txt
new file mode 100644
--- /dev/null
+++ b/new/dir/c.txt
@@ -0,0 +1,2 @@
+hello
+world
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
`
	res, err := c.Patch(ctx, agent.PatchRequest{Patch: multi})
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.PatchedFile{
		{Path: "/a.txt", Bytes: 14, SHA256: sum("one\nTWO\nthree\n")},
		{Path: "/new/dir/c.txt", Bytes: 12, SHA256: sum("hello\nworld\n"), Created: true},
		{Path: "/gone.txt", Deleted: true},
	}
	if diff := cmp.Diff(want, res.Files); diff != "" {
		t.Errorf("Patch files (-want +got):\n%s", diff)
	}
	if got := content(t, root, "a.txt"); got != "one\nTWO\nthree\n" {
		t.Errorf("a.txt = %q", got)
	}
	if st, _ := os.Stat(filepath.Join(root, "a.txt")); st.Mode().Perm() != 0o600 {
		t.Errorf("a.txt mode %v, want 0600 kept", st.Mode())
	}
	if got := content(t, root, "new/dir/c.txt"); got != "hello\nworld\n" {
		t.Errorf("c.txt = %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "gone.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("gone.txt: %v, want deleted", err)
	}

	// A traditional diff with a/ b/ prefixes, in a dir, whose second
	// file's hunk does not match: nothing at all may change.
	setup()
	const bad = `--- a/a.txt
+++ b/a.txt
@@ -1,2 +1,2 @@
-one
+ONE
 two
--- /dev/null
+++ b/made.txt
@@ -0,0 +1 @@
+new
--- a/b.txt
+++ b/b.txt
@@ -1,2 +1,2 @@
 keep
-older
+newer
`
	_, err = c.Patch(ctx, agent.PatchRequest{Patch: bad})
	if status(err) != 409 || !strings.Contains(err.Error(), "file 3 of 3 (/b.txt): hunk 1 of 1 (@@ -1,2 +1,2 @@) does not apply") {
		t.Errorf("bad hunk: %v, want 409 naming file 3 and hunk 1", err)
	}
	if got := content(t, root, "a.txt"); got != "one\ntwo\nthree\n" {
		t.Errorf("a.txt changed by a failed patch: %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "made.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("made.txt created by a failed patch: %v", err)
	}

	// The same diff minus the bad part applies, in a directory, and a
	// rename with a change moves the content.
	setup()
	os.Mkdir(filepath.Join(root, "sub"), 0o755)
	put(t, root, "sub/x.txt", "x1\nx2\n")
	const rename = `diff --git a/x.txt b/y.txt
similarity index 50%
rename from x.txt
rename to y.txt
--- a/x.txt
+++ b/y.txt
@@ -1,2 +1,2 @@
 x1
-x2
+y2
`
	res, err = c.Patch(ctx, agent.PatchRequest{Patch: rename, Dir: "/sub"})
	if err != nil || len(res.Files) != 2 || res.Files[0] != (agent.PatchedFile{Path: "/sub/x.txt", Deleted: true}) || res.Files[1].Path != "/sub/y.txt" || !res.Files[1].Created {
		t.Errorf("rename = %+v, %v", res, err)
	}
	if got := content(t, root, "sub/y.txt"); got != "x1\ny2\n" {
		t.Errorf("renamed file %q", got)
	}

	// Plain names and an explicit strip.
	setup()
	const plain = "--- a.txt\n+++ a.txt\n@@ -3 +3 @@\n-three\n+3\n"
	if _, err := c.Patch(ctx, agent.PatchRequest{Patch: plain}); err != nil || content(t, root, "a.txt") != "one\ntwo\n3\n" {
		t.Errorf("plain names: %v, a.txt %q", err, content(t, root, "a.txt"))
	}
	strip := 2
	const deep = "--- x/y/b.txt\n+++ x/y/b.txt\n@@ -2 +2 @@\n-old\n+new\n"
	if _, err := c.Patch(ctx, agent.PatchRequest{Patch: deep, Strip: &strip}); err != nil || content(t, root, "b.txt") != "keep\nnew\n" {
		t.Errorf("strip 2: %v, b.txt %q", err, content(t, root, "b.txt"))
	}

	setup()
	for _, tt := range []struct {
		name, patch string
		status      int
		msg         string
	}{
		{"empty", "", 400, "empty"},
		{"not a diff", "hello\n", 400, "no file diffs"},
		{"create existing", "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+x\n", 409, "already exists"},
		{"patch missing", "--- a/nope\n+++ b/nope\n@@ -1 +1 @@\n-x\n+y\n", 409, "does not exist"},
		{"delete changed", "--- a/b.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-keep\n", 409, "b.txt"},
	} {
		_, err := c.Patch(ctx, agent.PatchRequest{Patch: tt.patch})
		if status(err) != tt.status || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %d mentioning %q", tt.name, err, tt.status, tt.msg)
		}
	}
	if got := content(t, root, "b.txt"); got != "keep\nold\n" {
		t.Errorf("b.txt changed by failed patches: %q", got)
	}
}
