package site

import (
	"bufio"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	secret    = "TOP-SECRET-outside-the-root-7f3a"
	indexHTML = "<!doctype html><h1>home</h1>\n"
	styleCSS  = "body { color: #333; }\n"
	docsHTML  = "<!doctype html><h1>docs</h1>\n"
	page404   = "<!doctype html><h1>custom 404</h1>\n"
	alphabet  = "abcdefghijklmnopqrstuvwxyz"
)

// tree builds a site root next to a directory that holds a secret, with
// symbolic links that stay inside the root and links that try to leave it.
// It returns the site root.
func tree(t testing.TB) string {
	t.Helper()
	base := t.TempDir()
	site := filepath.Join(base, "site")
	outside := filepath.Join(base, "outside")
	files := map[string]string{
		"outside/secret.txt":       secret,
		"outside/index.html":       secret,
		"outside/dir/secret.txt":   secret,
		"site/index.html":          indexHTML,
		"site/style.css":           styleCSS,
		"site/alpha.txt":           alphabet,
		"site/blob":                "\x00\x01\x02binary",
		"site/docs/index.html":     docsHTML,
		"site/noindex/file.txt":    "file\n",
		"site/404.html":            page404,
		"site/a:b/index.html":      "colon\n",
		"site/my dir/index.html":   "space\n",
		"site/deep/er/index.html":  "deeper\n",
		"site/index.html.d/x.html": "x\n",
	}
	for name, body := range files {
		p := filepath.Join(base, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"site/link-in.css":   "style.css",
		"site/linkdir":       "docs",
		"site/deep/up.css":   "../style.css",
		"site/escape-file":   "../outside/secret.txt",
		"site/escape-dir":    "../outside",
		"site/deep/escape":   "../../outside/secret.txt",
		"site/abs-file":      filepath.Join(outside, "secret.txt"),
		"site/abs-dir":       outside,
		"site/abs-inside":    filepath.Join(site, "style.css"),
		"site/dangling":      "nowhere",
		"site/loop":          "loop",
		"site/escape-parent": "..",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(base, filepath.FromSlash(name))); err != nil {
			t.Fatal(err)
		}
	}
	return site
}

// do sends a raw request line through the handler, parsed exactly as
// net/http's server parses it, so r.URL.Path and r.URL.RawPath are what a
// real client would produce.
func do(t testing.TB, h http.Handler, method, target string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: example.com\r\n")
	for i := 0; i+1 < len(hdr); i += 2 {
		b.WriteString(hdr[i] + ": " + hdr[i+1] + "\r\n")
	}
	b.WriteString("\r\n")
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(b.String())))
	if err != nil {
		t.Fatalf("ReadRequest(%q): %v", target, err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// doPath sends a request whose already-decoded path is p, as a caller that
// rewrote r.URL.Path (strip_prefix) would.
func doPath(h http.Handler, p string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.URL = &url.URL{Path: p}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func config(root string) Config {
	return Config{Root: root, Index: "index.html", CacheControl: "public, max-age=300"}
}

func TestServeFile(t *testing.T) {
	root := tree(t)
	h := New(config(root))
	tests := []struct {
		target, body, ctype string
	}{
		{"/style.css", styleCSS, mime.TypeByExtension(".css")},
		{"/index.html", indexHTML, "text/html; charset=utf-8"},
		{"/", indexHTML, "text/html; charset=utf-8"},
		{"/docs/", docsHTML, "text/html; charset=utf-8"},
		{"/blob", "\x00\x01\x02binary", "application/octet-stream"},
		{"/alpha.txt?v=1", alphabet, "text/plain; charset=utf-8"},
		{"/my%20dir/", "space\n", "text/html; charset=utf-8"},
		{"//docs//index.html", docsHTML, "text/html; charset=utf-8"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			rec := do(t, h, "GET", tt.target)
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200; body %q", rec.Code, rec.Body)
			}
			if got := rec.Body.String(); got != tt.body {
				t.Errorf("body = %q, want %q", got, tt.body)
			}
			res := rec.Result()
			for k, want := range map[string]string{
				"Content-Type":   tt.ctype,
				"Cache-Control":  "public, max-age=300",
				"Accept-Ranges":  "bytes",
				"Content-Length": strconv.Itoa(len(tt.body)),
			} {
				if got := res.Header.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if et := res.Header.Get("Etag"); !strings.HasPrefix(et, `"`) || !strings.HasSuffix(et, `"`) || len(et) < 3 {
				t.Errorf("Etag = %q, want a strong quoted tag", et)
			}
			if _, err := http.ParseTime(res.Header.Get("Last-Modified")); err != nil {
				t.Errorf("Last-Modified %q: %v", res.Header.Get("Last-Modified"), err)
			}
		})
	}
}

func TestNoCacheControlWhenUnset(t *testing.T) {
	h := New(Config{Root: tree(t), Index: "index.html"})
	rec := do(t, h, "GET", "/style.css")
	if got := rec.Header().Get("Cache-Control"); got != "" {
		t.Errorf("Cache-Control = %q, want none", got)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	h := New(config(tree(t)))
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
		t.Run(m, func(t *testing.T) {
			rec := do(t, h, m, "/index.html")
			if rec.Code != http.StatusMethodNotAllowed {
				t.Errorf("status = %d, want 405", rec.Code)
			}
			if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
				t.Errorf("Allow = %q, want %q", got, "GET, HEAD")
			}
			if got := rec.Body.String(); got != "method not allowed\n" {
				t.Errorf("body = %q", got)
			}
		})
	}
}

// TestHEAD uses a real server so that "no body" is what goes on the wire.
func TestHEAD(t *testing.T) {
	srv := httptest.NewServer(New(config(tree(t))))
	defer srv.Close()
	for _, tt := range []struct {
		path string
		code int
		clen string
	}{
		{"/style.css", 200, strconv.Itoa(len(styleCSS))},
		{"/missing", 404, strconv.Itoa(len("not found\n"))},
	} {
		req, _ := http.NewRequest(http.MethodHead, srv.URL+tt.path, nil)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tt.code {
			t.Errorf("HEAD %s: status = %d, want %d", tt.path, res.StatusCode, tt.code)
		}
		if len(body) != 0 {
			t.Errorf("HEAD %s: body = %q, want none", tt.path, body)
		}
		if got := res.Header.Get("Content-Length"); got != tt.clen {
			t.Errorf("HEAD %s: Content-Length = %q, want %q", tt.path, got, tt.clen)
		}
	}
	// The recorder keeps anything written, so it shows the handler itself
	// writes no body for HEAD either.
	h := New(config(tree(t)))
	for _, target := range []string{"/style.css", "/missing", "/noindex/"} {
		if rec := do(t, h, "HEAD", target); rec.Body.Len() != 0 {
			t.Errorf("HEAD %s wrote body %q", target, rec.Body)
		}
	}
}

func TestDirectoryRedirect(t *testing.T) {
	h := New(config(tree(t)))
	tests := []struct{ target, location string }{
		{"/docs", "docs/"},
		{"/docs?a=1&b=2", "docs/?a=1&b=2"},
		{"/deep/er", "er/"},
		{"/my%20dir", "my%20dir/"},
		{"/a:b", "./a:b/"},
		{"/linkdir", "linkdir/"},
		{"/noindex", "noindex/"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			rec := do(t, h, "GET", tt.target)
			if rec.Code != http.StatusMovedPermanently {
				t.Fatalf("status = %d, want 301", rec.Code)
			}
			if got := rec.Header().Get("Location"); got != tt.location {
				t.Errorf("Location = %q, want %q", got, tt.location)
			}
			// The relative Location must resolve to the directory with
			// a slash, also behind a stripped prefix.
			base, _ := url.Parse("http://example.com/prefix" + tt.target)
			loc, err := url.Parse(rec.Header().Get("Location"))
			if err != nil {
				t.Fatal(err)
			}
			got := base.ResolveReference(loc)
			want := "/prefix" + strings.SplitN(tt.target, "?", 2)[0] + "/"
			if got.EscapedPath() != want {
				t.Errorf("resolves to %q, want %q", got.EscapedPath(), want)
			}
		})
	}
	// The root itself is served, never redirected: after strip_prefix the
	// handler cannot tell "/docs" from "/docs/".
	for _, p := range []string{"", "/"} {
		if rec := doPath(h, p); rec.Code != http.StatusOK || rec.Body.String() != indexHTML {
			t.Errorf("path %q: status %d body %q, want the index", p, rec.Code, rec.Body)
		}
	}
}

func TestDirectoryIndex(t *testing.T) {
	root := tree(t)
	tests := []struct {
		name   string
		cfg    Config
		target string
		code   int
		body   string
	}{
		{"index", config(root), "/docs/", 200, docsHTML},
		{"index through dir symlink", config(root), "/linkdir/", 200, docsHTML},
		{"no index file", config(root), "/noindex/", 404, "not found\n"},
		{"no index with not_found page", Config{Root: root, Index: "index.html", NotFound: "404.html"}, "/noindex/", 404, page404},
		{"no index with spa", Config{Root: root, Index: "index.html", SPA: true}, "/noindex/", 404, "not found\n"},
		{"index disabled", Config{Root: root}, "/", 404, "not found\n"},
		{"index disabled subdir", Config{Root: root}, "/docs/", 404, "not found\n"},
		{"index is a directory", Config{Root: root, Index: "index.html.d"}, "/", 404, "not found\n"},
		{"other index name", Config{Root: root, Index: "file.txt"}, "/noindex/", 200, "file\n"},
		{"file with trailing slash", config(root), "/style.css/", 404, "not found\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, New(tt.cfg), "GET", tt.target)
			if rec.Code != tt.code || rec.Body.String() != tt.body {
				t.Errorf("GET %s = %d %q, want %d %q", tt.target, rec.Code, rec.Body, tt.code, tt.body)
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	root := tree(t)
	tests := []struct {
		name   string
		cfg    Config
		target string
		code   int
		body   string
		ctype  string
	}{
		{"plain", config(root), "/missing.html", 404, "not found\n", "text/plain; charset=utf-8"},
		{"page", Config{Root: root, Index: "index.html", NotFound: "404.html"}, "/missing.html", 404, page404, "text/html; charset=utf-8"},
		{"page with leading slash", Config{Root: root, NotFound: "/404.html"}, "/a/b/c", 404, page404, "text/html; charset=utf-8"},
		{"page missing", Config{Root: root, NotFound: "nope.html"}, "/missing", 404, "not found\n", "text/plain; charset=utf-8"},
		{"page escapes root", Config{Root: root, NotFound: "../outside/secret.txt"}, "/missing", 404, "not found\n", "text/plain; charset=utf-8"},
		{"page is a directory", Config{Root: root, NotFound: "docs"}, "/missing", 404, "not found\n", "text/plain; charset=utf-8"},
		{"under a file", config(root), "/style.css/x", 404, "not found\n", "text/plain; charset=utf-8"},
		{"dangling symlink", config(root), "/dangling", 404, "not found\n", "text/plain; charset=utf-8"},
		{"symlink loop", config(root), "/loop", 404, "not found\n", "text/plain; charset=utf-8"},
		{"long name", config(root), "/" + strings.Repeat("x", 5000), 404, "not found\n", "text/plain; charset=utf-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, New(tt.cfg), "GET", tt.target)
			if rec.Code != tt.code || rec.Body.String() != tt.body {
				t.Errorf("GET %s = %d %q, want %d %q", tt.target, rec.Code, rec.Body, tt.code, tt.body)
			}
			if got := rec.Header().Get("Content-Type"); got != tt.ctype {
				t.Errorf("Content-Type = %q, want %q", got, tt.ctype)
			}
			if got := rec.Header().Get("Cache-Control"); got != "" {
				t.Errorf("Cache-Control = %q on a 404, want none", got)
			}
			if got := rec.Header().Get(HeaderSite); got != "" {
				t.Errorf("%s = %q on a populated root, want none", HeaderSite, got)
			}
		})
	}
}

func TestSPA(t *testing.T) {
	root := tree(t)
	spa := Config{Root: root, Index: "index.html", NotFound: "404.html", SPA: true}
	tests := []struct {
		name   string
		cfg    Config
		target string
		code   int
		body   string
	}{
		{"deep link", spa, "/app/settings/profile", 200, indexHTML},
		{"missing asset", spa, "/missing.js", 200, indexHTML},
		{"existing file", spa, "/style.css", 200, styleCSS},
		{"existing dir index", spa, "/docs/", 200, docsHTML},
		{"existing dir redirect", spa, "/docs", 301, ""},
		{"escaping symlink falls back to index", spa, "/escape-file", 200, indexHTML},
		{"spa without index name", Config{Root: root, SPA: true}, "/app", 404, "not found\n"},
		{"spa with index missing uses not_found", Config{Root: root, Index: "nope.html", NotFound: "404.html", SPA: true}, "/app", 404, page404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, New(tt.cfg), "GET", tt.target)
			if rec.Code != tt.code || rec.Body.String() != tt.body {
				t.Errorf("GET %s = %d %q, want %d %q", tt.target, rec.Code, rec.Body, tt.code, tt.body)
			}
		})
	}
	// The SPA index is a normal file response: validators and ranges work.
	h := New(spa)
	rec := do(t, h, "GET", "/app/route")
	if rec := do(t, h, "GET", "/other/route", "If-None-Match", rec.Header().Get("Etag")); rec.Code != http.StatusNotModified {
		t.Errorf("conditional SPA fallback: status = %d, want 304", rec.Code)
	}
}

func TestRootUnavailable(t *testing.T) {
	base := t.TempDir()
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, root, status string
	}{
		{"missing", filepath.Join(base, "nope"), "root-missing"},
		{"under a file", filepath.Join(file, "sub"), "root-missing"},
		{"not a directory", file, "root-not_a_directory"},
		{"empty", empty, "root-empty"},
		{"unset", "", "root-missing"},
	}
	const body = "not found: this site has no files deployed yet\n"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Root: tt.root, Index: "index.html", NotFound: "404.html", SPA: true}
			for _, target := range []string{"/", "/index.html", "/a/b", "/dir/"} {
				rec := do(t, New(cfg), "GET", target)
				if rec.Code != http.StatusNotFound || rec.Body.String() != body {
					t.Errorf("GET %s = %d %q, want 404 %q", target, rec.Code, rec.Body, body)
				}
				if got := rec.Header().Get("X-Applb-Site"); got != tt.status {
					t.Errorf("GET %s: x-applb-site = %q, want %q", target, got, tt.status)
				}
			}
		})
	}

	// A root filled after the handler was built serves at once.
	h := New(config(empty))
	if rec := do(t, h, "GET", "/"); rec.Code != http.StatusNotFound {
		t.Fatalf("empty root: status = %d, want 404", rec.Code)
	}
	if err := os.WriteFile(filepath.Join(empty, "index.html"), []byte(indexHTML), 0o644); err != nil {
		t.Fatal(err)
	}
	if rec := do(t, h, "GET", "/"); rec.Code != http.StatusOK || rec.Body.String() != indexHTML {
		t.Errorf("after filling: %d %q, want 200 index", rec.Code, rec.Body)
	}
	if rec := do(t, h, "GET", "/missing"); rec.Header().Get(HeaderSite) != "" {
		t.Errorf("populated root still reports %q", rec.Header().Get(HeaderSite))
	}
}

func TestConditional(t *testing.T) {
	root := tree(t)
	h := New(config(root))
	rec := do(t, h, "GET", "/style.css")
	etag, lm := rec.Header().Get("Etag"), rec.Header().Get("Last-Modified")
	tests := []struct {
		name string
		hdr  []string
		code int
	}{
		{"if-none-match", []string{"If-None-Match", etag}, 304},
		{"if-none-match list", []string{"If-None-Match", `"other", ` + etag}, 304},
		{"if-none-match star", []string{"If-None-Match", "*"}, 304},
		{"if-none-match other", []string{"If-None-Match", `"other"`}, 200},
		{"if-modified-since", []string{"If-Modified-Since", lm}, 304},
		{"if-modified-since old", []string{"If-Modified-Since", "Mon, 02 Jan 2006 15:04:05 GMT"}, 200},
		{"if-match other", []string{"If-Match", `"other"`}, 412},
		{"if-range match", []string{"Range", "bytes=0-3", "If-Range", etag}, 206},
		{"if-range stale", []string{"Range", "bytes=0-3", "If-Range", `"other"`}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, h, "GET", "/style.css", tt.hdr...)
			if rec.Code != tt.code {
				t.Fatalf("status = %d, want %d", rec.Code, tt.code)
			}
			if tt.code == 304 {
				if rec.Body.Len() != 0 {
					t.Errorf("304 with body %q", rec.Body)
				}
				if got := rec.Header().Get("Etag"); got != etag {
					t.Errorf("304 Etag = %q, want %q", got, etag)
				}
			}
		})
	}

	// Changing the file changes the tag, so the old one no longer matches.
	p := filepath.Join(root, "style.css")
	if err := os.WriteFile(p, []byte("body { color: red; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	rec = do(t, h, "GET", "/style.css", "If-None-Match", etag)
	if rec.Code != http.StatusOK {
		t.Errorf("after change: status = %d, want 200", rec.Code)
	}
	if got := rec.Header().Get("Etag"); got == etag {
		t.Errorf("Etag unchanged after the file changed: %q", got)
	}
	// Replacing by rename with the old size and mtime still changes the
	// tag: the inode differs.
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	etag = rec.Header().Get("Etag")
	tmp := filepath.Join(root, ".tmp")
	if err := os.WriteFile(tmp, []byte("body { color: rex; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	if got := do(t, h, "GET", "/style.css").Header().Get("Etag"); got == etag {
		t.Errorf("Etag unchanged after rename-replace: %q", got)
	}
}

func TestRange(t *testing.T) {
	h := New(config(tree(t)))
	n := strconv.Itoa(len(alphabet))
	tests := []struct {
		name, rng, crange, body string
		code                    int
	}{
		{"prefix", "bytes=0-3", "bytes 0-3/" + n, "abcd", 206},
		{"middle", "bytes=10-12", "bytes 10-12/" + n, "klm", 206},
		{"open end", "bytes=20-", "bytes 20-25/" + n, "uvwxyz", 206},
		{"suffix", "bytes=-3", "bytes 23-25/" + n, "xyz", 206},
		{"past end clipped", "bytes=24-100", "bytes 24-25/" + n, "yz", 206},
		{"unsatisfiable", "bytes=26-30", "bytes */" + n, "", 416},
		{"unsatisfiable far", "bytes=1000-", "bytes */" + n, "", 416},
		{"not bytes unit ignored", "items=0-3", "", alphabet, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, h, "GET", "/alpha.txt", "Range", tt.rng)
			if rec.Code != tt.code {
				t.Fatalf("status = %d, want %d", rec.Code, tt.code)
			}
			if got := rec.Header().Get("Content-Range"); got != tt.crange {
				t.Errorf("Content-Range = %q, want %q", got, tt.crange)
			}
			if tt.code != 416 && rec.Body.String() != tt.body {
				t.Errorf("body = %q, want %q", rec.Body, tt.body)
			}
			if tt.code == 416 && strings.Contains(rec.Body.String(), alphabet) {
				t.Errorf("416 carried the file: %q", rec.Body)
			}
		})
	}

	t.Run("multi", func(t *testing.T) {
		rec := do(t, h, "GET", "/alpha.txt", "Range", "bytes=0-1,4-5")
		if rec.Code != http.StatusPartialContent {
			t.Fatalf("status = %d, want 206", rec.Code)
		}
		mt, params, err := mime.ParseMediaType(rec.Header().Get("Content-Type"))
		if err != nil || mt != "multipart/byteranges" {
			t.Fatalf("Content-Type = %q (%v), want multipart/byteranges", rec.Header().Get("Content-Type"), err)
		}
		mr := multipart.NewReader(rec.Body, params["boundary"])
		var parts []string
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(p)
			parts = append(parts, p.Header.Get("Content-Range")+"="+string(b))
		}
		want := []string{"bytes 0-1/26=ab", "bytes 4-5/26=ef"}
		if strings.Join(parts, ";") != strings.Join(want, ";") {
			t.Errorf("parts = %q, want %q", parts, want)
		}
	})

	t.Run("HEAD", func(t *testing.T) {
		rec := do(t, h, "HEAD", "/alpha.txt", "Range", "bytes=0-3")
		if rec.Code != 206 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != "4" {
			t.Errorf("HEAD range = %d, %d body bytes, Content-Length %q; want 206, 0, 4", rec.Code, rec.Body.Len(), rec.Header().Get("Content-Length"))
		}
	})
}

// TestTraversal sends requests that try to leave the root. None may return
// the secret, and each gets the status the path rules give it.
func TestTraversal(t *testing.T) {
	root := tree(t)
	handlers := map[string]*Handler{
		"plain": New(config(root)),
		"spa":   New(Config{Root: root, Index: "index.html", NotFound: "404.html", SPA: true}),
	}
	raw := []struct {
		target string
		code   int // for the plain handler
	}{
		{"/../outside/secret.txt", 404},
		{"/docs/../../outside/secret.txt", 404},
		{"/%2e%2e/outside/secret.txt", 404},
		{"/%2E%2E/outside/secret.txt", 404},
		{"/.%2e/outside/secret.txt", 404},
		{"/%2e%2e%2foutside%2fsecret.txt", 404},
		{"/docs%2f..%2f..%2foutside%2fsecret.txt", 404},
		{"/%252e%252e/outside/secret.txt", 404},
		{"/%2e%2e/", 404},
		{"/./style.css", 404},
		{"/..%5coutside%5csecret.txt", 404},
		{"/..\\outside\\secret.txt", 404},
		{"/%00", 400},
		{"/style.css%00.html", 400},
		{"/%2500", 400},
		{"/escape-file", 404},
		{"/escape-dir/secret.txt", 404},
		{"/escape-dir/dir/secret.txt", 404},
		{"/escape-dir/", 404},
		{"/escape-dir", 404},
		{"/deep/escape", 404},
		{"/abs-file", 404},
		{"/abs-dir/secret.txt", 404},
		{"/abs-inside", 404}, // absolute links are refused even when they point inside
		{"/escape-parent/outside/secret.txt", 404},
		{"/escape-parent/", 404},
		{"//" + filepath.ToSlash(filepath.Dir(root)) + "/outside/secret.txt", 404},
	}
	for name, h := range handlers {
		for _, tt := range raw {
			t.Run(name+tt.target, func(t *testing.T) {
				rec := do(t, h, "GET", tt.target)
				if strings.Contains(rec.Body.String(), secret) {
					t.Fatalf("served the secret: %d %q", rec.Code, rec.Body)
				}
				if name == "plain" && rec.Code != tt.code {
					t.Errorf("status = %d, want %d (body %q)", rec.Code, tt.code, rec.Body)
				}
			})
		}
	}
	// Decoded paths as a caller that rewrote r.URL.Path hands them over.
	decoded := []struct {
		path string
		code int
	}{
		{"../outside/secret.txt", 404},
		{"/a/../../outside/secret.txt", 404},
		{filepath.Join(filepath.Dir(root), "outside", "secret.txt"), 404},
		{"..", 404},
		{"/x\x00y", 400},
		{`\..\outside\secret.txt`, 404},
		{"/%2e%2e/outside/secret.txt", 404},
	}
	for _, tt := range decoded {
		rec := doPath(handlers["plain"], tt.path)
		if strings.Contains(rec.Body.String(), secret) || rec.Code != tt.code {
			t.Errorf("path %q = %d %q, want %d without the secret", tt.path, rec.Code, rec.Body, tt.code)
		}
	}
}

func TestSymlinksInside(t *testing.T) {
	h := New(config(tree(t)))
	tests := []struct{ target, body string }{
		{"/link-in.css", styleCSS},
		{"/deep/up.css", styleCSS},
		{"/linkdir/index.html", docsHTML},
		{"/linkdir/", docsHTML},
	}
	for _, tt := range tests {
		if rec := do(t, h, "GET", tt.target); rec.Code != 200 || rec.Body.String() != tt.body {
			t.Errorf("GET %s = %d %q, want 200 %q", tt.target, rec.Code, rec.Body, tt.body)
		}
	}
}

func TestCleanPath(t *testing.T) {
	tests := []struct {
		path, raw string
		name      string
		slash     bool
		err       error
	}{
		{"", "", ".", true, nil},
		{"/", "", ".", true, nil},
		{"/a", "", "a", false, nil},
		{"/a/", "", "a", true, nil},
		{"a//b///", "", "a/b", true, nil},
		{"/a/b", "/a%2Fb", "a/b", false, nil},
		{"/...", "", "...", false, nil},
		{"/..a/b..", "", "..a/b..", false, nil},
		{"/a/..", "", "", false, errRefusedPath},
		{"/a/./b", "", "", false, errRefusedPath},
		{"/a\\b", "", "", false, errRefusedPath},
		{"/%2e%2e", "/%252e%252e", "", false, errRefusedPath},
		{"/a/b", "/a%2f..%2fb", "", false, errRefusedPath},
		{"/a\x00", "", "", false, errBadPath},
		{"/%00", "", "", false, errBadPath},
	}
	for _, tt := range tests {
		name, slash, err := cleanPath(&url.URL{Path: tt.path, RawPath: tt.raw})
		if name != tt.name || slash != tt.slash || err != tt.err {
			t.Errorf("cleanPath(%q, %q) = %q, %v, %v; want %q, %v, %v", tt.path, tt.raw, name, slash, err, tt.name, tt.slash, tt.err)
		}
	}
}
