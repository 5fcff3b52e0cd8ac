package fleetca

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func hostSerial(t *testing.T, d string) string {
	t.Helper()
	crt, err := readCert(filepath.Join(Dir(d), HostCert))
	if err != nil {
		t.Fatal(err)
	}
	return crt.SerialNumber.String()
}

func readCRLFile(t *testing.T, a string, ca *x509.Certificate) *x509.RevocationList {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(a), CRLFile))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "X509 CRL" {
		t.Fatalf("%s: no PEM X509 CRL", CRLFile)
	}
	der, err := os.ReadFile(filepath.Join(Dir(a), CRLDERFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(der, blk.Bytes) {
		t.Errorf("%s and %s differ", CRLFile, CRLDERFile)
	}
	l, err := x509.ParseRevocationList(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CheckSignatureFrom(ca); err != nil {
		t.Errorf("the CRL is not signed by the fleet CA: %v", err)
	}
	return l
}

func crlSerials(l *x509.RevocationList) []string {
	var out []string
	for _, e := range l.RevokedCertificateEntries {
		out = append(out, e.SerialNumber.String())
	}
	slices.Sort(out)
	return out
}

// TestRevoke: revoking a host lists exactly its certificates (the joined
// one and its renewal) in a CRL signed by the CA, not another host's nor
// the first host's; the record is 0600; again, nothing changes but the
// CRL's number; the revoked host's renewal is refused; a new join with the
// same id gets a new, unrevoked serial.
func TestRevoke(t *testing.T) {
	a := startAuthority(t, "alpha")
	key := testSecretKey(t, a.dir)
	beta := a.join(t, "beta")
	gamma := a.join(t, "gamma")
	first := hostSerial(t, beta)
	if _, err := Renew(context.Background(), RenewOptions{DataDir: beta, Server: a.url}); err != nil {
		t.Fatal(err)
	}
	renewed := hostSerial(t, beta)
	ca, err := readCert(filepath.Join(Dir(a.dir), CACert))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(Dir(a.dir), IssuedFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", IssuedFile, fi.Mode().Perm())
	}
	issued, err := Issued(a.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(issued) != 4 { // alpha, beta, gamma, beta renewed
		t.Errorf("issued: %d certificates, want 4: %+v", len(issued), issued)
	}

	r, err := Revoke(a.dir, key, "beta", "key stolen", a.clock())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{first, renewed}
	slices.Sort(want)
	if r.Newly != 2 {
		t.Errorf("newly revoked: %d, want 2", r.Newly)
	}
	l := readCRLFile(t, a.dir, ca)
	if got := crlSerials(l); !slices.Equal(got, want) {
		t.Errorf("CRL serials %v, want beta's %v (not gamma's %s nor alpha's %s)", got, want, hostSerial(t, gamma), hostSerial(t, a.dir))
	}
	n1 := l.Number

	// Idempotent.
	r, err = Revoke(a.dir, key, "beta", "", a.clock())
	if err != nil {
		t.Fatal(err)
	}
	if r.Newly != 0 {
		t.Errorf("revoking again: newly %d, want 0", r.Newly)
	}
	l = readCRLFile(t, a.dir, ca)
	if got := crlSerials(l); !slices.Equal(got, want) {
		t.Errorf("CRL serials again %v, want %v", got, want)
	}
	if l.Number.Cmp(n1) <= 0 {
		t.Errorf("CRL number %s after %s: want it to grow", l.Number, n1)
	}
	for _, c := range mustIssued(t, a.dir) {
		if c.Host == "beta" && (c.RevokedAt == nil || c.Reason != "key stolen") {
			t.Errorf("beta's %s: revoked %v reason %q, want revoked for the first reason", c.Serial, c.RevokedAt, c.Reason)
		}
		if c.Host != "beta" && c.RevokedAt != nil {
			t.Errorf("host %s's %s revoked", c.Host, c.Serial)
		}
	}

	// The revoked host cannot renew.
	_, err = Renew(context.Background(), RenewOptions{DataDir: beta, Server: a.url})
	if err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("renewal of a revoked host: %v, want refused as revoked", err)
	}
	// gamma still renews.
	if _, err := Renew(context.Background(), RenewOptions{DataDir: gamma, Server: a.url}); err != nil {
		t.Errorf("gamma's renewal: %v", err)
	}
	// A new join with the same id, with a new token: a new serial, not revoked.
	ir, err := Init(InitOptions{DataDir: a.dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(context.Background(), JoinOptions{DataDir: beta, Server: a.url, Token: ir.Token, Pin: ir.Pin, HostID: "beta", Force: true}); err != nil {
		t.Fatal(err)
	}
	again := hostSerial(t, beta)
	if slices.Contains(want, again) {
		t.Fatalf("the new join reused serial %s", again)
	}
	crt, _ := readCert(filepath.Join(Dir(beta), HostCert))
	if rv, err := IsRevoked(a.dir, crt.SerialNumber); err != nil || rv {
		t.Errorf("the re-joined certificate revoked: %v %v", rv, err)
	}
	if _, err := Renew(context.Background(), RenewOptions{DataDir: beta, Server: a.url}); err != nil {
		t.Errorf("the re-joined host's renewal: %v", err)
	}
}

func mustIssued(t *testing.T, d string) []IssuedCert {
	t.Helper()
	is, err := Issued(d)
	if err != nil {
		t.Fatal(err)
	}
	return is
}

// TestRevokeRefused: an unknown host id is an error naming it, a bad id
// names the rule, the CA host's own id is refused, a joined host (no CA)
// is refused; none rewrites the CRL (berth fleet init's, none revoked).
func TestRevokeRefused(t *testing.T) {
	a := startAuthority(t, "alpha")
	key := testSecretKey(t, a.dir)
	beta := a.join(t, "beta")
	before, err := ReadCRL(a.dir)
	if err != nil || before == nil {
		t.Fatalf("berth fleet init wrote no CRL: %v", err)
	}
	_, err = Revoke(a.dir, key, "nosuch", "", time.Now())
	if !errors.Is(err, ErrUnknownHost) || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("unknown host: %v, want ErrUnknownHost naming it", err)
	}
	if _, err := Revoke(a.dir, key, "-bad", "", time.Now()); err == nil || !strings.Contains(err.Error(), "-bad") {
		t.Errorf("bad id: %v", err)
	}
	if _, err := Revoke(a.dir, key, "alpha", "", time.Now()); !errors.Is(err, ErrRevokeSelf) {
		t.Errorf("own id: %v, want ErrRevokeSelf", err)
	}
	if _, err := Revoke(beta, key, "gamma", "", time.Now()); err == nil || !strings.Contains(err.Error(), "no fleet CA") {
		t.Errorf("on a joined host: %v", err)
	}
	if after, _ := ReadCRL(a.dir); !bytes.Equal(before, after) {
		t.Error("a refused revocation rewrote the CRL")
	}
}

// TestRevocations: the set takes a CRL of the fleet CA (DER or PEM) and
// answers for its serials; one signed by another CA, or older than the
// one in use, is refused and the set kept.
func TestRevocations(t *testing.T) {
	a := startAuthority(t, "alpha")
	key := testSecretKey(t, a.dir)
	beta := a.join(t, "beta")
	gamma := a.join(t, "gamma")
	ca, _ := readCert(filepath.Join(Dir(a.dir), CACert))
	bc, _ := readCert(filepath.Join(Dir(beta), HostCert))
	gc, _ := readCert(filepath.Join(Dir(gamma), HostCert))
	if _, err := EnsureCRL(a.dir, key, time.Now()); err != nil {
		t.Fatal(err)
	}
	empty, _ := ReadCRL(a.dir)
	r1, err := Revoke(a.dir, key, "beta", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var rv Revocations
	if rv.Revoked(bc) {
		t.Error("the zero set revokes")
	}
	pemCRL, _ := os.ReadFile(filepath.Join(Dir(a.dir), CRLFile))
	if err := rv.Set(pemCRL, ca); err != nil {
		t.Fatal(err)
	}
	if !rv.Revoked(bc) || rv.Revoked(gc) {
		t.Errorf("revoked beta %v gamma %v, want beta only", rv.Revoked(bc), rv.Revoked(gc))
	}
	if err := rv.Set(empty, ca); err == nil || !rv.Revoked(bc) {
		t.Errorf("an older CRL: %v, want refused and beta still revoked", err)
	}
	other := startAuthority(t, "omega")
	oca, _ := readCert(filepath.Join(Dir(other.dir), CACert))
	if err := rv.Set(r1.CRL, oca); err == nil {
		t.Error("a CRL checked against another CA was accepted")
	}
	if err := rv.Set([]byte("junk"), ca); err == nil {
		t.Error("junk accepted")
	}
}

// TestRevokeMain: berth fleet revoke takes HOST-ID with flags on either
// side, and without one says it is required; an unknown host exits 1
// naming it.
func TestRevokeMain(t *testing.T) {
	a := startAuthority(t, "alpha")
	beta := a.join(t, "beta")
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"revoke", "--data-dir", a.dir, "beta", "--reason", "gone"}, &out, &errb); code != 0 {
		t.Fatalf("revoke: %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "Revoked host beta: 1 certificate(s)") || !strings.Contains(out.String(), hostSerial(t, beta)) {
		t.Errorf("revoke printed %q", out.String())
	}
	if c := mustIssued(t, a.dir); c[1].Reason != "gone" {
		t.Errorf("reason %q, want gone", c[1].Reason)
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"revoke", "--data-dir", a.dir}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "HOST-ID is required") {
		t.Errorf("no host id: %d %q", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"revoke", "--data-dir", a.dir, "nosuch"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), `"nosuch"`) {
		t.Errorf("unknown host: %d %q", code, errb.String())
	}
}
