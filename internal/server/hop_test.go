package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/fleetca"
	"github.com/berth-dev/berth/internal/fleet/hop"
)

// TestFleetHopListener: berth serve with --fleet-listen on a data dir
// berth fleet init set up serves the hop into the data plane: a request
// from another fleet host (a certificate POST /fleet/join would sign)
// reaches a deployment's backend by its Host, without the X-Berth-Hop the
// hop server set for the gateway; a client without a fleet certificate is
// refused; the host's fleet registration carries the hop address; and
// --fleet-listen without a fleet is refused.
func TestFleetHopListener(t *testing.T) {
	if err := (FleetOptions{Listen: "127.0.0.1:0"}).Check(); err == nil || !strings.Contains(err.Error(), "--fleet-listen needs a fleet") {
		t.Fatalf("--fleet-listen alone: %v", err)
	}
	if err := (FleetOptions{Dev: true, Listen: "127.0.0.1:0"}).Check(); err == nil || !strings.Contains(err.Error(), "fleet CA") {
		t.Fatalf("--fleet-listen with --etcd-dev: %v", err)
	}
	ports := freeLoopbackPorts(t, 2)
	d1 := t.TempDir()
	ir, err := fleetca.Init(fleetca.InitOptions{DataDir: d1, Advertise: ports[0], PeerAdvertise: ports[1], HostID: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	// beta's certificate, as POST /fleet/join signs it.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, _ := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "beta"}}, key)
	req, open, err := fleetca.NewJoinRequest(ir.Token, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := fleetca.Sign(d1, dataDirSecretKey(t, d1), req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	jr, err := open(sealed)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	pair, err := tls.X509KeyPair([]byte(jr.Certificate), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	if err != nil {
		t.Fatal(err)
	}
	cas, err := fleetca.LoadCAPool(filepath.Join(fleetca.Dir(d1), fleetca.CACert))
	if err != nil {
		t.Fatal(err)
	}

	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s hop=%q", r.Host, r.URL.Path, r.Header.Get(hop.Header))
	}))
	defer backend.Close()
	a := startNode(t, Options{DataDir: d1, Fleet: FleetOptions{LeaseTTL: 2 * time.Second, Listen: "127.0.0.1:0"}})
	hopAddr := a.s.HopAddr()
	if hopAddr == "" {
		t.Fatal("no hop listener")
	}
	a.must(201, "POST", "/deployments", "", fmt.Sprintf(`{"id":"web","routes":[{"host":"web.test"}],"upstreams":[%q]}`, strings.TrimPrefix(backend.URL, "http://")), nil)

	tr, err := hop.NewTransport(hop.Config{HostID: "beta", Cert: pair, CAs: cas})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var got string
	for deadline := time.Now().Add(30 * time.Second); ; {
		req, _ := http.NewRequestWithContext(hop.WithPeer(context.Background(), "alpha"), "GET", "https://"+hopAddr+"/x", nil)
		req.Host = "web.test"
		req.Header.Set(hop.Header, "gamma")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = string(b)
		if resp.StatusCode == 200 || time.Now().After(deadline) {
			if resp.StatusCode != 200 {
				t.Fatalf("through the hop: %d %s", resp.StatusCode, b)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != `web.test /x hop=""` {
		t.Fatalf("the backend saw %s", got)
	}

	// No client certificate: refused at the handshake.
	plain := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cas, ServerName: "alpha"}}}
	if resp, err := plain.Get("https://" + hopAddr + "/x"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %d", resp.StatusCode)
	} else if !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("a client without a certificate: %v", err)
	}

	hs, err := a.s.fleetHost.m.Hosts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].ID != "alpha" || hs[0].HopAddress != hopAddr {
		t.Fatalf("the fleet's hosts: %+v, want alpha with hop address %s", hs, hopAddr)
	}
}
