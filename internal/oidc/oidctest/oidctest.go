// Package oidctest runs a real OpenID Provider in-process on 127.0.0.1, for
// berth's tests of sign-in: discovery, a JWKS, an authorization endpoint
// that signs in a queued user without a form (it redirects straight back to
// redirect_uri with a code), a token endpoint that verifies PKCE S256, the
// client's secret (HTTP Basic or in the form) and redirect_uri, and ID
// tokens that echo the nonce, signed RS256 by a key that can be rotated.
//
// It is github.com/oauth2-proxy/mockoidc behind one wrapper that serializes
// its requests (mockoidc's session store is not safe for concurrent use),
// publishes the key set itself (so a rotation can keep or withdraw the old
// key), requires PKCE S256 and a nonce of every authorization request, and
// can make the next token exchange misbehave ([Provider.Next]) so that
// tests of a relying party's verification can fail closed.
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"
)

// User is an account the provider signs in.
type User struct {
	Subject       string
	Email         string
	EmailVerified bool
	Name          string
	// HD is Google's hosted-domain claim; "" sends none.
	HD string
	// Claims adds claims to the ID token or replaces them; a nil value
	// removes one (e.g. "email_verified": nil sends no email_verified).
	Claims map[string]any
}

// DefaultUser is who signs in when no user is queued: oidctest-user,
// user@example.org (verified), "Test User", no hd.
func DefaultUser() User {
	return User{Subject: "oidctest-user", Email: "user@example.org", EmailVerified: true, Name: "Test User"}
}

// Misbehave is one way the next token exchange goes wrong.
type Misbehave int

const (
	// WrongNonce: the ID token carries another nonce than the request's.
	WrongNonce Misbehave = iota + 1
	// WrongAudience: the ID token is issued to another client.
	WrongAudience
	// WrongIssuer: the ID token names another issuer.
	WrongIssuer
	// ForeignKey: the ID token is signed by a key the provider never
	// published, under the kid of its current key.
	ForeignKey
	// Expired: the ID token expired an hour ago.
	Expired
	// NoIDToken: the answer carries no id_token.
	NoIDToken
)

// Provider is a running OpenID Provider.
type Provider struct {
	m *mockoidc.MockOIDC

	mu            sync.Mutex // serializes every request; guards what follows
	keys          []*mockoidc.Keypair
	users         []User
	next          [][]Misbehave
	cur           []Misbehave // the token request being served's
	redirects     map[string]string
	hits          map[string]int
	failDiscovery int
	lastAuthorize url.Values
}

// Start runs a provider on 127.0.0.1 until t ends.
func Start(t testing.TB) *Provider {
	t.Helper()
	kp, err := newKeypair()
	if err != nil {
		t.Fatal(err)
	}
	m, err := mockoidc.NewServer(kp.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	m.Keypair = kp
	m.CodeChallengeMethodsSupported = []string{mockoidc.CodeChallengeMethodS256}
	p := &Provider{m: m, keys: []*mockoidc.Keypair{kp}, redirects: map[string]string{}, hits: map[string]int{}}
	if err := m.AddMiddleware(p.serve); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ln, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(); err != nil {
			t.Errorf("oidctest: shutdown: %v", err)
		}
	})
	return p
}

func newKeypair() (*mockoidc.Keypair, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	kp := &mockoidc.Keypair{PrivateKey: k, PublicKey: &k.PublicKey}
	if _, err := kp.KeyID(); err != nil {
		return nil, err
	}
	return kp, nil
}

// Issuer is the issuer URL (http://127.0.0.1:port/oidc).
func (p *Provider) Issuer() string { return p.m.Issuer() }

// ClientID is the one client the provider knows.
func (p *Provider) ClientID() string { return p.m.ClientID }

// ClientSecret is that client's secret.
func (p *Provider) ClientSecret() string { return p.m.ClientSecret }

// QueueUser makes u the account the next authorization request signs in
// (users queue up; with none queued, [DefaultUser] signs in).
func (p *Provider) QueueUser(u User) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.users = append(p.users, u)
}

// RotateKey makes a new signing key, with a new kid, the one that signs
// from now on, and returns its kid. With keepOld the old keys stay in the
// published key set; without, they are withdrawn.
func (p *Provider) RotateKey(keepOld bool) string {
	kp, err := newKeypair()
	if err != nil {
		panic(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if keepOld {
		p.keys = append([]*mockoidc.Keypair{kp}, p.keys...)
	} else {
		p.keys = []*mockoidc.Keypair{kp}
	}
	p.m.Keypair = kp
	return kp.Kid
}

// KeyIDs are the kids of the published keys, the signing one first.
func (p *Provider) KeyIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, k := range p.keys {
		ids = append(ids, k.Kid)
	}
	return ids
}

// Next makes the next token request (an authorization_code grant) misbehave
// in all the ways given; calls queue up, one per token request.
func (p *Provider) Next(m ...Misbehave) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next = append(p.next, m)
}

// FailDiscovery makes the next n requests for the discovery document
// answer 503.
func (p *Provider) FailDiscovery(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failDiscovery += n
}

// DiscoveryHits counts the requests for the discovery document so far.
func (p *Provider) DiscoveryHits() int { return p.count(mockoidc.DiscoveryEndpoint) }

// JWKSHits counts the requests for the key set so far.
func (p *Provider) JWKSHits() int { return p.count(mockoidc.JWKSEndpoint) }

// TokenHits counts the token requests so far.
func (p *Provider) TokenHits() int { return p.count(mockoidc.TokenEndpoint) }

func (p *Provider) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[path]
}

// LastAuthorize is the parameters of the last authorization request.
func (p *Provider) LastAuthorize() url.Values {
	p.mu.Lock()
	defer p.mu.Unlock()
	return cloneValues(p.lastAuthorize)
}

func cloneValues(v url.Values) url.Values {
	c := url.Values{}
	for k, vs := range v {
		c[k] = slices.Clone(vs)
	}
	return c
}

// serve wraps every mockoidc endpoint.
func (p *Provider) serve(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.hits[r.URL.Path]++
		switch r.URL.Path {
		case mockoidc.DiscoveryEndpoint:
			if p.failDiscovery > 0 {
				p.failDiscovery--
				http.Error(w, "discovery is failing, as the test asked", http.StatusServiceUnavailable)
				return
			}
		case mockoidc.JWKSEndpoint:
			p.jwks(w)
			return
		case mockoidc.AuthorizationEndpoint:
			if !p.authorize(w, r) {
				return
			}
		case mockoidc.TokenEndpoint:
			restore, ok := p.token(w, r)
			if !ok {
				return
			}
			defer restore()
		}
		next.ServeHTTP(w, r)
	})
}

func (p *Provider) jwks(w http.ResponseWriter) {
	var set jose.JSONWebKeySet
	for _, k := range p.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.PublicKey, KeyID: k.Kid, Algorithm: string(jose.RS256), Use: "sig"})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(set)
}

func oauthError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}

// authorize checks what mockoidc does not (PKCE S256 and a nonce are
// required), hands mockoidc the user to sign in and the code to answer with,
// and remembers the code's redirect_uri.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) bool {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return false
	}
	p.lastAuthorize = cloneValues(r.Form)
	switch {
	case r.Form.Get("code_challenge") == "" || r.Form.Get("code_challenge_method") != mockoidc.CodeChallengeMethodS256:
		oauthError(w, http.StatusBadRequest, "invalid_request", "PKCE with code_challenge_method=S256 is required")
		return false
	case r.Form.Get("nonce") == "":
		oauthError(w, http.StatusBadRequest, "invalid_request", "a nonce is required")
		return false
	}
	u := DefaultUser()
	if len(p.users) > 0 {
		u, p.users = p.users[0], p.users[1:]
	}
	p.m.QueueUser(&user{p: p, u: u})
	var b [24]byte
	rand.Read(b[:])
	code := base64.RawURLEncoding.EncodeToString(b[:])
	p.m.QueueCode(code)
	p.redirects[code] = r.Form.Get("redirect_uri")
	return true
}

// token accepts the client's credentials in HTTP Basic (which mockoidc
// advertises but reads only from the form), checks redirect_uri against the
// code's, and sets up this request's misbehaviour; restore undoes it.
func (p *Provider) token(w http.ResponseWriter, r *http.Request) (restore func(), ok bool) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return nil, false
	}
	if id, secret, basic := r.BasicAuth(); basic {
		id, err1 := url.QueryUnescape(id)
		secret, err2 := url.QueryUnescape(secret)
		if err := errors.Join(err1, err2); err != nil {
			oauthError(w, http.StatusUnauthorized, "invalid_client", "malformed Basic credentials")
			return nil, false
		}
		for _, f := range []url.Values{r.Form, r.PostForm} {
			f.Set("client_id", id)
			f.Set("client_secret", secret)
		}
	}
	restore = func() { p.cur = nil }
	if r.Form.Get("grant_type") != "authorization_code" {
		return restore, true
	}
	code := r.Form.Get("code")
	if want, known := p.redirects[code]; known && want != r.Form.Get("redirect_uri") {
		oauthError(w, http.StatusBadRequest, "invalid_grant", "redirect_uri is not the authorization request's")
		return nil, false
	}
	if len(p.next) > 0 {
		p.cur, p.next = p.next[0], p.next[1:]
	}
	if slices.Contains(p.cur, NoIDToken) {
		if s, err := p.m.SessionStore.GetSessionByID(code); err == nil {
			s.Scopes = slices.DeleteFunc(s.Scopes, func(s string) bool { return s == "openid" })
		}
	}
	if slices.Contains(p.cur, ForeignKey) {
		foreign, err := newKeypair()
		if err != nil {
			panic(err)
		}
		signing := p.m.Keypair
		foreign.Kid = signing.Kid
		p.m.Keypair = foreign
		restore = func() { p.cur = nil; p.m.Keypair = signing }
	}
	return restore, true
}

// user is a User as mockoidc signs it in; its claims are made when the
// token request is served, so that request's misbehaviour applies.
type user struct {
	p *Provider
	u User
}

func (u *user) ID() string { return u.u.Subject }

func (u *user) Userinfo(scopes []string) ([]byte, error) {
	info := map[string]any{"sub": u.u.Subject}
	if slices.Contains(scopes, "email") {
		info["email"], info["email_verified"] = u.u.Email, u.u.EmailVerified
	}
	if slices.Contains(scopes, "profile") && u.u.Name != "" {
		info["name"] = u.u.Name
	}
	return json.Marshal(info)
}

func (u *user) Claims(scopes []string, base *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	rc := base.RegisteredClaims
	c := jwt.MapClaims{
		"iss": rc.Issuer,
		"sub": rc.Subject,
		"aud": []string(rc.Audience),
		"exp": rc.ExpiresAt.Unix(),
		"iat": rc.IssuedAt.Unix(),
		"nbf": rc.NotBefore.Unix(),
	}
	if base.Nonce != "" {
		c["nonce"] = base.Nonce
	}
	if slices.Contains(scopes, "email") && u.u.Email != "" {
		c["email"], c["email_verified"] = u.u.Email, u.u.EmailVerified
	}
	if slices.Contains(scopes, "profile") && u.u.Name != "" {
		c["name"] = u.u.Name
	}
	if u.u.HD != "" {
		c["hd"] = u.u.HD
	}
	for _, m := range u.p.cur { // u.p.mu is held: this runs inside the token request
		switch m {
		case WrongNonce:
			c["nonce"] = "not-the-nonce-of-this-sign-in"
		case WrongAudience:
			c["aud"] = []string{"another-client"}
		case WrongIssuer:
			c["iss"] = rc.Issuer + "-elsewhere"
		case Expired:
			now := rc.IssuedAt.Time
			c["iat"], c["nbf"], c["exp"] = now.Add(-2*time.Hour).Unix(), now.Add(-2*time.Hour).Unix(), now.Add(-time.Hour).Unix()
		}
	}
	for k, v := range u.u.Claims {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c, nil
}
