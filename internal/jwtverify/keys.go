package jwtverify

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

const (
	// jwksRefresh is how often a held JWKS is fetched again in the
	// background (app-lb caches it 10 min).
	jwksRefresh = 10 * time.Minute
	// secretRefresh is how often a held HMAC secret is resolved again.
	secretRefresh = time.Minute
	// missWindow is the least time between two refetches for an unknown
	// kid: an attacker minting kids must not turn the gate into a load
	// generator against the issuer.
	missWindow = 30 * time.Second
	// emptyRetry is the least time between two fetches on demand while no
	// keys are held and the last one failed.
	emptyRetry = 5 * time.Second
	// fetchTimeout bounds one fetch or resolve, body included.
	fetchTimeout = 5 * time.Second
	// maxJWKSBytes bounds a JWKS response body.
	maxJWKSBytes = 1 << 20
	// maxKeys bounds the usable keys kept from one JWKS, and so the
	// signatures a token without a kid can cost.
	maxKeys = 32
	// maxRedirects bounds the redirects followed to the JWKS.
	maxRedirects = 3
)

// verifyKey is a public key (or the HMAC secret) and which of the spec's
// algorithms it may verify.
type verifyKey struct {
	kid  string
	key  any
	algs uint16
}

// A keySet is the keys held, immutable once published.
type keySet struct {
	// anyKid: the keys are not told apart by kid (a secret, a PEM key),
	// so a token's kid, whatever it is, does not narrow them.
	anyKid bool
	keys   []verifyKey
}

// pick is the key for a token with kid whose alg has bit, a
// jwt.VerificationKeySet when several may be it, or nil.
func (s *keySet) pick(kid string, bit uint16) any {
	var first any
	var set *jwt.VerificationKeySet
	for _, k := range s.keys {
		if k.algs&bit == 0 || !s.anyKid && kid != "" && k.kid != kid {
			continue
		}
		switch {
		case first == nil:
			first = k.key
		case set == nil:
			set = &jwt.VerificationKeySet{Keys: []jwt.VerificationKey{first, k.key}}
		default:
			set.Keys = append(set.Keys, k.key)
		}
	}
	if set != nil {
		return *set
	}
	return first
}

var errRateLimited = errors.New("rate-limited")

// A source holds the keys of a secret or a JWKS, fetching them on demand
// and refreshing them in the background.
type source struct {
	what  string
	load  func(ctx context.Context) (*keySet, error)
	every time.Duration
	now   func() time.Time
	onErr func(error)
	// tick replaces the refresh ticker in tests, and refreshed (when set)
	// hears that a background refresh ended.
	tick      <-chan time.Time
	refreshed func()

	cur atomic.Pointer[keySet]

	mu       sync.Mutex
	inflight *fetch
	lastMiss time.Time // start of the last unknown-kid refetch
	lastFail time.Time // end of the last failed fetch while none were held
	lastErr  error
	started  bool // the refresh loop runs
	closed   bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// A fetch is one load in flight, shared by whoever waits for keys.
type fetch struct {
	done    chan struct{}
	err     error
	waiters atomic.Int32 // for tests: how many wait on it
}

func newSource(what string, every time.Duration, now func() time.Time, onErr func(error), load func(context.Context) (*keySet, error)) *source {
	ctx, cancel := context.WithCancel(context.Background())
	return &source{what: what, load: load, every: every, now: now, onErr: onErr, ctx: ctx, cancel: cancel}
}

// keys returns the keys held, fetching them first if there are none.
func (s *source) keys(ctx context.Context) (*keySet, error) {
	if set := s.cur.Load(); set != nil {
		return set, nil
	}
	s.mu.Lock()
	if set := s.cur.Load(); set != nil {
		s.mu.Unlock()
		return set, nil
	}
	f := s.inflight
	if f == nil {
		switch {
		case s.closed:
			s.mu.Unlock()
			return nil, fmt.Errorf("the verifier is closed")
		case s.lastErr != nil && s.now().Sub(s.lastFail) < emptyRetry:
			err := s.lastErr
			s.mu.Unlock()
			return nil, err
		}
		f = s.startLocked()
	}
	s.mu.Unlock()
	if err := s.wait(ctx, f); err != nil {
		return nil, err
	}
	return s.cur.Load(), nil
}

// refetch fetches the keys again because seen lacked one a token wanted:
// at most once per missWindow, joining a fetch already in flight. It
// returns the keys held afterwards (seen at worst) and why no fresh ones
// came.
func (s *source) refetch(ctx context.Context, seen *keySet) (*keySet, error) {
	s.mu.Lock()
	if set := s.cur.Load(); set != seen {
		s.mu.Unlock() // a fetch landed meanwhile: look there first
		return set, nil
	}
	f := s.inflight
	if f == nil {
		now := s.now()
		switch {
		case s.closed:
			s.mu.Unlock()
			return seen, fmt.Errorf("the verifier is closed")
		case !s.lastMiss.IsZero() && now.Sub(s.lastMiss) < missWindow:
			s.mu.Unlock()
			return seen, errRateLimited
		}
		s.lastMiss = now
		f = s.startLocked()
	}
	s.mu.Unlock()
	err := s.wait(ctx, f)
	return s.cur.Load(), err
}

// startLocked starts a fetch, and the refresh loop if it is not running.
// s.mu is held and s is not closed.
func (s *source) startLocked() *fetch {
	f := &fetch{done: make(chan struct{})}
	s.inflight = f
	s.wg.Add(1)
	go s.run(f)
	if !s.started {
		s.started = true
		s.wg.Add(1)
		go s.refresh()
	}
	return f
}

func (s *source) run(f *fetch) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.ctx, fetchTimeout)
	set, err := s.load(ctx)
	cancel()
	s.mu.Lock()
	if err == nil {
		s.cur.Store(set)
		s.lastErr = nil
	} else {
		if s.cur.Load() == nil {
			s.lastErr, s.lastFail = err, s.now()
		}
	}
	f.err = err
	s.inflight = nil
	s.mu.Unlock()
	// Before the waiters wake: whoever sees the failure, the hook has heard it.
	if err != nil && s.onErr != nil {
		s.onErr(fmt.Errorf("jwtverify: %s: %w", s.what, err))
	}
	close(f.done)
}

func (s *source) wait(ctx context.Context, f *fetch) error {
	f.waiters.Add(1)
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return fmt.Errorf("gave up waiting for the %s: %w", s.what, context.Cause(ctx))
	}
}

// refresh fetches the keys every s.every until the source is closed. The
// keys held serve meanwhile, and stay when a fetch fails.
func (s *source) refresh() {
	defer s.wg.Done()
	tick := s.tick
	if tick == nil {
		t := time.NewTicker(s.every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick:
		}
		s.mu.Lock()
		f := s.inflight
		if f == nil && !s.closed {
			f = s.startLocked()
		}
		s.mu.Unlock()
		if f != nil {
			select {
			case <-f.done:
			case <-s.ctx.Done():
				return
			}
		}
		if s.refreshed != nil {
			s.refreshed()
		}
	}
}

func (s *source) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

var (
	defaultClientOnce sync.Once
	defaultClient     *http.Client
)

// fetchClient is c (or the default client) with the redirect rule.
func fetchClient(c *http.Client) *http.Client {
	if c == nil {
		defaultClientOnce.Do(func() {
			d := &net.Dialer{Timeout: fetchTimeout, KeepAlive: 30 * time.Second}
			defaultClient = &http.Client{
				Timeout: fetchTimeout,
				Transport: &http.Transport{
					Proxy:                  http.ProxyFromEnvironment,
					DialContext:            d.DialContext,
					TLSHandshakeTimeout:    fetchTimeout,
					ResponseHeaderTimeout:  fetchTimeout,
					ExpectContinueTimeout:  time.Second,
					IdleConnTimeout:        90 * time.Second,
					MaxIdleConnsPerHost:    2,
					MaxResponseHeaderBytes: 64 << 10,
					ForceAttemptHTTP2:      true,
				},
			}
		})
		c = defaultClient
	}
	cc := *c
	prev := c.CheckRedirect
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("more than %d redirects", maxRedirects)
		}
		if msg := urlProblem(req.URL.String()); msg != "" {
			return fmt.Errorf("redirected to %s, which %s", req.URL.Redacted(), msg)
		}
		if prev != nil {
			return prev(req, via)
		}
		return nil
	}
	return &cc
}

// fetchJWKS gets and parses the JWK set at url, keeping the keys some
// algorithm (by mask) may verify with.
func fetchJWKS(ctx context.Context, c *http.Client, url string, mask func(key any, alg string) uint16) (*keySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	if resp.ContentLength > maxJWKSBytes {
		return nil, fmt.Errorf("%s sent %d bytes; a JWKS is at most %d", url, resp.ContentLength, maxJWKSBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("%s sent more than %d bytes; a JWKS is at most that", url, maxJWKSBytes)
	}
	set, err := parseJWKS(body, mask)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return set, nil
}

// parseJWKS reads a JWK set key by key, so that one key of a kind this
// verifier cannot use (Ed448, an encryption key) does not void the rest.
func parseJWKS(body []byte, mask func(key any, alg string) uint16) (*keySet, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("not a JWK set: %v", err)
	}
	if doc.Keys == nil {
		return nil, fmt.Errorf("not a JWK set: no keys array")
	}
	set := &keySet{}
	var skipped []string
	skip := func(i int, why string) {
		if len(skipped) < 3 {
			skipped = append(skipped, fmt.Sprintf("keys[%d] %s", i, why))
		}
	}
	for i, raw := range doc.Keys {
		// Private parameters mean a misconfigured issuer; go-jose would
		// parse them (at a cost) and they have no business here.
		var priv struct {
			D, P, Q, Dp, Dq, Qi, K, Priv json.RawMessage
		}
		if err := json.Unmarshal(raw, &priv); err != nil {
			skip(i, "is not an object")
			continue
		}
		if priv.D != nil || priv.P != nil || priv.Q != nil || priv.Dp != nil || priv.Dq != nil || priv.Qi != nil || priv.K != nil || priv.Priv != nil {
			skip(i, "carries private or symmetric key material")
			continue
		}
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil {
			skip(i, "does not parse: "+strings.TrimPrefix(err.Error(), "go-jose/go-jose: "))
			continue
		}
		if jwk.Use != "" && jwk.Use != "sig" {
			skip(i, fmt.Sprintf("is for use %q", jwk.Use))
			continue
		}
		switch jwk.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		default:
			skip(i, fmt.Sprintf("is a %T, not a public signing key", jwk.Key))
			continue
		}
		if msg := usable(jwk.Key); msg != "" {
			skip(i, "is "+msg)
			continue
		}
		m := mask(jwk.Key, jwk.Algorithm)
		if m == 0 {
			what := describeKey(jwk.Key)
			if jwk.Algorithm != "" {
				what += " for " + jwk.Algorithm
			}
			skip(i, "is "+what+", which no listed algorithm uses")
			continue
		}
		if len(set.keys) == maxKeys {
			return nil, fmt.Errorf("more than %d usable keys", maxKeys)
		}
		set.keys = append(set.keys, verifyKey{kid: jwk.KeyID, key: jwk.Key, algs: m})
	}
	if len(set.keys) == 0 {
		msg := fmt.Sprintf("no usable key among %d", len(doc.Keys))
		if len(skipped) > 0 {
			msg += ": " + strings.Join(skipped, "; ")
		}
		return nil, errors.New(msg)
	}
	return set, nil
}
