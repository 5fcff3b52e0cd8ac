package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/client"
)

// pairFiles writes a self-signed pair (selfSigned) as PEM files.
func pairFiles(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	cert, pool := selfSigned(t)
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pool
}

// TestStaticPairAndAdminTLS: a static pair (Options.Certs) serves the data
// plane's HTTPS through the certificate manager, which GET /certs lists;
// the admin API with its own pair speaks TLS only, and the client package
// reaches it with the pair's root (WithTLSConfig) and not without.
func TestStaticPairAndAdminTLS(t *testing.T) {
	certFile, keyFile, pool := pairFiles(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(up.Close)
	o := Options{
		ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: t.TempDir(), EgressAddr: "off",
		ProxyTLSAddr: "127.0.0.1:0",
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	o.Certs.StaticCert, o.Certs.StaticKey = certFile, keyFile
	o.AdminTLSCert, o.AdminTLSKey = certFile, keyFile
	testOptions(&o)
	s := runWith(t, o)
	ctx := t.Context()
	c, err := client.New("https://"+s.AdminAddr(), client.WithTLSConfig(&tls.Config{RootCAs: pool}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx, "POST", "/deployments", json.RawMessage(`{"id":"app","routes":[{"host":"app.test"}],"upstreams":["`+strings.TrimPrefix(up.URL, "http://")+`"]}`), nil); err != nil {
		t.Fatalf("creating a deployment over the admin API's TLS: %v", err)
	}
	certs, err := c.Certs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, cs := range certs {
		hosts = append(hosts, cs.Host)
		if cs.NeedsRenewal || cs.NotAfter == "" {
			t.Errorf("GET /certs: %+v", cs)
		}
	}
	if strings.Join(hosts, ",") != "*.test,127.0.0.1" {
		t.Errorf("GET /certs hosts %v, want the static pair's names", hosts)
	}
	if p, err := c.PendingCerts(ctx); err != nil || len(p) != 0 {
		t.Errorf("GET /certs/pending = %v, %v; want none without ACME", p, err)
	}
	plain, _ := client.New("http://" + s.AdminAddr())
	if _, err := plain.Certs(ctx); err == nil {
		t.Error("the TLS admin API answered plain HTTP")
	}
	unverified, _ := client.New("https://" + s.AdminAddr())
	if _, err := unverified.Certs(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client without the pair's root: %v, want a certificate error", err)
	}

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "app.test"}}}
	t.Cleanup(hc.CloseIdleConnections)
	req, _ := http.NewRequest("GET", "https://"+s.ProxyTLSAddr()+"/", nil)
	req.Host = "app.test"
	r, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || string(b) != "https" {
		t.Errorf("GET https://app.test/: %d %q", r.StatusCode, b)
	}
}

// TestCertOptionsRefused: a pair's half alone, two ways of giving the
// admin API a certificate, and ACME for the admin host without ACME stop
// New with an error that names the flag.
func TestCertOptionsRefused(t *testing.T) {
	certFile, keyFile, _ := pairFiles(t)
	for _, c := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"certificate without key", func(o *Options) { o.Certs.StaticCert = certFile }, "--tls-key"},
		{"admin key without certificate", func(o *Options) { o.AdminTLSKey = keyFile }, "--admin-tls-cert"},
		{"admin pair and ACME host", func(o *Options) {
			o.AdminTLSCert, o.AdminTLSKey, o.AdminACMEHost = certFile, keyFile, "admin.test"
		}, "--admin-acme-host"},
		{"ACME host without ACME", func(o *Options) { o.AdminACMEHost = "admin.test" }, "--acme-email"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{
				ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: t.TempDir(), EgressAddr: "off",
				ProxyTLSAddr: "127.0.0.1:0", Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			}
			c.edit(&o)
			testOptions(&o)
			s, err := New(context.Background(), o)
			if err == nil {
				t.Fatalf("New succeeded (admin on %s)", s.AdminAddr())
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v; want it to name %s", err, c.want)
			}
		})
	}
}

// TestAdminACMEHostReserved: with --admin-acme-host, no deployment may route
// that name (the data plane would serve the admin API's certificate for
// it): 409 naming why, whoever writes it.
func TestAdminACMEHostReserved(t *testing.T) {
	o := Options{
		ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: t.TempDir(), EgressAddr: "off",
		ProxyTLSAddr: "127.0.0.1:0", AdminACMEHost: "Admin.Test.",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	// Nothing answers this directory: orders fail and back off, which is
	// not what this test looks at; the static pair serves the admin
	// listener meanwhile.
	o.Certs.Email, o.Certs.Directory = "ops@example.test", "https://127.0.0.1:1/dir"
	certFile, keyFile, pool := pairFiles(t)
	o.Certs.StaticCert, o.Certs.StaticKey = certFile, keyFile
	testOptions(&o)
	s := runWith(t, o)
	c, err := client.New("https://"+s.AdminAddr(), client.WithTLSConfig(&tls.Config{RootCAs: pool, ServerName: "admin.test"}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(t.Context(), "POST", "/deployments", json.RawMessage(`{"id":"app","routes":[{"host":"admin.test"}],"upstreams":["127.0.0.1:9"]}`), nil)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || !strings.Contains(ce.Message, "admin API") || !strings.Contains(ce.Message, "routes[0]") {
		t.Errorf("routing the admin host: %v; want 409 naming routes[0] and the admin API", err)
	}
	if _, err := c.Do(t.Context(), "POST", "/deployments", json.RawMessage(`{"id":"app","routes":[{"host":"app.test"}],"upstreams":["127.0.0.1:9"]}`), nil); err != nil {
		t.Errorf("routing another host: %v", err)
	}
}
