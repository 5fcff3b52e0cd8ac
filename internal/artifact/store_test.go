package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/web"
)

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func digestOf(b []byte) string { return fmt.Sprintf("%x", sha256.Sum256(b)) }

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := NewStore(t.TempDir(), StoreOptions{MaxBlobBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type resp struct {
	code int
	body string
	hdr  http.Header
}

func do(t *testing.T, h http.Handler, method, path, key, body string) resp {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return resp{w.Code, w.Body.String(), w.Header()}
}

// TestProtocol drives the standalone protocol: auth, blob upload and its
// digest check, idempotence, tags and their listing.
func TestProtocol(t *testing.T) {
	s := newStore(t)
	h := s.Handler("k3y", nil)
	blob := []byte("hello artifacts")
	d := digestOf(blob)

	if r := do(t, h, "GET", "/tags", "", ""); r.code != 401 {
		t.Errorf("no key: %d %s", r.code, r.body)
	}
	if r := do(t, h, "GET", "/tags", "wrong", ""); r.code != 401 {
		t.Errorf("wrong key: %d %s", r.code, r.body)
	}
	if r := do(t, s.Handler("", nil), "GET", "/tags", "", ""); r.code != 401 {
		t.Errorf("a store without a key must serve nobody: %d", r.code)
	}
	other := digestOf([]byte("other"))
	if r := do(t, h, "PUT", "/blobs/"+other, "k3y", string(blob)); r.code != 400 || !strings.Contains(r.body, other) || !strings.Contains(r.body, d) {
		t.Errorf("mismatch: %d %s (want 400 naming both digests)", r.code, r.body)
	}
	if _, err := s.Stat(other); !errors.Is(err, ErrNotFound) {
		t.Errorf("a mismatched upload is visible: %v", err)
	}
	if r := do(t, h, "PUT", "/blobs/xyz", "k3y", "x"); r.code != 400 || !strings.Contains(r.body, "digest") {
		t.Errorf("bad digest: %d %s", r.code, r.body)
	}
	if r := do(t, h, "PUT", "/blobs/"+d, "k3y", string(blob)); r.code != 201 {
		t.Fatalf("put: %d %s", r.code, r.body)
	}
	if r := do(t, h, "PUT", "/blobs/sha256:"+d, "k3y", string(blob)); r.code != 200 {
		t.Errorf("second put: %d %s (want 200, idempotent)", r.code, r.body)
	}
	if r := do(t, h, "GET", "/blobs/"+d, "k3y", ""); r.code != 200 || r.body != string(blob) || r.hdr.Get("Docker-Content-Digest") != "sha256:"+d {
		t.Errorf("get: %d %q %v", r.code, r.body, r.hdr)
	}
	if r := do(t, h, "HEAD", "/blobs/"+d, "k3y", ""); r.code != 200 || r.hdr.Get("Content-Length") != fmt.Sprint(len(blob)) {
		t.Errorf("head: %d %v", r.code, r.hdr)
	}
	big := strings.Repeat("x", 1<<20+1)
	if r := do(t, h, "PUT", "/blobs/"+digestOf([]byte(big)), "k3y", big); r.code != 413 {
		t.Errorf("oversized: %d %s", r.code, r.body)
	}

	// Tags: a bare digest or JSON; only a stored blob.
	if r := do(t, h, "PUT", "/tags/team/app", "k3y", d+"\n"); r.code != 200 {
		t.Fatalf("tag: %d %s", r.code, r.body)
	}
	if r := do(t, h, "PUT", "/tags/v2", "k3y", `{"digest":"sha256:`+d+`","media_type":"application/x-tar"}`); r.code != 200 {
		t.Fatalf("tag json: %d %s", r.code, r.body)
	}
	if r := do(t, h, "PUT", "/tags/v3", "k3y", other); r.code != 404 {
		t.Errorf("tag of a missing blob: %d %s", r.code, r.body)
	}
	for _, bad := range []string{"/tags/a/../b", "/tags/a//b", "/tags/a%20b"} {
		if r := do(t, h, "PUT", bad, "k3y", d); r.code != 400 && r.code != 404 && r.code != 301 && r.code != 307 {
			t.Errorf("%s: %d %s", bad, r.code, r.body)
		}
	}
	if r := do(t, h, "PUT", "/tags/v4", "k3y", `{"digest":"nope"}`); r.code != 400 || !strings.Contains(r.body, "digest") {
		t.Errorf("bad tag body: %d %s", r.code, r.body)
	}
	r := do(t, h, "GET", "/tags/v2", "k3y", "")
	var v TagView
	if json.Unmarshal([]byte(r.body), &v); r.code != 200 || v.Digest != d || v.MediaType != "application/x-tar" || v.Size != int64(len(blob)) {
		t.Errorf("get tag: %d %s", r.code, r.body)
	}
	r = do(t, h, "GET", "/tags?prefix=team/", "k3y", "")
	var vs []TagView
	if json.Unmarshal([]byte(r.body), &vs); len(vs) != 1 || vs[0].Tag != "team/app" {
		t.Errorf("list: %d %s", r.code, r.body)
	}
	// A tag "team/…" claims its blob for namespace team.
	if !s.Claimed("team", d) {
		t.Errorf("tag team/app did not claim its blob for namespace team")
	}
	if r := do(t, h, "DELETE", "/tags/v2", "k3y", ""); r.code != 204 {
		t.Errorf("delete tag: %d", r.code)
	}
	if r := do(t, h, "GET", "/tags/v2", "k3y", ""); r.code != 404 {
		t.Errorf("deleted tag: %d", r.code)
	}
	if r := do(t, h, "DELETE", "/blobs/"+d, "k3y", ""); r.code != 204 {
		t.Errorf("delete blob: %d %s", r.code, r.body)
	}
}

// nsHandler serves the store through namespace ns as the admin API does
// (after its walls).
func nsHandler(s *Store, ns string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.Serve(w, r, ns, strings.TrimPrefix(r.URL.Path, "/")); err != nil {
			w.WriteHeader(statusOf(err))
			io.WriteString(w, err.Error())
		}
	})
}

func statusOf(err error) int {
	var e *web.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 500
}

// TestNamespaceClaims: a namespace reads only the blobs it uploaded or
// tagged; another namespace's digest is the same 404 as a digest nobody
// stored, and cannot be tagged into reach.
func TestNamespaceClaims(t *testing.T) {
	s := newStore(t)
	a, b := nsHandler(s, "a"), nsHandler(s, "b")
	secret := []byte("a's private bytes")
	d := digestOf(secret)
	if r := do(t, a, "PUT", "/blobs/"+d, "", string(secret)); r.code != 201 {
		t.Fatalf("a put: %d %s", r.code, r.body)
	}
	if r := do(t, a, "PUT", "/tags/app", "", d); r.code != 200 {
		t.Fatalf("a tag: %d %s", r.code, r.body)
	}
	if rec, err := s.Tag("a/app"); err != nil || rec.Digest != d {
		t.Errorf("the tag is not stored as a/app: %+v %v", rec, err)
	}
	if r := do(t, a, "GET", "/blobs/"+d, "", ""); r.code != 200 || r.body != string(secret) {
		t.Errorf("a get: %d", r.code)
	}
	nobody := digestOf([]byte("never stored"))
	theirs := do(t, b, "GET", "/blobs/"+d, "", "")
	none := do(t, b, "GET", "/blobs/"+nobody, "", "")
	if theirs.code != 404 || none.code != 404 || strings.ReplaceAll(theirs.body, d, nobody) != none.body {
		t.Errorf("b reading a's blob: %d %q; a blob nobody stored: %d %q (must not differ)", theirs.code, theirs.body, none.code, none.body)
	}
	if r := do(t, b, "PUT", "/tags/stolen", "", d); r.code != 404 {
		t.Errorf("b tagging a's digest: %d %s", r.code, r.body)
	}
	if r := do(t, b, "GET", "/tags/app", "", ""); r.code != 404 {
		t.Errorf("b reading tag app: %d %s", r.code, r.body)
	}
	if r := do(t, b, "GET", "/tags", "", ""); r.code != 200 || r.body != "[]\n" && r.body != "[]" {
		t.Errorf("b's tags: %d %q", r.code, r.body)
	}
	if r := do(t, a, "GET", "/tags", "", ""); !strings.Contains(r.body, `"tag":"app"`) {
		t.Errorf("a's tags are listed without the prefix: %s", r.body)
	}
	// Holding the bytes is what a claim takes: b uploads the same bytes.
	if r := do(t, b, "PUT", "/blobs/"+d, "", string(secret)); r.code != 200 {
		t.Errorf("b uploading the same bytes: %d %s", r.code, r.body)
	}
	if r := do(t, b, "GET", "/blobs/"+d, "", ""); r.code != 200 {
		t.Errorf("b after uploading: %d", r.code)
	}
	if r := do(t, a, "DELETE", "/blobs/"+d, "", ""); r.code != 405 {
		t.Errorf("namespace blob delete: %d", r.code)
	}
}

// TestSources reads one blob through each kind of Source, and a store that
// lies about its bytes.
func TestSources(t *testing.T) {
	s := newStore(t)
	blob := []byte("tarball bytes")
	d := digestOf(blob)
	if _, _, err := s.PutBlob(d, bytes.NewReader(blob), "team"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutTag("team/v1", TagRecord{Digest: d}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler("k", nil))
	defer srv.Close()
	ctx := t.Context()
	for _, c := range []struct {
		store, ns, ref string
		o              OpenOptions
	}{
		{"local", "team", "v1", OpenOptions{Local: s}},
		{s.Root(), "x", "team/v1", OpenOptions{Roots: []string{filepath.Dir(s.Root())}}},
		{srv.URL, "x", "team/v1", OpenOptions{AllowPrivate: true}},
	} {
		src, err := Open(c.store, c.ns, "k", c.o)
		if err != nil {
			t.Fatalf("%s: %v", c.store, err)
		}
		got, err := src.Resolve(ctx, c.ref)
		if err != nil || got != d {
			t.Errorf("%s: resolve = %q, %v", c.store, got, err)
			continue
		}
		rc, _, err := src.Fetch(ctx, got)
		if err != nil {
			t.Fatalf("%s: fetch: %v", c.store, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(b, blob) {
			t.Errorf("%s: fetched %q, %v", c.store, b, err)
		}
	}
	if _, err := Open("local", "other", "", OpenOptions{Local: s}); err != nil {
		t.Fatal(err)
	}
	src, _ := Open("local", "other", "", OpenOptions{Local: s})
	if _, err := src.Resolve(ctx, d); err == nil {
		t.Errorf("namespace other resolved team's digest")
	}
	if _, err := Open(s.Root(), "x", "", OpenOptions{}); err == nil {
		t.Errorf("an absolute root outside the allowed directories was opened")
	}
	// Loopback needs the operator's leave.
	src, _ = Open(srv.URL, "x", "k", OpenOptions{})
	if _, err := src.Resolve(ctx, "team/v1"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("loopback store without AllowPrivate: %v", err)
	}
	// A store that answers other bytes than the digest.
	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "not the bytes") }))
	defer liar.Close()
	src, _ = Open(liar.URL, "x", "", OpenOptions{AllowPrivate: true})
	rc, _, err := src.Fetch(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(rc)
	var mm *DigestMismatchError
	if !errors.As(err, &mm) || !strings.Contains(err.Error(), d) || !strings.Contains(err.Error(), digestOf([]byte("not the bytes"))) {
		t.Errorf("lying store: %v (want a mismatch naming both digests)", err)
	}
}

func tarball(t *testing.T, gz bool, entries map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, name := range sortedKeys(entries) {
		body := entries[name]
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}
		if strings.HasSuffix(name, "/") {
			hdr = &tar.Header{Name: name, Mode: 0o755, Typeflag: tar.TypeDir}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

// TestTrees unpacks a tar.gz with strip_components once, reuses it the
// second time, and refuses an entry that leaves the tree.
func TestTrees(t *testing.T) {
	s := newStore(t)
	tgz := tarball(t, true, map[string]string{"site-1.0/": "", "site-1.0/index.html": "<h1>hi</h1>", "site-1.0/css/a.css": "a{}", "top.txt": "dropped"})
	d := digestOf(tgz)
	if _, _, err := s.PutBlob(d, bytes.NewReader(tgz), "ns"); err != nil {
		t.Fatal(err)
	}
	trees, err := OpenTrees(filepath.Join(t.TempDir(), "trees"))
	if err != nil {
		t.Fatal(err)
	}
	src, _ := Open("local", "ns", "", OpenOptions{Local: s})
	tr, err := trees.Unpack(t.Context(), src, d, 1)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Reused || tr.Files != 2 || tr.Bytes != int64(len("<h1>hi</h1>a{}")) {
		t.Errorf("first unpack: %+v", tr)
	}
	if b, err := os.ReadFile(filepath.Join(tr.Dir, "index.html")); err != nil || string(b) != "<h1>hi</h1>" {
		t.Errorf("index.html: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(tr.Dir, "top.txt")); err == nil {
		t.Errorf("top.txt was not stripped")
	}
	if !strings.HasSuffix(tr.Dir, filepath.Join("sha256", d+"-strip1")) {
		t.Errorf("tree dir %s", tr.Dir)
	}
	again, err := trees.Unpack(t.Context(), src, d, 1)
	if err != nil || !again.Reused || again.Dir != tr.Dir || again.Files != tr.Files {
		t.Errorf("second unpack: %+v %v", again, err)
	}

	// Unsafe entries: a hard link out of the tree.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "evil", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"})
	tw.Close()
	if _, _, err := UnpackTree(t.Context(), &buf, t.TempDir(), 0); err == nil {
		t.Errorf("a hard link leaving the tree was unpacked")
	}
	// A symlinked parent.
	buf.Reset()
	tw = tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "/"})
	tw.WriteHeader(&tar.Header{Name: "up/etc/x", Typeflag: tar.TypeReg, Mode: 0o644})
	tw.Close()
	if _, _, err := UnpackTree(t.Context(), &buf, t.TempDir(), 0); err == nil {
		t.Errorf("an entry through a symlink out of the tree was unpacked")
	}
	// ../ names are resolved inside, as tar does.
	dir := t.TempDir()
	if _, _, err := UnpackTree(t.Context(), bytes.NewReader(tarball(t, false, map[string]string{"../../x": "in"})), dir, 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "x")); string(b) != "in" {
		t.Errorf("../../x did not land inside the tree")
	}
	// A blob whose bytes are not its digest leaves no tree.
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "x"), nil, 0o600)
	fake := fakeSource{data: tgz, digest: digestOf([]byte("x"))}
	if _, err := trees.Unpack(t.Context(), fake, fake.digest, 0); err == nil {
		t.Errorf("a mismatched blob was unpacked")
	}
	if _, err := os.Stat(filepath.Join(trees.dir, "sha256", fake.digest)); err == nil {
		t.Errorf("a mismatched blob left a tree")
	}
}

type fakeSource struct {
	data   []byte
	digest string
}

func (f fakeSource) Resolve(_ context.Context, ref string) (string, error) { return f.digest, nil }
func (f fakeSource) Fetch(_ context.Context, d string) (io.ReadCloser, int64, error) {
	return verify(io.NopCloser(bytes.NewReader(f.data)), d, int64(len(f.data))), int64(len(f.data)), nil
}

// TestDockerfileManifest: a tag of media type heyvm.dockerfile.v1 must
// name a manifest whose context the namespace holds.
func TestDockerfileManifest(t *testing.T) {
	s := newStore(t)
	h := nsHandler(s, "ns")
	ctxTar := "context tarball"
	cd := digestOf([]byte(ctxTar))
	m := `{"dockerfile":"FROM alpine\n","context_digest":"` + cd + `","image_name":"web","size_mb":512}`
	md := digestOf([]byte(m))
	do(t, h, "PUT", "/blobs/"+md, "", m)
	tag := `{"digest":"` + md + `","media_type":"heyvm.dockerfile.v1"}`
	if r := do(t, h, "PUT", "/tags/recipe", "", tag); r.code != 400 || !strings.Contains(r.body, "context_digest") {
		t.Errorf("manifest without its context: %d %s", r.code, r.body)
	}
	do(t, h, "PUT", "/blobs/"+cd, "", ctxTar)
	if r := do(t, h, "PUT", "/tags/recipe", "", tag); r.code != 200 {
		t.Errorf("manifest: %d %s", r.code, r.body)
	}
	if r := do(t, h, "PUT", "/tags/bad", "", `{"digest":"`+cd+`","media_type":"heyvm.dockerfile.v1"}`); r.code != 400 || !strings.Contains(r.body, "media_type: ") {
		t.Errorf("a tarball tagged as a manifest: %d %s", r.code, r.body)
	}
	got, err := ParseDockerfileManifest(strings.NewReader(m))
	if err != nil || got.ContextDigest != cd || got.SizeMB != 512 || got.ImageName != "web" {
		t.Errorf("parse: %+v %v", got, err)
	}
	if _, err := ParseDockerfileManifest(strings.NewReader(`{"context_digest":"x"}`)); err == nil || !strings.Contains(err.Error(), "dockerfile: required") {
		t.Errorf("manifest without a dockerfile: %v", err)
	}
}

// TestTreeBound: a tree over Trees.MaxBytes is refused and leaves nothing.
func TestTreeBound(t *testing.T) {
	s := newStore(t)
	tb := tarball(t, true, map[string]string{"big": strings.Repeat("z", 10000)})
	d := digestOf(tb)
	s.PutBlob(d, bytes.NewReader(tb), "ns")
	trees, err := OpenTrees(filepath.Join(t.TempDir(), "trees"))
	if err != nil {
		t.Fatal(err)
	}
	trees.MaxBytes = 4096
	src, _ := Open("local", "ns", "", OpenOptions{Local: s})
	if _, err := trees.Unpack(t.Context(), src, d, 0); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("an oversized tree: %v", err)
	}
	if _, err := os.Stat(filepath.Join(trees.dir, "sha256", d)); err == nil {
		t.Errorf("an oversized tree was left")
	}
}
