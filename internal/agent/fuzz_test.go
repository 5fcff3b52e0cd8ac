//go:build linux

package agent_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/agent"
)

// FuzzPathConfinement sends arbitrary paths, with a symlink in the root
// pointing at an arbitrary target, through read, readBytes, glob, grep,
// edit, write, put, patch and mkdir, and checks that the secret outside
// the root is never answered or changed and that nothing is made outside
// the root: whatever a successful write wrote must be found inside it.
func FuzzPathConfinement(f *testing.F) {
	for _, s := range []struct{ p, link string }{
		{"/ok", "../outside"},
		{"/../outside/secret", "../outside"},
		{"/l/secret", "../outside"},
		{"/l", "../outside/secret"},
		{"/l/new", "/"},
		{"/l/x/y", "/tmp"},
		{"/in/../../outside/secret", "in"},
		{"/in/../l/secret", "../../outside"},
		{"//l//secret", "./../outside/"},
		{"/l/../outside/secret", "in"},
		{"/./l", "l"},
		{"/l/secret", "in/../../outside"},
		{"/**", "../outside"},
		{"/l/**", "../outside"},
		{"**/secret", "../outside"},
		{"/%2e%2e/outside/secret", "..%2f"},
		{"/a\x00b", "x\x00y"},
		{"", ""},
		{"relative/path", "../outside"},
		{"/" + strings.Repeat("a/", 300), strings.Repeat("../", 50)},
		{"/l/{secret,x}", "../outside"},
		{"/l/[s]ecret", "../outside"},
	} {
		f.Add(s.p, s.link)
	}
	f.Fuzz(func(t *testing.T, p, link string) {
		var rnd [12]byte
		rand.Read(rnd[:])
		secret := "SECRET-" + hex.EncodeToString(rnd[:]) // unguessable
		base := t.TempDir()
		root := filepath.Join(base, "root")
		outside := filepath.Join(base, "outside")
		os.MkdirAll(filepath.Join(root, "in"), 0o755)
		os.MkdirAll(outside, 0o755)
		os.WriteFile(filepath.Join(outside, "secret"), []byte(secret+"\n"), 0o644)
		os.WriteFile(filepath.Join(root, "ok"), []byte("ok\n"), 0o644)
		if link != "" && !strings.ContainsRune(link, 0) {
			os.Symlink(link, filepath.Join(root, "l"))
		}
		before := outsideState(t, base)
		h := agent.NewServer(agent.Options{Root: root}).Handler()

		do := func(method, target string, body io.Reader) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), method, target, body))
			if strings.Contains(rec.Body.String(), secret) {
				t.Fatalf("%s %s leaked the secret: %s", method, target, rec.Body)
			}
			return rec
		}
		post := func(target string, v any) *httptest.ResponseRecorder {
			b, _ := json.Marshal(v)
			return do("POST", target, bytes.NewReader(b))
		}
		q := "path=" + url.QueryEscape(p)

		post("/v1/files/read", agent.ReadTextRequest{Path: p})
		do("GET", "/v1/files?"+q, nil)
		do("GET", "/v1/files/stat?"+q, nil)
		do("GET", "/v1/files/list?"+q, nil)
		post("/v1/files/glob", agent.GlobRequest{Pattern: p})
		post("/v1/files/glob", agent.GlobRequest{Pattern: "**", Path: p})
		post("/v1/files/grep", agent.GrepRequest{Pattern: "SECRET", Path: p})
		post("/v1/files/grep", agent.GrepRequest{Pattern: "SECRET", Glob: p})
		post("/v1/files/edit", agent.EditRequest{Path: p, Edits: []agent.Edit{{Old: "SECRET", New: "PWNED", ReplaceAll: true}}})

		// Every write carries a marker; one that succeeded must have left
		// it in a file inside the root (looked for at once, before a
		// later write may replace the same file).
		wrote := func(rec *httptest.ResponseRecorder, marker string) {
			if rec.Code/100 != 2 {
				return
			}
			found := false
			filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					b, _ := os.ReadFile(p)
					found = found || bytes.Contains(b, []byte(marker))
				}
				return nil
			})
			if !found {
				t.Fatalf("a write of %q succeeded (%s) but is not inside the root", marker, rec.Body)
			}
		}
		wrote(post("/v1/files/write", agent.WriteRequest{Path: p, Content: "marker-write"}), "marker-write")
		wrote(post("/v1/files/write", agent.WriteRequest{Path: p + "/sub/f", Content: "marker-parents", Parents: true}), "marker-parents")
		wrote(do("PUT", "/v1/files?"+q, strings.NewReader("marker-put")), "marker-put")
		patch := "--- /dev/null\n+++ " + p + "\n@@ -0,0 +1 @@\n+marker-patch\n"
		wrote(post("/v1/files/patch", agent.PatchRequest{Patch: patch}), "marker-patch")
		wrote(post("/v1/files/patch", agent.PatchRequest{Patch: "--- /dev/null\n+++ b/new\n@@ -0,0 +1 @@\n+marker-dir\n", Dir: p}), "marker-dir")
		post("/v1/files/mkdir", agent.MkdirRequest{Path: p + "/made", Parents: true})

		if got, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(got) != secret+"\n" {
			t.Fatalf("the secret changed: %q, %v", got, err)
		}
		if after := outsideState(t, base); after != before {
			t.Fatalf("outside the root changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// The handler answers every request with JSON errors, even to paths the
// fuzzer cannot reach through the typed requests above.
var _ http.Handler = agent.NewServer(agent.Options{}).Handler()
