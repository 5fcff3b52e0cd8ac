package proxy_test

import (
	"context"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/proxy/proxytest"
	"github.com/berth-dev/berth/internal/ratelimit"
	"github.com/berth-dev/berth/internal/route"
)

// frozen is a clock that never moves: a bucket refills only when a test
// says so, never with the wall clock.
func frozen() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }

func newLimiter(t testing.TB, rl apitype.RateLimit) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.NewLimiter(rl, frozen)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// leaveSignal is a proxy.Limiter that reports every Leave, so a test can
// wait for a request to be done with its limiter (the client may read the
// whole response before the handler has returned).
type leaveSignal struct {
	proxy.Limiter
	left chan netip.Addr
}

func newLeaveSignal(l proxy.Limiter) *leaveSignal {
	return &leaveSignal{Limiter: l, left: make(chan netip.Addr, 16)}
}

func (s *leaveSignal) Leave(a netip.Addr) {
	s.Limiter.Leave(a)
	s.left <- a
}

func (s *leaveSignal) waitLeave(t testing.TB) netip.Addr {
	t.Helper()
	select {
	case a := <-s.left:
		return a
	case <-time.After(hangGuard):
		t.Fatal("no Leave")
		return netip.Addr{}
	}
}

// TestRateLimitBurst: past the burst, a client is answered 429 with
// Retry-After and berth's own body, before the gate or a backend sees the
// request, and the refusal is observed like berth's other answers.
func TestRateLimitBurst(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	rec := newRecorder()
	d := static("rl", proxy.NewBackend("rl-1", addr, false))
	d.Metrics = rec
	gate := &countGate{}
	d.Gate = gate
	sig := newLeaveSignal(newLimiter(t, apitype.RateLimit{RequestsPerSec: 0.5, Burst: 2}))
	d.Limit = sig
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{d, catchAll}))
	base := startProxy(t, h)
	c := newClient(t)

	for i := range 2 {
		if resp, body := get(t, c, base+"/", "rl.test"); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d within the burst: %d %q", i+1, resp.StatusCode, body)
		}
		if a := sig.waitLeave(t); a != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("Leave with %s, want the peer 127.0.0.1", a)
		}
		if o := rec.next(t); o.status != http.StatusOK {
			t.Errorf("observed %+v", o)
		}
	}
	resp, body := get(t, c, base+"/", "rl.test")
	if resp.StatusCode != http.StatusTooManyRequests || body != "rate limit exceeded\n" {
		t.Fatalf("past the burst: %d %q, want 429 %q", resp.StatusCode, body, "rate limit exceeded\n")
	}
	if got := resp.Header.Get("Retry-After"); got != "2" { // a token every 2s
		t.Errorf("Retry-After = %q, want 2", got)
	}
	if got := resp.Header.Get("Content-Type"); got != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type = %q", got)
	}
	if o := rec.next(t); o.status != http.StatusTooManyRequests || o.failed {
		t.Errorf("refusal observed as %+v, want 429, not failed", o)
	}
	if n := gate.n(); n != 2 {
		t.Errorf("the gate saw %d requests, want 2: the limit comes first", n)
	}
	select {
	case a := <-sig.left:
		t.Errorf("Leave(%s) for a refused request", a)
	default:
	}
}

// countGate is a proxy.Gate that admits everything and counts.
type countGate struct {
	mu    sync.Mutex
	count int
}

func (g *countGate) Admit(http.ResponseWriter, *http.Request, bool) (int, bool) {
	g.mu.Lock()
	g.count++
	g.mu.Unlock()
	return 0, false
}

func (g *countGate) n() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.count
}

// TestRateLimitConcurrency: while a client has concurrent_per_client
// requests in flight the next is refused; once one is done (Leave), the
// client is admitted again.
func TestRateLimitConcurrency(t *testing.T) {
	arrived := make(chan string, 4)
	g := newGate("slow", arrived)
	_, addr := startBackend(t, g)
	t.Cleanup(g.open)
	d := static("conc", proxy.NewBackend("conc-1", addr, false))
	sig := newLeaveSignal(newLimiter(t, apitype.RateLimit{ConcurrentPerClient: 1}))
	d.Limit = sig
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{d, catchAll}))
	base := startProxy(t, h)
	c := newClient(t)

	done := make(chan int, 1)
	go func() {
		resp, _ := get(t, c, base+"/slow", "conc.test")
		done <- resp.StatusCode
	}()
	waitArrival(t, arrived) // in flight at the backend
	resp, body := get(t, c, base+"/", "conc.test")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || body != "rate limit exceeded\n" {
		t.Fatalf("second request in flight: %d %q Retry-After %q, want 429, 1", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	g.open()
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the first request: %d", code)
	}
	sig.waitLeave(t)
	if resp, body := get(t, c, base+"/", "conc.test"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the first left: %d %q", resp.StatusCode, body)
	}
	sig.waitLeave(t)
}

// TestRateLimitWebsocket: a websocket is in flight until it closes.
func TestRateLimitWebsocket(t *testing.T) {
	_, addr := startBackend(t, wsEcho())
	d := static("ws", proxy.NewBackend("ws-1", addr, false))
	sig := newLeaveSignal(newLimiter(t, apitype.RateLimit{ConcurrentPerClient: 1}))
	d.Limit = sig
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{d, []route.Rule{{Host: "ws.test"}}}))
	base := startProxy(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()

	ws, _, err := dialWS(t, ctx, base, "ws.test")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	exchange(t, ctx, ws, "hello")
	if _, resp, err := dialWS(t, ctx, base, "ws.test"); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second websocket with one open: %v, want a 429 refusal", err)
	}
	select {
	case a := <-sig.left:
		t.Fatalf("Leave(%s) with the websocket open", a)
	default:
	}
	ws.Close(websocket.StatusNormalClosure, "")
	sig.waitLeave(t)
	ws2, _, err := dialWS(t, ctx, base, "ws.test")
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	ws2.Close(websocket.StatusNormalClosure, "")
}

// TestKeepAliveGETAllocsLimited is TestKeepAliveGETAllocs with a per-client
// limit on the deployment: the hook (the peer's address, Enter, the
// deferred Leave) and a known client's limiter allocate nothing.
func TestKeepAliveGETAllocsLimited(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations over many requests")
	}
	if frontEnd == "h1-watch" {
		t.Skip("every request is watched for a hang-up: the slow path")
	}
	addr := proxytest.RawUpstream(t, 100)
	h := proxy.New(proxy.Options{})
	d := static("bench", proxy.NewBackend("bench-1", addr, false))
	d.Limit = newLimiter(t, apitype.RateLimit{RequestsPerSec: 1e6, Burst: 1e6, ConcurrentPerClient: 10})
	h.Swap(table(entry{d, catchAll}))
	paddr, _ := startH1(t, h, proxy.H1Options{})
	q := proxytest.NewQuietClient(t, paddr, "GET /bench?q=1 HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	if allocs := proxytest.AllocsPerRequest(t, q, 2000, 200, 100); allocs != 0 {
		t.Errorf("%v allocations per keep-alive GET with a rate limit, want 0", allocs)
	}
}
