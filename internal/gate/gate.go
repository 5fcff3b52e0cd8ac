package gate

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/jwtverify"
	"github.com/berth-dev/berth/internal/oidc"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/sessions"
)

// app-lb's defaults, kept so that links apps already carry (a sign-out
// link to /__applb/auth/logout) keep working behind berth.
const (
	DefaultBasePath   = "/__applb/auth"
	DefaultCookieName = "applb_session"
	DefaultSessionTTL = 12 * time.Hour
	flowCookieName    = "berth_auth_flow"
	flowTTL           = 10 * time.Minute
	exchangeTimeout   = 10 * time.Second
)

// Tokens is what the gate needs of the app-tokens (package auth).
type Tokens interface {
	Verify(ctx context.Context, raw string) (*auth.Token, error)
	Mint(ctx context.Context, by *auth.Principal, req apitype.NewToken) (auth.MintedView, error)
	Revoke(ctx context.Context, by *auth.Principal, id string) error
}

// Sessions is what the gate needs of the sign-in sessions.
type Sessions interface {
	// Create stores a session lasting ttl and returns its cookie secret.
	Create(ctx context.Context, s sessions.Session, ttl time.Duration) (secret string, _ sessions.Session, _ error)
	// Lookup finds the live session of secret at deployment, signed in
	// under the policy fingerprint, and marks it used.
	Lookup(secret, deployment, fingerprint string) (sessions.Session, bool)
	// Revoke ends a session; one already gone is not an error.
	Revoke(ctx context.Context, id string) error
	// RevokeSubject ends every session of subject at deployment.
	RevokeSubject(ctx context.Context, deployment, subject string) (int, error)
	// SetTokenID records the session_scope token minted for a session.
	SetTokenID(ctx context.Context, id, tokenID string) error
}

// Secrets resolves secret references (package secrets).
type Secrets interface {
	Value(ctx context.Context, ns, id, key string) (string, error)
}

// Providers lists the namespaces' declared auth providers (package
// namespaces).
type Providers interface {
	Providers(ctx context.Context) ([]apitype.AuthProviderView, error)
}

// Event is a refused credential or a failed sign-in, for the SIEM: Kind is
// `gate-token`, `gate-jwt`, `signin-state`, `signin-denied`,
// `signin-failed`; Source is the socket peer, never a forwarded header.
type Event struct {
	Kind       string
	Deployment string
	Namespace  string
	Host       string
	Source     netip.Addr
	Reason     string
	// Subject is the identity a refused sign-in presented (its email, or
	// its subject), when one did.
	Subject string
}

// Options configure a [Manager].
type Options struct {
	Tokens    Tokens
	Sessions  Sessions
	Secrets   Secrets
	Providers Providers
	// OIDC discovers and caches issuers; nil makes one with its default
	// client.
	OIDC *oidc.Registry
	// JWTClient fetches JWKS documents; nil: jwtverify's default.
	JWTClient *http.Client
	// Key seals the sign-in flow cookie (the state, nonce and PKCE
	// verifier of a sign-in under way).
	Key secrets.Key
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	Log *slog.Logger
	// Event receives refusals and sign-in failures; nil drops them.
	Event func(Event)
	// GoogleIssuer is the issuer the google provider signs in with: ""
	// is Google's (tests name a provider on loopback).
	GoogleIssuer string
}

// Manager compiles gates and holds what they share: JWT verifiers (one per
// distinct spec, with their JWKS caches), the namespace providers
// snapshot, the OIDC registry and the decision counters.
type Manager struct {
	o       Options
	oidc    *oidc.Registry
	metrics *counters

	mu        sync.Mutex
	verifiers map[string]*verifierEntry
	closed    bool

	provs     sync.Mutex // serializes reloads
	providers atomic.Pointer[map[string]*identity]

	scopedTokens sync.Map // session id → raw session_scope token (memory only)
}

type verifierEntry struct {
	v       *jwtverify.Verifier
	cache   *claimCache
	lastUse atomic.Int64 // unix seconds of the last compile or verification
}

// used marks the entry used at now (one atomic store a second at most).
func (e *verifierEntry) used(now time.Time) {
	if s := now.Unix(); e.lastUse.Load() != s {
		e.lastUse.Store(s)
	}
}

// NewManager returns a Manager; call ReloadProviders once the store is
// open, and again after every auth provider write.
func NewManager(o Options) *Manager {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{o: o, oidc: o.OIDC, metrics: newCounters(), verifiers: map[string]*verifierEntry{}}
	if m.oidc == nil {
		m.oidc = oidc.NewRegistry(nil)
	}
	m.providers.Store(&map[string]*identity{})
	return m
}

// Close stops the JWT verifiers' background refreshes.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for k, e := range m.verifiers {
		e.v.Close()
		delete(m.verifiers, k)
	}
}

// ReloadProviders rereads the namespaces' auth providers: a gate with
// provider_ref resolves its provider from this snapshot on every request.
func (m *Manager) ReloadProviders(ctx context.Context) error {
	if m.o.Providers == nil {
		return nil
	}
	m.provs.Lock()
	defer m.provs.Unlock()
	ps, err := m.o.Providers.Providers(ctx)
	if err != nil {
		return err
	}
	next := make(map[string]*identity, len(ps))
	for _, p := range ps {
		id, err := m.compileIdentity(p.Namespace, identitySpec{
			providers: p.Provider.Providers, clientID: p.ClientID, clientSecret: p.ClientSecret,
			domains: p.AllowedDomains, emails: p.AllowedEmails, jwt: p.JWT, cookieDomain: p.CookieDomain,
			issuer: providerIssuer(p),
		})
		if err != nil {
			id = &identity{err: err}
		}
		id.name = p.Name
		next[p.Namespace+"/"+p.Name] = id
	}
	m.providers.Store(&next)
	return nil
}

// providerIssuer is the OpenID Connect issuer a provider names (berth's
// `issuer` key), or "".
func providerIssuer(p apitype.AuthProviderView) string {
	raw, ok := p.Extra["issuer"]
	if !ok {
		return ""
	}
	s, _ := unquote(raw)
	return s
}

// Compile returns the gate of a deployment spec (normalized and validated),
// or nil when it has none.
func (m *Manager) Compile(s *apitype.DeploymentSpec) (*Gate, error) {
	a := s.Auth
	if a == nil {
		return nil, nil
	}
	ns := cmp.Or(s.Namespace, "default")
	g := &Gate{
		m: m, dep: s.ID, ns: ns,
		base:         strings.TrimSuffix(cmp.Or(a.BasePath, DefaultBasePath), "/"),
		cookie:       cmp.Or(a.CookieName, DefaultCookieName),
		ttl:          DefaultSessionTTL,
		sessionScope: a.SessionScope,
		forward:      a.ForwardIdentity != nil && *a.ForwardIdentity,
		redirectURL:  a.RedirectURL,
		ref:          a.ProviderRef,
	}
	if a.SessionTTLSecs != nil && *a.SessionTTLSecs > 0 {
		g.ttl = time.Duration(*a.SessionTTLSecs) * time.Second
	}
	g.publics = slices.Clone(a.PublicPaths)
	// Longest prefix first: the most specific entry decides.
	slices.SortStableFunc(g.publics, func(x, y apitype.PublicPath) int { return len(y.Path) - len(x.Path) })
	if g.ref != "" && m.o.Providers != nil {
		// Resolved live on every request; but a reference to nothing
		// is refused when written (DELETE /auth-providers refuses to
		// take one away from a deployment that inherits it).
		if ps := m.providers.Load(); ps == nil || (*ps)[ns+"/"+g.ref] == nil {
			return nil, fmt.Errorf("provider_ref: no auth provider %q in namespace %q (POST /auth-providers declares one)", g.ref, ns)
		}
	}
	if g.ref == "" {
		id, err := m.compileIdentity(ns, identitySpec{
			providers: a.Provider.Providers, clientID: a.ClientID, clientSecret: a.ClientSecret,
			domains: a.AllowedDomains, emails: a.AllowedEmails, jwt: a.JWT, cookieDomain: a.CookieDomain,
		})
		if err != nil {
			return nil, err
		}
		g.inline = id
	}
	return g, nil
}

// Collector is the gate's decision counters, for Prometheus.
func (m *Manager) Collector() *Collector { return &Collector{m.metrics} }

// Decisions returns the decision counters by "decision/reason".
func (m *Manager) Decisions() map[string]uint64 { return m.metrics.snapshot() }

func (m *Manager) event(e Event) {
	if m.o.Event != nil {
		m.o.Event(e)
	}
}

// verifier returns the shared verifier of a JWT spec in namespace ns.
func (m *Manager) verifier(ns string, spec *apitype.JwtSpec) (*verifierEntry, error) {
	key := ns + "\x00" + canonicalJSON(spec)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.o.Now()
	if e := m.verifiers[key]; e != nil {
		e.used(now)
		return e, nil
	}
	v, err := jwtverify.New(*spec, jwtverify.Options{
		Secret: func(ctx context.Context, ref apitype.SecretRef) ([]byte, error) {
			if m.o.Secrets == nil {
				return nil, errNoSecrets
			}
			val, err := m.o.Secrets.Value(ctx, cmp.Or(ref.Namespace, ns), ref.Secret, ref.Key)
			return []byte(val), err
		},
		Client: m.o.JWTClient,
		Now:    m.o.Now,
	})
	if err != nil {
		return nil, err
	}
	m.sweepVerifiers(now)
	e := &verifierEntry{v: v, cache: newClaimCache()}
	e.used(now)
	m.verifiers[key] = e
	return e, nil
}

// sweepVerifiers closes the verifiers nothing compiled or used in a day:
// specs that were replaced.
func (m *Manager) sweepVerifiers(now time.Time) {
	for k, e := range m.verifiers {
		if now.Unix()-e.lastUse.Load() > 24*3600 {
			e.v.Close()
			delete(m.verifiers, k)
		}
	}
}
