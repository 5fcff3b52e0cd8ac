package etcdembed_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/fleet/etcdembed"
)

type testCA struct {
	crt *x509.Certificate
	key *ecdsa.PrivateKey
	n   int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	crt, _ := x509.ParseCertificate(der)
	return &testCA{crt: crt, key: k, n: 1}
}

// issue makes a server and client certificate for cn (and 127.0.0.1).
func (ca *testCA) issue(t *testing.T, cn string) (tls.Certificate, *x509.Certificate) {
	t.Helper()
	ca.n++
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.n * 1000), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{cn, "localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.crt, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	crt, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k, Leaf: crt}, crt
}

// writeCRL writes, atomically, the CRL revoking revoked to path (DER).
func (ca *testCA) writeCRL(t *testing.T, path string, number int64, revoked ...*x509.Certificate) {
	t.Helper()
	l := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: time.Now().Add(-time.Minute), NextUpdate: time.Now().Add(time.Hour)}
	for _, c := range revoked {
		l.RevokedCertificateEntries = append(l.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: c.SerialNumber, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, l, ca.crt, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", der, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// reach reports whether a new client with cert gets an answer from the
// member at ep.
func reach(t *testing.T, ep string, ca *testCA, cert tls.Certificate) error {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.crt)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second,
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, "k", "v")
	return err
}

// TestMemberCRL: a member started with a CRL (none revoked) serves two
// clients of its CA; once the CRL is rewritten revoking one, a new
// connection with that certificate is refused while the other still
// gets its answers (etcd reads the CRL at each handshake).
func TestMemberCRL(t *testing.T) {
	d := t.TempDir()
	ca := newTestCA(t)
	srv, _ := ca.issue(t, "member")
	good, _ := ca.issue(t, "good")
	bad, badCrt := ca.issue(t, "bad")
	write := func(name string, typ string, der []byte) string {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kder, _ := x509.MarshalECPrivateKey(srv.PrivateKey.(*ecdsa.PrivateKey))
	crl := filepath.Join(d, "crl.der")
	ca.writeCRL(t, crl, 1)
	files := &etcdembed.TLSFiles{
		CertFile: write("member.crt", "CERTIFICATE", srv.Certificate[0]),
		KeyFile:  write("member.key", "EC PRIVATE KEY", kder),
		CAFile:   write("ca.crt", "CERTIFICATE", ca.crt.Raw),
		CRLFile:  crl,
	}
	cu, pu := "https://127.0.0.1:"+freePort(t), "https://127.0.0.1:"+freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(d, "etcd"), ClientURL: cu, PeerURL: pu, TLS: files, NoFsync: true, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for name, c := range map[string]tls.Certificate{"good": good, "bad": bad} {
		if err := reach(t, cu, ca, c); err != nil {
			t.Fatalf("%s before the revocation: %v", name, err)
		}
	}
	ca.writeCRL(t, crl, 2, badCrt)
	if err := reach(t, cu, ca, bad); err == nil {
		t.Error("a client with a revoked certificate reached the member")
	}
	if err := reach(t, cu, ca, good); err != nil {
		t.Errorf("the unrevoked client after the revocation: %v", err)
	}
}

// TestMemberCRLMissing: a CRLFile that does not exist at Start is not
// passed to etcd (which would fail every handshake): clients connect.
func TestMemberCRLMissing(t *testing.T) {
	d := t.TempDir()
	ca := newTestCA(t)
	srv, _ := ca.issue(t, "member")
	good, _ := ca.issue(t, "good")
	kder, _ := x509.MarshalECPrivateKey(srv.PrivateKey.(*ecdsa.PrivateKey))
	wr := func(name, typ string, der []byte) string {
		p := filepath.Join(d, name)
		os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
		return p
	}
	files := &etcdembed.TLSFiles{CertFile: wr("m.crt", "CERTIFICATE", srv.Certificate[0]), KeyFile: wr("m.key", "EC PRIVATE KEY", kder),
		CAFile: wr("ca.crt", "CERTIFICATE", ca.crt.Raw), CRLFile: filepath.Join(d, "none.der")}
	cu, pu := "https://127.0.0.1:"+freePort(t), "https://127.0.0.1:"+freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(d, "etcd"), ClientURL: cu, PeerURL: pu, TLS: files, NoFsync: true, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := reach(t, cu, ca, good); err != nil {
		t.Errorf("with no CRL file: %v", err)
	}
}
