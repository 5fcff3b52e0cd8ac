// Package pebbletest runs Debian's pebble (the ACME test CA) on loopback
// ports for tests: it validates HTTP-01 and TLS-ALPN-01 on the ports a test
// names, looks names up with the resolver it names (a bindtest server's),
// and answers on HTTPS signed by a CA made for the run, which Pebble
// gives as a pool and as a PEM file. pebble runs in the test's temporary
// directory with its own configuration, until the test ends.
package pebbletest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/certs/rfc2136/bindtest"
)

// Bin is where Debian's pebble package puts pebble.
const Bin = "/usr/bin/pebble"

// Options says where pebble validates.
type Options struct {
	// HTTPPort and TLSPort are the ports pebble validates HTTP-01 and
	// TLS-ALPN-01 challenges on, at the address DNS gives for the name.
	HTTPPort, TLSPort int
	// DNS is the resolver pebble looks names up with (host:port), e.g. a
	// bindtest server's Addr.
	DNS string
}

// Pebble is a running pebble.
type Pebble struct {
	Directory  string         // the ACME directory URL
	Mgmt       string         // the management API's base URL
	CARoots    *x509.CertPool // trusts pebble's own HTTPS (Directory, Mgmt)
	CARootFile string         // that root as a PEM file (berth's --acme-ca-root)
	Issuing    *x509.CertPool // pebble's issuing root (/roots/0): what issued certificates chain to
	IssuingPEM []byte         // the same root, PEM
}

// Binary returns pebble's path, skipping t when it is not installed and the
// test cannot install it (not root); as root, scripts/test installs pebble,
// so a missing pebble fails.
func Binary(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(Bin); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("%s is not installed (Debian package pebble; scripts/test installs it when run as root)", Bin)
		}
		t.Fatalf("%s is missing: install pebble (scripts/test does)", Bin)
	}
	return Bin
}

// Start runs pebble until the test ends, once it answers. Every challenge
// is validated at once (no sleep), every authorization asked for anew (no
// reuse), and no nonce is rejected, so issuance takes well under a second.
func Start(t testing.TB, o Options) *Pebble {
	t.Helper()
	bin := Binary(t)
	if o.HTTPPort == 0 || o.TLSPort == 0 || o.DNS == "" {
		t.Fatalf("pebbletest.Start: HTTPPort, TLSPort and DNS are needed, got %+v", o)
	}
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := Cert(t, "localhost", 24*time.Hour, true)
	p := &Pebble{CARoots: x509.NewCertPool(), CARootFile: filepath.Join(dir, "ca.pem")}
	p.CARoots.AppendCertsFromPEM(caPEM)
	writeFile(t, p.CARootFile, caPEM)
	writeFile(t, filepath.Join(dir, "cert.pem"), certPEM)
	writeFile(t, filepath.Join(dir, "key.pem"), keyPEM)
	// the ports are free when chosen, but another test may take one before
	// pebble binds it: then pebble exits, and it is started again
	for attempt := 1; ; attempt++ {
		err := p.start(t, bin, dir, o)
		if err == nil {
			return p
		}
		if attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("pebble did not start (attempt %d): %v", attempt, err)
	}
}

func (p *Pebble) start(t testing.TB, bin, dir string, o Options) error {
	acmePort, mgmtPort := bindtest.FreePort(t), bindtest.FreePort(t)
	conf, _ := json.Marshal(map[string]any{"pebble": map[string]any{
		"listenAddress":                  "127.0.0.1:" + strconv.Itoa(acmePort),
		"managementListenAddress":        "127.0.0.1:" + strconv.Itoa(mgmtPort),
		"certificate":                    filepath.Join(dir, "cert.pem"),
		"privateKey":                     filepath.Join(dir, "key.pem"),
		"httpPort":                       o.HTTPPort,
		"tlsPort":                        o.TLSPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
	}})
	writeFile(t, filepath.Join(dir, "pebble.json"), conf)
	cmd := exec.Command(bin, "-config", filepath.Join(dir, "pebble.json"), "-dnsserver", o.DNS)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	d := bindtest.StartDaemon(t, cmd)
	exited, logs, stop := d.Exited, d.Logs, d.Stop
	p.Directory = fmt.Sprintf("https://127.0.0.1:%d/dir", acmePort)
	p.Mgmt = fmt.Sprintf("https://127.0.0.1:%d", mgmtPort)
	client := p.client()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := client.Get(p.Mgmt + "/roots/0"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				p.Issuing = x509.NewCertPool()
				if !p.Issuing.AppendCertsFromPEM(b) {
					stop()
					t.Fatalf("pebble's /roots/0 is not PEM: %q", b)
				}
				p.IssuingPEM = b
				if resp, err := client.Get(p.Directory); err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						break
					}
				}
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("pebble exited (%v):\n%s", d.Err, logs.String())
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

// client trusts pebble's own HTTPS.
func (p *Pebble) client() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.CARoots}}, Timeout: 5 * time.Second}
}

// CertStatus asks pebble's management API for the status of the
// certificate with serial ("Valid", "Revoked").
func (p *Pebble) CertStatus(t testing.TB, serial *big.Int) string {
	t.Helper()
	resp, err := p.client().Get(fmt.Sprintf("%s/cert-status-by-serial/%x", p.Mgmt, serial))
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

// Cert makes a CA and a leaf it signs for name (and 127.0.0.1), valid for
// d; with ca false the leaf is self-signed and caPEM is the leaf. pebble's
// HTTPS is such a pair; tests use it for certificates of their own.
func Cert(t testing.TB, name string, d time.Duration, ca bool) (caPEM, certPEM, keyPEM []byte) {
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

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
