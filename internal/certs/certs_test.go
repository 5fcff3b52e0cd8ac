package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/berth-dev/berth/internal/certs/pebbletest"
	"github.com/berth-dev/berth/internal/secrets"
)

// staticFiles writes a self-signed pair for name and returns its paths.
func staticFiles(t *testing.T, name string) (certFile, keyFile string, cert []byte) {
	_, certPEM, keyPEM := pebbletest.Cert(t, name, 24*time.Hour, false)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	return certFile, keyFile, certPEM
}

func TestOptionErrors(t *testing.T) {
	certFile, keyFile, _ := staticFiles(t, "static.example.test")
	_, otherKey, _ := staticFiles(t, "other.example.test")
	dir := t.TempDir()
	dnsp, err := ParseDNS("rfc2136://k:c2VjcmV0@127.0.0.1:53")
	if err != nil {
		t.Fatal(err)
	}
	acme := func(o Options) Options {
		o.Key = testKey
		if o.Email == "" {
			o.Email = "ops@example.test"
		}
		if o.Dir == "" {
			o.Dir = dir
		}
		return o
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Dir: dir, StaticCert: certFile}, "--tls-key: required with --tls-cert"},
		{Options{Dir: dir, StaticKey: keyFile}, "--tls-cert: required with --tls-key"},
		{Options{Dir: dir, StaticCert: filepath.Join(dir, "nope.pem"), StaticKey: keyFile}, "--tls-cert: open"},
		{Options{Dir: dir, StaticCert: certFile, StaticKey: otherKey}, "--tls-cert, --tls-key: tls: private key does not match"},
		{Options{StaticCert: certFile, StaticKey: keyFile}, "--acme-dir: required"},
		{Options{Dir: dir, Wildcards: []string{"example.test"}}, "--acme-wildcard: wildcards need ACME"},
		{acme(Options{Email: "ops"}), "--acme-email"},
		{Options{Dir: dir, Email: "not an email", Key: testKey}, "--acme-email: \"not an email\""},
		{acme(Options{Directory: "http://ca.example.test/dir"}), "--acme-directory: \"http://ca.example.test/dir\" is not an https:// URL"},
		{acme(Options{Directory: "https://%zz"}), "--acme-directory:"},
		{acme(Options{Wildcards: []string{"test"}}), "--acme-wildcard: \"test\""},
		{acme(Options{Wildcards: []string{"bad_label.example.test"}, DNS: dnsp}), "--acme-wildcard: \"bad_label.example.test\""},
		{acme(Options{Wildcards: []string{"*.example.test"}}), "--acme-dns: required with --acme-wildcard"},
		{Options{Email: "ops@example.test", Key: testKey}, "--acme-dir: required"},
		{Options{Dir: dir, Email: "ops@example.test"}, "secret key is zero"},
	} {
		m, err := New(c.o)
		if m != nil {
			m.stopCache()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", c.o, err, c.want)
		}
	}
	// "*.example.test" is read as its base
	m, err := New(acme(Options{Wildcards: []string{"*.Example.Test.", "example.test"}, DNS: dnsp}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.stopCache()
	if !slices.Equal(m.wildcards, []string{"example.test"}) {
		t.Errorf("wildcards = %q", m.wildcards)
	}
}

func TestParseDNS(t *testing.T) {
	if _, err := ParseDNS("rfc2136://k:c2VjcmV0@127.0.0.1:53?zone=example.test."); err != nil {
		t.Fatal(err)
	}
	for spec, want := range map[string]string{
		"route53://key:secret@x": `--acme-dns: unknown DNS provider "route53"`,
		"k:c2VjcmV0@127.0.0.1":   "--acme-dns: \"…@127.0.0.1\" is not a provider URL",
		"rfc2136://k:!!@1.2.3.4": "--acme-dns: rfc2136: the secret of TSIG key \"k\" is not base64",
	} {
		_, err := ParseDNS(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDNS(%q) = %v, want %q", spec, err, want)
		}
	}
}

func TestDisabled(t *testing.T) {
	m, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Enabled() || len(m.Certs()) != 0 || m.Pending() != nil {
		t.Fatalf("a Manager with no options: enabled %v, certs %v, pending %v", m.Enabled(), m.Certs(), m.Pending())
	}
	rec := httptest.NewRecorder()
	if m.ServeHTTPChallenge(rec, httptest.NewRequest("GET", "/.well-known/acme-challenge/abc", nil)) {
		t.Error("answered a challenge with ACME off")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Run(ctx); err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestBackoffDelay(t *testing.T) {
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute,
		32 * time.Minute, 64 * time.Minute, 128 * time.Minute, 256 * time.Minute, 6 * time.Hour, 6 * time.Hour}
	for i, w := range want {
		if got := backoffDelay(i + 1); got != w {
			t.Errorf("backoffDelay(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := backoffDelay(1000); got != BackoffMax {
		t.Errorf("backoffDelay(1000) = %v", got)
	}
}

// TestNotOrderable: IP addresses and single labels are routed but never
// ordered; Pending says why.
func TestNotOrderable(t *testing.T) {
	m, err := New(Options{Dir: t.TempDir(), Key: testKey, Email: "ops@example.test", Directory: "https://127.0.0.1:1/dir"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.stopCache()
	m.SetHosts([]string{"10.0.0.1", "localhost", "Ok.Example.Test."})
	if o := m.orders(); len(o) != 1 || o[0].label != "ok.example.test" {
		t.Fatalf("orders = %+v", o)
	}
	p := m.Pending()
	if len(p) != 3 || p[0].Host != "10.0.0.1" || p[0].LastError != errNotOrderable || p[1].Host != "localhost" || p[2].LastError != "" {
		t.Fatalf("Pending() = %+v", p)
	}
	if m.decide(context.Background(), "localhost") == nil {
		t.Error("on demand admits localhost")
	}
}

// TestFailureMetrics: renewal failures are counted (a counter that a
// success does not reset) beside the consecutive failures of any order
// (a gauge that a success removes).
func TestFailureMetrics(t *testing.T) {
	m, err := New(Options{Dir: t.TempDir(), Key: testKey, Email: "ops@example.test", Directory: "https://127.0.0.1:1/dir"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.stopCache()
	m.recordFailure("r.example.test", true, errors.New("the CA said no"))
	m.recordFailure("r.example.test", true, errors.New("the CA said no"))
	m.recordFailure("i.example.test", false, errors.New("the CA said no"))
	if v := metricValue(t, m, "berth_cert_renewal_failures_total", "r.example.test"); v != 2 {
		t.Errorf("renewal failures of r = %v", v)
	}
	if v := metricValue(t, m, "berth_cert_renewal_failures_total", "i.example.test"); v != -1 {
		t.Errorf("an issuance failure was counted as a renewal failure: %v", v)
	}
	if v := metricValue(t, m, "berth_cert_consecutive_failures", "i.example.test"); v != 1 {
		t.Errorf("consecutive failures of i = %v", v)
	}
	m.recordSuccess("r.example.test")
	if v := metricValue(t, m, "berth_cert_consecutive_failures", "r.example.test"); v != -1 {
		t.Errorf("consecutive failures of r after a success = %v", v)
	}
	if v := metricValue(t, m, "berth_cert_renewal_failures_total", "r.example.test"); v != 2 {
		t.Errorf("renewal failures of r after a success = %v", v)
	}
}

// TestWildcardPending: a host a wildcard covers reports the wildcard's
// state, backoff included.
func TestWildcardPending(t *testing.T) {
	dnsp, _ := ParseDNS("rfc2136://k:c2VjcmV0@127.0.0.1:1")
	clock := newClock()
	m, err := New(Options{Dir: t.TempDir(), Key: testKey, Email: "ops@example.test", Directory: "https://127.0.0.1:1/dir",
		Wildcards: []string{"w.example.test"}, DNS: dnsp, now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer m.stopCache()
	m.SetHosts([]string{"x.w.example.test"})
	m.recordFailure("w.example.test", false, errors.New("SERVFAIL"))
	p := m.Pending()
	want := HostState{Host: "x.w.example.test", State: "wildcard-pending", RetryAt: clock.Now().Add(time.Minute).UTC(), LastError: "SERVFAIL", Failures: 1}
	if len(p) != 1 || p[0] != want {
		t.Fatalf("Pending() = %+v, want %+v", p, want)
	}
	if m.decide(context.Background(), "x.w.example.test") == nil {
		t.Error("on demand admits a host a wildcard covers")
	}
}

func TestCovering(t *testing.T) {
	m := &Manager{wildcards: []string{"example.test", "b.other.test"}}
	for host, want := range map[string]string{
		"example.test": "example.test", "a.example.test": "example.test", "x.b.other.test": "b.other.test",
		"a.b.example.test": "", "example.test.evil": "", "xexample.test": "", "other.test": "",
	} {
		got, ok := m.covering(host)
		if got != want || ok != (want != "") {
			t.Errorf("covering(%q) = %q, %v; want %q", host, got, ok, want)
		}
	}
}

// TestStaticFallback: with ACME off, the static pair is served for every
// name (and none), listed by Certs, and the listener is enabled.
func TestStaticFallback(t *testing.T) {
	certFile, keyFile, certPEM := staticFiles(t, "static.example.test")
	m, err := New(Options{Dir: filepath.Join(t.TempDir(), "acme"), StaticCert: certFile, StaticKey: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer m.stopCache()
	if !m.Enabled() {
		t.Fatal("a static pair does not enable the HTTPS listener")
	}
	addr := serveTLS(t, m)
	for _, sni := range []string{"static.example.test", "anything.else.test", ""} {
		leaf, err := handshakeAt(addr, sni)
		if err != nil {
			t.Fatalf("SNI %q: %v", sni, err)
		}
		if !bytes.Contains(certPEM, pemBody(leaf)) {
			t.Errorf("SNI %q was not served the static certificate", sni)
		}
	}
	c := m.Certs()
	if len(c) != 2 || c[0].Host != "127.0.0.1" || c[1].Host != "static.example.test" || c[1].Issuer != "static.example.test" {
		t.Errorf("Certs() = %+v", c)
	}
	if m.Pending() != nil {
		t.Errorf("Pending() = %+v with ACME off", m.Pending())
	}
	conf := m.TLSConfig()
	if conf.MinVersion != tls.VersionTLS12 || !slices.Equal(conf.NextProtos, []string{"h2", "http/1.1", "acme-tls/1"}) || conf.SessionTicketKey != [32]byte{} {
		t.Errorf("TLSConfig: min %x, protos %q", conf.MinVersion, conf.NextProtos)
	}
	for _, s := range conf.CipherSuites {
		if slices.ContainsFunc(tls.InsecureCipherSuites(), func(c *tls.CipherSuite) bool { return c.ID == s }) ||
			!strings.Contains(tls.CipherSuiteName(s), "GCM") && !strings.Contains(tls.CipherSuiteName(s), "CHACHA20") {
			t.Errorf("TLSConfig offers %s", tls.CipherSuiteName(s))
		}
	}
}

// TestNoSNIOracle: a certificate of a host no longer routed is not served,
// even though it is still cached and stored: a handshake for it fails
// exactly as one for a name never routed does (the same server error, the
// same alert), or, with a static pair, gets the same static certificate.
func TestNoSNIOracle(t *testing.T) {
	for _, withStatic := range []bool{false, true} {
		o := Options{Dir: filepath.Join(t.TempDir(), "acme"), Key: testKey, Email: "ops@example.test",
			Directory: "https://127.0.0.1:1/dir", Log: testLog(t)}
		if withStatic {
			o.StaticCert, o.StaticKey, _ = staticFiles(t, "static.example.test")
		}
		m, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		defer m.stopCache()
		injectCert(t, m, "once.example.test")
		addr := serveTLS(t, m)

		m.SetHosts([]string{"once.example.test"})
		leaf, err := handshakeAt(addr, "once.example.test")
		if err != nil || leaf.DNSNames[0] != "once.example.test" {
			t.Fatalf("the routed host: %v, %v", leaf, err)
		}
		m.SetHosts(nil) // no longer routed; its certificate is still cached and stored
		if _, ok := m.cached(hostOrder("once.example.test")); !ok {
			t.Fatal("the test needs the certificate still cached")
		}
		once, onceErr := handshakeAt(addr, "once.example.test")
		never, neverErr := handshakeAt(addr, "never.example.test")
		if withStatic {
			if onceErr != nil || neverErr != nil || !once.Equal(never) || once.DNSNames[0] != "static.example.test" {
				t.Errorf("with a static pair: once %v %v, never %v %v", once, onceErr, never, neverErr)
			}
		} else if onceErr == nil || neverErr == nil || onceErr.Error() != neverErr.Error() {
			t.Errorf("client errors differ: once %v, never %v", onceErr, neverErr)
		}
		// a hello without a connection (QUIC's may have none) for a routed
		// host with no certificate and one offering only acme-tls/1
		m.SetHosts([]string{"routed.example.test"})
		m.getCertificate(&tls.ClientHelloInfo{ServerName: "routed.example.test"})
		m.getCertificate(&tls.ClientHelloInfo{ServerName: "routed.example.test", SupportedProtos: []string{"acme-tls/1"}})
		m.SetHosts(nil)
		_, s1 := m.getCertificate(&tls.ClientHelloInfo{ServerName: "once.example.test"})
		_, s2 := m.getCertificate(&tls.ClientHelloInfo{ServerName: "never.example.test"})
		if s1 != s2 {
			t.Errorf("server errors differ: %v, %v", s1, s2)
		}
		if err := m.decide(context.Background(), "once.example.test"); err == nil {
			t.Error("on demand admits a host no longer routed")
		}
	}
}

// injectCert puts a self-signed certificate for host into m's storage in
// certmagic's layout and into the cache, as an issued one would be.
func injectCert(t *testing.T, m *Manager, host string) {
	_, certPEM, keyPEM := pebbletest.Cert(t, host, 24*time.Hour, false)
	ctx := context.Background()
	for k, v := range map[string][]byte{
		certmagic.StorageKeys.SitePrivateKey(m.issuerKey, host): keyPEM,
		certmagic.StorageKeys.SiteCert(m.issuerKey, host):       certPEM,
		certmagic.StorageKeys.SiteMeta(m.issuerKey, host):       []byte(`{"sans":["` + host + `"]}`),
	} {
		if err := m.storage.Store(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.cfg.CacheManagedCertificate(ctx, host); err != nil {
		t.Fatal(err)
	}
}

func serveTLS(t *testing.T, m *Manager) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := tls.Server(c, m.TLSConfig())
				if tc.Handshake() == nil {
					tc.Write([]byte("x"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func handshakeAt(addr, sni string) (*x509.Certificate, error) {
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

func pemBody(c *x509.Certificate) []byte {
	var b bytes.Buffer
	pemEncode(&b, c.Raw)
	return bytes.TrimSpace(b.Bytes())
}

// TestSealedStorage: values whose key ends in ".key" are sealed on disk
// and open only under their own name with the same key; other values pass
// through unchanged.
func TestSealedStorage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := &sealedStorage{Storage: &certmagic.FileStorage{Path: dir}, key: testKey}
	secret := []byte("-----BEGIN EC PRIVATE KEY-----\nabc\n-----END EC PRIVATE KEY-----\n")
	if err := s.Store(ctx, "certificates/ca/host/host.key", secret); err != nil {
		t.Fatal(err)
	}
	if err := s.Store(ctx, "certificates/ca/host/host.crt", []byte("public")); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "certificates/ca/host/host.key"))
	if bytes.Contains(raw, []byte("PRIVATE KEY")) || raw[0] != 1 {
		t.Fatalf("stored key is not sealed: %q", raw)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, "certificates/ca/host/host.crt")); string(raw) != "public" {
		t.Errorf("a certificate was changed on its way to disk: %q", raw)
	}
	if got, err := s.Load(ctx, "certificates/ca/host/host.key"); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Load = %q, %v", got, err)
	}
	other := &sealedStorage{Storage: s.Storage, key: secrets.Key{9}}
	if _, err := other.Load(ctx, "certificates/ca/host/host.key"); err == nil || !strings.Contains(err.Error(), "does not open with the secret key") {
		t.Errorf("another key opened it: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "certificates/ca/host/moved.key"), raw, 0o600)
	if _, err := s.Load(ctx, "certificates/ca/host/moved.key"); err == nil {
		t.Error("a sealed key opened under another name")
	}
}

// TestUnknownChallenge: a challenge request for a token berth does not know
// is not answered, so the proxy routes it.
func TestUnknownChallenge(t *testing.T) {
	m, err := New(Options{Dir: t.TempDir(), Key: testKey, Email: "ops@example.test", Directory: "https://127.0.0.1:1/dir"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.stopCache()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "http://a.example.test/.well-known/acme-challenge/c29tZXRva2Vu", nil)
	if m.ServeHTTPChallenge(rec, req) || rec.Body.Len() != 0 || rec.Code != http.StatusOK {
		t.Errorf("answered an unknown token: %d %q", rec.Code, rec.Body)
	}
}
