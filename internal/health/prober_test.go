package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestProberKeepsConnection: an HTTP check's probes share one connection
// while the backend allows it, give Probe's verdicts, and survive the
// backend closing the idle connection.
func TestProberKeepsConnection(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	var conns atomic.Int32
	var chunked, closing atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.UserAgent() != "berth/health" || r.URL.Path != "/healthz" {
			t.Errorf("probe %q %q", r.UserAgent(), r.URL.Path)
		}
		if closing.Load() {
			w.Header().Set("Connection", "close")
		}
		w.WriteHeader(int(status.Load()))
		if chunked.Load() {
			w.(http.Flusher).Flush() // no Content-Length: chunked
			w.Write([]byte(strings.Repeat("x", 5000)))
		} else {
			w.Write([]byte("ok"))
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	p := NewProber(Check{Addr: strings.TrimPrefix(srv.URL, "http://"), Path: "healthz", Timeout: 5 * time.Second}, nil)
	defer p.Close()
	ctx := context.Background()
	probe := func(want bool) {
		t.Helper()
		if err := p.Probe(ctx); (err == nil) != want {
			t.Fatalf("status %d: err %v, want healthy=%v", status.Load(), err, want)
		}
	}
	for _, st := range []int32{200, 404, 500, 503, 200} {
		status.Store(st)
		probe(st < 500)
	}
	chunked.Store(true)
	probe(true)
	probe(true)
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 7 probes, want 1", n)
	}
	srv.CloseClientConnections()
	probe(true)
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections after the backend closed the first, want 2", n)
	}
	closing.Store(true)
	probe(true) // on the second connection, which it then closes
	probe(true)
	probe(true)
	if n := conns.Load(); n != 4 {
		t.Fatalf("%d connections after three Connection: close answers, want 4", n)
	}
	srv.Close()
	probe(false)
}

func TestProberFailures(t *testing.T) {
	ln, addr := garbageServer(t)
	if err := NewProber(Check{Addr: addr, Path: "/", Timeout: 5 * time.Second}, nil).Probe(context.Background()); err == nil {
		t.Error("garbage status line counted as healthy")
	}
	if err := NewProber(Check{Addr: addr, Timeout: 5 * time.Second}, nil).Probe(context.Background()); err != nil {
		t.Errorf("tcp check: %v", err)
	}
	ln.Close()
	if err := NewProber(Check{Addr: addr, Timeout: 5 * time.Second}, nil).Probe(context.Background()); err == nil {
		t.Error("closed port counted as healthy")
	}
	if err := NewProber(Check{Addr: addr, Path: "/a b"}, nil).Probe(context.Background()); err == nil {
		t.Error("bad path accepted")
	}
}

// TestProberBudget: probers keep no more connections than their budget;
// the others connect afresh for each probe, and a closed prober gives its
// share back.
func TestProberBudget(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	b := NewBudget(2)
	var ps []*Prober
	for i := range 3 {
		ps = append(ps, NewProber(Check{Addr: strings.TrimPrefix(srv.URL, "http://"), Path: fmt.Sprintf("/%d", i), Timeout: 5 * time.Second}, b))
	}
	for range 2 {
		for _, p := range ps {
			if err := p.Probe(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n, k := conns.Load(), b.Kept(); n != 4 || k != 2 {
		t.Fatalf("%d connections for 2 rounds of 3 probers with a budget of 2, %d kept; want 4 and 2", n, k)
	}
	ps[0].Close()
	if k := b.Kept(); k != 1 {
		t.Fatalf("%d kept after closing a prober, want 1", k)
	}
	ps[2].Probe(context.Background())
	ps[2].Probe(context.Background())
	if n, k := conns.Load(), b.Kept(); n != 5 || k != 2 {
		t.Fatalf("after the budget freed up: %d connections, %d kept; want 5 and 2", n, k)
	}
}
