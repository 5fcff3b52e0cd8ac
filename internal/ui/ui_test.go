package ui_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/clocktest"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/ui"
)

// world is the UI with a real gate, real app-tokens on a real store, and
// a probe route behind the gate (CRUD tier, narrowing wall) that answers
// who called it, served on loopback behind the admin listener's guard.
type world struct {
	srv    *httptest.Server
	clk    *clocktest.Clock
	tokens *auth.Tokens
	team   string // a token confined to namespace team
	teamID string
}

func newWorld(t *testing.T, tls bool) *world {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	tokens, err := auth.NewTokens(context.Background(), auth.TokensConfig{Store: st, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	minted, err := tokens.Mint(context.Background(), &auth.Principal{Kind: auth.Operator, User: "admin"},
		apitype.NewToken{Name: "team", Admin: apitype.ScopeAdmin, Namespace: "team", Deployments: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := ui.NewSessions(ui.SessionOptions{TTL: time.Hour, Idle: 30 * time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sess.Close)
	gate := auth.New(auth.Config{Password: "pw", Tokens: tokens, Sessions: sess, Now: clk.Now})
	mux := http.NewServeMux()
	pages := ui.New(ui.Options{Gate: gate, Sessions: sess})
	for _, p := range ui.Patterns() {
		mux.Handle(p, pages)
	}
	mux.Handle("/probe", gate.Wrap(auth.CRUD, auth.WallNarrow, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := auth.FromContext(r.Context())
		io.WriteString(w, p.Name()+" confined="+map[bool]string{true: "yes", false: "no"}[p.Confined()])
	})))
	h := auth.Guard(auth.GuardConfig{}, mux)
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return &world{srv: srv, clk: clk, tokens: tokens, team: minted.Token, teamID: minted.ID}
}

// browser is a client with a cookie jar that follows no redirect.
func (w *world) browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{
		Transport: w.srv.Client().Transport, Jar: jar, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type answer struct {
	code   int
	header http.Header
	body   string
}

func do(t *testing.T, c *http.Client, method, u string, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	r, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return answer{r.StatusCode, r.Header, string(b)}
}

// signIn posts the sign-in form as a browser does (with its Origin).
func (w *world) signIn(t *testing.T, c *http.Client, user, secret string) answer {
	t.Helper()
	form := url.Values{"user": {user}, "secret": {secret}, "next": {"/dashboard"}}
	return do(t, c, "POST", w.srv.URL+"/login", form.Encode(), "Content-Type", "application/x-www-form-urlencoded", "Origin", w.srv.URL)
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// csrf reads the session's CSRF token from the dashboard.
func (w *world) csrf(t *testing.T, c *http.Client) string {
	t.Helper()
	a := do(t, c, "GET", w.srv.URL+"/dashboard", "")
	m := csrfMeta.FindStringSubmatch(a.body)
	if a.code != 200 || m == nil {
		t.Fatalf("dashboard: %d, no CSRF token in %q", a.code, a.body)
	}
	return m[1]
}

// TestSignInCookie: the operator's password starts a session whose cookie
// is HttpOnly, SameSite=Strict, host-only on the whole path; on plain HTTP
// it is berth_ui (a __Host- cookie must be Secure), over TLS
// __Host-berth_ui and Secure. The session acts as the operator.
func TestSignInCookie(t *testing.T) {
	for _, tls := range []bool{false, true} {
		w := newWorld(t, tls)
		c := w.browser(t)
		a := w.signIn(t, c, "admin", "pw")
		if a.code != http.StatusSeeOther || a.header.Get("Location") != "/dashboard" {
			t.Fatalf("tls=%v: sign-in %d %v %s", tls, a.code, a.header, a.body)
		}
		set := a.header.Values("Set-Cookie")
		want := "berth_ui="
		if tls {
			want = "__Host-berth_ui="
		}
		if len(set) != 1 || !strings.HasPrefix(set[0], want) || !strings.Contains(set[0], "; Path=/") ||
			!strings.Contains(set[0], "; HttpOnly") || !strings.Contains(set[0], "; SameSite=Strict") ||
			strings.Contains(set[0], "Domain=") || strings.Contains(set[0], "; Secure") != tls {
			t.Errorf("tls=%v: Set-Cookie %q", tls, set)
		}
		if p := do(t, c, "GET", w.srv.URL+"/probe", ""); p.code != 200 || p.body != "user:admin confined=no" {
			t.Errorf("tls=%v: the session acts as %d %q", tls, p.code, p.body)
		}
		// Signing in again gives a new secret and ends the old session.
		old := strings.SplitN(set[0], ";", 2)[0]
		again := w.signIn(t, c, "admin", "pw")
		if s := again.header.Get("Set-Cookie"); s == "" || strings.HasPrefix(s, old+";") {
			t.Errorf("tls=%v: a second sign-in kept the secret: %q", tls, s)
		}
		if p := do(t, w.browser(t), "GET", w.srv.URL+"/probe", "", "Cookie", old); p.code != 401 {
			t.Errorf("tls=%v: the session signed in over still works: %d", tls, p.code)
		}
		if p := do(t, c, "GET", w.srv.URL+"/probe", ""); p.code != 200 {
			t.Errorf("tls=%v: the new session: %d", tls, p.code)
		}
	}
}

// TestSignInRefused: a wrong password or an unknown token is the sign-in
// page again (401, saying why, with no Basic challenge that would pop a
// browser dialog) and starts no session; a form without an Origin header
// is refused; a next that leaves the listener is not followed.
func TestSignInRefused(t *testing.T) {
	w := newWorld(t, false)
	c := w.browser(t)
	for _, secret := range []string{"wrong", "berth_000000000000_" + strings.Repeat("A", 43)} {
		a := w.signIn(t, c, "admin", secret)
		if a.code != 401 || !strings.Contains(a.body, "Wrong user, password or token.") || a.header.Get("WWW-Authenticate") != "" || len(a.header.Values("Set-Cookie")) != 0 {
			t.Errorf("%q: %d %v", secret, a.code, a.header)
		}
	}
	if a := w.signIn(t, c, "mallory", "pw"); a.code != 401 {
		t.Errorf("the right password for the wrong user: %d", a.code)
	}
	form := url.Values{"secret": {"pw"}}.Encode()
	if a := do(t, c, "POST", w.srv.URL+"/login", form, "Content-Type", "application/x-www-form-urlencoded"); a.code != 403 || len(a.header.Values("Set-Cookie")) != 0 {
		t.Errorf("no Origin: %d", a.code)
	}
	if a := do(t, c, "POST", w.srv.URL+"/login", form, "Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example"); a.code != 403 {
		t.Errorf("a foreign Origin: %d", a.code)
	}
	for _, next := range []string{"//evil.example/x", "https://evil.example", "/\\evil.example"} {
		f := url.Values{"secret": {"pw"}, "next": {next}}.Encode()
		a := do(t, c, "POST", w.srv.URL+"/login", f, "Content-Type", "application/x-www-form-urlencoded", "Origin", w.srv.URL)
		if a.code != 303 || a.header.Get("Location") != "/dashboard" {
			t.Errorf("next %q: %d to %q", next, a.code, a.header.Get("Location"))
		}
	}
	// Not signed in, the pages send the browser to sign in; the API
	// answers a page's script 401 without a Basic challenge.
	anon := w.browser(t)
	if a := do(t, anon, "GET", w.srv.URL+"/dashboard", ""); a.code != 303 || a.header.Get("Location") != "/login?next=%2Fdashboard" {
		t.Errorf("/dashboard not signed in: %d %q", a.code, a.header.Get("Location"))
	}
	if a := do(t, anon, "GET", w.srv.URL+"/probe", "", "Sec-Fetch-Mode", "cors"); a.code != 401 || strings.Contains(a.header.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("a script's unauthenticated request: %d %v", a.code, a.header["Www-Authenticate"])
	}
	if a := do(t, anon, "GET", w.srv.URL+"/probe", ""); a.code != 401 || !strings.Contains(strings.Join(a.header.Values("WWW-Authenticate"), ","), "Basic") {
		t.Errorf("an API client's unauthenticated request lost its Basic challenge: %d %v", a.code, a.header["Www-Authenticate"])
	}
}

// TestCSRF: a session's request that changes state needs the session's
// CSRF token; a wrong or missing one is 403 and changes nothing; a safe
// one needs none; an Authorization header ignores the cookie.
func TestCSRF(t *testing.T) {
	w := newWorld(t, false)
	c := w.browser(t)
	w.signIn(t, c, "admin", "pw")
	tok := w.csrf(t, c)
	if a := do(t, c, "POST", w.srv.URL+"/probe", ""); a.code != 403 || !strings.Contains(a.body, "CSRF") {
		t.Errorf("no CSRF token: %d %s", a.code, a.body)
	}
	wrong := []byte(tok)
	wrong[0] ^= 1
	if a := do(t, c, "POST", w.srv.URL+"/probe", "", ui.CSRFHeader, string(wrong)); a.code != 403 {
		t.Errorf("a wrong CSRF token: %d %s", a.code, a.body)
	}
	other := w.browser(t)
	w.signIn(t, other, "admin", "pw")
	if a := do(t, c, "POST", w.srv.URL+"/probe", "", ui.CSRFHeader, w.csrf(t, other)); a.code != 403 {
		t.Errorf("another session's CSRF token: %d %s", a.code, a.body)
	}
	if a := do(t, c, "DELETE", w.srv.URL+"/probe", "", ui.CSRFHeader, tok); a.code != 200 || a.body != "user:admin confined=no" {
		t.Errorf("the right CSRF token: %d %s", a.code, a.body)
	}
	if a := do(t, c, "GET", w.srv.URL+"/probe", ""); a.code != 200 {
		t.Errorf("a GET: %d %s", a.code, a.body)
	}
	if a := do(t, c, "POST", w.srv.URL+"/probe", "", "Authorization", "Bearer "+w.team); a.code != 200 || !strings.HasPrefix(a.body, "token:") {
		t.Errorf("a Bearer credential with the cookie: %d %s", a.code, a.body)
	}
	// Signing out needs the token too.
	if a := do(t, c, "POST", w.srv.URL+"/logout", url.Values{"csrf": {string(wrong)}}.Encode(), "Content-Type", "application/x-www-form-urlencoded", "Origin", w.srv.URL); a.code != 403 {
		t.Errorf("sign-out with a wrong token: %d", a.code)
	}
	a := do(t, c, "POST", w.srv.URL+"/logout", url.Values{"csrf": {tok}}.Encode(), "Content-Type", "application/x-www-form-urlencoded", "Origin", w.srv.URL)
	if a.code != 303 || a.header.Get("Location") != "/login" || !strings.Contains(a.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("sign-out: %d %v", a.code, a.header)
	}
	if a := do(t, c, "GET", w.srv.URL+"/probe", ""); a.code != 401 {
		t.Errorf("after sign-out: %d %s", a.code, a.body)
	}
}

// TestSessionEnds: a session ends at its TTL and when idle; its browser
// is then sent to sign in again, and the API answers 401 (no Basic
// challenge, so no dialog over the page).
func TestSessionEnds(t *testing.T) {
	w := newWorld(t, false)
	c := w.browser(t)
	w.signIn(t, c, "admin", "pw")
	for i := 0; i < 2; i++ { // used every 25 minutes: never idle
		w.clk.Add(25 * time.Minute)
		if a := do(t, c, "GET", w.srv.URL+"/probe", ""); a.code != 200 {
			t.Fatalf("after %d×25 min: %d", i+1, a.code)
		}
	}
	w.clk.Add(10*time.Minute + time.Second) // past the 1 h TTL
	if a := do(t, c, "GET", w.srv.URL+"/probe", ""); a.code != 401 || a.header.Get("WWW-Authenticate") == "" || strings.Contains(a.header.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("past its TTL: %d %v", a.code, a.header["Www-Authenticate"])
	}
	if a := do(t, c, "GET", w.srv.URL+"/dashboard", ""); a.code != 303 || !strings.HasPrefix(a.header.Get("Location"), "/login") {
		t.Errorf("past its TTL, the dashboard: %d", a.code)
	}
	w.signIn(t, c, "admin", "pw")
	w.clk.Add(31 * time.Minute) // idle
	if a := do(t, c, "GET", w.srv.URL+"/probe", ""); a.code != 401 {
		t.Errorf("idle: %d", a.code)
	}
}

// TestConfinedSession: a session signed in with a namespace-confined
// token acts as that token (confined), and ends when the token is revoked.
func TestConfinedSession(t *testing.T) {
	w := newWorld(t, false)
	c := w.browser(t)
	if a := w.signIn(t, c, "", w.team); a.code != 303 {
		t.Fatalf("sign-in with a token: %d %s", a.code, a.body)
	}
	if a := do(t, c, "GET", w.srv.URL+"/probe", ""); a.code != 200 || a.body != "token:"+w.teamID+" confined=yes" {
		t.Errorf("the token's session acts as %d %q", a.code, a.body)
	}
	if a := do(t, c, "GET", w.srv.URL+"/dashboard", ""); !strings.Contains(a.body, "token "+w.teamID+" (namespace team)") {
		t.Errorf("the dashboard does not say who is signed in: %s", a.body)
	}
	if err := w.tokens.Revoke(context.Background(), &auth.Principal{Kind: auth.Operator, User: "admin"}, w.teamID); err != nil {
		t.Fatal(err)
	}
	if a := do(t, c, "GET", w.srv.URL+"/probe", ""); a.code != 401 {
		t.Errorf("after the token was revoked: %d %s", a.code, a.body)
	}
	// A token's expiry ends its sessions too.
	secs := int64(60)
	short, err := w.tokens.Mint(context.Background(), &auth.Principal{Kind: auth.Operator, User: "admin"},
		apitype.NewToken{Name: "short", Admin: apitype.ScopeView, Namespace: "team", Deployments: []string{}, ExpiresInSecs: &secs})
	if err != nil {
		t.Fatal(err)
	}
	c = w.browser(t)
	w.signIn(t, c, "", short.Token)
	if a := do(t, c, "GET", w.srv.URL+"/dashboard", ""); a.code != 200 {
		t.Fatalf("signed in with a view token: %d", a.code)
	}
	w.clk.Add(61 * time.Second)
	if a := do(t, c, "GET", w.srv.URL+"/dashboard", ""); a.code != 303 {
		t.Errorf("after the token expired, the dashboard: %d", a.code)
	}
}

// TestAssets: the assets are served with an ETag (304 on a match), the
// dashboard with Cache-Control: no-store and a CSP; the whole UI is far
// under its 500 KiB compressed budget.
func TestAssets(t *testing.T) {
	w := newWorld(t, false)
	c := w.browser(t)
	a := do(t, c, "GET", w.srv.URL+"/__ui/app.css", "")
	if a.code != 200 || a.header.Get("ETag") == "" || !strings.HasPrefix(a.header.Get("Content-Type"), "text/css") {
		t.Fatalf("app.css: %d %v", a.code, a.header)
	}
	if b := do(t, c, "GET", w.srv.URL+"/__ui/app.css", "", "If-None-Match", a.header.Get("ETag")); b.code != 304 {
		t.Errorf("revalidated: %d", b.code)
	}
	if b := do(t, c, "GET", w.srv.URL+"/__ui/nope.js", ""); b.code != 404 {
		t.Errorf("a missing asset: %d", b.code)
	}
	w.signIn(t, c, "admin", "pw")
	d := do(t, c, "GET", w.srv.URL+"/dashboard", "")
	if d.header.Get("Cache-Control") != "no-store" || !strings.Contains(d.header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("dashboard headers %v", d.header)
	}
	var total int
	err := fs.WalkDir(os.DirFS("assets"), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join("assets", p))
		if err != nil {
			return err
		}
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(b)
		zw.Close()
		total += z.Len()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total == 0 || total > 500<<10 {
		t.Errorf("the UI is %d bytes compressed", total)
	}
	t.Logf("the UI is %d bytes gzipped", total)
}

var cspNonce = regexp.MustCompile(`style-src 'self' 'nonce-([A-Za-z0-9_-]+)'`)

// TestSecurityAndStoragePages: /siem and /storage are served to a
// signed-in browser (the nav marking the page, its script, the session's
// CSRF token for the script's writes), with the pages' CSP; a browser not
// signed in is sent to sign in first and comes back to the page; a write
// to a page's path is not a page.
func TestSecurityAndStoragePages(t *testing.T) {
	w := newWorld(t, false)
	anon := w.browser(t)
	for _, p := range []struct{ path, title, script string }{
		{"/siem", "Security", "/__ui/siem.js"},
		{"/storage", "Storage", "/__ui/storage.js"},
	} {
		if a := do(t, anon, "GET", w.srv.URL+p.path, ""); a.code != 303 || a.header.Get("Location") != "/login?next="+url.QueryEscape(p.path) {
			t.Errorf("%s not signed in: %d %q", p.path, a.code, a.header.Get("Location"))
		}
		c := w.browser(t)
		form := url.Values{"secret": {"pw"}, "next": {p.path}}.Encode()
		if a := do(t, c, "POST", w.srv.URL+"/login", form, "Content-Type", "application/x-www-form-urlencoded", "Origin", w.srv.URL); a.code != 303 || a.header.Get("Location") != p.path {
			t.Fatalf("sign-in for %s: %d %q", p.path, a.code, a.header.Get("Location"))
		}
		a := do(t, c, "GET", w.srv.URL+p.path, "")
		if a.code != 200 || a.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s: %d %v", p.path, a.code, a.header)
		}
		for _, want := range []string{
			`<a href="` + p.path + `" aria-current="page">` + p.title + `</a>`,
			`<script type="module" src="` + p.script + `"></script>`,
			`<title>` + p.title + ` · berth</title>`,
		} {
			if !strings.Contains(a.body, want) {
				t.Errorf("%s lacks %s", p.path, want)
			}
		}
		if m := csrfMeta.FindStringSubmatch(a.body); m == nil || m[1] != w.csrf(t, c) {
			t.Errorf("%s: no CSRF token for its script, or not the session's", p.path)
		}
		csp := a.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self';") || strings.Contains(csp, "unsafe") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("%s: CSP %q", p.path, csp)
		}
		if b := do(t, c, "POST", w.srv.URL+p.path, "", ui.CSRFHeader, w.csrf(t, c)); b.code != http.StatusMethodNotAllowed || strings.Contains(b.body, "<html") {
			t.Errorf("POST %s: %d %.80s", p.path, b.code, b.body)
		}
	}
	// An app-token's session gets the pages too (the API narrows what
	// their scripts read).
	c := w.browser(t)
	w.signIn(t, c, "", w.team)
	if a := do(t, c, "GET", w.srv.URL+"/storage", ""); a.code != 200 || !strings.Contains(a.body, "token "+w.teamID) {
		t.Errorf("/storage for a token's session: %d", a.code)
	}
}

// TestStyleNonce: every page answer has a fresh style nonce, in its CSP
// and on the dashboard's terminal stylesheet link, where shell.js reads it
// to admit the <style> elements xterm.js makes; nothing else is admitted.
func TestStyleNonce(t *testing.T) {
	w := newWorld(t, false)
	c := w.browser(t)
	w.signIn(t, c, "admin", "pw")
	seen := map[string]bool{}
	for range 3 {
		a := do(t, c, "GET", w.srv.URL+"/dashboard", "")
		m := cspNonce.FindStringSubmatch(a.header.Get("Content-Security-Policy"))
		if m == nil {
			t.Fatalf("no style nonce in %q", a.header.Get("Content-Security-Policy"))
		}
		if len(m[1]) < 22 || seen[m[1]] {
			t.Errorf("nonce %q: short or seen before", m[1])
		}
		seen[m[1]] = true
		if !strings.Contains(a.body, `<link rel="stylesheet" href="/__ui/xterm.css" data-style-nonce nonce="`+m[1]+`">`) {
			t.Errorf("the dashboard's terminal stylesheet does not carry the answer's nonce %q", m[1])
		}
		if !strings.Contains(a.body, `<dialog id="shell"`) {
			t.Error("the dashboard has no shell dialog")
		}
	}
	// Assets carry no nonce: nothing they contain is admitted by one.
	if a := do(t, c, "GET", w.srv.URL+"/__ui/shell.js", ""); strings.Contains(a.header.Get("Content-Security-Policy"), "nonce") {
		t.Errorf("an asset's CSP %q", a.header.Get("Content-Security-Policy"))
	}
}

var assetRef = regexp.MustCompile(`(?:src|href)="/__ui/([^"]+)"|from '\./([^']+)'|import\('\./([^']+)'\)`)

// TestAssetReferences: every /__ui/ file a page names, and every module a
// script imports, is served with its type (a module served as anything
// but JavaScript is refused under nosniff), so no page loads a 404.
func TestAssetReferences(t *testing.T) {
	w := newWorld(t, false)
	c := w.browser(t)
	refs := map[string]string{}
	for _, dir := range []string{"assets", "assets/static"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.*"))
		for _, f := range files {
			if !strings.HasSuffix(f, ".html") && !strings.HasSuffix(f, ".js") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range assetRef.FindAllStringSubmatch(string(b), -1) {
				refs[m[1]+m[2]+m[3]] = f
			}
		}
	}
	for _, want := range []string{"siem.js", "storage.js", "shell.js", "xterm.js", "xterm-addon-fit.js", "xterm.css", "format.js"} {
		if refs[want] == "" {
			t.Errorf("nothing refers to %s", want)
		}
	}
	for ref, from := range refs {
		a := do(t, c, "GET", w.srv.URL+"/__ui/"+ref, "")
		want := map[string]string{".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}[filepath.Ext(ref)]
		if a.code != 200 || want == "" || !strings.HasPrefix(a.header.Get("Content-Type"), want) {
			t.Errorf("%s (named in %s): %d %q", ref, from, a.code, a.header.Get("Content-Type"))
		}
	}
}

// TestPages: the network, plugins and Computers pages are served to a
// signed-in session with its CSRF token, their own script and the nav
// marking the page; not signed in, each sends the browser to sign in and
// back; the UI does not claim /computers, the Computer API's path.
func TestPages(t *testing.T) {
	w := newWorld(t, false)
	anon := w.browser(t)
	c := w.browser(t)
	w.signIn(t, c, "admin", "pw")
	for _, p := range []struct{ path, title, script string }{
		{"/network", "Network", "/__ui/network.js"},
		{"/plugins", "Plugins", "/__ui/plugins.js"},
		{ui.ComputersPath, "Computers", "/__ui/computers.js"},
	} {
		a := do(t, anon, "GET", w.srv.URL+p.path, "")
		if a.code != http.StatusSeeOther || a.header.Get("Location") != "/login?next="+url.QueryEscape(p.path) {
			t.Errorf("%s not signed in: %d to %q", p.path, a.code, a.header.Get("Location"))
		}
		a = do(t, c, "GET", w.srv.URL+p.path, "")
		if a.code != 200 || !strings.Contains(a.body, "<title>"+p.title+" · berth</title>") || !csrfMeta.MatchString(a.body) ||
			!strings.Contains(a.body, `<script type="module" src="`+p.script+`"></script>`) ||
			!strings.Contains(a.body, `<a href="`+p.path+`" aria-current="page">`+p.title+`</a>`) {
			t.Errorf("%s: %d %s", p.path, a.code, a.body)
		}
		if a.header.Get("Cache-Control") != "no-store" || !strings.Contains(a.header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("%s headers %v", p.path, a.header)
		}
		if s := do(t, c, "GET", w.srv.URL+p.script, ""); s.code != 200 || !strings.HasPrefix(s.header.Get("Content-Type"), "text/javascript") {
			t.Errorf("%s: %d %v", p.script, s.code, s.header)
		}
	}
	// A token confined to a namespace may open the pages (what it sees
	// there is the API's to narrow).
	tc := w.browser(t)
	w.signIn(t, tc, "", w.team)
	if a := do(t, tc, "GET", w.srv.URL+ui.ComputersPath, ""); a.code != 200 || !strings.Contains(a.body, "(namespace team)") {
		t.Errorf("the team's token on the Computers page: %d", a.code)
	}
	for _, p := range ui.Patterns() {
		if strings.HasSuffix(p, " /computers") || p == "/computers" || strings.HasPrefix(strings.TrimPrefix(p, "GET "), "/computers/") {
			t.Errorf("the UI claims %q, the Computer API's", p)
		}
	}
}

// TestPagesUngated: without an operator password the pages are served to
// a browser that has not signed in (the API is open on loopback).
func TestPagesUngated(t *testing.T) {
	sess, err := ui.NewSessions(ui.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sess.Close)
	gate := auth.New(auth.Config{Sessions: sess})
	pages := ui.New(ui.Options{Gate: gate, Sessions: sess})
	for _, path := range []string{"/network", "/plugins", ui.ComputersPath} {
		rec := httptest.NewRecorder()
		pages.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 || strings.Contains(rec.Body.String(), "csrf-token") {
			t.Errorf("%s ungated: %d", path, rec.Code)
		}
	}
}
