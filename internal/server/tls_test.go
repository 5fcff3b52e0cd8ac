package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// selfSigned is a self-signed ECDSA P-256 certificate for 127.0.0.1 and
// *.test, and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
		DNSNames: []string{"*.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestProxyTLS runs a server with TLS on both front ends and reaches one
// deployment over HTTPS (HTTP/1.1 and HTTP/2) and HTTP/3 on the one port,
// with X-Forwarded-Proto https, HSTS and an Alt-Svc naming that port, while
// the plaintext listener redirects to it (308) but for the ACME challenge
// hook; the proxy counts the TLS listeners as berth's own.
func TestProxyTLS(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Header.Get("X-Forwarded-Proto"), r.URL.Path)
	}))
	t.Cleanup(up.Close)
	cert, pool := selfSigned(t)
	for _, std := range []bool{false, true} {
		name := "front end"
		if std {
			name = "net/http"
		}
		t.Run(name, func(t *testing.T) {
			o := Options{
				ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: t.TempDir(), EgressAddr: "off", StdHTTP: std,
				ProxyTLSAddr: "127.0.0.1:0", TLSConfig: &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }},
				RedirectHTTPS: true, HSTS: "max-age=600",
				ACMEChallenge: func(w http.ResponseWriter, r *http.Request) bool {
					io.WriteString(w, "key-authorization")
					return true
				},
				Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			}
			testOptions(&o)
			s := runWith(t, o)
			h := &harness{t: t, s: s, admin: "http://" + s.AdminAddr()}
			upAddr := strings.TrimPrefix(up.URL, "http://")
			if r := h.json("POST", "/deployments", `{"id":"app","routes":[{"host":"app.test"}],"upstreams":["`+upAddr+`"]}`); r.code != 201 {
				t.Fatalf("creating the deployment: %d %s", r.code, r.body)
			}
			taddr := s.ProxyTLSAddr()
			_, port, _ := net.SplitHostPort(taddr)
			if !s.self.Contains(netip.MustParseAddrPort(taddr)) {
				t.Errorf("the proxy does not know %s as berth's own", taddr)
			}

			for _, h2 := range []bool{false, true} {
				tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
				if !h2 {
					tr.Protocols = new(http.Protocols)
					tr.Protocols.SetHTTP1(true)
				}
				defer tr.CloseIdleConnections()
				checkTLSGet(t, &http.Client{Transport: tr}, "https://"+taddr+"/p", map[bool]int{false: 1, true: 2}[h2],
					map[string]string{"Strict-Transport-Security": "max-age=600", "Alt-Svc": `h3=":` + port + `"; ma=86400`})
			}
			h3 := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
			defer h3.Close()
			checkTLSGet(t, &http.Client{Transport: h3}, "https://"+taddr+"/p", 3, map[string]string{"Strict-Transport-Security": "max-age=600", "Alt-Svc": ""})

			r := get(t, "http://"+s.ProxyAddr()+"/p?q=1", "app.test")
			if want := "https://app.test:" + port + "/p?q=1"; r.code != http.StatusPermanentRedirect || r.header.Get("Location") != want {
				t.Errorf("plaintext: %d to %q, want 308 to %q", r.code, r.header.Get("Location"), want)
			}
			if r.header.Get("Strict-Transport-Security") != "" {
				t.Error("a plaintext response has HSTS")
			}
			r = get(t, "http://"+s.ProxyAddr()+"/.well-known/acme-challenge/tok", "app.test")
			if r.code != 200 || string(r.body) != "key-authorization" {
				t.Errorf("the ACME challenge: %d %q", r.code, r.body)
			}
		})
	}
}

// checkTLSGet GETs url with Host app.test and checks the answer came over
// HTTP/proto from the backend with X-Forwarded-Proto https, with the given
// header values.
func checkTLSGet(t *testing.T, c *http.Client, url string, proto int, hdr map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Host = "app.test"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("HTTP/%d: %v", proto, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != proto || resp.StatusCode != 200 || string(b) != "https /p" {
		t.Errorf("HTTP/%d: %s %d %q, want the backend's \"https /p\"", proto, resp.Proto, resp.StatusCode, b)
	}
	for k, v := range hdr {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("HTTP/%d: %s %q, want %q", proto, k, got, v)
		}
	}
}

// TestProxyTLSBadOptions refuses, with an error and no listener left
// bound, a TLS configuration without a certificate and a TLS address that
// is not host:port.
func TestProxyTLSBadOptions(t *testing.T) {
	cert, _ := selfSigned(t)
	for name, o := range map[string]Options{
		"no certificate": {TLSConfig: &tls.Config{}, ProxyTLSAddr: "127.0.0.1:0"},
		"bad address":    {TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ProxyTLSAddr: "127.0.0.1"},
	} {
		o.ProxyAddr, o.AdminAddr, o.DataDir, o.EgressAddr = "127.0.0.1:0", "127.0.0.1:0", t.TempDir(), "off"
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
		testOptions(&o)
		if s, err := New(context.Background(), o); err == nil {
			t.Errorf("%s: New succeeded (TLS on %s)", name, s.ProxyTLSAddr())
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
