package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/fleet/fleetca"
)

// etcdReach reports whether a new etcd client with the host certificate
// of data dir d gets an answer from the fleet's member at ep.
func etcdReach(t *testing.T, ep, d string) error {
	t.Helper()
	fd := fleetca.Dir(d)
	pair, err := tls.LoadX509KeyPair(filepath.Join(fd, fleetca.HostCert), filepath.Join(fd, fleetca.HostKey))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := fleetca.LoadCAPool(filepath.Join(fd, fleetca.CACert))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "/")
	return err
}

func hostCertOf(t *testing.T, d string) *x509.Certificate {
	t.Helper()
	crt, err := fleetca.LoadCACert(filepath.Join(fleetca.Dir(d), fleetca.HostCert))
	if err != nil {
		t.Fatal(err)
	}
	return crt
}

// TestFleetRevoke: POST /fleet/hosts/beta/revoke on the CA host revokes
// beta's certificate: a new etcd connection with it is refused by the
// embedded member while gamma's still answers, the CA host's hop set
// holds it at once and beta's berth (still connected) learns it from
// etcd, beta's renewal is refused; berth fleet revoke on the data dir
// (gamma) is applied and published by the running berth within its poll;
// an unknown host is a 404; beta joins again with a new token and a new,
// unrevoked certificate.
func TestFleetRevoke(t *testing.T) {
	ports := freeLoopbackPorts(t, 2)
	d1 := t.TempDir()
	ir, err := fleetca.Init(fleetca.InitOptions{DataDir: d1, Advertise: ports[0], PeerAdvertise: ports[1], HostID: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	a := startNode(t, Options{DataDir: d1, Fleet: FleetOptions{LeaseTTL: 2 * time.Second}})
	ctx := context.Background()
	join := func(dir, id string, force bool) {
		t.Helper()
		r, err := fleetca.Init(fleetca.InitOptions{DataDir: d1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fleetca.Join(ctx, fleetca.JoinOptions{DataDir: dir, Server: a.admin, Token: r.Token, Pin: ir.Pin, HostID: id, Force: force}); err != nil {
			t.Fatal(err)
		}
	}
	d2, d3 := t.TempDir(), t.TempDir()
	join(d2, "beta", false)
	join(d3, "gamma", false)
	b := startNode(t, Options{DataDir: d2, Fleet: FleetOptions{LeaseTTL: 2 * time.Second}})
	ep := "https://" + ports[0]
	for _, d := range []string{d2, d3} {
		if err := etcdReach(t, ep, d); err != nil {
			t.Fatalf("before the revocation: %v", err)
		}
	}
	betaCrt, gammaCrt := hostCertOf(t, d2), hostCertOf(t, d3)

	var rv apitype.FleetRevocation
	a.must(200, "POST", "/fleet/hosts/beta/revoke", "", `{"reason": "test"}`, &rv)
	if rv.Host != "beta" || rv.Newly != 1 || len(rv.Serials) != 1 || rv.Serials[0] != betaCrt.SerialNumber.String() || !rv.Published {
		t.Fatalf("revoked: %+v", rv)
	}
	if err := etcdReach(t, ep, d2); err == nil {
		t.Error("the embedded etcd member let a new connection with beta's revoked certificate in")
	}
	if err := etcdReach(t, ep, d3); err != nil {
		t.Errorf("gamma after beta's revocation: %v", err)
	}
	if !a.s.revoked.Revoked(betaCrt) || a.s.revoked.Revoked(gammaCrt) {
		t.Error("the CA host's hop set: want beta's certificate only")
	}
	waitFor(t, "beta's berth to learn the CRL from etcd", func() bool { return b.s.revoked.Revoked(betaCrt) })
	if _, err := fleetca.Renew(ctx, fleetca.RenewOptions{DataDir: d2}); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("beta's renewal: %v, want refused as revoked", err)
	}
	var e map[string]any
	a.must(404, "POST", "/fleet/hosts/nosuch/revoke", "", "", &e)
	if s, _ := json.Marshal(e); !strings.Contains(string(s), "nosuch") {
		t.Errorf("an unknown host: %s", s)
	}
	b.must(409, "POST", "/fleet/hosts/gamma/revoke", "", "", &e)

	// berth fleet revoke on the data dir, the berth running.
	var out, errb strings.Builder
	if code := fleetca.Main(ctx, []string{"revoke", "--data-dir", d1, "gamma"}, &out, &errb); code != 0 {
		t.Fatalf("berth fleet revoke: %d %s", code, errb.String())
	}
	waitFor(t, "beta's berth to learn gamma's revocation", func() bool { return b.s.revoked.Revoked(gammaCrt) })
	if !a.s.revoked.Revoked(gammaCrt) {
		t.Error("the CA host did not apply the CRL berth fleet revoke wrote")
	}
	if err := etcdReach(t, ep, d3); err == nil {
		t.Error("gamma's revoked certificate still reaches etcd")
	}

	// beta joins again with a new token: a new serial, not revoked.
	b.stop()
	join(d2, "beta", true)
	again := hostCertOf(t, d2)
	if again.SerialNumber.Cmp(betaCrt.SerialNumber) == 0 || a.s.revoked.Revoked(again) {
		t.Fatal("the re-joined beta's certificate is the revoked one")
	}
	if err := etcdReach(t, ep, d2); err != nil {
		t.Errorf("the re-joined beta: %v", err)
	}
	if _, err := os.Stat(filepath.Join(fleetca.Dir(d1), fleetca.CRLFile)); err != nil {
		t.Error(err)
	}
}
