package site

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzServePath requests arbitrary paths, both as raw request targets (as
// net/http parses them) and as already-decoded paths (as a caller that
// rewrote r.URL.Path hands them over), from handlers rooted next to a
// directory holding a secret and reachable through escaping symbolic
// links. The secret must never be served, and nothing may panic.
func FuzzServePath(f *testing.F) {
	root := tree(f)
	outside := filepath.ToSlash(filepath.Join(filepath.Dir(root), "outside"))
	seeds := []string{
		"/", "/index.html", "/docs", "/docs/", "/missing",
		"/../outside/secret.txt", "../outside/secret.txt", "/%2e%2e/outside/secret.txt",
		"/%252e%252e/outside/secret.txt", "/.%2E/outside/index.html", "/..%2foutside%2fsecret.txt",
		"/..\\outside\\secret.txt", "/%5c..%5coutside", "/escape-file", "/escape-dir/secret.txt",
		"/escape-dir/", "/escape-dir/dir/secret.txt", "/deep/escape", "/abs-file", "/abs-dir/",
		"/escape-parent/outside/secret.txt", "/linkdir/../../outside/secret.txt",
		"//" + outside + "/secret.txt", outside + "/secret.txt", "/x%00", "/\x00",
		"/a:b", "/%", "/%zz", "?x=../../", "/;/../outside",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	handlers := []*Handler{
		New(config(root)),
		New(Config{Root: root, Index: "index.html", NotFound: "404.html", SPA: true}),
		New(Config{Root: root, Index: "../outside/index.html", NotFound: "../outside/secret.txt", SPA: true}),
	}
	f.Fuzz(func(t *testing.T, p string) {
		var reqs []*http.Request
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL = &url.URL{Path: p}
		reqs = append(reqs, r)
		if !strings.ContainsAny(p, " \r\n") {
			raw := "GET " + p + " HTTP/1.1\r\nHost: x\r\n\r\n"
			if r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw))); err == nil {
				reqs = append(reqs, r)
			}
		}
		for _, r := range reqs {
			for _, h := range handlers {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if strings.Contains(rec.Body.String(), secret) {
					t.Fatalf("path %q (raw %q) served the secret: %d", r.URL.Path, r.URL.RawPath, rec.Code)
				}
				if rec.Code != 200 && rec.Code != 301 && rec.Code != 400 && rec.Code != 404 {
					t.Errorf("path %q: status %d, want 200, 301, 400 or 404", r.URL.Path, rec.Code)
				}
			}
		}
	})
}
