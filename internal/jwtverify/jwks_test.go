package jwtverify

import (
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/berth-dev/berth/apitype"
)

// jwksServer is an issuer's JWKS endpoint on loopback.
type jwksServer struct {
	*httptest.Server
	hits atomic.Int32

	mu     sync.Mutex
	body   []byte
	status int
	// gate, when set, holds every request until it is closed; arrived
	// hears each request as it arrives.
	gate    chan struct{}
	arrived chan struct{}
}

func newJWKSServer(t testing.TB, keys ...jose.JSONWebKey) *jwksServer {
	t.Helper()
	s := &jwksServer{status: http.StatusOK}
	s.setKeys(t, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		body, status, gate, arrived := s.body, s.status, s.gate, s.arrived
		s.mu.Unlock()
		if arrived != nil {
			arrived <- struct{}{}
		}
		if gate != nil {
			<-gate
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) setKeys(t testing.TB, keys ...jose.JSONWebKey) {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	s.setBody(b)
}

func (s *jwksServer) setBody(b []byte) {
	s.mu.Lock()
	s.body = b
	s.mu.Unlock()
}

// hold makes requests wait until the returned release is called.
func (s *jwksServer) hold(t *testing.T) (arrived <-chan struct{}, release func()) {
	t.Helper()
	gate, in := make(chan struct{}), make(chan struct{}, 64)
	s.mu.Lock()
	s.gate, s.arrived = gate, in
	s.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			s.mu.Lock()
			s.gate, s.arrived = nil, nil
			s.mu.Unlock()
			close(gate)
		})
	}
	t.Cleanup(release) // before the server's Close, which waits for handlers
	return in, release
}

func jwk(pub crypto.PublicKey, kid, alg string) jose.JSONWebKey {
	return jose.JSONWebKey{Key: pub, KeyID: kid, Algorithm: alg, Use: "sig"}
}

func jwksSpec(url string, algs ...string) apitype.JwtSpec {
	return apitype.JwtSpec{JWKSURL: url, Algorithms: algs, Issuer: "auth-service"}
}

func rs256(t *testing.T, kid string, key crypto.Signer) string {
	t.Helper()
	return sign(t, jwt.SigningMethodRS256, key, claims(), "kid", kid)
}

func wantReason(t *testing.T, v *Verifier, tok string, want Reason) error {
	t.Helper()
	_, err := v.Verify(context.Background(), tok)
	t.Log(err)
	if got := reasonOf(t, err); got != want {
		t.Fatalf("reason %q (%v), want %q", got, err, want)
	}
	return err
}

func wantHits(t *testing.T, s *jwksServer, want int32) {
	t.Helper()
	if got := s.hits.Load(); got != want {
		t.Fatalf("JWKS fetched %d times, want %d", got, want)
	}
}

// TestJWKSRotation: the issuer adds a key; a token signed with it verifies
// after one refetch; tokens with made-up kids cost at most one fetch per
// window.
func TestJWKSRotation(t *testing.T) {
	clock := newClock()
	srv := newJWKSServer(t, jwk(rsaKey().Public(), "k1", "RS256"))
	v := newVerifier(t, jwksSpec(srv.URL, "RS256"), Options{Now: clock.Now})
	wantHits(t, srv, 0) // New fetches nothing

	wantReason(t, v, rs256(t, "k1", rsaKey()), "")
	wantReason(t, v, rs256(t, "k1", rsaKey()), "")
	wantHits(t, srv, 1)

	// Rotation: k2 is published (k1 retired).
	srv.setKeys(t, jwk(rsaKey2().Public(), "k2", "RS256"))
	wantReason(t, v, rs256(t, "k2", rsaKey2()), "")
	wantHits(t, srv, 2)
	wantReason(t, v, rs256(t, "k2", rsaKey2()), "")
	wantHits(t, srv, 2)
	// k1 is gone from the set held now; its tokens find no key, and the
	// refetch they would ask for is inside the window.
	err := wantReason(t, v, rs256(t, "k1", rsaKey()), ReasonNoKey)
	if !strings.Contains(err.Error(), `no key "k1"`) {
		t.Errorf("message %q does not name the kid", err)
	}

	// Made-up kids: none fetch inside the window…
	for i := range 20 {
		wantReason(t, v, rs256(t, fmt.Sprintf("random-%d", i), rsaKey()), ReasonNoKey)
	}
	wantHits(t, srv, 2)
	// …and once it has passed, one does, and the window starts again.
	clock.Add(missWindow)
	for i := range 20 {
		wantReason(t, v, rs256(t, fmt.Sprintf("again-%d", i), rsaKey()), ReasonNoKey)
	}
	wantHits(t, srv, 3)
	clock.Add(missWindow - time.Second)
	wantReason(t, v, rs256(t, "yet-another", rsaKey()), ReasonNoKey)
	wantHits(t, srv, 3)
	// The known kid never waited on any of it.
	wantReason(t, v, rs256(t, "k2", rsaKey2()), "")
	wantHits(t, srv, 3)
}

// TestJWKSServerDown: once fetched, the keys held keep verifying with the
// issuer gone; a kid they lack is then jwks-unavailable.
func TestJWKSServerDown(t *testing.T) {
	clock := newClock()
	srv := newJWKSServer(t, jwk(rsaKey().Public(), "k1", "RS256"))
	var heard atomic.Int32
	v := newVerifier(t, jwksSpec(srv.URL, "RS256"), Options{Now: clock.Now, FetchError: func(error) { heard.Add(1) }})
	if err := v.Prefetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	for range 3 {
		wantReason(t, v, rs256(t, "k1", rsaKey()), "")
	}
	err := wantReason(t, v, rs256(t, "k2", rsaKey2()), ReasonJWKSUnavailable)
	if !strings.Contains(err.Error(), "refetch failed") {
		t.Errorf("message %q", err)
	}
	if heard.Load() != 1 {
		t.Errorf("FetchError heard %d, want 1", heard.Load())
	}
	wantReason(t, v, rs256(t, "k1", rsaKey()), "")
}

func TestJWKSBadResponses(t *testing.T) {
	big := []byte(`{"keys":[],"pad":"` + strings.Repeat("x", maxJWKSBytes) + `"}`)
	for _, tc := range []struct {
		name    string
		status  int
		body    []byte
		chunked bool
		msg     string
	}{
		{"oversize", 200, big, false, "a JWKS is at most 1048576"},
		{"oversize chunked", 200, big, true, "more than 1048576 bytes"},
		{"garbage", 200, []byte("<html>hello</html>"), false, "not a JWK set"},
		{"no keys array", 200, []byte(`{"issuer":"x"}`), false, "no keys array"},
		{"empty set", 200, []byte(`{"keys":[]}`), false, "no usable key among 0"},
		{"404", 404, []byte(`not here`), false, "answered 404 Not Found"},
		{"only a symmetric key", 200, []byte(`{"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}]}`), false, "private or symmetric"},
		{"an unknown key type", 200, []byte(`{"keys":[{"kty":"OKP","crv":"Ed448","kid":"x","x":"AAAA"}]}`), false, "keys[0] does not parse"},
		{"an encryption key", 200, mustJSON(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: rsaKey().Public(), KeyID: "e", Use: "enc"}}}), false, `is for use "enc"`},
		{"a private key", 200, mustJSON(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: rsaKey(), KeyID: "p"}}}), false, "private or symmetric"},
		{"a key for another alg", 200, mustJSON(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{jwk(ecKey().Public(), "ec", "ES256")}}), false, "which no listed algorithm uses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.chunked {
					w.Header().Set("Transfer-Encoding", "chunked")
					w.WriteHeader(tc.status)
					for b := tc.body; len(b) > 0; {
						n := min(len(b), 32<<10)
						if _, err := w.Write(b[:n]); err != nil {
							return
						}
						w.(http.Flusher).Flush()
						b = b[n:]
					}
					return
				}
				w.Header().Set("Content-Length", fmt.Sprint(len(tc.body)))
				w.WriteHeader(tc.status)
				w.Write(tc.body)
			}))
			defer srv.Close()
			v := newVerifier(t, jwksSpec(srv.URL, "RS256"), Options{Now: newClock().Now})
			err := wantReason(t, v, rs256(t, "k1", rsaKey()), ReasonJWKSUnavailable)
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q, want …%s…", err, tc.msg)
			}
			if err := v.Prefetch(context.Background()); err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Prefetch = %v", err)
			}
		})
	}
}

func mustJSON(v any) []byte { return must(json.Marshal(v)) }

// TestJWKSEmptyRetry: with no keys held, a failed fetch is tried again on
// demand only after emptyRetry, and a good one then serves.
func TestJWKSEmptyRetry(t *testing.T) {
	clock := newClock()
	srv := newJWKSServer(t)
	srv.setBody([]byte("garbage"))
	v := newVerifier(t, jwksSpec(srv.URL, "RS256"), Options{Now: clock.Now})
	tok := rs256(t, "k1", rsaKey())
	wantReason(t, v, tok, ReasonJWKSUnavailable)
	wantReason(t, v, tok, ReasonJWKSUnavailable)
	wantHits(t, srv, 1)
	srv.setKeys(t, jwk(rsaKey().Public(), "k1", "RS256"))
	clock.Add(emptyRetry - time.Second)
	wantReason(t, v, tok, ReasonJWKSUnavailable)
	wantHits(t, srv, 1)
	clock.Add(time.Second)
	wantReason(t, v, tok, "")
	wantHits(t, srv, 2)
}

// TestJWKSSharedFetch: requests arriving while a fetch is in flight wait
// for it — the first fetch and an unknown-kid refetch alike.
func TestJWKSSharedFetch(t *testing.T) {
	clock := newClock()
	srv := newJWKSServer(t, jwk(rsaKey().Public(), "k1", "RS256"))
	v := newVerifier(t, jwksSpec(srv.URL, "RS256"), Options{Now: clock.Now})
	const n = 8
	run := func(tok string) {
		t.Helper()
		arrived, release := srv.hold(t)
		errs := make(chan error, n)
		for range n {
			go func() {
				_, err := v.Verify(context.Background(), tok)
				errs <- err
			}()
		}
		<-arrived
		waitWaiters(t, v.src, n)
		release()
		for range n {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	}
	run(rs256(t, "k1", rsaKey()))
	wantHits(t, srv, 1)

	srv.setKeys(t, jwk(rsaKey().Public(), "k1", "RS256"), jwk(rsaKey2().Public(), "k2", "RS256"))
	run(rs256(t, "k2", rsaKey2()))
	wantHits(t, srv, 2)
}

// waitWaiters returns once n callers wait on s's fetch in flight.
func waitWaiters(t *testing.T, s *source, n int32) {
	t.Helper()
	s.mu.Lock()
	f := s.inflight
	s.mu.Unlock()
	if f == nil {
		t.Fatal("no fetch in flight")
	}
	for f.waiters.Load() < n {
		time.Sleep(time.Millisecond) // a wait for a condition, not a timed assertion
	}
}

// TestJWKSBackgroundRefresh: the refresh replaces the set, and while it
// runs the keys held keep serving without waiting.
func TestJWKSBackgroundRefresh(t *testing.T) {
	clock := newClock()
	srv := newJWKSServer(t, jwk(rsaKey().Public(), "k1", "RS256"))
	v := newVerifier(t, jwksSpec(srv.URL, "RS256"), Options{Now: clock.Now})
	tick := make(chan time.Time)
	v.src.tick = tick
	wantReason(t, v, rs256(t, "k1", rsaKey()), "")

	// A refresh that hangs at the issuer does not hold up a known kid.
	srv.setKeys(t, jwk(rsaKey().Public(), "k1", "RS256"), jwk(rsaKey2().Public(), "k2", "RS256"))
	arrived, release := srv.hold(t)
	done := make(chan struct{})
	v.src.refreshed = func() { close(done) }
	tick <- time.Now()
	<-arrived
	for range 5 {
		wantReason(t, v, rs256(t, "k1", rsaKey()), "")
	}
	release()
	<-done
	wantHits(t, srv, 2)
	// k2 came with the refresh: no refetch for it.
	wantReason(t, v, rs256(t, "k2", rsaKey2()), "")
	wantHits(t, srv, 2)

	// A failed refresh keeps the set.
	srv.setBody([]byte("oops"))
	refreshNow(t, v.src, tick)
	wantHits(t, srv, 3)
	wantReason(t, v, rs256(t, "k2", rsaKey2()), "")
}

// TestJWKSClose: Close waits for the refresh loop and a fetch in flight;
// afterwards the keys held serve and nothing is fetched.
func TestJWKSClose(t *testing.T) {
	clock := newClock()
	srv := newJWKSServer(t, jwk(rsaKey().Public(), "k1", "RS256"))
	v, err := New(jwksSpec(srv.URL, "RS256"), Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	wantReason(t, v, rs256(t, "k1", rsaKey()), "")

	// A fetch in flight, held at the issuer: Close cancels it.
	arrived, _ := srv.hold(t)
	errs := make(chan error, 1)
	go func() {
		_, err := v.Verify(context.Background(), rs256(t, "k2", rsaKey2()))
		errs <- err
	}()
	<-arrived
	v.Close()
	if got := reasonOf(t, <-errs); got != ReasonJWKSUnavailable {
		t.Errorf("the request waiting on the fetch Close cancelled: %q", got)
	}
	v.Close() // twice is fine

	hits := srv.hits.Load()
	wantReason(t, v, rs256(t, "k1", rsaKey()), "")
	clock.Add(time.Hour)
	wantReason(t, v, sign(t, jwt.SigningMethodRS256, rsaKey2(), claims("exp", t0.Add(2*time.Hour).Unix()), "kid", "k3"), ReasonJWKSUnavailable)
	wantHits(t, srv, hits)
}

// TestJWKSWaitBoundedByContext: a request whose context ends stops
// waiting; the fetch goes on and serves the next one.
func TestJWKSWaitBoundedByContext(t *testing.T) {
	clock := newClock()
	srv := newJWKSServer(t, jwk(rsaKey().Public(), "k1", "RS256"))
	v := newVerifier(t, jwksSpec(srv.URL, "RS256"), Options{Now: clock.Now})
	arrived, release := srv.hold(t)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := v.Verify(ctx, rs256(t, "k1", rsaKey()))
		errs <- err
	}()
	<-arrived
	waitWaiters(t, v.src, 1)
	cancel()
	err := <-errs
	if reasonOf(t, err) != ReasonJWKSUnavailable || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("%v", err)
	}
	release()
	wantReason(t, v, rs256(t, "k1", rsaKey()), "")
	wantHits(t, srv, 1)
}

// TestJWKSKeys: a set of several kinds; tokens pick by kid and alg, and
// without a kid every key that suits the alg is tried.
func TestJWKSKeys(t *testing.T) {
	clock := newClock()
	srv := newJWKSServer(t)
	srv.setBody(mustJSON(map[string]any{"keys": []any{
		jwk(rsaKey().Public(), "rsa", "RS256"),
		jose.JSONWebKey{Key: rsaKey2().Public(), KeyID: "rsa2"}, // no alg, no use
		jwk(ecKey().Public(), "ec", "ES256"),
		jwk(edKey().Public(), "ed", "EdDSA"),
		jose.JSONWebKey{Key: ecKey2().Public(), KeyID: "enc", Use: "enc"},
		map[string]string{"kty": "OKP", "crv": "Ed448", "kid": "x448", "x": "AAAA"},
	}}))
	v := newVerifier(t, jwksSpec(srv.URL, "RS256", "PS256", "ES256", "EdDSA"), Options{Now: clock.Now})
	for _, tc := range []struct {
		name  string
		token string
		want  Reason
	}{
		{"RS256 by kid", rs256(t, "rsa", rsaKey()), ""},
		{"RS256, key without alg", rs256(t, "rsa2", rsaKey2()), ""},
		{"PS256, key without alg", sign(t, jwt.SigningMethodPS256, rsaKey2(), claims(), "kid", "rsa2"), ""},
		{"PS256 with a key marked RS256", sign(t, jwt.SigningMethodPS256, rsaKey(), claims(), "kid", "rsa"), ReasonNoKey},
		{"ES256 by kid", sign(t, jwt.SigningMethodES256, ecKey(), claims(), "kid", "ec"), ""},
		{"EdDSA by kid", sign(t, jwt.SigningMethodEdDSA, edKey(), claims(), "kid", "ed"), ""},
		{"RS256 naming the EC kid", rs256(t, "ec", rsaKey()), ReasonNoKey},
		{"ES256 with the encryption key", sign(t, jwt.SigningMethodES256, ecKey2(), claims(), "kid", "enc"), ReasonNoKey},
		{"no kid, RS256: both RSA keys tried", sign(t, jwt.SigningMethodRS256, rsaKey2(), claims()), ""},
		{"no kid, ES256", sign(t, jwt.SigningMethodES256, ecKey(), claims()), ""},
		{"no kid, wrong key", sign(t, jwt.SigningMethodES256, ecKey2(), claims()), ReasonSignature},
		{"right kid, wrong key", rs256(t, "rsa", rsaKey2()), ReasonSignature},
		{"HS256 over the RSA key's PEM", sign(t, jwt.SigningMethodHS256, []byte(pemPublic(t, rsaKey().Public())), claims(), "kid", "rsa"), ReasonAlgorithm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantReason(t, v, tc.token, tc.want)
		})
	}
}

func TestJWKSRedirects(t *testing.T) {
	clock := newClock()
	srv := newJWKSServer(t, jwk(rsaKey().Public(), "k1", "RS256"))
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, srv.URL, http.StatusFound) })
	mux.HandleFunc("/out", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://jwks.example.com/keys", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	redir := httptest.NewServer(mux)
	defer redir.Close()

	v := newVerifier(t, jwksSpec(redir.URL+"/ok", "RS256"), Options{Now: clock.Now})
	wantReason(t, v, rs256(t, "k1", rsaKey()), "")
	for path, msg := range map[string]string{"/out": "must be https", "/loop": "more than 3 redirects"} {
		v := newVerifier(t, jwksSpec(redir.URL+path, "RS256"), Options{Now: clock.Now, Client: &http.Client{}})
		err := wantReason(t, v, rs256(t, "k1", rsaKey()), ReasonJWKSUnavailable)
		if !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want …%s…", path, err, msg)
		}
	}
}

func TestJWKSTooManyKeys(t *testing.T) {
	var keys []jose.JSONWebKey
	for i := range maxKeys + 1 {
		keys = append(keys, jwk(ecKey().Public(), fmt.Sprint(i), "ES256"))
	}
	srv := newJWKSServer(t, keys...)
	v := newVerifier(t, jwksSpec(srv.URL, "ES256"), Options{Now: newClock().Now})
	err := wantReason(t, v, sign(t, jwt.SigningMethodES256, ecKey(), claims(), "kid", "0"), ReasonJWKSUnavailable)
	if !strings.Contains(err.Error(), "more than 32 usable keys") {
		t.Error(err)
	}
}
