package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/certs/pebbletest"
	"github.com/berth-dev/berth/internal/certs/rfc2136/bindtest"
	"github.com/berth-dev/berth/internal/clocktest"
	"github.com/berth-dev/berth/internal/secrets"
)

// testZone is the zone the tests' named serves: every name in it is
// 127.0.0.1, and TXT records in it can be updated with TSIG.
const testZone = "example.test."

// env is one test's world on loopback: named, pebble, and the plaintext and
// TLS listeners pebble validates against, which serve the test's Manager.
type env struct {
	dns    *bindtest.Server
	pebble *pebbletest.Pebble
	httpLn net.Listener // pebble's HTTPPort
	tlsLn  net.Listener // pebble's TLSPort

	mu sync.Mutex
	m  *Manager // the Manager the listeners serve
}

// startEnv starts named and pebble for one test.
func startEnv(t testing.TB) *env {
	t.Helper()
	pebbletest.Binary(t)
	// *.example.test resolves every name but those under a name that exists
	// (RFC 4592): w.example.test exists while a DNS-01 challenge for the
	// wildcard base w.example.test is in progress, so it gets its own
	e := &env{dns: bindtest.Start(t, testZone, "w IN A 127.0.0.1", "*.w IN A 127.0.0.1")}
	var err error
	if e.httpLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if e.tlsLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	e.pebble = pebbletest.Start(t, pebbletest.Options{HTTPPort: port(e.httpLn), TLSPort: port(e.tlsLn), DNS: e.dns.Addr})
	e.serve(t)
	return e
}

// serve runs the plaintext listener (HTTP-01 via ServeHTTPChallenge, else
// 404) and the TLS listener (TLSConfig) for whatever Manager e.m is.
func (e *env) serve(t testing.TB) {
	quiet := slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	plain := &http.Server{ErrorLog: quiet, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := e.manager(); m != nil && m.ServeHTTPChallenge(w, r) {
			return
		}
		http.NotFound(w, r)
	})}
	secure := &http.Server{ErrorLog: quiet, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from "+r.Host)
	})}
	tlsConf := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if m := e.manager(); m != nil {
			return m.TLSConfig(), nil
		}
		return nil, errors.New("no manager")
	}}
	go plain.Serve(e.httpLn)
	go secure.Serve(tls.NewListener(e.tlsLn, tlsConf))
	t.Cleanup(func() { plain.Close(); secure.Close() })
}

func (e *env) manager() *Manager {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m
}

// newManager returns a Manager on e's CA with its state in dir (a new
// temporary directory when ""), served by e's listeners.
func (e *env) newManager(t testing.TB, dir string, edit func(*Options)) *Manager {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	o := Options{
		Dir: filepath.Join(dir, "acme"), Key: testKey, Email: "ops@example.test",
		Directory: e.pebble.Directory, CARoots: e.pebble.CARoots,
		HTTPPort: port(e.httpLn), TLSPort: port(e.tlsLn),
		dnsResolvers: []string{e.dns.Addr}, Log: testLog(t),
	}
	if edit != nil {
		edit(&o)
	}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.stopCache)
	e.mu.Lock()
	e.m = m
	e.mu.Unlock()
	return m
}

// dial handshakes with e's TLS listener for name, verifying the chain
// against pebble's issuing root, and returns the leaf it was given.
func (e *env) dial(t testing.TB, name string) *x509.Certificate {
	t.Helper()
	c, err := tls.Dial("tcp", e.tlsLn.Addr().String(), &tls.Config{ServerName: name, RootCAs: e.pebble.Issuing, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatalf("handshake for %s: %v", name, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

var testKey = secrets.Key{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}

func port(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

func testLog(t testing.TB) *slog.Logger {
	if os.Getenv("BERTH_CERTS_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// newClock is berth's clock in tests, from now: renewal and backoff are
// decided by it, so no test waits for either.
func newClock() *clocktest.Clock { return clocktest.New(time.Now()) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
