package fleetca

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHostCertsServeTheHop: the first host's certificate and a joined
// host's are both server and client certificates of the fleet CA with the
// host id as a subject alternative name, and verify as that name only; a
// client-only certificate, as berth issued before the hop, is refused with
// the advice to re-join or renew.
func TestHostCertsServeTheHop(t *testing.T) {
	d := t.TempDir()
	r, err := Init(InitOptions{DataDir: d, Advertise: "127.0.0.1:23790", HostID: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := readCert(filepath.Join(Dir(d), CACert))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	alpha, err := readCert(filepath.Join(Dir(d), HostCert))
	if err != nil {
		t.Fatal(err)
	}

	key, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	csrDER, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "beta"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := signToken(t, d, testSecretKey(t, d), r.Token, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER})), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	beta, err := parseCertPEM([]byte(resp.Certificate))
	if err != nil {
		t.Fatal(err)
	}

	for id, crt := range map[string]*x509.Certificate{"alpha": alpha, "beta": beta} {
		for _, u := range HostUsages {
			if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, DNSName: id, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
				t.Errorf("%s's certificate for usage %v as %s: %v", id, u, id, err)
			}
		}
		if err := CheckHostCert(crt, id); err != nil {
			t.Errorf("CheckHostCert(%s): %v", id, err)
		}
		other := map[string]string{"alpha": "beta", "beta": "alpha"}[id]
		if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, DNSName: other, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Errorf("%s's certificate verifies as %s", id, other)
		}
		if err := CheckHostCert(crt, other); err == nil {
			t.Errorf("CheckHostCert(%s's certificate, %s) passed", id, other)
		}
	}
	if len(beta.DNSNames) != 1 || beta.DNSNames[0] != "beta" || len(beta.IPAddresses) != 0 {
		t.Errorf("beta's SANs: %v %v, want the host id only", beta.DNSNames, beta.IPAddresses)
	}

	// A certificate as Sign issued before the hop: client auth, no SAN.
	caKey, _, err := LoadCAKey(d, testSecretKey(t, d))
	if err != nil {
		t.Fatal(err)
	}
	der, err := issue(ca, caKey, &key.PublicKey, "gamma", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	old, _ := x509.ParseCertificate(der)
	if err := CheckHostCert(old, "gamma"); !errors.Is(err, ErrOldHostCert) || !strings.Contains(err.Error(), "client auth only") || !strings.Contains(err.Error(), "re-join") {
		t.Fatalf("an old client-only certificate: %v", err)
	}
	// Server and client auth but no SAN (the first host's, before the hop).
	der, err = issue(ca, caKey, &key.PublicKey, "gamma", HostUsages, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	old, _ = x509.ParseCertificate(der)
	if err := CheckHostCert(old, "gamma"); !errors.Is(err, ErrOldHostCert) || !strings.Contains(err.Error(), "subject alternative name gamma") {
		t.Fatalf("an old certificate without the host id's SAN: %v", err)
	}
	// LoadHostCert reads the pair and takes the id from the common name.
	if _, id, err := LoadHostCert(filepath.Join(Dir(d), HostCert), filepath.Join(Dir(d), HostKey), ""); err != nil || id != "alpha" {
		t.Fatalf("LoadHostCert: %q %v", id, err)
	}
	if _, _, err := LoadHostCert(filepath.Join(Dir(d), HostCert), filepath.Join(Dir(d), HostKey), "beta"); err == nil {
		t.Fatal("LoadHostCert as another host passed")
	}
	if _, err := LoadCAPool(filepath.Join(Dir(d), CACert)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCAPool(filepath.Join(d, "nope.crt")); err == nil || !strings.Contains(err.Error(), "fleet CA") {
		t.Fatalf("LoadCAPool of a missing file: %v", err)
	}
}

// TestInitRenewsOldHostCert: berth fleet init again on a first host whose
// certificate is older than the hop (no SAN for the host id) renews it for
// the same key and names, with the id added; once renewed, it is kept.
func TestInitRenewsOldHostCert(t *testing.T) {
	d := t.TempDir()
	if _, err := Init(InitOptions{DataDir: d, Advertise: "10.1.2.3:2379", HostID: "alpha"}); err != nil {
		t.Fatal(err)
	}
	fd := Dir(d)
	ca, _ := readCert(filepath.Join(fd, CACert))
	caKey, _, _ := LoadCAKey(d, testSecretKey(t, d))
	key, err := readKey(filepath.Join(fd, HostKey))
	if err != nil {
		t.Fatal(err)
	}
	// As init issued it before the hop.
	der, err := issue(ca, caKey, &key.PublicKey, "alpha", HostUsages, []string{"10.1.2.3", "127.0.0.1", "localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(fd, HostCert), certPEM(der), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadHostCert(filepath.Join(fd, HostCert), filepath.Join(fd, HostKey), "alpha"); !errors.Is(err, ErrOldHostCert) {
		t.Fatalf("the old certificate: %v", err)
	}
	r, err := Init(InitOptions{DataDir: d})
	if err != nil || !r.Renewed {
		t.Fatalf("init again: %+v %v", r, err)
	}
	crt, _ := readCert(filepath.Join(fd, HostCert))
	if err := CheckHostCert(crt, "alpha"); err != nil {
		t.Fatalf("the renewed certificate: %v", err)
	}
	if err := crt.VerifyHostname("10.1.2.3"); err != nil {
		t.Fatalf("the renewed certificate lost the advertised address: %v", err)
	}
	if _, _, err := LoadHostCert(filepath.Join(fd, HostCert), filepath.Join(fd, HostKey), "alpha"); err != nil {
		t.Fatalf("the renewed certificate with the host's key: %v", err)
	}
	if r, err := Init(InitOptions{DataDir: d}); err != nil || r.Renewed {
		t.Fatalf("init a third time: %+v %v", r, err)
	}
}
