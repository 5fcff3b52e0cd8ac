package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/certs/rfc2136/bindtest"
	"github.com/berth-dev/berth/internal/secrets"
)

// pebbleBin is Debian's pebble (ACME test CA).
const pebbleBin = "/usr/bin/pebble"

// testZone is the zone the tests' named serves: every name in it is
// 127.0.0.1, and TXT records in it can be updated with TSIG.
const testZone = "example.test."

// env is one test's world on loopback: named, pebble, and the plaintext and
// TLS listeners pebble validates against, which serve the test's Manager.
type env struct {
	dns       *bindtest.Server
	directory string         // pebble's ACME directory URL
	mgmt      string         // pebble's management API base URL
	caRoots   *x509.CertPool // trusts pebble's own HTTPS
	issuing   *x509.CertPool // pebble's issuing root (/roots/0)
	httpLn    net.Listener   // pebble's httpPort
	tlsLn     net.Listener   // pebble's tlsPort

	mu sync.Mutex
	m  *Manager // the Manager the listeners serve
}

func needBinary(t testing.TB, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("%s is not installed (Debian package %s; scripts/test installs it when run as root)", path, pkg)
		}
		t.Fatalf("%s is missing: install %s (scripts/test does)", path, pkg)
	}
}

// startEnv starts named and pebble for one test.
func startEnv(t testing.TB) *env {
	t.Helper()
	needBinary(t, pebbleBin, "pebble")
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
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := serverCert(t, "localhost", 24*time.Hour, true)
	e.caRoots = x509.NewCertPool()
	e.caRoots.AppendCertsFromPEM(caPEM)
	writeFile(t, filepath.Join(dir, "cert.pem"), certPEM)
	writeFile(t, filepath.Join(dir, "key.pem"), keyPEM)
	// the ports are free when chosen, but another test may take one before
	// pebble binds it: then pebble exits, and it is started again
	for attempt := 1; ; attempt++ {
		err := e.startPebble(t, dir)
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("pebble did not start (attempt %d): %v", attempt, err)
	}
	e.serve(t)
	return e
}

// startPebble runs pebble until the test ends, once it answers.
func (e *env) startPebble(t testing.TB, dir string) error {
	acmePort, mgmtPort := bindtest.FreePort(t), bindtest.FreePort(t)
	conf, _ := json.Marshal(map[string]any{"pebble": map[string]any{
		"listenAddress":                  "127.0.0.1:" + strconv.Itoa(acmePort),
		"managementListenAddress":        "127.0.0.1:" + strconv.Itoa(mgmtPort),
		"certificate":                    filepath.Join(dir, "cert.pem"),
		"privateKey":                     filepath.Join(dir, "key.pem"),
		"httpPort":                       port(e.httpLn),
		"tlsPort":                        port(e.tlsLn),
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
	}})
	writeFile(t, filepath.Join(dir, "pebble.json"), conf)
	cmd := exec.Command(pebbleBin, "-config", filepath.Join(dir, "pebble.json"), "-dnsserver", e.dns.Addr)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with a killed test binary
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	e.directory = fmt.Sprintf("https://127.0.0.1:%d/dir", acmePort)
	e.mgmt = fmt.Sprintf("https://127.0.0.1:%d", mgmtPort)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.caRoots}}, Timeout: 5 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(e.mgmt + "/roots/0")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				e.issuing = x509.NewCertPool()
				if !e.issuing.AppendCertsFromPEM(b) {
					stop()
					t.Fatalf("pebble's /roots/0 is not PEM: %q", b)
				}
				if resp, err := client.Get(e.directory); err == nil && resp.StatusCode == 200 {
					resp.Body.Close()
					break
				}
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("pebble exited (%v):\n%s", waitErr, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("pebble did not answer within 20 s:\n%s", logs.String())
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("pebble's log:\n%s", logs.String())
		}
	})
	return nil
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
		Directory: e.directory, CARoots: e.caRoots,
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
	c, err := tls.Dial("tcp", e.tlsLn.Addr().String(), &tls.Config{ServerName: name, RootCAs: e.issuing, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatalf("handshake for %s: %v", name, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

// certStatus asks pebble's management API whether serial is revoked.
func (e *env) certStatus(t testing.TB, serial *big.Int) string {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.caRoots}}, Timeout: 5 * time.Second}
	resp, err := client.Get(fmt.Sprintf("%s/cert-status-by-serial/%x", e.mgmt, serial))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct{ Status string }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("cert-status-by-serial: %v", err)
	}
	return st.Status
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

// serverCert makes a CA and a leaf it signs for name (and 127.0.0.1),
// valid for d; with ca false the leaf is self-signed and caPEM is the leaf.
func serverCert(t testing.TB, name string, d time.Duration, ca bool) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	now := time.Now()
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(d),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	parent, parentKey := leaf, leafKey
	if ca {
		caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		parent = &x509.Certificate{
			SerialNumber: big.NewInt(now.UnixNano() + 1), Subject: pkix.Name{CommonName: "berth test CA"},
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(d), IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, parent, parent, &caKey.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		parent, _ = x509.ParseCertificate(der)
		parentKey = caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, parent, &leafKey.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	kb, _ := x509.MarshalECPrivateKey(leafKey)
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	if !ca {
		caPEM = certPEM
	}
	return caPEM, certPEM, keyPEM
}

// fakeClock is berth's clock in tests: renewal and backoff are decided by
// it, so no test waits for either.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
