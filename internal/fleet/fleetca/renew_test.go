package fleetca

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
)

// authority is a first host's /fleet/join and /fleet/renew over real
// HTTP on loopback, answering as the admin API does, with a clock the
// test moves.
type authority struct {
	dir string
	url string
	mu  sync.Mutex
	now time.Time
}

func (a *authority) clock() time.Time { a.mu.Lock(); defer a.mu.Unlock(); return a.now }
func (a *authority) set(t time.Time)  { a.mu.Lock(); a.now = t; a.mu.Unlock() }

func startAuthority(t *testing.T, id string) *authority {
	t.Helper()
	a := &authority{dir: t.TempDir(), now: time.Now()}
	if _, err := Init(InitOptions{DataDir: a.dir, Advertise: "127.0.0.1:23790", HostID: id}); err != nil {
		t.Fatal(err)
	}
	key := testSecretKey(t, a.dir)
	answer := func(w http.ResponseWriter, resp any, err error) {
		switch {
		case errors.Is(err, ErrRenewRefused), errors.Is(err, ErrTokenInvalid), errors.Is(err, ErrTokenUsed), errors.Is(err, ErrTokenExpired):
			w.WriteHeader(http.StatusForbidden)
		case err != nil:
			w.WriteHeader(http.StatusBadRequest)
		}
		if err != nil {
			json.NewEncoder(w).Encode(map[string]string{"message": err.Error()})
			return
		}
		json.NewEncoder(w).Encode(resp)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fleet/join", func(w http.ResponseWriter, r *http.Request) {
		var req apitype.FleetJoinRequest
		json.NewDecoder(r.Body).Decode(&req)
		resp, err := Sign(a.dir, key, req, a.clock())
		answer(w, resp, err)
	})
	mux.HandleFunc("POST /fleet/renew", func(w http.ResponseWriter, r *http.Request) {
		var req apitype.FleetRenewRequest
		json.NewDecoder(r.Body).Decode(&req)
		resp, err := SignRenewal(a.dir, key, req, a.clock())
		answer(w, resp, err)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

func (a *authority) join(t *testing.T, id string) string {
	t.Helper()
	ir, err := Init(InitOptions{DataDir: a.dir})
	if err != nil {
		t.Fatal(err)
	}
	d := t.TempDir()
	if _, err := Join(context.Background(), JoinOptions{DataDir: d, Server: a.url, Token: ir.Token, Pin: ir.Pin, HostID: id}); err != nil {
		t.Fatal(err)
	}
	return d
}

// renewRequest is a renewal as Renew makes it, from the pieces a test
// varies.
func renewRequest(t testing.TB, chain *x509.Certificate, signer *ecdsa.PrivateKey, cn string, ts int64) apitype.FleetRenewRequest {
	t.Helper()
	k, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, k)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(renewMessage(csr, ts))
	sig, err := ecdsa.SignASN1(rand.Reader, signer, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return apitype.FleetRenewRequest{
		Chain: string(certPEM(chain.Raw)), CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})),
		Timestamp: ts, Signature: base64.StdEncoding.EncodeToString(sig),
	}
}

// TestRenew: a joined host renews its still valid certificate through the
// first host with no join token (berth fleet renew, the server the one it
// joined through): a new key, made on the host, and a new validity; the
// first host's CA and the host id are kept. Due only with less than a
// third of the lifetime left.
func TestRenew(t *testing.T) {
	a := startAuthority(t, "alpha")
	d := a.join(t, "beta")
	fd := Dir(d)
	old, _ := readCert(filepath.Join(fd, HostCert))
	oldKey, _ := readKey(filepath.Join(fd, HostKey))

	now := time.Now()
	if due, _, err := RenewDue(d, now); err != nil || due {
		t.Fatalf("due on a fresh certificate: %v %v", due, err)
	}
	later := now.Add(250 * 24 * time.Hour)
	if due, na, err := RenewDue(d, later); err != nil || !due || !na.Equal(old.NotAfter) {
		t.Fatalf("due with a third left: %v %v %v", due, na, err)
	}
	if due, _, err := RenewDue(a.dir, later); err != nil || due {
		t.Fatalf("the first host is never due through renew: %v %v", due, err)
	}

	// Both clocks 250 days on: the certificate is still valid then.
	a.set(later)
	r, err := Renew(context.Background(), RenewOptions{DataDir: d, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	crt, _ := readCert(filepath.Join(fd, HostCert))
	key, _ := readKey(filepath.Join(fd, HostKey))
	if r.HostID != "beta" || crt.Subject.CommonName != "beta" || !r.NotAfter.Equal(crt.NotAfter) {
		t.Fatalf("renewed: %+v, cert %s %v", r, crt.Subject.CommonName, crt.NotAfter)
	}
	if key.Equal(oldKey) || !crt.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
		t.Fatal("the renewed certificate is not for a fresh key kept in host.key")
	}
	if !crt.NotBefore.After(old.NotBefore.Add(200*24*time.Hour)) || !crt.NotAfter.After(old.NotAfter.Add(200*24*time.Hour)) {
		t.Fatalf("validity %v..%v, the old %v..%v", crt.NotBefore, crt.NotAfter, old.NotBefore, old.NotAfter)
	}
	if _, _, err := LoadHostCert(filepath.Join(fd, HostCert), filepath.Join(fd, HostKey), "beta"); err != nil {
		t.Fatalf("the renewed pair: %v", err)
	}
	ca, _ := readCert(filepath.Join(Dir(a.dir), CACert))
	if err := crt.CheckSignatureFrom(ca); err != nil {
		t.Fatal(err)
	}

	// Back at the wall clock, the renewed certificate is not valid yet
	// (from 250 days on): the first host refuses it.
	a.set(time.Now())
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"renew", "--data-dir", d}, &out, &errb); code != 1 {
		t.Fatalf("renew with a certificate valid only from %v: %d %s", crt.NotBefore, code, out.String())
	}
	if !strings.Contains(errb.String(), "refused the renewal (403)") {
		t.Fatalf("renew: %s", errb.String())
	}
	// An expired certificate does not even ask.
	if _, err := Renew(context.Background(), RenewOptions{DataDir: d, Now: func() time.Time { return crt.NotAfter.Add(time.Hour) }}); err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), "re-join") {
		t.Fatalf("renewing an expired certificate: %v", err)
	}
	// The first host renews with berth fleet init, not renew.
	if _, err := Renew(context.Background(), RenewOptions{DataDir: a.dir}); err == nil || !strings.Contains(err.Error(), "berth fleet init") {
		t.Fatalf("renew on the first host: %v", err)
	}
}

// TestRenewMain: berth fleet renew on a joined host prints the new expiry.
func TestRenewMain(t *testing.T) {
	a := startAuthority(t, "alpha")
	d := a.join(t, "beta")
	old, _ := readCert(filepath.Join(Dir(d), HostCert))
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"renew", "--data-dir", d}, &out, &errb); code != 0 {
		t.Fatalf("renew: %d %s", code, errb.String())
	}
	crt, _ := readCert(filepath.Join(Dir(d), HostCert))
	if !strings.Contains(out.String(), "Renewed the certificate of host beta") || !strings.Contains(out.String(), crt.NotAfter.UTC().Format(time.RFC3339)) || crt.SerialNumber.Cmp(old.SerialNumber) == 0 {
		t.Fatalf("renew printed %s", out.String())
	}
}

// TestRenewRefused: the first host signs a renewal only for a still
// valid certificate of its CA, whose key signed this request with a fresh
// timestamp, for the certificate's own host id.
func TestRenewRefused(t *testing.T) {
	a := startAuthority(t, "alpha")
	d := a.join(t, "beta")
	crt, _ := readCert(filepath.Join(Dir(d), HostCert))
	key, _ := readKey(filepath.Join(Dir(d), HostKey))
	sk := testSecretKey(t, a.dir)
	now := time.Now()

	// Another fleet's certificate for beta.
	b := startAuthority(t, "other")
	bd := b.join(t, "beta")
	foreign, _ := readCert(filepath.Join(Dir(bd), HostCert))
	foreignKey, _ := readKey(filepath.Join(Dir(bd), HostKey))
	stranger, _ := newKey()

	for _, c := range []struct {
		name string
		req  apitype.FleetRenewRequest
		at   time.Time
		want string
	}{
		{"expired", renewRequest(t, crt, key, "beta", crt.NotAfter.Add(time.Hour).Unix()), crt.NotAfter.Add(time.Hour), "not a valid one of this fleet's CA"},
		{"another CA", renewRequest(t, foreign, foreignKey, "beta", now.Unix()), now, "not a valid one of this fleet's CA"},
		{"CN mismatch", renewRequest(t, crt, key, "gamma", now.Unix()), now, `is for "gamma"`},
		{"bad signature", renewRequest(t, crt, stranger, "beta", now.Unix()), now, "signature"},
		{"stale", renewRequest(t, crt, key, "beta", now.Add(-6*time.Minute).Unix()), now, "old"},
		{"future", renewRequest(t, crt, key, "beta", now.Add(10*time.Minute).Unix()), now, "in the future"},
	} {
		_, err := SignRenewal(a.dir, sk, c.req, c.at)
		if !errors.Is(err, ErrRenewRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}
	// A signature over another timestamp than the one sent.
	req := renewRequest(t, crt, key, "beta", now.Unix())
	req.Timestamp--
	if _, err := SignRenewal(a.dir, sk, req, now); !errors.Is(err, ErrRenewRefused) || !strings.Contains(err.Error(), "signature") {
		t.Errorf("a replayed signature with another timestamp: %v", err)
	}
	// Malformed: a bad request, not a refusal.
	for name, req := range map[string]apitype.FleetRenewRequest{
		"no chain":   {CSR: req.CSR, Timestamp: req.Timestamp, Signature: req.Signature},
		"bad csr":    {Chain: req.Chain, CSR: "x", Timestamp: req.Timestamp, Signature: req.Signature},
		"bad base64": {Chain: req.Chain, CSR: req.CSR, Timestamp: req.Timestamp, Signature: "!!"},
	} {
		if _, err := SignRenewal(a.dir, sk, req, now); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		}
	}
	// And the good one passes.
	if _, err := SignRenewal(a.dir, sk, renewRequest(t, crt, key, "beta", now.Unix()), now); err != nil {
		t.Fatalf("the good renewal: %v", err)
	}
}

// TestInitRenewsExpiring: berth fleet init on the first host renews its
// own certificate, for a new key and the same names, once less than a
// third of its lifetime is left, and not before.
func TestInitRenewsExpiring(t *testing.T) {
	d := t.TempDir()
	if _, err := Init(InitOptions{DataDir: d, Advertise: "10.1.2.3:2379", HostID: "alpha"}); err != nil {
		t.Fatal(err)
	}
	fd := Dir(d)
	old, _ := readCert(filepath.Join(fd, HostCert))
	oldKey, _ := readKey(filepath.Join(fd, HostKey))
	if r, err := Init(InitOptions{DataDir: d, Now: func() time.Time { return time.Now().Add(200 * 24 * time.Hour) }}); err != nil || r.Renewed {
		t.Fatalf("init with more than a third left: %+v %v", r, err)
	}
	later := time.Now().Add(250 * 24 * time.Hour)
	r, err := Init(InitOptions{DataDir: d, Now: func() time.Time { return later }})
	if err != nil || !r.Renewed {
		t.Fatalf("init with less than a third left: %+v %v", r, err)
	}
	crt, _ := readCert(filepath.Join(fd, HostCert))
	key, _ := readKey(filepath.Join(fd, HostKey))
	if key.Equal(oldKey) || !crt.NotAfter.After(old.NotAfter.Add(200*24*time.Hour)) {
		t.Fatalf("renewed: %v..%v (old until %v), fresh key %v", crt.NotBefore, crt.NotAfter, old.NotAfter, !key.Equal(oldKey))
	}
	if err := crt.VerifyHostname("10.1.2.3"); err != nil || CheckHostCert(crt, "alpha") != nil {
		t.Fatalf("the renewed certificate's names: %v %v", err, CheckHostCert(crt, "alpha"))
	}
	if _, _, err := LoadHostCert(filepath.Join(fd, HostCert), filepath.Join(fd, HostKey), "alpha"); err != nil {
		t.Fatal(err)
	}
}

// TestRenewResumes: a renewal stopped after the new key was written and
// before the new certificate (the old key kept aside as host.key.prev)
// runs again: the old certificate and old key still prove the host.
func TestRenewResumes(t *testing.T) {
	a := startAuthority(t, "alpha")
	d := a.join(t, "beta")
	keyFile := filepath.Join(Dir(d), HostKey)
	oldB, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := newKey()
	kb, _ := keyPEM(k)
	if err := writeFile(keyFile+prevSuffix, oldB, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(keyFile, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Renew(context.Background(), RenewOptions{DataDir: d}); err != nil {
		t.Fatalf("renew after a stopped renewal: %v", err)
	}
	if _, _, err := LoadHostCert(filepath.Join(Dir(d), HostCert), keyFile, "beta"); err != nil {
		t.Fatalf("the pair after: %v", err)
	}
	if _, err := os.Stat(keyFile + prevSuffix); !os.IsNotExist(err) {
		t.Fatalf("host.key.prev left: %v", err)
	}
	// Without the old key aside, a mismatched pair is refused with advice.
	if err := writeFile(keyFile, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Renew(context.Background(), RenewOptions{DataDir: d}); err == nil || !strings.Contains(err.Error(), "re-join") {
		t.Fatalf("renew with a mismatched pair: %v", err)
	}
}

// TestRenewOldJoinedHost: a host that joined before the hop (a
// client-only certificate, no subject alternative name) and before
// fleet.json kept the server renews with --server into a certificate the
// hop accepts, and the server is kept for the next renewal.
func TestRenewOldJoinedHost(t *testing.T) {
	a := startAuthority(t, "alpha")
	d := a.join(t, "beta")
	fd := Dir(d)
	key, _ := readKey(filepath.Join(fd, HostKey))
	ca, _ := readCert(filepath.Join(Dir(a.dir), CACert))
	caKey, _, err := LoadCAKey(a.dir, testSecretKey(t, a.dir))
	if err != nil {
		t.Fatal(err)
	}
	der, err := issue(ca, caKey, &key.PublicKey, "beta", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(fd, HostCert), certPEM(der), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _, _ := LoadConfig(d)
	c.Server = ""
	if err := saveConfig(d, c); err != nil {
		t.Fatal(err)
	}
	if _, err := Renew(context.Background(), RenewOptions{DataDir: d}); err == nil || !strings.Contains(err.Error(), "--server URL") {
		t.Fatalf("renew with no server known: %v", err)
	}
	if _, err := Renew(context.Background(), RenewOptions{DataDir: d, Server: a.url}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadHostCert(filepath.Join(fd, HostCert), filepath.Join(fd, HostKey), "beta"); err != nil {
		t.Fatalf("the renewed certificate on the hop: %v", err)
	}
	if c, _, _ := LoadConfig(d); c.Server != a.url {
		t.Fatalf("fleet.json's server: %q, want %q", c.Server, a.url)
	}
}
