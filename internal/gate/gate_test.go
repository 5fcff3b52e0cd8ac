package gate_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/gate"
	"github.com/berth-dev/berth/internal/oidc/oidctest"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/sessions"
	"github.com/berth-dev/berth/internal/store"
)

const hmacKey = "an HS256 key of thirty-two bytes or more, for tests"

// env is one test's gate world: real app-tokens over a real store, an
// in-memory session set, an HS256 secret, and the events seen.
type env struct {
	t        *testing.T
	m        *gate.Manager
	tokens   *auth.Tokens
	sessions *sessions.Manager
	provs    *provs
	mu       sync.Mutex
	events   []gate.Event
}

func newEnv(t *testing.T, googleIssuer string) *env {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tokens, err := auth.NewTokens(context.Background(), auth.TokensConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	var key secrets.Key
	rand.Read(key[:])
	e := &env{t: t, tokens: tokens, provs: &provs{}}
	e.sessions, err = sessions.New(context.Background(), st, sessions.Options{
		OnEnd: func(s sessions.Session) { e.m.EndSession(s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.sessions.Close)
	e.m = gate.NewManager(gate.Options{
		Tokens: tokens, Sessions: e.sessions, Secrets: fakeSecrets{}, Providers: e.provs, Key: key,
		GoogleIssuer: googleIssuer,
		Event: func(ev gate.Event) {
			e.mu.Lock()
			e.events = append(e.events, ev)
			e.mu.Unlock()
		},
	})
	t.Cleanup(e.m.Close)
	return e
}

func (e *env) eventKinds() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.events {
		out = append(out, ev.Kind)
	}
	return out
}

func (e *env) mint(admin apitype.AdminScope, ns string, deps ...string) string {
	e.t.Helper()
	mv, err := e.tokens.Mint(context.Background(), &auth.Principal{Kind: auth.Operator, User: "test"},
		apitype.NewToken{Name: "t", Admin: admin, Namespace: ns, Deployments: deps})
	if err != nil {
		e.t.Fatal(err)
	}
	return mv.Token
}

func (e *env) compile(s *apitype.DeploymentSpec) *gate.Gate {
	e.t.Helper()
	g, err := e.m.Compile(s)
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}

type fakeSecrets struct{}

func (fakeSecrets) Value(_ context.Context, ns, id, key string) (string, error) {
	switch id {
	case "hmac":
		return hmacKey, nil
	case "oidc":
		return "", nil // set per test via the provider's secret: see oidcSecret
	}
	if v, ok := oidcSecrets.Load(id); ok {
		return v.(string), nil
	}
	return "", errors.New("no such secret")
}

var oidcSecrets sync.Map

type provs struct {
	mu sync.Mutex
	ps []apitype.AuthProviderView
}

func (p *provs) Providers(context.Context) ([]apitype.AuthProviderView, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]apitype.AuthProviderView(nil), p.ps...), nil
}

// spec is a deployment spec with gate a in namespace ns.
func spec(id, ns string, a *apitype.AuthGate) *apitype.DeploymentSpec {
	return &apitype.DeploymentSpec{ID: id, Namespace: ns, Routes: []apitype.RouteRule{{Host: "app.test"}}, Auth: a}
}

func yes() *bool { b := true; return &b }

func hsJWT(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(hmacKey))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func jwtGate() *apitype.AuthGate {
	return &apitype.AuthGate{
		Provider: apitype.Providers(apitype.ProviderAppToken, apitype.ProviderJWT),
		JWT: &apitype.JwtSpec{Secret: &apitype.SecretRef{Secret: "hmac", Namespace: "team"}, Algorithms: []string{"HS256"},
			Issuer: "https://issuer.test", Cookie: "tok"},
		PublicPaths: []apitype.PublicPath{
			{Path: "/healthz", Scope: apitype.PathPublic},
			{Path: "/api/", Scope: apitype.PathView},
			{Path: "/api/open/", Scope: apitype.PathNone},
		},
		ForwardIdentity: yes(),
	}
}

// upstream is what a request the gate let through shows the app.
type upstream struct {
	User, Email, Name, Authorization, Cookie string
	Credentialed                             bool // Admit's second answer
}

// do runs one request through g, answering like an app when admitted.
func do(g *gate.Gate, r *http.Request) (*httptest.ResponseRecorder, *upstream) {
	w := httptest.NewRecorder()
	st, cred := g.Admit(w, r, false)
	if st != 0 {
		if w.Code != st {
			panic("Admit's status differs from the one written")
		}
		return w, nil
	}
	return w, &upstream{
		User: r.Header.Get("X-Auth-Request-User"), Email: r.Header.Get("X-Auth-Request-Email"),
		Name: r.Header.Get("X-Auth-Request-Name"), Authorization: r.Header.Get("Authorization"), Cookie: r.Header.Get("Cookie"),
		Credentialed: cred,
	}
}

func get(path string, hdr ...string) *http.Request {
	r := httptest.NewRequest("GET", "http://app.test"+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func body(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", w.Body, err)
	}
	return m
}

// TestDecisionOrder walks app-lb.md §3.6's order with real app-tokens and
// JWTs, asserting each answer's status and body.
func TestDecisionOrder(t *testing.T) {
	e := newEnv(t, "")
	g := e.compile(spec("app", "team", jwtGate()))
	now := time.Now()
	good := hsJWT(t, jwt.MapClaims{"iss": "https://issuer.test", "sub": "alice", "email": "alice@example.org", "name": "Alice", "exp": now.Add(time.Hour).Unix()})
	viewTok := e.mint(apitype.ScopeView, "team")
	noneTok := e.mint(apitype.ScopeNone, "team")
	otherNS := e.mint(apitype.ScopeAdmin, "other")
	otherDep := e.mint(apitype.ScopeAdmin, "", "elsewhere")

	type want struct {
		status int
		user   string
		in     string // a substring of the body
	}
	for _, c := range []struct {
		name string
		r    *http.Request
		want want
	}{
		{"public path, nothing", get("/healthz"), want{0, "", ""}},
		{"public path with dot segments", get("/healthz/../admin"), want{401, "", `"accepts"`}},
		{"public path with an encoded slash", get("/healthz%2F..%2Fadmin"), want{401, "", `"accepts"`}},
		{"public path strips a client's identity", get("/healthz", "X-Auth-Request-User", "mallory"), want{0, "", ""}},
		{"view path, view token", get("/api/x", "Authorization", "Bearer "+viewTok), want{0, "", ""}},
		{"view path, none token", get("/api/x", "Authorization", "Bearer "+noneTok), want{403, "", `this token's admin scope is 'none', and this path needs 'view' or higher`}},
		{"view path, other namespace", get("/api/x", "Authorization", "Bearer "+otherNS), want{403, "", `this token does not admit deployment \"app\"`}},
		{"view path, nothing", get("/api/x"), want{401, "", `"scope":"view"`}},
		{"view path, a JWT is not enough", get("/api/x", "Authorization", "Bearer "+good), want{401, "", `"scope":"view"`}},
		{"none path, a JWT is enough", get("/api/open/x", "Authorization", "Bearer "+good), want{0, "alice", ""}},
		{"app-token", get("/", "Authorization", "Bearer "+noneTok), want{0, "", ""}},
		{"jwt bearer", get("/", "Authorization", "Bearer "+good), want{0, "alice", ""}},
		{"jwt cookie", get("/", "Cookie", "tok="+good), want{0, "alice", ""}},
		{"jwt bearer wins over a client identity", get("/", "Authorization", "Bearer "+good, "X-Auth-Request-User", "mallory"), want{0, "alice", ""}},
		{"token of another namespace", get("/", "Authorization", "Bearer "+otherNS), want{403, "", `"error":"insufficient_scope"`}},
		{"token of another deployment", get("/", "Authorization", "Bearer "+otherDep), want{403, "", `"token_id"`}},
		{"nothing, a program", get("/"), want{401, "", `"accepts":["app-token","jwt"]`}},
		{"forged token", get("/", "Authorization", "Bearer berth_000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), want{401, "", `"error":"authentication required"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, up := do(g, c.r)
			if c.want.status == 0 {
				if up == nil {
					t.Fatalf("refused with %d %s, want admitted", w.Code, w.Body)
				}
				if up.User != c.want.user {
					t.Errorf("X-Auth-Request-User = %q, want %q", up.User, c.want.user)
				}
				// Only a public path lets a caller in without a credential
				// (the SIEM counts the misses of those alone).
				if public := strings.HasPrefix(c.r.URL.Path, "/healthz"); up.Credentialed == public {
					t.Errorf("credentialed = %v on %s", up.Credentialed, c.r.URL.Path)
				}
				return
			}
			if up != nil {
				t.Fatalf("admitted (user %q), want %d", up.User, c.want.status)
			}
			if w.Code != c.want.status || !strings.Contains(w.Body.String(), c.want.in) {
				t.Errorf("got %d %s, want %d containing %s", w.Code, w.Body, c.want.status, c.want.in)
			}
			if w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("X-Frame-Options") != "DENY" {
				t.Errorf("gate response headers: %v", w.Header())
			}
		})
	}
	if kinds := e.eventKinds(); !contains(kinds, "gate-token") {
		t.Errorf("events %v: the forged token raised no gate-token", kinds)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestJWTClaims: gateHost and namespace claims bind a token to its host
// and namespace; a refused token is a gate-jwt event and a 401.
func TestJWTClaims(t *testing.T) {
	e := newEnv(t, "")
	g := e.compile(spec("app", "team", jwtGate()))
	exp := time.Now().Add(time.Hour).Unix()
	for _, c := range []struct {
		name   string
		claims jwt.MapClaims
		ok     bool
	}{
		{"plain", jwt.MapClaims{"iss": "https://issuer.test", "sub": "a", "exp": exp}, true},
		{"gateHost matches", jwt.MapClaims{"iss": "https://issuer.test", "sub": "a", "exp": exp, "gateHost": "APP.test"}, true},
		{"gateHost another host", jwt.MapClaims{"iss": "https://issuer.test", "sub": "a", "exp": exp, "gateHost": "evil.test"}, false},
		{"namespace matches", jwt.MapClaims{"iss": "https://issuer.test", "sub": "a", "exp": exp, "namespace": "team"}, true},
		{"namespace another", jwt.MapClaims{"iss": "https://issuer.test", "sub": "a", "exp": exp, "namespace": "other"}, false},
		{"wrong issuer", jwt.MapClaims{"iss": "https://evil.test", "sub": "a", "exp": exp}, false},
		{"expired", jwt.MapClaims{"iss": "https://issuer.test", "sub": "a", "exp": time.Now().Add(-time.Hour).Unix()}, false},
		{"no subject", jwt.MapClaims{"iss": "https://issuer.test", "exp": exp}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, up := do(g, get("/", "Authorization", "Bearer "+hsJWT(t, c.claims)))
			if c.ok != (up != nil) {
				t.Fatalf("admitted = %v (%d %s), want %v", up != nil, w.Code, w.Body, c.ok)
			}
			if !c.ok && w.Code != 401 {
				t.Errorf("status %d, want 401", w.Code)
			}
		})
	}
	if kinds := e.eventKinds(); !contains(kinds, "gate-jwt") {
		t.Errorf("events %v: no gate-jwt", kinds)
	}
	// A verified token is cached: the same token again is admitted (and
	// an expired one never is, cached or not: checked above).
	tok := hsJWT(t, jwt.MapClaims{"iss": "https://issuer.test", "sub": "again", "exp": exp})
	for range 3 {
		if _, up := do(g, get("/", "Authorization", "Bearer "+tok)); up == nil || up.User != "again" {
			t.Fatal("a cached token was not admitted")
		}
	}
}

// TestUngatedHostMissing: a request without a Host is refused with
// app-lb's words.
func TestHostMissing(t *testing.T) {
	e := newEnv(t, "")
	g := e.compile(spec("app", "team", jwtGate()))
	r := get("/")
	r.Host = ""
	w, up := do(g, r)
	if up != nil || w.Code != 400 || w.Body.String() != "this deployment requires sign-in, which needs a Host header\n" {
		t.Fatalf("got %d %q", w.Code, w.Body)
	}
}

// TestProviderRef: a gate inheriting a provider resolves it on every
// request: missing → 500 naming it (fails closed); declared → used.
func TestProviderRef(t *testing.T) {
	e := newEnv(t, "")
	ref := spec("app", "team", &apitype.AuthGate{ProviderRef: "corp", ForwardIdentity: yes()})
	// A reference to nothing is refused when written, naming the field.
	if _, err := e.m.Compile(ref); err == nil || !strings.Contains(err.Error(), "provider_ref") || !strings.Contains(err.Error(), `"corp"`) {
		t.Fatalf("an undeclared provider: %v", err)
	}
	declare := func(ps ...apitype.AuthProviderView) {
		e.provs.mu.Lock()
		e.provs.ps = ps
		e.provs.mu.Unlock()
		if err := e.m.ReloadProviders(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	corp := apitype.AuthProviderView{Name: "corp", Namespace: "team", Provider: apitype.Providers(apitype.ProviderJWT),
		JWT: &apitype.JwtSpec{Secret: &apitype.SecretRef{Secret: "hmac", Namespace: "team"}, Algorithms: []string{"HS256"}, Issuer: "https://issuer.test"}}
	declare(corp)
	g := e.compile(ref)
	tok := hsJWT(t, jwt.MapClaims{"iss": "https://issuer.test", "sub": "bob", "exp": time.Now().Add(time.Hour).Unix()})
	if w, up := do(g, get("/", "Authorization", "Bearer "+tok)); up == nil || up.User != "bob" {
		t.Fatalf("declared provider: %d %q", w.Code, w.Body)
	}
	// A provider of the same name in another namespace is not this one.
	if _, err := e.m.Compile(spec("app2", "other", &apitype.AuthGate{ProviderRef: "corp"})); err == nil {
		t.Fatal("another namespace's provider was accepted")
	}
	// Resolved live: a provider gone from under a gate fails closed.
	declare()
	w, up := do(g, get("/", "Authorization", "Bearer "+tok))
	if up != nil || w.Code != 500 || !strings.Contains(w.Body.String(), `inherits the auth provider "corp", which is not declared`) {
		t.Fatalf("missing provider: %d %q", w.Code, w.Body)
	}
}

// browserClient is an http.Client with a cookie jar that does not follow
// redirects (the test follows them, asserting each).
func browserClient(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func fetch(t *testing.T, c *http.Client, u string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// app serves g in front of an app that echoes the identity it received.
func app(t *testing.T, g func() *gate.Gate) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st, _ := g().Admit(w, r, false); st != 0 {
			return
		}
		json.NewEncoder(w).Encode(upstream{
			User: r.Header.Get("X-Auth-Request-User"), Email: r.Header.Get("X-Auth-Request-Email"),
			Name: r.Header.Get("X-Auth-Request-Name"), Authorization: r.Header.Get("Authorization"), Cookie: r.Header.Get("Cookie"),
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// signIn follows a browser's sign-in from an app URL and returns the app's
// final answer.
func signIn(t *testing.T, c *http.Client, appURL string) (*http.Response, string) {
	t.Helper()
	resp := fetch(t, c, appURL)
	if resp.StatusCode != 302 {
		t.Fatalf("not signed in: %d, want a redirect to the issuer", resp.StatusCode)
	}
	for range 6 {
		loc, err := resp.Location()
		if err != nil {
			t.Fatalf("redirect without Location: %d", resp.StatusCode)
		}
		req, _ := http.NewRequest("GET", loc.String(), nil)
		req.Header.Set("Accept", "text/html")
		if resp, err = c.Do(req); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 302 {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp, string(b)
		}
		resp.Body.Close()
	}
	t.Fatal("too many redirects")
	return nil, ""
}

func oidcGate(op *oidctest.Provider, domains ...string) *apitype.AuthGate {
	oidcSecrets.Store("oidc-client", op.ClientSecret())
	return &apitype.AuthGate{
		Provider: apitype.Providers(apitype.ProviderGoogle), ClientID: op.ClientID(),
		ClientSecret:   &apitype.SecretRef{Secret: "oidc-client", Namespace: "team"},
		AllowedDomains: domains, ForwardIdentity: yes(), SessionScope: apitype.ScopeView,
	}
}

// TestOIDCSignIn: a browser signs in through a real OpenID Provider (PKCE,
// state, nonce, a verified ID token), reaches the app with its identity
// and a session_scope token, signs out, and is sent to sign in again; the
// session's token is revoked with it.
func TestOIDCSignIn(t *testing.T) {
	op := oidctest.Start(t)
	e := newEnv(t, op.Issuer())
	g := e.compile(spec("app", "team", oidcGate(op, "example.org")))
	srv := app(t, func() *gate.Gate { return g })
	c := browserClient(t)
	op.QueueUser(oidctest.User{Subject: "u1", Email: "Alice@Example.org", EmailVerified: true, Name: "Alice", HD: "example.org"})
	resp, b := signIn(t, c, srv.URL+"/page?q=1")
	if resp.StatusCode != 200 {
		t.Fatalf("after sign-in: %d %s", resp.StatusCode, b)
	}
	if resp.Request.URL.Path != "/page" || resp.Request.URL.RawQuery != "q=1" {
		t.Errorf("returned to %s, want /page?q=1", resp.Request.URL)
	}
	var up upstream
	json.Unmarshal([]byte(b), &up)
	if up.User != "u1" || up.Email != "Alice@Example.org" || up.Name != "Alice" {
		t.Errorf("identity upstream %+v", up)
	}
	if !strings.HasPrefix(up.Authorization, "Bearer berth_") {
		t.Errorf("session_scope: Authorization upstream %q, want the session's app-token", up.Authorization)
	}
	if strings.Contains(up.Cookie, gate.DefaultCookieName) {
		t.Errorf("the session cookie reached the upstream: %q", up.Cookie)
	}
	// The session's token works as an app-token for this deployment only.
	tok := strings.TrimPrefix(up.Authorization, "Bearer ")
	vt, err := e.tokens.Verify(context.Background(), tok)
	if err != nil || vt.Admin != apitype.ScopeView || vt.Namespace != "team" {
		t.Fatalf("session token %+v, %v", vt, err)
	}
	u, _ := url.Parse(srv.URL)
	var session *http.Cookie
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == gate.DefaultCookieName {
			session = ck
		}
	}
	if session == nil {
		t.Fatal("no session cookie")
	}

	// Sign out: redirected to /, which asks to sign in again.
	out := fetch(t, c, srv.URL+gate.DefaultBasePath+"/logout")
	if out.StatusCode != 302 || out.Header.Get("Location") != "/" {
		t.Fatalf("logout: %d %s", out.StatusCode, out.Header.Get("Location"))
	}
	if again := fetch(t, c, srv.URL+"/"); again.StatusCode != 302 || !strings.HasPrefix(again.Header.Get("Location"), op.Issuer()) {
		t.Fatalf("after logout: %d %s, want a redirect to the issuer", again.StatusCode, again.Header.Get("Location"))
	}
	// The old cookie, replayed, does not work; the token went with it.
	r := get("/", "Cookie", gate.DefaultCookieName+"="+session.Value)
	if w, up := do(g, r); up != nil {
		t.Fatalf("a signed-out session was admitted: %d", w.Code)
	}
	if _, err := e.tokens.Verify(context.Background(), tok); err == nil {
		t.Error("the session's token survived sign-out")
	}
}

// TestOIDCRefusals: an account outside the allow-list is refused naming
// it; a callback whose state does not match is a 400 and a signin-state
// event; a program gets a 401 with the login URL; a policy edit ends the
// sessions signed in under the old policy.
func TestOIDCRefusals(t *testing.T) {
	op := oidctest.Start(t)
	e := newEnv(t, op.Issuer())
	g := e.compile(spec("app", "team", oidcGate(op, "example.org")))
	cur := g
	var mu sync.Mutex
	srv := app(t, func() *gate.Gate { mu.Lock(); defer mu.Unlock(); return cur })

	op.QueueUser(oidctest.User{Subject: "m", Email: "mallory@evil.test", EmailVerified: true})
	resp, b := signIn(t, browserClient(t), srv.URL+"/")
	if resp.StatusCode != 403 || !strings.Contains(b, "mallory@evil.test is not allowed to sign in here") {
		t.Errorf("outside the allow-list: %d %s", resp.StatusCode, b)
	}

	// Forged state.
	c := browserClient(t)
	start := fetch(t, c, srv.URL+"/")
	loc, _ := start.Location()
	cb := srv.URL + gate.DefaultBasePath + "/callback?code=x&state=" + url.QueryEscape(loc.Query().Get("state")+"x")
	if r := fetch(t, c, cb); r.StatusCode != 400 {
		t.Errorf("forged state: %d, want 400", r.StatusCode)
	}
	if !contains(e.eventKinds(), "signin-state") {
		t.Errorf("events %v: no signin-state", e.eventKinds())
	}

	// A program.
	w, _ := do(g, get("/"))
	if m := body(t, w); w.Code != 401 || m["login_url"] != "http://app.test"+gate.DefaultBasePath+"/login" {
		t.Errorf("program: %d %v", w.Code, m)
	}

	// A policy edit ends sessions.
	op.QueueUser(oidctest.User{Subject: "u2", Email: "bob@example.org", EmailVerified: true, HD: "example.org"})
	c = browserClient(t)
	if resp, b := signIn(t, c, srv.URL+"/"); resp.StatusCode != 200 {
		t.Fatalf("sign-in: %d %s", resp.StatusCode, b)
	}
	if r := fetch(t, c, srv.URL+"/"); r.StatusCode != 200 {
		t.Fatalf("signed in: %d", r.StatusCode)
	}
	mu.Lock()
	cur = e.compile(spec("app", "team", oidcGate(op, "example.org", "example.com")))
	mu.Unlock()
	if r := fetch(t, c, srv.URL+"/"); r.StatusCode != 302 {
		t.Fatalf("after the allow-list changed: %d, want sent to sign in again", r.StatusCode)
	}
}

// TestOIDCProviderIssuer: a namespace provider names any issuer (berth's
// `issuer`), and the gate inheriting it signs people in there.
func TestOIDCProviderIssuer(t *testing.T) {
	op := oidctest.Start(t)
	e := newEnv(t, "")
	oidcSecrets.Store("oidc-client", op.ClientSecret())
	iss, _ := json.Marshal(op.Issuer())
	e.provs.ps = []apitype.AuthProviderView{{Name: "keycloak", Namespace: "team", Provider: apitype.Providers(apitype.ProviderGoogle),
		ClientID: op.ClientID(), ClientSecret: &apitype.SecretRef{Secret: "oidc-client", Namespace: "team"},
		AllowedEmails: []string{"carol@corp.test"}, Extra: map[string]json.RawMessage{"issuer": iss}}}
	if err := e.m.ReloadProviders(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := e.compile(spec("app", "team", &apitype.AuthGate{ProviderRef: "keycloak", ForwardIdentity: yes()}))
	srv := app(t, func() *gate.Gate { return g })
	op.QueueUser(oidctest.User{Subject: "c", Email: "carol@corp.test", EmailVerified: true})
	resp, b := signIn(t, browserClient(t), srv.URL+"/")
	var up upstream
	json.Unmarshal([]byte(b), &up)
	if resp.StatusCode != 200 || up.User != "c" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestChoicePage: a gate with two ways to sign in shows a page offering
// both, rendered without script or external assets.
func TestChoicePage(t *testing.T) {
	op := oidctest.Start(t)
	e := newEnv(t, op.Issuer())
	a := oidcGate(op, "example.org")
	a.Provider = apitype.Providers(apitype.ProviderGoogle, apitype.ProviderJWT)
	a.JWT = &apitype.JwtSpec{Secret: &apitype.SecretRef{Secret: "hmac"}, Algorithms: []string{"HS256"}, Issuer: "https://login.corp.test",
		Cookie: "tok", LoginURL: "https://login.corp.test/signin"}
	g := e.compile(spec("app", "team", a))
	w, _ := do(g, get("/x", "Accept", "text/html"))
	page := w.Body.String()
	if w.Code != 401 || !strings.Contains(page, "Sign in with") || !strings.Contains(page, "login.corp.test") {
		t.Fatalf("%d %s", w.Code, page)
	}
	for _, bad := range []string{"<script", "http://", "https://"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page carries %q", bad)
		}
	}
	// Its second choice is the hosted sign-in, returning to /x.
	w, _ = do(g, get(gate.DefaultBasePath+"/login?via=1&rd=/x", "Accept", "text/html"))
	if loc := w.Header().Get("Location"); w.Code != 302 || loc != "https://login.corp.test/signin?redirect_uri="+url.QueryEscape("http://app.test/x") {
		t.Errorf("hosted sign-in: %d %s", w.Code, loc)
	}
	// rd must stay on this host.
	w, _ = do(g, get(gate.DefaultBasePath+"/login?via=1&rd=//evil.test/", "Accept", "text/html"))
	if loc := w.Header().Get("Location"); strings.Contains(loc, "evil.test") {
		t.Errorf("open redirect: %s", loc)
	}
}

// FuzzAdmit: whatever a client sends in its credentials, the gate never
// panics and never admits it to a non-public path.
func FuzzAdmit(f *testing.F) {
	f.Add("Bearer berth_0123456789ab_xxxx", "applb_session=abc; tok=eyJhbGciOiJub25lIn0.e30.", "/")
	f.Add("", "berth_auth_flow=AAAA", "/__applb/auth/callback?code=a&state=b")
	f.Add("bearer eyJ", "tok=a.b.c", "/api/x")
	e := newEnv(&testing.T{}, "")
	g, err := e.m.Compile(spec("app", "team", jwtGate()))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, authz, cookie, path string) {
		r, err := http.NewRequest("GET", "http://app.test/", nil)
		if err != nil {
			return
		}
		if u, err := url.ParseRequestURI(path); err == nil {
			r.URL = u
		}
		r.Header.Set("Authorization", authz)
		r.Header.Set("Cookie", cookie)
		w, up := do(g, r)
		if up != nil && !strings.HasPrefix(r.URL.Path, "/healthz") {
			t.Fatalf("admitted %q %q %q (status %d)", authz, cookie, path, w.Code)
		}
	})
}

// BenchmarkAdmit is what a gate adds to a request it admits: a session
// cookie, a JWT (verified once, then cached) and an app-token.
func BenchmarkAdmit(b *testing.B) {
	t := &testing.T{}
	e := newEnv(t, "")
	g, err := e.m.Compile(spec("app", "team", jwtGate()))
	if err != nil {
		b.Fatal(err)
	}
	tok := hsJWT(t, jwt.MapClaims{"iss": "https://issuer.test", "sub": "alice", "email": "a@b.c", "exp": time.Now().Add(time.Hour).Unix()})
	app := e.mint(apitype.ScopeView, "team")
	run := func(b *testing.B, hdr ...string) {
		r := get("/x", hdr...)
		w := httptest.NewRecorder()
		b.ReportAllocs()
		for b.Loop() {
			if st, _ := g.Admit(w, r, false); st != 0 {
				b.Fatal("refused")
			}
		}
	}
	b.Run("jwt", func(b *testing.B) { run(b, "Authorization", "Bearer "+tok) })
	b.Run("app-token", func(b *testing.B) { run(b, "Authorization", "Bearer "+app) })
	b.Run("public", func(b *testing.B) {
		r := get("/healthz")
		w := httptest.NewRecorder()
		b.ReportAllocs()
		for b.Loop() {
			if st, _ := g.Admit(w, r, false); st != 0 {
				b.Fatal("refused")
			}
		}
	})
}

// TestScopedSignIn: the jwt gate's scoped sign-in (authorize_url and
// token_url): a browser goes through an authorization code flow with
// PKCE, and the token that comes back must name this host and namespace;
// the gate keeps a host-only session.
func TestScopedSignIn(t *testing.T) {
	e := newEnv(t, "")
	var mu sync.Mutex
	challenge, gateHost := "", "app.test"
	issuer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/authorize":
			q := r.URL.Query()
			if q.Get("code_challenge_method") != "S256" || q.Get("scope") != "namespace:team" {
				http.Error(w, "bad authorize "+r.URL.RawQuery, 400)
				return
			}
			challenge = q.Get("code_challenge")
			http.Redirect(w, r, q.Get("redirect_uri")+"?code=c1&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
		case "/token":
			r.ParseForm()
			sum := sha256.Sum256([]byte(r.Form.Get("code_verifier")))
			if r.Form.Get("code") != "c1" || base64.RawURLEncoding.EncodeToString(sum[:]) != challenge {
				http.Error(w, `{"error":"invalid_grant"}`, 400)
				return
			}
			tok := hsJWT(t, jwt.MapClaims{"iss": "https://issuer.test", "sub": "dana", "exp": time.Now().Add(time.Hour).Unix(),
				"gateHost": gateHost, "namespace": "team"})
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer"})
		}
	}))
	t.Cleanup(issuer.Close)
	a := jwtGate()
	a.JWT.Cookie = ""
	a.JWT.AuthorizeURL, a.JWT.TokenURL = issuer.URL+"/authorize", issuer.URL+"/token"
	g := e.compile(spec("app", "team", a))
	srv := app(t, func() *gate.Gate { return g })
	// The app is served as app.test (the token names it): dial it there.
	c := browserClient(t)
	c.Transport = &http.Transport{DialContext: func(ctx context.Context, n, addr string) (net.Conn, error) {
		if strings.HasPrefix(addr, "app.test:") {
			addr = strings.TrimPrefix(srv.URL, "http://")
		}
		return (&net.Dialer{}).DialContext(ctx, n, addr)
	}}
	port := srv.URL[strings.LastIndexByte(srv.URL, ':'):]
	resp, b := signIn(t, c, "http://app.test"+port+"/x")
	var up upstream
	json.Unmarshal([]byte(b), &up)
	if resp.StatusCode != 200 || up.User != "dana" {
		t.Fatalf("scoped sign-in: %d %s", resp.StatusCode, b)
	}
	// A token for another host is refused.
	mu.Lock()
	gateHost = "other.test"
	mu.Unlock()
	resp, b = signIn(t, browserClient2(t, c.Transport), "http://app.test"+port+"/x")
	if resp.StatusCode != 403 || !strings.Contains(b, "another host or namespace") {
		t.Errorf("a token for another host: %d %s", resp.StatusCode, b)
	}
}

func browserClient2(t *testing.T, tr http.RoundTripper) *http.Client {
	c := browserClient(t)
	c.Transport = tr
	return c
}
