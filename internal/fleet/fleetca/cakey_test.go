package fleetca

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/secrets"
)

func csrPEM(t *testing.T, cn string) string {
	t.Helper()
	k, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// TestCAKeySealed: berth fleet init writes ca.key sealed with the data
// dir's secret key (the secret.key berth serve uses, made here): the file
// holds no PEM private key, and Sign still signs with it; another secret
// key is refused with a clear error, and nothing is signed.
func TestCAKeySealed(t *testing.T) {
	d := t.TempDir()
	var out, errb bytes.Buffer
	t.Setenv("BERTH_SECRET_KEY", "")
	if code := Main(context.Background(), []string{"init", "--data-dir", d, "--advertise", "127.0.0.1:23790", "--host-id", "alpha"}, &out, &errb); code != 0 {
		t.Fatalf("init: %d %s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(d, secrets.KeyFileName)); err != nil {
		t.Fatalf("init made no secret key as berth serve would: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(Dir(d), CAKey))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("PRIVATE KEY")) {
		t.Fatalf("ca.key holds a PEM private key:\n%s", b)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != sealedKeyType {
		t.Fatalf("ca.key: %q", b)
	}
	if _, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		t.Fatal("ca.key's block parses as a plaintext key")
	}
	key := testSecretKey(t, d)
	r, err := Init(InitOptions{DataDir: d})
	if err != nil || r.MigratedCAKey {
		t.Fatalf("init again: %+v %v", r, err)
	}
	resp, err := signToken(t, d, key, r.Token, csrPEM(t, "beta"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := readCert(filepath.Join(Dir(d), CACert))
	crt, err := parseCertPEM([]byte(resp.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	if err := crt.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("the signed certificate: %v", err)
	}

	// Another secret key: refused, the token not spent.
	tok, _, err := AddToken(d, key, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, _ := secrets.ParseKey("another key")
	if _, err := signToken(t, d, other, tok, csrPEM(t, "gamma"), time.Now()); !errors.Is(err, ErrCAKeyWrongKey) || !strings.Contains(err.Error(), "does not open with this data dir's secret key") {
		t.Fatalf("Sign with another key: %v", err)
	}
	if _, err := Init(InitOptions{DataDir: d, SecretKey: "another key"}); !errors.Is(err, ErrCAKeyWrongKey) {
		t.Fatalf("init with another key: %v", err)
	}
	if _, err := signToken(t, d, key, tok, csrPEM(t, "gamma"), time.Now()); err != nil {
		t.Fatalf("the token after a refused sign: %v", err)
	}
}

// TestCAKeyPlaintextMigrated: a plaintext ca.key, as berth wrote before
// sealing it, is still read; berth fleet init seals it and says so, and
// the sealed key is the same CA key.
func TestCAKeyPlaintextMigrated(t *testing.T) {
	d := t.TempDir()
	if _, err := Init(InitOptions{DataDir: d, Advertise: "127.0.0.1:23790", HostID: "alpha", SecretKey: "k1"}); err != nil {
		t.Fatal(err)
	}
	key, _ := secrets.ParseKey("k1")
	caKey, _, err := LoadCAKey(d, key)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := keyPEM(caKey)
	path := filepath.Join(Dir(d), CAKey)
	if err := writeFile(path, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BERTH_SECRET_KEY", "k1")
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"init", "--data-dir", d}, &out, &errb); code != 0 {
		t.Fatalf("init: %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "was plaintext") || !strings.Contains(out.String(), "now sealed") {
		t.Fatalf("init said:\n%s", out.String())
	}
	b, _ := os.ReadFile(path)
	if bytes.Contains(b, []byte("PRIVATE KEY")) {
		t.Fatalf("ca.key still plaintext:\n%s", b)
	}
	again, migrated, err := LoadCAKey(d, key)
	if err != nil || migrated || !again.Equal(caKey) {
		t.Fatalf("the sealed key: migrated %v, %v, same %v", migrated, err, again != nil && again.Equal(caKey))
	}
	// Sign reads a plaintext key too, and seals it.
	if err := writeFile(path, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	tok, _, _ := AddToken(d, key, time.Hour, time.Now())
	if _, err := signToken(t, d, key, tok, csrPEM(t, "beta"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); bytes.Contains(b, []byte("PRIVATE KEY")) {
		t.Fatal("Sign left the plaintext key")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("ca.key mode %v", st.Mode().Perm())
	}
}
