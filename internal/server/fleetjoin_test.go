package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/fleet/fleetca"
	"github.com/berth-dev/berth/internal/secrets"
)

func freeLoopbackPorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

func nodeFleetHosts(t *testing.T, n *node) apitype.FleetHosts {
	t.Helper()
	var hs apitype.FleetHosts
	n.must(200, "GET", "/fleet/hosts", "", "", &hs)
	return hs
}

// TestFleetInitJoin: berth fleet init makes a data dir whose berth runs
// an embedded etcd member with mutual TLS; berth fleet join against its
// admin API sets a second data dir up, whose berth joins the fleet with
// no fleet flags; both list both hosts, and the second holds the first's
// secret key. A reused, an expired and a wrong token, a forged MAC (as an
// unknown token) and a wrong CA pin are refused, and a client without a
// fleet certificate cannot talk to etcd.
func TestFleetInitJoin(t *testing.T) {
	ports := freeLoopbackPorts(t, 2)
	d1 := t.TempDir()
	ir, err := fleetca.Init(fleetca.InitOptions{DataDir: d1, Advertise: ports[0], PeerAdvertise: ports[1], HostID: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	if !ir.Created || !strings.HasPrefix(ir.Pin, "sha256:") || ir.Endpoints[0] != "https://"+ports[0] {
		t.Fatalf("init: %+v", ir)
	}
	a := startNode(t, Options{DataDir: d1, Fleet: FleetOptions{LeaseTTL: 2 * time.Second}})

	ctx := context.Background()
	join := func(dir, tok, pin, id string) (fleetca.JoinResult, error) {
		return fleetca.Join(ctx, fleetca.JoinOptions{DataDir: dir, Server: a.admin, Token: tok, Pin: pin, HostID: id})
	}
	d2 := t.TempDir()
	jr, err := join(d2, ir.Token, ir.Pin, "beta")
	if err != nil {
		t.Fatal(err)
	}
	if jr.HostID != "beta" || len(jr.Endpoints) != 1 || jr.Endpoints[0] != "https://"+ports[0] || jr.NotAfter.Before(time.Now().Add(300*24*time.Hour)) {
		t.Fatalf("join: %+v", jr)
	}
	// beta holds alpha's secret key, the same bytes in a 0600 secret.key:
	// what one seals the other opens.
	if st, err := os.Stat(filepath.Join(d2, secrets.KeyFileName)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("beta's secret.key: %v %v", st, err)
	}
	alphaKey, betaKey := dataDirSecretKey(t, d1), dataDirSecretKey(t, d2)
	if plain, err := betaKey.Open(alphaKey.Seal([]byte("s3cret"), []byte("ad")), []byte("ad")); alphaKey != betaKey || err != nil || string(plain) != "s3cret" {
		t.Fatalf("beta's secret key is not alpha's: %q %v", plain, err)
	}
	b := startNode(t, Options{DataDir: d2, Fleet: FleetOptions{LeaseTTL: 2 * time.Second}})

	for _, n := range []*node{a, b} {
		hs := nodeFleetHosts(t, n)
		if hostIDsOf(hs) != "alpha:active beta:active" {
			t.Fatalf("hosts through %s: %+v", n.admin, hs)
		}
	}

	// The fleet CA key on alpha is sealed with its secret key, which
	// alpha's berth opened to sign beta's certificate.
	if b, err := os.ReadFile(filepath.Join(d1, "fleet", "ca.key")); err != nil || strings.Contains(string(b), "PRIVATE KEY") {
		t.Fatalf("alpha's ca.key: %v\n%s", err, b)
	}

	// beta renews its certificate through alpha's admin API (POST
	// /fleet/renew, the server kept in fleet.json), with no join token:
	// berth fleet renew, then berth serve's daily check once due.
	certOf := func() *x509.Certificate {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(d2, "fleet", "host.crt"))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := pem.Decode(b)
		if p == nil {
			t.Fatal("host.crt: no PEM")
		}
		c, err := x509.ParseCertificate(p.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	before := certOf()
	rr, err := fleetca.Renew(ctx, fleetca.RenewOptions{DataDir: d2})
	if err != nil {
		t.Fatal(err)
	}
	renewed := certOf()
	if rr.HostID != "beta" || renewed.SerialNumber.Cmp(before.SerialNumber) == 0 || renewed.PublicKey.(*ecdsa.PublicKey).Equal(before.PublicKey) {
		t.Fatalf("renewed: %+v; serial %v (was %v)", rr, renewed.SerialNumber, before.SerialNumber)
	}
	if _, _, err := fleetca.LoadHostCert(filepath.Join(d2, "fleet", "host.crt"), filepath.Join(d2, "fleet", "host.key"), "beta"); err != nil {
		t.Fatalf("the renewed pair: %v", err)
	}
	// A stale proof is refused (403), and nothing written.
	if _, err := fleetca.Renew(ctx, fleetca.RenewOptions{DataDir: d2, Now: func() time.Time { return time.Now().Add(-10 * time.Minute) }}); err == nil || !strings.Contains(err.Error(), "refused the renewal (403)") || !strings.Contains(err.Error(), "old") {
		t.Fatalf("a stale renewal: %v", err)
	}
	if certOf().SerialNumber.Cmp(renewed.SerialNumber) != 0 {
		t.Fatal("a refused renewal replaced host.crt")
	}
	// berth serve on beta: not due now, due with a third of the lifetime left.
	b.s.renewFleetCert(ctx, time.Now())
	if certOf().SerialNumber.Cmp(renewed.SerialNumber) != 0 {
		t.Fatal("berth serve renewed a fresh certificate")
	}
	b.s.renewFleetCert(ctx, time.Now().Add(250*24*time.Hour))
	if c := certOf(); c.SerialNumber.Cmp(renewed.SerialNumber) == 0 || c.Subject.CommonName != "beta" {
		t.Fatal("berth serve did not renew a certificate with less than a third of its lifetime left")
	}
	var re map[string]any
	b.must(409, "POST", "/fleet/renew", "", `{"chain":"x","csr":"y","timestamp":1,"signature":"z"}`, &re)

	// The refusals, each with its reason, and nothing written.
	refused := func(what, tok, pin, want string) {
		t.Helper()
		dir := t.TempDir()
		_, err := join(dir, tok, pin, "gamma")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want an error containing %q", what, err, want)
		}
		if _, err := os.Stat(filepath.Join(dir, "fleet", "fleet.json")); !os.IsNotExist(err) {
			t.Fatalf("%s: fleet.json written: %v", what, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "fleet", "host.crt")); !os.IsNotExist(err) {
			t.Fatalf("%s: host.crt written: %v", what, err)
		}
	}
	refused("a reused token", ir.Token, ir.Pin, "already used")
	refused("a wrong token", "bfj_"+strings.Repeat("0", 64), ir.Pin, "not one this fleet issued")
	expired, _, err := fleetca.AddToken(d1, dataDirSecretKey(t, d1), time.Hour, time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	refused("an expired token", expired, ir.Pin, "expired")
	fresh, _, err := fleetca.AddToken(d1, dataDirSecretKey(t, d1), time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	refused("a wrong CA pin", fresh, "sha256:"+strings.Repeat("ab", 32), "not the pinned")

	// On the wire: a request naming a good token's id with a MAC under
	// another token is answered exactly as an unknown token is (no oracle
	// for which ids exist), and the token is not spent; a malformed one
	// names its fields.
	good, _, err := fleetca.AddToken(d1, alphaKey, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forged, _, err := fleetca.NewJoinRequest("bfj_"+strings.Repeat("1", 64), csrFor(t, "mallory"))
	if err != nil {
		t.Fatal(err)
	}
	unknownB, _ := json.Marshal(forged)
	good2, _, _ := fleetca.NewJoinRequest(good, "")
	forged.TokenID = good2.TokenID
	forgedB, _ := json.Marshal(forged)
	var eForged, eUnknown map[string]any
	a.must(403, "POST", "/fleet/join", "", string(forgedB), &eForged)
	a.must(403, "POST", "/fleet/join", "", string(unknownB), &eUnknown)
	if fs, us := fmt.Sprint(eForged), fmt.Sprint(eUnknown); fs != us || !strings.Contains(fs, "join_refused") || !strings.Contains(fs, "not one this fleet issued") {
		t.Fatalf("a forged MAC answered %s, an unknown token %s", fs, us)
	}
	if _, err := join(t.TempDir(), good, ir.Pin, "gamma"); err != nil {
		t.Fatalf("the token after a forged request: %v", err)
	}
	var eBad map[string]any
	a.must(400, "POST", "/fleet/join", "", `{"token_id":"00"}`, &eBad)
	if s := fmt.Sprint(eBad); !strings.Contains(s, "nonce, csr, mac required") {
		t.Fatalf("a request without nonce, csr and mac: %s", s)
	}
	forged.Nonce = "AAAA"
	badNonce, _ := json.Marshal(forged)
	a.must(400, "POST", "/fleet/join", "", string(badNonce), &eBad)
	if s := fmt.Sprint(eBad); !strings.Contains(s, "nonce: want base64 of 32 bytes") {
		t.Fatalf("a bad nonce: %s", s)
	}

	// etcd's client port: a client with the fleet CA but no certificate
	// of its own is refused at the TLS handshake.
	caPEM, err := os.ReadFile(filepath.Join(d2, "fleet", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ports[0], &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err == nil {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		// TLS 1.3 reports the server's refusal on the first read.
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") && !strings.Contains(err.Error(), "bad certificate") {
		t.Fatalf("TLS to etcd without a client certificate: %v", err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + ports[0]}, DialTimeout: 3 * time.Second, TLS: &tls.Config{RootCAs: roots}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = cli.Get(gctx, "/")
	cancel()
	cli.Close()
	if err == nil {
		t.Fatal("an etcd client without a fleet certificate read the store")
	}
	// And in plaintext nothing answers either.
	hc := &http.Client{Timeout: 5 * time.Second}
	if resp, err := hc.Get("http://" + ports[0] + "/version"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("etcd answered plain HTTP")
		}
	}

	// A berth that did not init holds no CA: its /fleet/join says so.
	var e map[string]any
	b.must(409, "POST", "/fleet/join", "", `{"token_id":"x","nonce":"y","csr":"z","mac":"w"}`, &e)
	if s, _ := json.Marshal(e); !strings.Contains(string(s), "holds no fleet CA") {
		t.Fatalf("join on a host without the CA: %s", s)
	}
}

// TestFleetConfigContradicts: --etcd-dev on a data dir berth fleet init
// set up is refused, and flags given override the file.
func TestFleetConfigContradicts(t *testing.T) {
	d := t.TempDir()
	if _, err := fleetca.Init(fleetca.InitOptions{DataDir: d, Advertise: "127.0.0.1:1", HostID: "alpha"}); err != nil {
		t.Fatal(err)
	}
	if _, err := (FleetOptions{Dev: true}).FromDataDir(d); err == nil || !strings.Contains(err.Error(), "--etcd-dev contradicts") {
		t.Fatalf("--etcd-dev over fleet.json: %v", err)
	}
	f, err := (FleetOptions{Endpoints: []string{"https://10.0.0.9:2379"}}).FromDataDir(d)
	if err != nil {
		t.Fatal(err)
	}
	if f.Endpoints[0] != "https://10.0.0.9:2379" || f.CAFile != filepath.Join(d, "fleet", "ca.crt") || f.member == nil || f.member.TLS == nil {
		t.Fatalf("merged: %+v", f)
	}
	if f, err := (FleetOptions{}).FromDataDir(t.TempDir()); err != nil || f.enabled() {
		t.Fatalf("no fleet.json: %+v %v", f, err)
	}
	// The fleet CA key is sealed with the data dir's secret key: berth
	// with another refuses to start.
	if _, err := tryStart(t, Options{DataDir: d, SecretKey: "another key"}); err == nil || !strings.Contains(err.Error(), "does not open with this data dir's secret key") {
		t.Fatalf("start with another secret key: %v", err)
	}
}

// csrFor is a PEM certificate request for a new key with common name cn.
func csrFor(t *testing.T, cn string) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// dataDirSecretKey is the secret key of data dir d (its secret.key, as
// berth serve and berth fleet init load it), which seals the fleet CA key.
func dataDirSecretKey(t *testing.T, d string) secrets.Key {
	t.Helper()
	k, _, err := secrets.LoadKey("", d)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
