package oidc

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

const (
	// requestTimeout bounds each discovery and each code exchange.
	requestTimeout = 10 * time.Second
	// maxBody bounds every response body read from an issuer (discovery,
	// JWKS, token endpoint): an issuer named in a namespace's configuration
	// is not trusted to be small.
	maxBody = 1 << 20
	// Discovery backoff: after the nth failure in a row, no new attempt is
	// made for minBackoff·2ⁿ⁻¹, at most maxBackoff.
	minBackoff = time.Second
	maxBackoff = 5 * time.Minute
)

// Registry discovers issuers and keeps what it found. An issuer's discovery
// document is fetched once, by the first [Registry.Provider] call that
// names it (concurrent calls wait for the same fetch), and kept for the
// life of the Registry: requests never re-discover. A failed discovery is
// remembered and answered from memory until its backoff has passed (1 s,
// doubling per failure in a row, at most 5 min); the first call after that
// tries again. The issuer's signing keys are go-oidc's remote key set, one
// per issuer shared by every client of it, fetched on first use and fetched
// again whenever a token names a key it does not hold (key rotation).
//
// A Registry is safe for concurrent use.
type Registry struct {
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	issuers map[string]*issuer
}

// issuer is one issuer's discovery state; guarded by Registry.mu.
type issuer struct {
	op       *oidc.Provider
	meta     metadata
	err      *Error
	failures int
	retryAt  time.Time
	inflight chan struct{} // non-nil while a discovery runs; closed when it ends
}

// metadata is what berth reads from a discovery document beyond go-oidc.
type metadata struct {
	AuthURL          string   `json:"authorization_endpoint"`
	TokenURL         string   `json:"token_endpoint"`
	JWKSURL          string   `json:"jwks_uri"`
	TokenAuthMethods []string `json:"token_endpoint_auth_methods_supported"`
	CodeChallenge    []string `json:"code_challenge_methods_supported"`
}

// Option configures a [Registry].
type Option func(*Registry)

// WithClock makes the Registry tell time by now: the ID token's expiry and
// the discovery backoff. For tests.
func WithClock(now func() time.Time) Option {
	return func(r *Registry) { r.now = now }
}

// NewRegistry makes a Registry whose requests to issuers go through client.
// A nil client is one with timeouts on the dial (5 s), the TLS handshake
// (5 s), the response headers and the whole request (10 s), the
// environment's proxy, and no redirects followed (the token endpoint gets
// the client secret; it is posted where discovery said, nowhere else).
// Either way, response bodies are cut at 1 MiB. The composition root may
// pass a client whose dialer refuses private addresses, since a namespace's
// auth provider can name any issuer.
func NewRegistry(client *http.Client, opts ...Option) *Registry {
	if client == nil {
		client = defaultClient()
	}
	c := *client
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = limitTransport{base}
	r := &Registry{client: &c, now: time.Now, issuers: map[string]*issuer{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

func defaultClient() *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           d.DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: requestTimeout,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   4,
			ForceAttemptHTTP2:     true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// limitTransport cuts response bodies at maxBody.
type limitTransport struct{ base http.RoundTripper }

func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil {
		resp.Body = &limitBody{r: io.LimitReader(resp.Body, maxBody+1), c: resp.Body}
	}
	return resp, err
}

type limitBody struct {
	r io.Reader
	c io.Closer
	n int64
}

var errTooLarge = errors.New("the identity provider's response is larger than 1 MiB")

func (b *limitBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > maxBody {
		return n, errTooLarge
	}
	return n, err
}

func (b *limitBody) Close() error { return b.c.Close() }

// Provider is the relying party for c, discovering c's issuer if this
// Registry has not yet. ctx bounds only this caller's wait: a discovery
// that has started runs to its own timeout, for the callers after it.
// Errors are [*Error]s: [ReasonConfig] for c itself or for what the issuer
// offers, [ReasonDiscovery] for the discovery.
func (r *Registry) Provider(ctx context.Context, c Config) (*Provider, error) {
	if err := CheckConfig(c); err != nil {
		return nil, newError(ReasonConfig, err, "the sign-in is misconfigured: %v", err)
	}
	iss := c.IssuerURL()
	for {
		r.mu.Lock()
		e := r.issuers[iss]
		if e == nil {
			e = &issuer{}
			r.issuers[iss] = e
		}
		switch {
		case e.op != nil:
			op, meta := e.op, e.meta
			r.mu.Unlock()
			return r.newProvider(c, op, meta)
		case e.inflight != nil:
			ch := e.inflight
			r.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, newError(ReasonDiscovery, ctx.Err(), "gave up waiting for the identity provider %s", iss)
			}
		case e.err != nil && r.now().Before(e.retryAt):
			err := e.err
			r.mu.Unlock()
			return nil, err
		}
		ch := make(chan struct{})
		e.inflight = ch
		r.mu.Unlock()

		op, meta, err := r.discover(iss)

		r.mu.Lock()
		e.inflight = nil
		close(ch)
		if err != nil {
			e.failures++
			e.err = err
			e.retryAt = r.now().Add(backoff(e.failures))
		} else {
			e.op, e.meta, e.err, e.failures = op, meta, nil, 0
		}
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// backoff is how long discovery waits after n failures in a row.
func backoff(n int) time.Duration {
	d := minBackoff
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// discover fetches iss's discovery document and checks what berth needs of
// it. Its context is its own: one caller's cancellation does not fail the
// discovery for the others waiting on it.
func (r *Registry) discover(iss string) (*oidc.Provider, metadata, *Error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	op, err := oidc.NewProvider(oidc.ClientContext(ctx, r.client), iss)
	if err != nil {
		var mismatch *oidc.IssuerMismatchError
		if errors.As(err, &mismatch) {
			return nil, metadata{}, newError(ReasonDiscovery, redact(err), "the identity provider at %s calls itself %q: the issuer must be written exactly as it is there", iss, mismatch.Discovered)
		}
		return nil, metadata{}, newError(ReasonDiscovery, redact(err), "could not discover the identity provider %s", iss)
	}
	var m metadata
	if err := op.Claims(&m); err != nil {
		return nil, metadata{}, newError(ReasonDiscovery, redact(err), "the identity provider %s published an unreadable discovery document", iss)
	}
	for _, f := range []struct{ name, url string }{
		{"authorization_endpoint", m.AuthURL},
		{"token_endpoint", m.TokenURL},
		{"jwks_uri", m.JWKSURL},
	} {
		if f.url == "" {
			return nil, metadata{}, newError(ReasonDiscovery, nil, "the identity provider %s publishes no %s", iss, f.name)
		}
		if err := checkURL(f.name, f.url); err != nil {
			return nil, metadata{}, newError(ReasonDiscovery, err, "the identity provider %s published an unusable %s", iss, f.name)
		}
	}
	if len(m.CodeChallenge) > 0 && !slices.Contains(m.CodeChallenge, "S256") {
		return nil, metadata{}, newError(ReasonConfig, nil, "the identity provider %s does not support PKCE with S256, which berth requires", iss)
	}
	return op, m, nil
}

// newProvider is the relying party for c at a discovered issuer.
func (r *Registry) newProvider(c Config, op *oidc.Provider, m metadata) (*Provider, error) {
	ep := op.Endpoint()
	switch {
	case c.ClientSecret == "":
		ep.AuthStyle = oauth2.AuthStyleInParams // a public client: client_id in the form, PKCE for proof
	case len(m.TokenAuthMethods) == 0 || slices.Contains(m.TokenAuthMethods, "client_secret_basic"):
		ep.AuthStyle = oauth2.AuthStyleInHeader // the spec's default
	case slices.Contains(m.TokenAuthMethods, "client_secret_post"):
		ep.AuthStyle = oauth2.AuthStyleInParams
	default:
		return nil, newError(ReasonConfig, nil, "the identity provider %s accepts neither client_secret_basic nor client_secret_post at its token endpoint (it offers %v)", c.IssuerURL(), m.TokenAuthMethods)
	}
	return &Provider{
		cfg:      c,
		issuer:   c.IssuerURL(),
		endpoint: ep,
		client:   r.client,
		// Both verifiers share op's one remote key set.
		verifier: op.Verifier(&oidc.Config{ClientID: c.ClientID, Now: r.now}),
		signature: op.Verifier(&oidc.Config{
			SkipClientIDCheck: true, SkipExpiryCheck: true, SkipIssuerCheck: true,
		}),
	}, nil
}
