package server

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/internal/oidc/oidctest"
)

// identityEcho is an upstream that answers with the identity headers it
// received.
func identityEcho(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{
			"user": r.Header.Get("X-Auth-Request-User"), "email": r.Header.Get("X-Auth-Request-Email"),
			"name": r.Header.Get("X-Auth-Request-Name"), "path": r.URL.Path,
		})
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// declareCorp declares the OpenID Connect provider "corp" (op, admitting
// alice@corp.test) in namespace default, its client secret in the store.
func declareCorp(t *testing.T, h *harness, op *oidctest.Provider) {
	t.Helper()
	if r := h.json("POST", "/secrets", fmt.Sprintf(`{"id": "oidc", "data": {"client_secret": %q}}`, op.ClientSecret())); r.code != 201 {
		t.Fatalf("secret: %d %s", r.code, r.body)
	}
	prov := fmt.Sprintf(`{"name": "corp", "provider": "google", "client_id": %q, "issuer": %q,
		"client_secret": {"secret": "oidc", "key": "client_secret"}, "allowed_emails": ["alice@corp.test"]}`, op.ClientID(), op.Issuer())
	if r := h.json("POST", "/auth-providers", prov); r.code != 201 {
		t.Fatalf("provider: %d %s", r.code, r.body)
	}
}

// gatedApp declares an OpenID Connect provider (op) in namespace default
// and a deployment app.test inheriting it, with /healthz public.
func gatedApp(t *testing.T, h *harness, op *oidctest.Provider, up string) {
	t.Helper()
	declareCorp(t, h, op)
	dep := fmt.Sprintf(`{"id": "app", "routes": [{"host": "app.test"}], "upstreams": [%q],
		"auth": {"provider_ref": "corp", "forward_identity": true, "public_paths": [{"path": "/healthz", "scope": "public"}]}}`, up)
	if r := h.json("POST", "/deployments", dep); r.code != 201 {
		t.Fatalf("deployment: %d %s", r.code, r.body)
	}
	if r := h.json("POST", "/deployments", fmt.Sprintf(`{"id": "open", "routes": [{"host": "open.test"}], "upstreams": [%q]}`, up)); r.code != 201 {
		t.Fatalf("deployment: %d %s", r.code, r.body)
	}
}

// viaProxy is a client whose every *.test name dials berth's proxy, with a
// cookie jar, following no redirects.
func viaProxy(h *harness) *http.Client {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, _ := net.SplitHostPort(addr); strings.HasSuffix(host, ".test") {
			addr = strings.TrimPrefix(h.proxy, "http://")
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	return &http.Client{Transport: tr, Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func browse(t *testing.T, c *http.Client, u string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Accept", "text/html")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// followSignIn follows a browser's sign-in redirects from resp and body, the
// answer browse gave: while the answer is a 302 (at most 5 times) it browses
// the Location, sending hdr (as browse does) on each. It returns the last
// answer and its body.
func followSignIn(t *testing.T, c *http.Client, resp *http.Response, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	for range 5 {
		if resp.StatusCode != 302 {
			break
		}
		loc, err := resp.Location()
		if err != nil {
			t.Fatal(err)
		}
		resp, body = browse(t, c, loc.String(), hdr...)
	}
	return resp, body
}

// TestGateThroughBerth: a deployment behind an inherited OpenID Connect
// provider, through berth's own proxy: a program is told where to sign
// in, a public path passes, a browser signs in through the real provider
// and reaches the app with its identity, and no client-sent
// X-Auth-Request-* header reaches any upstream, gated or not.
func TestGateThroughBerth(t *testing.T) {
	op := oidctest.Start(t)
	h := start(t, "")
	gatedApp(t, h, op, identityEcho(t))
	c := viaProxy(h)
	port := h.proxy[strings.LastIndexByte(h.proxy, ':')+1:]
	app := "http://app.test:" + port

	// A program.
	req, _ := http.NewRequest("GET", app+"/x", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if resp.StatusCode != 401 || m["login_url"] != app+"/__applb/auth/login" {
		t.Fatalf("program: %d %v", resp.StatusCode, m)
	}
	// A public path, with a forged identity.
	resp, b := browse(t, c, app+"/healthz", "X-Auth-Request-User", "mallory")
	if resp.StatusCode != 200 || strings.Contains(b, "mallory") {
		t.Fatalf("public path: %d %s", resp.StatusCode, b)
	}
	// An ungated deployment strips it too.
	if resp, b := browse(t, c, "http://open.test:"+port+"/", "X-Auth-Request-User", "mallory", "X-Auth-Request-Email", "m@evil"); resp.StatusCode != 200 || strings.Contains(b, "mallory") || strings.Contains(b, "m@evil") {
		t.Fatalf("ungated: %d %s", resp.StatusCode, b)
	}

	// A browser signs in.
	op.QueueUser(oidctest.User{Subject: "alice-id", Email: "alice@corp.test", EmailVerified: true, Name: "Alice"})
	resp, b = browse(t, c, app+"/page")
	resp, b = followSignIn(t, c, resp, b, "X-Auth-Request-User", "mallory")
	if resp.StatusCode != 200 {
		t.Fatalf("after sign-in: %d %s", resp.StatusCode, b)
	}
	var seen map[string]string
	json.Unmarshal([]byte(b), &seen)
	if seen["user"] != "alice-id" || seen["email"] != "alice@corp.test" || seen["path"] != "/page" {
		t.Fatalf("the app saw %v", seen)
	}
	// The decisions are counted in the Prometheus exposition.
	if r := h.do("GET", "/metrics/prometheus", "", ""); !strings.Contains(string(r.body), `berth_gate_decisions_total{decision="allow",reason="session"} 1`) ||
		!strings.Contains(string(r.body), `berth_gate_decisions_total{decision="allow",reason="public"}`) {
		t.Errorf("gate decisions missing from /metrics/prometheus:\n%s", r.body)
	}
	// The operator lists the session; a token of another namespace sees
	// none, and its DELETE answers as for a session that does not exist.
	r := h.json("GET", "/sessions?deployment=app", "")
	var list []map[string]any
	json.Unmarshal(r.body, &list)
	if r.code != 200 || len(list) != 1 || list[0]["subject"] != "alice-id" || list[0]["namespace"] != "default" {
		t.Fatalf("GET /sessions: %d %s", r.code, r.body)
	}
	id := list[0]["id"].(string)
	mint := h.json("POST", "/tokens", `{"name": "other", "admin": "admin", "namespace": "other", "deployments": []}`)
	var minted map[string]any
	json.Unmarshal(mint.body, &minted)
	other := "Bearer " + minted["token"].(string)
	if r := h.json("GET", "/sessions", "", "Authorization", other); r.code != 200 || strings.TrimSpace(string(r.body)) != "[]" {
		t.Errorf("another namespace lists %d %s", r.code, r.body)
	}
	foreign := h.json("DELETE", "/sessions/"+id, "", "Authorization", other)
	missing := h.json("DELETE", "/sessions/000000000000", "", "Authorization", other)
	if foreign.code != 404 || strings.ReplaceAll(string(foreign.body), id, "X") != strings.ReplaceAll(string(missing.body), "000000000000", "X") {
		t.Errorf("foreign %d %s vs missing %d %s", foreign.code, foreign.body, missing.code, missing.body)
	}
	cl, err := client.New(h.admin)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := cl.RevokeSubjectSessions(context.Background(), "app", "nobody"); err != nil || n != 0 {
		t.Errorf("signing out a person with no session: %d, %v", n, err)
	}
	if ss, err := cl.Sessions(context.Background(), "app"); err != nil || len(ss) != 1 || ss[0].ID != id {
		t.Fatalf("client.Sessions: %v, %v", ss, err)
	}
	if err := cl.RevokeSession(context.Background(), id); err != nil {
		t.Fatalf("client.RevokeSession: %v", err)
	}
	if resp, _ := browse(t, c, app+"/page"); resp.StatusCode != 302 {
		t.Errorf("after the session was revoked: %d, want sent to sign in", resp.StatusCode)
	}
	// Deleting the provider a deployment inherits is refused.
	if r := h.do("DELETE", "/auth-providers/default/corp", "", ""); r.code != 409 {
		t.Errorf("deleting an inherited provider: %d %s", r.code, r.body)
	}
	// Deleting the deployment ends its sessions.
	op.QueueUser(oidctest.User{Subject: "alice-id", Email: "alice@corp.test", EmailVerified: true})
	resp, b = browse(t, c, app+"/again")
	followSignIn(t, c, resp, b)
	if ss, _ := cl.Sessions(context.Background(), "app"); len(ss) != 1 {
		t.Fatalf("signed in again: %d sessions", len(ss))
	}
	if r := h.do("DELETE", "/deployments/app", "", ""); r.code != 204 {
		t.Fatalf("delete: %d", r.code)
	}
	if ss, _ := cl.Sessions(context.Background(), ""); len(ss) != 0 {
		t.Errorf("a deleted deployment's sessions live on: %v", ss)
	}
}

// TestBrowserSignIn: headless Chromium, driven by Playwright, signs in
// through the whole redirect flow (choice page, the OpenID Provider, the
// callback), reaches the app with the identity berth forwards, signs out
// and is asked to sign in again. It saves a screenshot of the sign-in page
// (BERTH_SCREENSHOT_DIR, else the test's temp dir) and checks it is a
// real image. scripts/test installs Chromium and playwright-core and sets
// BERTH_PLAYWRIGHT and BERTH_REQUIRE_BROWSER; without them it is skipped.
func TestBrowserSignIn(t *testing.T) {
	nodeModules := needBrowser(t, "playwright-core")
	op := oidctest.Start(t)
	h := start(t, "")
	gatedApp(t, h, op, identityEcho(t))
	// A second way to sign in on the provider, so the browser meets the
	// choice page.
	prov := fmt.Sprintf(`{"name": "corp", "provider": ["google", "jwt"], "client_id": %q, "issuer": %q,
		"client_secret": {"secret": "oidc", "key": "client_secret"}, "allowed_emails": ["alice@corp.test"],
		"jwt": {"jwks_url": %q, "algorithms": ["RS256"], "issuer": %q, "cookie": "corp_jwt", "login_url": "https://login.corp.example/signin"}}`,
		op.ClientID(), op.Issuer(), op.Issuer()+"/jwks", op.Issuer())
	if r := h.json("POST", "/auth-providers", prov); r.code != 200 {
		t.Fatalf("provider with two ways in: %d %s", r.code, r.body)
	}
	op.QueueUser(oidctest.User{Subject: "alice-id", Email: "alice@corp.test", EmailVerified: true, Name: "Alice"})
	shotDir := os.Getenv("BERTH_SCREENSHOT_DIR")
	if shotDir == "" {
		shotDir = t.TempDir()
	}
	shot := filepath.Join(shotDir, "signin-choice.png")
	port := h.proxy[strings.LastIndexByte(h.proxy, ':')+1:]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "signin.cjs"), "http://app.test:"+port, shot)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodeModules)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the browser run failed: %v\n%s", err, out)
	}
	var got struct {
		ChoiceStatus       int               `json:"choiceStatus"`
		ChoiceTitle        string            `json:"choiceTitle"`
		ChoiceLinks        []string          `json:"choiceLinks"`
		AppURL             string            `json:"appURL"`
		AppBody            map[string]string `json:"appBody"`
		Cookies            []map[string]any  `json:"cookies"`
		AfterLogoutStatus  int               `json:"afterLogoutStatus"`
		AfterLogoutTitle   string            `json:"afterLogoutTitle"`
		CookiesAfterLogout []string          `json:"cookiesAfterLogout"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("browser output %q: %v", out, err)
	}
	t.Logf("browser saw %+v", got)
	if got.ChoiceStatus != 401 || got.ChoiceTitle != "Sign in" || len(got.ChoiceLinks) != 2 {
		t.Errorf("choice page: %d %q %v", got.ChoiceStatus, got.ChoiceTitle, got.ChoiceLinks)
	}
	if got.AppBody["user"] != "alice-id" || got.AppBody["email"] != "alice@corp.test" || got.AppBody["path"] != "/hello" {
		t.Errorf("the app saw %v (at %s)", got.AppBody, got.AppURL)
	}
	var session map[string]any
	for _, c := range got.Cookies {
		if c["name"] == "applb_session" {
			session = c
		}
	}
	if session == nil || session["httpOnly"] != true || session["sameSite"] != "Lax" {
		t.Errorf("session cookie %v (all: %v)", session, got.Cookies)
	}
	if got.AfterLogoutStatus != 401 || got.AfterLogoutTitle != "Sign in" {
		t.Errorf("after sign-out: %d %q, want the sign-in page again", got.AfterLogoutStatus, got.AfterLogoutTitle)
	}
	for _, c := range got.CookiesAfterLogout {
		if c == "applb_session" {
			t.Error("the session cookie survived sign-out")
		}
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 200 {
		t.Errorf("screenshot is %v", b)
	}
}

// needBrowser skips the test (or fails it, under BERTH_REQUIRE_BROWSER)
// without Debian's Chromium and a node_modules (BERTH_PLAYWRIGHT) holding
// the packages named, and returns that node_modules.
func needBrowser(t *testing.T, packages ...string) string {
	t.Helper()
	skipShort(t, "drives a real browser")
	nodeModules := os.Getenv("BERTH_PLAYWRIGHT")
	_, err := os.Stat("/usr/bin/chromium")
	for _, p := range packages {
		if err == nil {
			_, err = os.Stat(filepath.Join(nodeModules, p))
		}
	}
	if nodeModules == "" || err != nil {
		if os.Getenv("BERTH_REQUIRE_BROWSER") != "" {
			t.Fatalf("BERTH_REQUIRE_BROWSER is set, but Chromium or %v (BERTH_PLAYWRIGHT=%q) is missing: %v", packages, nodeModules, err)
		}
		t.Skipf("needs /usr/bin/chromium and BERTH_PLAYWRIGHT (a node_modules with %v): scripts/test installs them", packages)
	}
	return nodeModules
}

// TestIssuerClientGuard: the gates' client for identity providers refuses
// berth's own listeners (a tenant's provider must not make berth call its
// own admin API) and reaches an issuer elsewhere on loopback.
func TestIssuerClientGuard(t *testing.T) {
	h := start(t, "")
	op := oidctest.Start(t)
	c := h.s.issuerClient()
	if _, err := c.Get(h.admin + "/healthz"); err == nil || !strings.Contains(err.Error(), "berth's own listeners") {
		t.Errorf("GET the admin API: %v, want refused", err)
	}
	resp, err := c.Get(op.Issuer() + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatalf("GET the issuer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("issuer discovery: %d", resp.StatusCode)
	}
}
