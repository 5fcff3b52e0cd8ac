package computerapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"github.com/berth-dev/berth/apitype/computertype"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/grant"
)

var fileActions = []grant.Action{
	grant.FilesRead, grant.FilesReadBytes, grant.FilesWrite, grant.FilesWriteByte, grant.FilesList,
	grant.FilesGlob, grant.FilesGrep, grant.FilesEdit, grant.FilesPatch, grant.Mkdir, grant.Exec,
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}

// TestFiles drives the files.* operations through the API with a grant.
func TestFiles(t *testing.T) {
	e := newEnv(t)
	e.create("f1")
	_, g := e.grant("f1", fileActions...)
	base := "/computers/f1"

	// write (atomic replace, parents), read windowed by lines.
	w := decode[computertype.WriteResult](t, e.must(g, 200, "POST", base+"/files/write", computertype.WriteRequest{Path: "src/a.txt", Content: "one\ntwo\nthree\nfour\n", Parents: true}))
	if w.Path != "/src/a.txt" || w.Bytes != 19 || !w.Created || len(w.SHA256) != 64 {
		t.Errorf("write = %+v", w)
	}
	r := decode[computertype.ReadResult](t, e.must(g, 200, "POST", base+"/files/read", computertype.ReadRequest{Path: "/src/a.txt", Offset: 2, Limit: 2}))
	if r.Content != "two\nthree\n" || r.StartLine != 2 || r.TotalLines != 4 || !r.Truncated || r.SHA256 != w.SHA256 {
		t.Errorf("read window = %+v", r)
	}

	// readBytes and writeBytes: exact bytes, the hash in a header.
	bin := []byte{0, 1, 2, 0xff, '\n'}
	e.must(g, 200, "PUT", base+"/files/writeBytes?path=bin/x.bin&parents=true", bin)
	// Streamed (no precondition): passed on to the agent with its length;
	// the answer has the hash of what was written.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	wb := decode[computertype.WriteResult](t, e.must(g, 200, "PUT", base+"/files/writeBytes?path=bin/big.bin", big))
	if sum := sha256.Sum256(big); wb.Path != "/bin/big.bin" || wb.Bytes != int64(len(big)) || wb.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("writeBytes of 4 MiB = %+v, want %d bytes with sha256 %x", wb, len(big), sum)
	}
	if resp := e.send(g, "GET", base+"/files/readBytes?path=bin/big.bin", nil, nil); !bytes.Equal(readAll(t, resp), big) {
		t.Error("readBytes of bin/big.bin differs from what writeBytes wrote")
	}
	resp := e.send(g, "GET", base+"/files/readBytes?path=bin/x.bin", nil, nil)
	got := readAll(t, resp)
	if string(got) != string(bin) || len(resp.Header.Get(HeaderSHA256)) != 64 {
		t.Errorf("readBytes = %q (sha %q), want %q", got, resp.Header.Get(HeaderSHA256), bin)
	}
	resp = e.send(g, "GET", base+"/files/readBytes?path=bin/x.bin&offset=1&limit=2", nil, nil)
	if got := readAll(t, resp); string(got) != "\x01\x02" {
		t.Errorf("readBytes window = %q", got)
	}

	// write with a stale hash precondition: 412, file unchanged.
	code, b := e.do(g, "POST", base+"/files/write", computertype.WriteRequest{Path: "src/a.txt", Content: "clobbered", ExpectedSHA256: strings.Repeat("0", 64)})
	if code != http.StatusPreconditionFailed {
		t.Errorf("write with a stale hash = %d %s, want 412", code, b)
	}
	code, b = e.do(g, "PUT", base+"/files/writeBytes?path=src/a.txt&expectedSha256="+strings.Repeat("0", 64), []byte("clobbered"))
	if code != http.StatusPreconditionFailed {
		t.Errorf("writeBytes with a stale hash = %d %s, want 412", code, b)
	}

	// edit: exact replacement; conflicts are 409 and change nothing.
	for _, tc := range []struct {
		name  string
		edits []computertype.Edit
	}{
		{"missing", []computertype.Edit{{Old: "five", New: "5"}}},
		{"ambiguous", []computertype.Edit{{Old: "o", New: "0"}}},
		{"second of two fails", []computertype.Edit{{Old: "one", New: "1"}, {Old: "nine", New: "9"}}},
	} {
		code, b := e.do(g, "POST", base+"/files/edit", computertype.EditRequest{Path: "src/a.txt", Edits: tc.edits})
		if code != http.StatusConflict {
			t.Errorf("edit %s = %d %s, want 409", tc.name, code, b)
		}
	}
	code, b = e.do(g, "POST", base+"/files/edit", computertype.EditRequest{Path: "src/a.txt", Edits: []computertype.Edit{{Old: "one", New: "1"}}, ExpectedSHA256: strings.Repeat("a", 64)})
	if code != http.StatusPreconditionFailed {
		t.Errorf("edit with a stale hash = %d %s, want 412", code, b)
	}
	r = decode[computertype.ReadResult](t, e.must(g, 200, "POST", base+"/files/read", computertype.ReadRequest{Path: "src/a.txt"}))
	if r.Content != "one\ntwo\nthree\nfour\n" || r.SHA256 != w.SHA256 {
		t.Fatalf("after refused edits the file is %q", r.Content)
	}
	ed := decode[computertype.EditResult](t, e.must(g, 200, "POST", base+"/files/edit", computertype.EditRequest{Path: "src/a.txt", ExpectedSHA256: w.SHA256,
		Edits: []computertype.Edit{{Old: "one", New: "1"}, {Old: "o", New: "0", ReplaceAll: true}}}))
	if ed.Replacements != 3 {
		t.Errorf("edit replacements = %d, want 3 (one, tw0, f0ur)", ed.Replacements)
	}
	r = decode[computertype.ReadResult](t, e.must(g, 200, "POST", base+"/files/read", computertype.ReadRequest{Path: "src/a.txt"}))
	if r.Content != "1\ntw0\nthree\nf0ur\n" || r.SHA256 != ed.SHA256 {
		t.Errorf("after edit = %q", r.Content)
	}

	// patch: all or nothing across files.
	e.must(g, 200, "POST", base+"/files/write", computertype.WriteRequest{Path: "src/b.txt", Content: "alpha\nbeta\n"})
	bad := "--- a/src/b.txt\n+++ b/src/b.txt\n@@ -1,2 +1,2 @@\n alpha\n-beta\n+BETA\n" +
		"--- a/src/a.txt\n+++ b/src/a.txt\n@@ -1 +1 @@\n-no such line\n+x\n"
	code, b = e.do(g, "POST", base+"/files/patch", computertype.PatchRequest{Patch: bad})
	if code != http.StatusConflict {
		t.Errorf("patch with a failing hunk = %d %s, want 409", code, b)
	}
	r = decode[computertype.ReadResult](t, e.must(g, 200, "POST", base+"/files/read", computertype.ReadRequest{Path: "src/b.txt"}))
	if r.Content != "alpha\nbeta\n" {
		t.Errorf("a failed patch changed b.txt to %q", r.Content)
	}
	good := "--- a/src/b.txt\n+++ b/src/b.txt\n@@ -1,2 +1,2 @@\n alpha\n-beta\n+BETA\n" +
		"--- /dev/null\n+++ b/src/c.txt\n@@ -0,0 +1 @@\n+new file\n"
	pr := decode[computertype.PatchResult](t, e.must(g, 200, "POST", base+"/files/patch", computertype.PatchRequest{Patch: good}))
	if len(pr.Files) != 2 || !pr.Files[1].Created {
		t.Errorf("patch = %+v", pr)
	}
	r = decode[computertype.ReadResult](t, e.must(g, 200, "POST", base+"/files/read", computertype.ReadRequest{Path: "src/c.txt"}))
	if r.Content != "new file\n" {
		t.Errorf("patched c.txt = %q", r.Content)
	}

	// mkdir, list, glob (newest first), grep (line numbers, limits).
	e.must(g, 201, "POST", base+"/mkdir", computertype.MkdirRequest{Path: "deep/er", Parents: true})
	e.must(g, 200, "POST", base+"/mkdir", computertype.MkdirRequest{Path: "deep/er", Parents: true})
	if code, _ := e.do(g, "POST", base+"/mkdir", computertype.MkdirRequest{Path: "deep/er"}); code != http.StatusConflict {
		t.Errorf("mkdir of an existing directory without parents = %d, want 409", code)
	}
	ls := decode[computertype.ListFilesResult](t, e.must(g, 200, "POST", base+"/files/list", computertype.PathRequest{Path: "src"}))
	var names []string
	for _, f := range ls.Entries {
		names = append(names, f.Name)
	}
	if diff := cmp.Diff([]string{"a.txt", "b.txt", "c.txt"}, names); diff != "" {
		t.Errorf("list src (-want +got):\n%s", diff)
	}
	gl := decode[computertype.GlobResult](t, e.must(g, 200, "POST", base+"/files/glob", computertype.GlobRequest{Pattern: "**/*.txt"}))
	var paths []string
	for _, m := range gl.Matches {
		paths = append(paths, m.Path)
	}
	// c.txt was written last (by the patch that also changed b.txt, so
	// within the clock's granularity they may tie; ties go by path).
	if len(paths) != 3 || !slices.Contains(paths, "src/c.txt") {
		t.Fatalf("glob = %v, want the three .txt files", paths)
	}
	for _, m := range gl.Matches {
		if m.Path == "src/c.txt" && m.ModTime != gl.Matches[0].ModTime {
			t.Errorf("glob = %+v, want src/c.txt among the newest", gl.Matches)
		}
	}
	for i := 1; i < len(gl.Matches); i++ {
		if gl.Matches[i].ModTime > gl.Matches[i-1].ModTime {
			t.Errorf("glob not newest first: %+v", gl.Matches)
		}
	}
	gr := decode[computertype.GrepResult](t, e.must(g, 200, "POST", base+"/files/grep", computertype.GrepRequest{Pattern: "^(t|B)", Path: "src"}))
	want := []computertype.GrepMatch{{Path: "a.txt", Line: 3, Text: "three"}, {Path: "a.txt", Line: 2, Text: "tw0"}, {Path: "b.txt", Line: 2, Text: "BETA"}}
	if diff := cmp.Diff(want, gr.Matches, sortGrep); diff != "" {
		t.Errorf("grep (-want +got):\n%s", diff)
	}
	gr = decode[computertype.GrepResult](t, e.must(g, 200, "POST", base+"/files/grep", computertype.GrepRequest{Pattern: "t", Path: "src", MaxResults: 1}))
	if len(gr.Matches) != 1 || !gr.Truncated {
		t.Errorf("grep with maxResults 1 = %+v", gr)
	}
	if code, _ := e.do(g, "POST", base+"/files/grep", computertype.GrepRequest{Pattern: "("}); code != http.StatusBadRequest {
		t.Errorf("grep with a bad regexp = %d, want 400", code)
	}

	// Every change is a files.written fact with the grant's provenance.
	prov := computer.Provenance{Actor: "agent-f1", Via: "test"}
	var written []string
	for _, f := range e.factsOfKind("f1", computer.FactFilesWritten) {
		if f.Provenance != prov {
			t.Errorf("fact %+v: provenance %+v, want %+v", f, f.Provenance, prov)
		}
		written = append(written, f.Path)
	}
	wantWritten := []string{"/src/a.txt", "/bin/x.bin", "/bin/big.bin", "/src/a.txt", "/src/b.txt", "/src/b.txt", "/src/c.txt"}
	if diff := cmp.Diff(wantWritten, written); diff != "" {
		t.Errorf("files.written facts (-want +got):\n%s", diff)
	}
}

var sortGrep = cmp.Transformer("sort", func(in []computertype.GrepMatch) map[string]computertype.GrepMatch {
	out := map[string]computertype.GrepMatch{}
	for _, m := range in {
		out[m.Path+":"+itoa(int64(m.Line))] = m
	}
	return out
})

// TestPathEscapes tries to leave the workspace through every path-taking
// operation.
func TestPathEscapes(t *testing.T) {
	e := newEnv(t)
	e.create("esc")
	_, g := e.grant("esc", append(fileActions, grant.Bash, grant.ProcessStart)...)
	base := "/computers/esc"
	// A symlink inside the workspace that points out of it.
	e.must(g, 200, "POST", base+"/bash", computertype.ExecRequest{Script: "ln -s / out && ln -s ../../.. up"})

	escapes := []string{"..", "../x", "/../etc/passwd", "a/../../x", "./../x", "a/b/../../../x"}
	for _, p := range escapes {
		for _, tc := range []struct {
			name, method, path string
			body               any
		}{
			{"read", "POST", "/files/read", computertype.ReadRequest{Path: p}},
			{"readBytes", "GET", "/files/readBytes?path=" + p, nil},
			{"write", "POST", "/files/write", computertype.WriteRequest{Path: p, Content: "x"}},
			{"writeBytes", "PUT", "/files/writeBytes?path=" + p, []byte("x")},
			{"list", "POST", "/files/list", computertype.PathRequest{Path: p}},
			{"glob path", "POST", "/files/glob", computertype.GlobRequest{Pattern: "*", Path: p}},
			{"glob pattern", "POST", "/files/glob", computertype.GlobRequest{Pattern: p + "/*"}},
			{"grep", "POST", "/files/grep", computertype.GrepRequest{Pattern: "root", Path: p}},
			{"edit", "POST", "/files/edit", computertype.EditRequest{Path: p, Edits: []computertype.Edit{{Old: "a", New: "b"}}}},
			{"patch dir", "POST", "/files/patch", computertype.PatchRequest{Patch: "--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+x\n", Dir: p}},
			{"mkdir", "POST", "/mkdir", computertype.MkdirRequest{Path: p + "/d"}},
			{"exec cwd", "POST", "/exec", computertype.ExecRequest{Argv: []string{"pwd"}, Cwd: p}},
			{"process cwd", "POST", "/processes", computertype.ProcessRequest{Argv: []string{"pwd"}, Cwd: p}},
		} {
			if code, b := e.do(g, tc.method, base+tc.path, tc.body); code != http.StatusForbidden {
				t.Errorf("%s %q = %d %s, want 403", tc.name, p, code, b)
			}
		}
	}
	for _, tc := range []struct {
		name, method, path string
		body               any
		want               int
	}{
		{"NUL", "POST", "/files/read", computertype.ReadRequest{Path: "a\x00b"}, http.StatusBadRequest},
		{"empty", "POST", "/files/read", computertype.ReadRequest{Path: ""}, http.StatusBadRequest},
		{"through a symlink", "POST", "/files/read", computertype.ReadRequest{Path: "out/etc/passwd"}, http.StatusForbidden},
		{"through a relative symlink", "GET", "/files/readBytes?path=up/etc/passwd", nil, http.StatusForbidden},
		{"write through a symlink", "POST", "/files/write", computertype.WriteRequest{Path: "out/tmp/berth-escape", Content: "x"}, http.StatusForbidden},
		{"list through a symlink", "POST", "/files/list", computertype.PathRequest{Path: "out"}, http.StatusForbidden},
		{"patch naming ..", "POST", "/files/patch", computertype.PatchRequest{Patch: "--- /dev/null\n+++ b/../../escaped\n@@ -0,0 +1 @@\n+x\n"}, http.StatusForbidden},
	} {
		if code, b := e.do(g, tc.method, base+tc.path, tc.body); code != tc.want {
			t.Errorf("%s = %d %s, want %d", tc.name, code, b, tc.want)
		}
	}
	// "/" is the workspace: absolute paths stay inside.
	e.must(g, 200, "POST", base+"/files/write", computertype.WriteRequest{Path: "/etc/passwd", Content: "mine", Parents: true})
	r := decode[computertype.ReadResult](t, e.must(g, 200, "POST", base+"/files/read", computertype.ReadRequest{Path: "etc/passwd"}))
	if r.Content != "mine" {
		t.Errorf("/etc/passwd in the workspace = %q", r.Content)
	}
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b := new(strings.Builder)
	if _, err := ioCopy(b, resp); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s = %d %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, b)
	}
	return []byte(b.String())
}
