package hop

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/fleetca"
)

// The benchmarks compare a keep-alive GET to a handler directly (plain
// HTTP/1.1) with the same GET through the hop (hop client → hop server →
// handler), over h2 and HTTP/1.1, one request at a time, and report the
// latencies' p50 and p99.
//
// By default both ends are on loopback in this process. bench/hop.sh runs
// them across two network namespaces: TestBenchPeer, with HOP_BENCH_SERVE
// set to an address, serves the handler there directly (port 7001) and
// through a hop server (port 7002) with a fleet made in HOP_BENCH_DIR,
// until it is signalled; BenchmarkHop, with HOP_BENCH_PEER set to that
// address, measures against them with the client certificate in
// HOP_BENCH_DIR.

const (
	benchDirectPort = "7001"
	benchHopPort    = "7002"
)

var tiny = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "ok\n")
})

// TestBenchPeer is bench/hop.sh's server end; skipped unless
// HOP_BENCH_SERVE is set.
func TestBenchPeer(t *testing.T) {
	addr, dir := os.Getenv("HOP_BENCH_SERVE"), os.Getenv("HOP_BENCH_DIR")
	if addr == "" || dir == "" {
		t.Skip("HOP_BENCH_SERVE and HOP_BENCH_DIR are for bench/hop.sh")
	}
	f := newFleetAt(t, filepath.Join(dir, "beta"), "beta", "alpha")
	if err := os.WriteFile(filepath.Join(dir, "alpha.crt"), f.pem["alpha"][0], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alpha.key"), f.pem["alpha"][1], 0o600); err != nil {
		t.Fatal(err)
	}
	dl, err := net.Listen("tcp", net.JoinHostPort(addr, benchDirectPort))
	if err != nil {
		t.Fatal(err)
	}
	direct := &http.Server{Handler: tiny, ReadHeaderTimeout: 10 * time.Second}
	go direct.Serve(dl)
	defer direct.Close()
	hs, err := NewServer(ServerConfig{Config: f.cfg["beta"], Handler: tiny})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", net.JoinHostPort(addr, benchHopPort))
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(hl)
	defer hs.Close()
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Minute):
	}
}

// BenchmarkHop: see above. Run with a bounded count, e.g.
// go test -run '^$' -bench BenchmarkHop -benchtime 2000x ./internal/fleet/hop
func BenchmarkHop(b *testing.B) {
	var directURL, hopAddr string
	var alpha Config
	if peer := os.Getenv("HOP_BENCH_PEER"); peer != "" {
		dir := os.Getenv("HOP_BENCH_DIR")
		c, err := ConfigFromFiles(filepath.Join(fleetca.Dir(filepath.Join(dir, "beta")), fleetca.CACert), filepath.Join(dir, "alpha.crt"), filepath.Join(dir, "alpha.key"), "alpha")
		if err != nil {
			b.Fatal(err)
		}
		alpha = c
		directURL = "http://" + net.JoinHostPort(peer, benchDirectPort) + "/"
		hopAddr = net.JoinHostPort(peer, benchHopPort)
	} else {
		f := newFleet(b, "beta", "alpha")
		alpha = f.cfg["alpha"]
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		direct := &http.Server{Handler: tiny, ReadHeaderTimeout: 10 * time.Second}
		go direct.Serve(l)
		b.Cleanup(func() { direct.Close() })
		directURL = "http://" + l.Addr().String() + "/"
		hopAddr = f.serve(b, "beta", tiny, nil)
	}
	b.Run("direct", func(b *testing.B) {
		tr := &http.Transport{MaxIdleConnsPerHost: 4}
		defer tr.CloseIdleConnections()
		measure(b, &http.Client{Transport: tr}, context.Background(), directURL)
	})
	for _, p := range []struct {
		name string
		h1   bool
	}{{"hop-h2", false}, {"hop-http1", true}} {
		b.Run(p.name, func(b *testing.B) {
			c := alpha
			c.HTTP2 = !p.h1
			tr, err := NewTransport(c)
			if err != nil {
				b.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			measure(b, &http.Client{Transport: tr}, WithPeer(context.Background(), "beta"), "https://"+hopAddr+"/")
		})
	}
}

// measure GETs url b.N times one after the other (after a warm-up that
// opens the keep-alive connection) and reports the p50 and p99 latency.
func measure(b *testing.B, c *http.Client, ctx context.Context, url string) {
	get := func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	for range 50 {
		get()
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		get()
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}
