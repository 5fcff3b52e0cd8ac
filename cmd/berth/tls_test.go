package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/certs/pebbletest"
)

// TestServeStaticTLS: berth serve --tls-cert --tls-key answers HTTPS on
// --proxy-tls-addr with that pair, for a deployment registered through the
// admin API, over HTTP/1.1 and HTTP/2.
func TestServeStaticTLS(t *testing.T) {
	dir := t.TempDir()
	_, certPEM, keyPEM := pebbletest.Cert(t, "app.test", time.Hour, false)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if os.WriteFile(certFile, certPEM, 0o600) != nil || os.WriteFile(keyFile, keyPEM, 0o600) != nil {
		t.Fatal("writing the pair")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "up %s %s", r.Host, r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(up.Close)

	w, _ := startServe(t, filepath.Join(dir, "data"), "--no-host-setup",
		"--proxy-tls-addr", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	logged := func(key string) string {
		m := regexp.MustCompile(`\b` + key + `=(\S+)`).FindStringSubmatch(w.String())
		if m == nil {
			t.Fatalf("the listening line has no %s:\n%s", key, w)
		}
		return m[1]
	}
	admin, tlsAddr := logged("admin"), logged("proxy_tls")

	spec := `{"id":"app","routes":[{"host":"app.test"}],"upstreams":["` + strings.TrimPrefix(up.URL, "http://") + `"]}`
	resp, err := http.Post("http://"+admin+"/deployments", "application/json", strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /deployments: %d %s", resp.StatusCode, b)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, tlsAddr)
			},
			Protocols: new(http.Protocols),
		}
		tr.Protocols.SetHTTP1(!h2)
		tr.Protocols.SetHTTP2(h2)
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := c.Get("https://app.test/")
		if err != nil {
			t.Fatalf("https (h2 %v): %v", h2, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		want := map[bool]int{false: 1, true: 2}[h2]
		if resp.StatusCode != 200 || resp.ProtoMajor != want || string(b) != "up app.test https" {
			t.Errorf("https over HTTP/%d: %s %d %q, want 200 %q", want, resp.Proto, resp.StatusCode, b, "up app.test https")
		}
		if leaf := resp.TLS.PeerCertificates[0]; !leaf.Equal(parseCert(t, certPEM)) {
			t.Errorf("https over HTTP/%d: served %v, not the --tls-cert pair", want, leaf.Subject)
		}
	}
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("the certificate is not PEM")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServeTLSHalfPair: one half of the static pair, or of the admin API's,
// is a usage error (exit 2) that names the missing flag, before berth opens
// its store or binds anything.
func TestServeTLSHalfPair(t *testing.T) {
	dir := t.TempDir()
	_, certPEM, keyPEM := pebbletest.Cert(t, "app.test", time.Hour, false)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if os.WriteFile(certFile, certPEM, 0o600) != nil || os.WriteFile(keyFile, keyPEM, 0o600) != nil {
		t.Fatal("writing the pair")
	}
	for _, c := range []struct{ given, file, missing string }{
		{"--tls-cert", certFile, "--tls-key"}, {"--tls-key", keyFile, "--tls-cert"},
		{"--admin-tls-cert", certFile, "--admin-tls-key"}, {"--admin-tls-key", keyFile, "--admin-tls-cert"},
	} {
		var stderr strings.Builder
		code := serve(t.Context(), []string{"--proxy-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--egress-addr", "off",
			"--data-dir", filepath.Join(dir, "data"), "--no-host-setup", "--proxy-tls-addr", "127.0.0.1:0", c.given, c.file}, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), c.missing) {
			t.Errorf("berth serve %s alone = %d, %q; want 2 naming %s", c.given, code, stderr.String(), c.missing)
		}
		if strings.Contains(stderr.String(), "secret store open") {
			t.Errorf("berth serve %s alone opened the store first:\n%s", c.given, stderr.String())
		}
	}
}
