package oidc_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/clocktest"
	"github.com/berth-dev/berth/internal/oidc"
	"github.com/berth-dev/berth/internal/oidc/oidctest"
)

const redirectURL = "https://app.example.org/__berth/auth/callback"

type rig struct {
	op    *oidctest.Provider
	clock *clocktest.Clock
	reg   *oidc.Registry
	cfg   oidc.Config
}

func newRig(t *testing.T) *rig {
	t.Helper()
	op := oidctest.Start(t)
	c := clocktest.New(time.Now())
	return &rig{
		op:    op,
		clock: c,
		reg:   oidc.NewRegistry(nil, oidc.WithClock(c.Now)),
		cfg:   oidc.Config{Issuer: op.Issuer(), ClientID: op.ClientID(), ClientSecret: op.ClientSecret()},
	}
}

func (r *rig) provider(t *testing.T) *oidc.Provider {
	t.Helper()
	p, err := r.reg.Provider(context.Background(), r.cfg)
	if err != nil {
		t.Fatalf("Provider: %v", err.(*oidc.Error).Detail())
	}
	return p
}

// browser plays the browser: it follows AuthCodeURL to the provider and
// returns the code and state from the redirect back, without following it.
func browser(t *testing.T, authURL string) (code, state string) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize answered %s, want 302", resp.Status)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if got := loc.Scheme + "://" + loc.Host + loc.Path; got != redirectURL {
		t.Fatalf("redirected to %s, want %s", got, redirectURL)
	}
	return loc.Query().Get("code"), loc.Query().Get("state")
}

// signIn runs a whole sign-in with f and returns Exchange's answer.
func signIn(t *testing.T, p *oidc.Provider, f oidc.Flow) (oidc.Identity, error) {
	t.Helper()
	code, state := browser(t, p.AuthCodeURL(f, redirectURL))
	if state != f.State {
		t.Fatalf("state came back %q, want %q", state, f.State)
	}
	return p.Exchange(context.Background(), f, code, redirectURL)
}

// wantReason checks err is an *oidc.Error with reason, and that neither its
// message nor its detail leaks the client secret.
func wantReason(t *testing.T, err error, reason oidc.Reason, secrets ...string) {
	t.Helper()
	var e *oidc.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v (%T), want an *oidc.Error with reason %s", err, err, reason)
	}
	if e.Reason != reason {
		t.Fatalf("reason %s (%s), want %s", e.Reason, e.Detail(), reason)
	}
	for _, s := range secrets {
		if strings.Contains(e.Error(), s) || strings.Contains(e.Detail(), s) {
			t.Errorf("error leaks a secret: %s", e.Detail())
		}
	}
}

func TestSignIn(t *testing.T) {
	r := newRig(t)
	r.op.QueueUser(oidctest.User{Subject: "u-1", Email: "alice@example.org", EmailVerified: true, Name: "Alice", HD: "example.org"})
	id, err := signIn(t, r.provider(t), oidc.NewFlow())
	if err != nil {
		t.Fatal(err.(*oidc.Error).Detail())
	}
	want := oidc.Identity{Issuer: r.op.Issuer(), Subject: "u-1", Email: "alice@example.org", EmailVerified: true, Name: "Alice", HostedDomain: "example.org"}
	if id != want {
		t.Errorf("identity %+v, want %+v", id, want)
	}
	if err := oidc.Allowed(id, true, []string{"example.org"}, nil); err != nil {
		t.Error(err)
	}
}

func TestAuthCodeURL(t *testing.T) {
	r := newRig(t)
	f := oidc.NewFlow()
	for _, google := range []bool{false, true} {
		r.cfg.Google = google
		u, err := url.Parse(r.provider(t).AuthCodeURL(f, redirectURL))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		sum := sha256.Sum256([]byte(f.Verifier))
		for k, want := range map[string]string{
			"response_type":         "code",
			"client_id":             r.op.ClientID(),
			"redirect_uri":          redirectURL,
			"scope":                 "openid email profile",
			"state":                 f.State,
			"nonce":                 f.Nonce,
			"code_challenge_method": "S256",
			"code_challenge":        base64.RawURLEncoding.EncodeToString(sum[:]),
		} {
			if q.Get(k) != want {
				t.Errorf("google=%v: %s=%q, want %q", google, k, q.Get(k), want)
			}
		}
		if got, want := q.Get("prompt"), map[bool]string{true: "select_account"}[google]; got != want {
			t.Errorf("google=%v: prompt=%q, want %q", google, got, want)
		}
		if q.Has("code_verifier") || q.Has("client_secret") || strings.Contains(u.String(), r.op.ClientSecret()) {
			t.Errorf("the authorization URL carries a secret: %s", u)
		}
	}
	// The provider saw what berth sent.
	if _, err := signIn(t, r.provider(t), f); err != nil {
		t.Fatal(err)
	}
	if got := r.op.LastAuthorize().Get("prompt"); got != "select_account" {
		t.Errorf("the provider saw prompt=%q", got)
	}
}

func TestNewFlow(t *testing.T) {
	a, b := oidc.NewFlow(), oidc.NewFlow()
	for _, s := range []string{a.State, a.Nonce, a.Verifier} {
		raw, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(raw) < 16 {
			t.Errorf("%q is not >=128 bits of base64url", s)
		}
	}
	if a.State == b.State || a.Nonce == b.Nonce || a.Verifier == b.Verifier || a.State == a.Nonce || a.Nonce == a.Verifier {
		t.Error("flows repeat")
	}
}

func TestPKCEWrongVerifier(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	f := oidc.NewFlow()
	code, _ := browser(t, p.AuthCodeURL(f, redirectURL))
	wrong := f
	wrong.Verifier = oidc.NewFlow().Verifier
	_, err := p.Exchange(context.Background(), wrong, code, redirectURL)
	wantReason(t, err, oidc.ReasonExchange, r.op.ClientSecret(), code, wrong.Verifier)
	if !strings.Contains(err.Error(), "invalid_grant") {
		t.Errorf("message %q does not say invalid_grant", err)
	}
}

func TestCodeUsedTwice(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	f := oidc.NewFlow()
	code, _ := browser(t, p.AuthCodeURL(f, redirectURL))
	if _, err := p.Exchange(context.Background(), f, code, redirectURL); err != nil {
		t.Fatal(err)
	}
	_, err := p.Exchange(context.Background(), f, code, redirectURL)
	wantReason(t, err, oidc.ReasonExchange, code)
}

func TestRedirectURLMustMatch(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	f := oidc.NewFlow()
	code, _ := browser(t, p.AuthCodeURL(f, redirectURL))
	_, err := p.Exchange(context.Background(), f, code, "https://elsewhere.example.org/cb")
	wantReason(t, err, oidc.ReasonExchange)
}

func TestWrongClientSecret(t *testing.T) {
	r := newRig(t)
	r.cfg.ClientSecret = "not-the-secret-" + oidc.NewFlow().State
	p := r.provider(t)
	f := oidc.NewFlow()
	code, _ := browser(t, p.AuthCodeURL(f, redirectURL))
	_, err := p.Exchange(context.Background(), f, code, redirectURL)
	// mockoidc echoes the secret it was sent in its error_description: it
	// must not reach the message nor the detail.
	wantReason(t, err, oidc.ReasonExchange, r.cfg.ClientSecret, r.op.ClientSecret())
	if d := err.(*oidc.Error).Detail(); !strings.Contains(d, "[redacted]") {
		t.Errorf("detail %q: the provider's echo of the secret was expected, redacted", d)
	}
}

func TestFlowIncomplete(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	for _, f := range []oidc.Flow{{State: "s", Verifier: "v"}, {State: "s", Nonce: "n"}} {
		_, err := p.Exchange(context.Background(), f, "code", redirectURL)
		wantReason(t, err, oidc.ReasonFlow)
	}
	_, err := p.Exchange(context.Background(), oidc.NewFlow(), "", redirectURL)
	wantReason(t, err, oidc.ReasonFlow)
	if n := r.op.TokenHits(); n != 0 {
		t.Errorf("%d token requests for flows that could not succeed", n)
	}
}

func TestNonce(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)

	// The provider puts another nonce in the token.
	r.op.Next(oidctest.WrongNonce)
	_, err := signIn(t, p, oidc.NewFlow())
	wantReason(t, err, oidc.ReasonNonce)

	// The callback is completed with another flow's nonce (same verifier,
	// so the exchange itself succeeds).
	f := oidc.NewFlow()
	code, _ := browser(t, p.AuthCodeURL(f, redirectURL))
	other := f
	other.Nonce = oidc.NewFlow().Nonce
	_, err = p.Exchange(context.Background(), other, code, redirectURL)
	wantReason(t, err, oidc.ReasonNonce)
}

func TestMisbehavingTokens(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	for _, c := range []struct {
		m    oidctest.Misbehave
		want oidc.Reason
	}{
		{oidctest.ForeignKey, oidc.ReasonSignature},
		{oidctest.WrongAudience, oidc.ReasonAudience},
		{oidctest.WrongIssuer, oidc.ReasonIssuer},
		{oidctest.Expired, oidc.ReasonExpired},
		{oidctest.NoIDToken, oidc.ReasonIDToken},
	} {
		r.op.Next(c.m)
		id, err := signIn(t, p, oidc.NewFlow())
		if err == nil {
			t.Errorf("misbehaviour %d: signed in as %+v", c.m, id)
			continue
		}
		wantReason(t, err, c.want, r.op.ClientSecret())
	}
	// And the provider is fine again.
	if _, err := signIn(t, p, oidc.NewFlow()); err != nil {
		t.Fatal(err)
	}
}

func TestAuthorizedPartyAndSubject(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)

	r.op.QueueUser(oidctest.User{Subject: "u", Claims: map[string]any{"azp": "another-client"}})
	_, err := signIn(t, p, oidc.NewFlow())
	wantReason(t, err, oidc.ReasonAudience)

	r.op.QueueUser(oidctest.User{Subject: "u", Claims: map[string]any{"aud": []string{r.op.ClientID(), "another-client"}}})
	_, err = signIn(t, p, oidc.NewFlow())
	wantReason(t, err, oidc.ReasonAudience)

	r.op.QueueUser(oidctest.User{Subject: "u", Claims: map[string]any{"aud": []string{r.op.ClientID(), "another-client"}, "azp": r.op.ClientID()}})
	if _, err := signIn(t, p, oidc.NewFlow()); err != nil {
		t.Error(err)
	}

	r.op.QueueUser(oidctest.User{Subject: "u", Claims: map[string]any{"sub": nil}})
	_, err = signIn(t, p, oidc.NewFlow())
	wantReason(t, err, oidc.ReasonIDToken)
}

func TestExpiredByClock(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	f := oidc.NewFlow()
	code, _ := browser(t, p.AuthCodeURL(f, redirectURL))
	r.clock.Add(11 * time.Minute) // the provider's tokens live 10 minutes
	_, err := p.Exchange(context.Background(), f, code, redirectURL)
	wantReason(t, err, oidc.ReasonExpired)
}

func TestEmailVerifiedClaim(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	for _, c := range []struct {
		claim any
		want  bool
	}{
		{nil, false}, // absent
		{false, false},
		{"true", true},
		{"false", false},
		{true, true},
	} {
		r.op.QueueUser(oidctest.User{Subject: "u", Email: "a@example.org", EmailVerified: true, Claims: map[string]any{"email_verified": c.claim}})
		id, err := signIn(t, p, oidc.NewFlow())
		if err != nil {
			t.Fatal(err)
		}
		if id.EmailVerified != c.want {
			t.Errorf("email_verified %#v: EmailVerified %v, want %v", c.claim, id.EmailVerified, c.want)
		}
	}
}

func TestKeyRotation(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	if _, err := signIn(t, p, oidc.NewFlow()); err != nil {
		t.Fatal(err)
	}
	if n := r.op.JWKSHits(); n != 1 {
		t.Fatalf("%d JWKS fetches for one sign-in", n)
	}
	if _, err := signIn(t, p, oidc.NewFlow()); err != nil {
		t.Fatal(err)
	}
	if n := r.op.JWKSHits(); n != 1 {
		t.Fatalf("%d JWKS fetches for two sign-ins with one key: the keys are not cached", n)
	}

	// Withdrawn: the new kid is not cached, so go-oidc fetches the set anew.
	r.op.RotateKey(false)
	if _, err := signIn(t, p, oidc.NewFlow()); err != nil {
		t.Fatalf("after a rotation: %v", err.(*oidc.Error).Detail())
	}
	if n := r.op.JWKSHits(); n != 2 {
		t.Errorf("%d JWKS fetches after a rotation, want 2", n)
	}

	// Kept: both keys are published; sign-ins keep verifying, and another
	// Provider of the same issuer shares the refreshed keys.
	r.op.RotateKey(true)
	if got := len(r.op.KeyIDs()); got != 2 {
		t.Fatalf("%d keys published, want 2", got)
	}
	r.cfg.Google = true
	p2 := r.provider(t)
	for range 2 {
		if _, err := signIn(t, p2, oidc.NewFlow()); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.op.JWKSHits(); n != 3 {
		t.Errorf("%d JWKS fetches after the second rotation, want 3", n)
	}
}

func TestDiscoveryCached(t *testing.T) {
	r := newRig(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			c := r.cfg
			c.Google = i%2 == 0
			if _, err := r.reg.Provider(context.Background(), c); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for range 3 {
		p := r.provider(t)
		if _, err := signIn(t, p, oidc.NewFlow()); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.op.DiscoveryHits(); n != 1 {
		t.Errorf("%d discovery fetches, want 1", n)
	}
}

func TestDiscoveryBackoff(t *testing.T) {
	r := newRig(t)
	r.op.FailDiscovery(2)
	try := func(wantHits int, wantOK bool) {
		t.Helper()
		_, err := r.reg.Provider(context.Background(), r.cfg)
		if wantOK && err != nil {
			t.Fatalf("Provider: %v", err)
		}
		if !wantOK {
			wantReason(t, err, oidc.ReasonDiscovery)
		}
		if n := r.op.DiscoveryHits(); n != wantHits {
			t.Fatalf("%d discovery fetches, want %d", n, wantHits)
		}
	}
	try(1, false) // the first failure
	try(1, false) // remembered: no fetch for 1 s
	r.clock.Add(time.Second)
	try(2, false) // the second failure
	r.clock.Add(time.Second)
	try(2, false) // backoff is now 2 s
	r.clock.Add(time.Second)
	try(3, true) // recovered
	if _, err := signIn(t, r.provider(t), oidc.NewFlow()); err != nil {
		t.Fatal(err)
	}
	r.clock.Add(time.Hour)
	try(3, true) // and kept, for good
}

func TestDiscoveryIssuerMismatch(t *testing.T) {
	r := newRig(t)
	r.cfg.Issuer = r.op.Issuer() + "/"
	_, err := r.reg.Provider(context.Background(), r.cfg)
	wantReason(t, err, oidc.ReasonDiscovery)
	if !strings.Contains(err.Error(), r.op.Issuer()) {
		t.Errorf("message %q does not say what the issuer calls itself", err)
	}
}

func TestProviderRefusesBadConfig(t *testing.T) {
	reg := oidc.NewRegistry(nil)
	_, err := reg.Provider(context.Background(), oidc.Config{Issuer: "http://idp.example.org", ClientID: "c"})
	wantReason(t, err, oidc.ReasonConfig)
	var fe *oidc.FieldError
	if !errors.As(err, &fe) || fe.Field != "issuer" {
		t.Errorf("error %v does not name the issuer field", err)
	}
}

func TestCheckConfig(t *testing.T) {
	for _, c := range []struct {
		cfg   oidc.Config
		field string // "" = valid
	}{
		{oidc.Config{ClientID: "c", ClientSecret: "s", Google: true}, ""},
		{oidc.Config{Issuer: "https://keycloak.example.org/realms/r", ClientID: "c"}, ""},
		{oidc.Config{Issuer: "http://127.0.0.1:5556/dex", ClientID: "c"}, ""},
		{oidc.Config{Issuer: "http://[::1]:5556", ClientID: "c"}, ""},
		{oidc.Config{Issuer: "http://localhost:8080", ClientID: "c"}, ""},
		{oidc.Config{Issuer: "http://idp.example.org", ClientID: "c"}, "issuer"},
		{oidc.Config{Issuer: "http://10.0.0.1", ClientID: "c"}, "issuer"},
		{oidc.Config{Issuer: "ftp://idp.example.org", ClientID: "c"}, "issuer"},
		{oidc.Config{Issuer: "idp.example.org", ClientID: "c"}, "issuer"},
		{oidc.Config{Issuer: "https://idp.example.org?x=1", ClientID: "c"}, "issuer"},
		{oidc.Config{Issuer: "https://idp.example.org#f", ClientID: "c"}, "issuer"},
		{oidc.Config{Issuer: "https://u:p@idp.example.org", ClientID: "c"}, "issuer"},
		{oidc.Config{Issuer: "https://idp.example.org"}, "client_id"},
		{oidc.Config{Issuer: "https://idp.example.org", ClientID: " "}, "client_id"},
		{oidc.Config{ClientID: "c", Google: true}, "client_secret"},
		{oidc.Config{Issuer: "https://accounts.google.com", ClientID: "c", ClientSecret: "s", Google: true}, ""},
		{oidc.Config{Issuer: "https://idp.example.org", ClientID: "c", ClientSecret: "s", Google: true}, "issuer"},
	} {
		err := oidc.CheckConfig(c.cfg)
		var fe *oidc.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%+v: got %v, want an error in %s", c.cfg, err, c.field)
		case c.field != "" && !strings.HasPrefix(err.Error(), c.field+": "):
			t.Errorf("%+v: message %q does not start with the field", c.cfg, err)
		}
		if strings.Contains(err2s(err), "p@") {
			t.Errorf("message %q shows credentials", err)
		}
	}
	if got := (oidc.Config{}).IssuerURL(); got != oidc.GoogleIssuer {
		t.Errorf("default issuer %q", got)
	}
}

func err2s(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestExchangeAbandoned(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	f := oidc.NewFlow()
	code, _ := browser(t, p.AuthCodeURL(f, redirectURL))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Exchange(ctx, f, code, redirectURL)
	wantReason(t, err, oidc.ReasonExchange, code)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("%v does not wrap context.Canceled", err.(*oidc.Error).Detail())
	}
}

func TestDiscoveryUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	reg := oidc.NewRegistry(nil)
	_, err = reg.Provider(context.Background(), oidc.Config{Issuer: "http://" + addr, ClientID: "c"})
	wantReason(t, err, oidc.ReasonDiscovery)
}

func TestDefaultUser(t *testing.T) {
	r := newRig(t)
	id, err := signIn(t, r.provider(t), oidc.NewFlow())
	if err != nil {
		t.Fatal(err)
	}
	if d := oidctest.DefaultUser(); id.Subject != d.Subject || id.Email != d.Email || !id.EmailVerified {
		t.Errorf("identity %+v, want the default user %+v", id, d)
	}
}
