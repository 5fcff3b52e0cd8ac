package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/fleetca"
)

// hopPair is two berths of one fleet (alpha made it with berth fleet
// init, beta joined it), both with a hop listener: beta serves
// deployment api from a local upstream, alpha's deployment front is
// discovery-backed by service "api".
type hopPair struct {
	a, b    *Server
	caFile  string
	appHits atomic.Int64
}

func startHopServer(tb testing.TB, o Options) *Server {
	tb.Helper()
	o.ProxyAddr, o.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.DrainTimeout = 5 * time.Second
	// The test binary is the agent of process-backed Computers.
	o.AgentCommand, o.AgentEnv = []string{os.Args[0]}, []string{"BERTH_TEST_ROLE=agent"}
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(context.Background(), o)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	return s
}

func hopPost(tb testing.TB, s *Server, path, body string) {
	tb.Helper()
	resp, err := http.Post("http://"+s.AdminAddr()+path, "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		tb.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
}

// hopGet is a GET of url with Host host; code 0 on a transport error.
func hopGet(c *http.Client, url, host string) (int, string) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

func startHopPair(tb testing.TB) *hopPair {
	tb.Helper()
	var ports []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ports = append(ports, l.Addr().String())
		l.Close()
	}
	d1, d2 := tb.TempDir(), tb.TempDir()
	ir, err := fleetca.Init(fleetca.InitOptions{DataDir: d1, Advertise: ports[0], PeerAdvertise: ports[1], HostID: "alpha"})
	if err != nil {
		tb.Fatal(err)
	}
	p := &hopPair{caFile: filepath.Join(fleetca.Dir(d1), fleetca.CACert)}
	p.a = startHopServer(tb, Options{DataDir: d1, Fleet: FleetOptions{LeaseTTL: 2 * time.Second, Listen: "127.0.0.1:0"}})
	if _, err := fleetca.Join(context.Background(), fleetca.JoinOptions{DataDir: d2, Server: "http://" + p.a.AdminAddr(), Token: ir.Token, Pin: ir.Pin, HostID: "beta"}); err != nil {
		tb.Fatal(err)
	}
	p.b = startHopServer(tb, Options{DataDir: d2, Fleet: FleetOptions{LeaseTTL: 2 * time.Second, Listen: "127.0.0.1:0"}})
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.appHits.Add(1)
		fmt.Fprintf(w, "api at beta for %s", r.Host)
	}))
	tb.Cleanup(app.Close)
	hopPost(tb, p.b, "/deployments", `{"id":"api","routes":[{"host":"api.test"}],"upstreams":["`+strings.TrimPrefix(app.URL, "http://")+`"]}`)
	hopPost(tb, p.a, "/deployments", `{"id":"front","routes":[{"host":"api.test"}],"discovery":{"service_id":"api"}}`)
	c := &http.Client{Timeout: 10 * time.Second}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := hopGet(c, "http://"+p.a.ProxyAddr()+"/", "api.test")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("alpha never routed front through beta: %d %s", code, body)
		}
	}
	return p
}

// TestFleetDiscoveryOverHop: with hop listeners on both hosts, beta's
// member of service "api" is its hop address (hop: true in /services and
// in the discovery status), and alpha's discovery-backed front reaches
// beta's upstream through it: front's only backend is beta's hop
// listener, which speaks nothing but mutual TLS, dialed with alpha's fleet
// certificate for host beta. A client without a fleet certificate cannot
// use beta's hop port.
func TestFleetDiscoveryOverHop(t *testing.T) {
	p := startHopPair(t)
	hopAddr := p.b.HopAddr()
	if hopAddr == "" || hopAddr == p.b.ProxyAddr() {
		t.Fatalf("beta's hop address %q", hopAddr)
	}

	before := p.appHits.Load()
	code, body := hopGet(&http.Client{Timeout: 10 * time.Second}, "http://"+p.a.ProxyAddr()+"/", "api.test")
	if code != 200 || body != "api at beta for api.test" {
		t.Fatalf("through alpha: %d %q", code, body)
	}
	if p.appHits.Load() != before+1 {
		t.Fatalf("beta's upstream saw %d requests, want 1", p.appHits.Load()-before)
	}

	e, ok := p.a.registry.Get("front")
	if !ok || !slices.Equal(e.Upstreams, []string{hopAddr}) {
		t.Fatalf("front's upstreams %+v, want beta's hop %s only", e, hopAddr)
	}
	bs := e.Pool.Backends()
	if len(bs) != 1 || bs[0].Addr != hopAddr || !bs[0].TLS || bs[0].TLSConfig == nil || bs[0].TLSConfig.ServerName != "beta" ||
		bs[0].TLSConfig.MinVersion != tls.VersionTLS13 || len(bs[0].TLSConfig.Certificates) != 1 {
		t.Fatalf("front's backends: %+v", bs)
	}

	// The member as the views show it.
	fv := p.a.adminFleetViews()
	svcs, err := fv.Services(t.Context(), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs.Services) != 1 || len(svcs.Services[0].Members) != 1 {
		t.Fatalf("services: %+v", svcs)
	}
	if m := svcs.Services[0].Members[0]; m.Peer != hopAddr || !m.Hop || m.Host != "beta" {
		t.Fatalf("beta's member %+v, want peer %s over the hop", m, hopAddr)
	}
	if js, _ := json.Marshal(svcs.Services[0].Members[0]); !strings.Contains(string(js), `"hop":true`) {
		t.Fatalf("the member as JSON: %s", js)
	}
	ds, err := fv.DiscoveryStatus(t.Context(), "default", "api")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Upstreams) != 1 || ds.Upstreams[0].Peer != hopAddr {
		t.Fatalf("discovery status %+v, want beta's hop %s", ds, hopAddr)
	}
	if js, _ := json.Marshal(ds.Upstreams[0]); !strings.Contains(string(js), `"hop":true`) {
		t.Fatalf("the discovery upstream as JSON: %s", js)
	}

	// beta's hop port: plain HTTP gets no answer from the deployment, and
	// TLS without a fleet certificate is refused at the handshake.
	before = p.appHits.Load()
	if code, body := hopGet(&http.Client{Timeout: 10 * time.Second}, "http://"+hopAddr+"/", "api.test"); code == 200 {
		t.Fatalf("plain HTTP to beta's hop port: %d %s", code, body)
	}
	cas, err := fleetca.LoadCAPool(p.caFile)
	if err != nil {
		t.Fatal(err)
	}
	noCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cas, ServerName: "beta"}}}
	if code, body := hopGet(noCert, "https://"+hopAddr+"/", "api.test"); code != 0 || !strings.Contains(body, "certificate required") {
		t.Fatalf("a client without a fleet certificate: %d %s", code, body)
	}
	if n := p.appHits.Load() - before; n != 0 {
		t.Fatalf("beta's upstream saw %d requests from clients without the hop", n)
	}
}

// BenchmarkDiscoveryHop: a GET through alpha's gateway to front, served by
// beta over the hop, against the same GET straight to beta's gateway;
// p50-µs is each request's median latency, and hop-added-p50-µs the
// difference: the added latency of the cross-host hop.
func BenchmarkDiscoveryHop(b *testing.B) {
	p := startHopPair(b)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	measure := func(url string) []time.Duration {
		ds := make([]time.Duration, 0, b.N)
		for range b.N {
			t0 := time.Now()
			code, body := hopGet(c, url, "api.test")
			ds = append(ds, time.Since(t0))
			if code != 200 {
				b.Fatalf("GET %s: %d %s", url, code, body)
			}
		}
		slices.Sort(ds)
		return ds
	}
	p50 := func(ds []time.Duration) float64 { return float64(ds[len(ds)/2].Nanoseconds()) / 1e3 }
	// Warm both paths' connections.
	for range 50 {
		hopGet(c, "http://"+p.a.ProxyAddr()+"/", "api.test")
		hopGet(c, "http://"+p.b.ProxyAddr()+"/", "api.test")
	}
	b.ResetTimer()
	via := measure("http://" + p.a.ProxyAddr() + "/")
	direct := measure("http://" + p.b.ProxyAddr() + "/")
	b.StopTimer()
	b.ReportMetric(p50(via), "hop-p50-µs")
	b.ReportMetric(p50(direct), "direct-p50-µs")
	b.ReportMetric(p50(via)-p50(direct), "hop-added-p50-µs")
}
