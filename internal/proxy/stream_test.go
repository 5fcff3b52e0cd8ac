package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/route"
)

// wsEcho accepts websockets and echoes every message back.
func wsEcho() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := context.Background() // the connection outlives r's context
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, msg); err != nil {
				return
			}
		}
	})
}

// dialWS opens a websocket to host through the proxy at base.
func dialWS(t *testing.T, ctx context.Context, base, host string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws", &websocket.DialOptions{
		Host:       host,
		HTTPClient: newClient(t),
	})
}

// exchange sends msg and expects it echoed.
func exchange(t *testing.T, ctx context.Context, c *websocket.Conn, msg string) {
	t.Helper()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	typ, got, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read echo of %q: %v", msg, err)
	}
	if typ != websocket.MessageText || string(got) != msg {
		t.Fatalf("echo = %v %q, want text %q", typ, got, msg)
	}
}

// TestWebsocketSurvivesSwap keeps a websocket open across configuration
// changes, including deleting its deployment.
func TestWebsocketSurvivesSwap(t *testing.T) {
	_, addr := startBackend(t, wsEcho())
	be := proxy.NewBackend("ws-1", addr, false)
	pool := proxy.NewPool(be)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{&proxy.Deployment{ID: "ws", Pool: pool}, []route.Rule{{Host: "ws.test"}}}))
	base := startProxy(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()

	c, resp, err := dialWS(t, ctx, base, "ws.test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if got := resp.Header.Get("X-Vm-Id"); got != "ws-1" {
		t.Errorf("upgrade response x-vm-id = %q", got)
	}
	exchange(t, ctx, c, "before")
	if be.InFlight() != 1 {
		t.Errorf("backend in flight = %d with a websocket open", be.InFlight())
	}

	// The same deployment with an added route, as a write would rebuild it.
	h.Swap(table(entry{&proxy.Deployment{ID: "ws", Pool: pool}, []route.Rule{{Host: "ws.test"}, {Host: "ws2.test"}}}))
	exchange(t, ctx, c, "after update")
	c2, _, err := dialWS(t, ctx, base, "ws2.test")
	if err != nil {
		t.Fatalf("new route: %v", err)
	}
	exchange(t, ctx, c2, "second socket")
	c2.Close(websocket.StatusNormalClosure, "")

	// The deployment deleted entirely.
	h.Swap(table())
	exchange(t, ctx, c, "after delete")
	if _, resp, err := dialWS(t, ctx, base, "ws.test"); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("dial after delete: err %v, want a 404 refusal", err)
	}
	exchange(t, ctx, c, "still here")
	if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := h.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if be.InFlight() != 0 {
		t.Errorf("backend in flight = %d after the websocket closed", be.InFlight())
	}
}

// TestWaitActive checks that an upgraded connection counts as active until it
// is closed, and that Wait honours its context.
func TestWaitActive(t *testing.T) {
	_, addr := startBackend(t, wsEcho())
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("ws", proxy.NewBackend("ws-1", addr, false)), []route.Rule{{Host: "ws.test"}}}))
	base := startProxy(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()

	if n := h.Active(); n != 0 {
		t.Fatalf("Active = %d before any request", n)
	}
	if err := h.Wait(ctx); err != nil {
		t.Fatalf("Wait when idle: %v", err)
	}
	c, _, err := dialWS(t, ctx, base, "ws.test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	exchange(t, ctx, c, "hello")
	if n := h.Active(); n != 1 {
		t.Errorf("Active = %d with one websocket open", n)
	}
	expired, stop := context.WithCancel(ctx)
	stop()
	if err := h.Wait(expired); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a websocket open = %v, want context.Canceled", err)
	}
	h.Swap(table())
	if n := h.Active(); n != 1 {
		t.Errorf("Active = %d after the swap", n)
	}
	exchange(t, ctx, c, "still open")
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	if err := h.Wait(ctx); err != nil {
		t.Fatalf("Wait after close: %v", err)
	}
	if n := h.Active(); n != 0 {
		t.Errorf("Active = %d after Wait returned", n)
	}
}

// TestWaitWhileServing calls Wait (and gives up on it) while traffic keeps
// going from idle to busy, as a shutdown that times out or a health check
// would; the handler must neither race nor panic.
func TestWaitWhileServing(t *testing.T) {
	arrived := make(chan string, 1)
	g := newGate("A", arrived)
	_, addr := startBackend(t, g)
	t.Cleanup(g.open)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("A", addr, false)), catchAll}))
	base := startProxy(t, h)
	c := newClient(t)

	for range 20 {
		slow := sendAsync(c, base+"/", "app.test")
		waitArrival(t, arrived)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.Wait(ctx); err == nil {
			t.Fatal("Wait returned nil with a request in flight")
		}
		// Let this one finish; the next iteration starts from idle.
		g.release <- struct{}{}
		waitResult(t, slow)
		ctx, cancel = context.WithTimeout(context.Background(), hangGuard)
		err := h.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Wait after the request finished: %v", err)
		}
	}
}

// TestStreamingUnbuffered checks that each flushed chunk reaches the client
// before the backend writes the next: the backend will not write event 2
// until the client has read event 1 through the proxy, so a buffering proxy
// deadlocks and the hang guard fails the test.
func TestStreamingUnbuffered(t *testing.T) {
	for _, ct := range []string{"text/event-stream", "application/x-ndjson"} {
		for _, h2 := range []bool{false, true} {
			name := ct
			if h2 {
				name += "/h2c"
			}
			t.Run(name, func(t *testing.T) {
				readOne := make(chan struct{})
				_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", ct)
					io.WriteString(w, "data: 1\n\n")
					if err := http.NewResponseController(w).Flush(); err != nil {
						return
					}
					select {
					case <-readOne:
					case <-r.Context().Done():
						return
					}
					io.WriteString(w, "data: 2\n\n")
				}))
				h := proxy.New(proxy.Options{})
				h.Swap(table(entry{static("sse", proxy.NewBackend("sse-1", addr, false)), catchAll}))
				base := startProxy(t, h)
				c := newClient(t)
				if h2 {
					c = h2cClient(t)
				}
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events", nil)
				req.Host = "sse.test"
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != 200 || resp.Header.Get("X-Vm-Id") != "sse-1" {
					t.Fatalf("status %d from %q", resp.StatusCode, resp.Header.Get("X-Vm-Id"))
				}
				if h2 != (resp.ProtoMajor == 2) {
					t.Fatalf("protocol %s", resp.Proto)
				}
				br := bufio.NewReader(resp.Body)
				readEvent := func() string {
					t.Helper()
					var ev strings.Builder
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							t.Fatalf("reading stream (a buffering proxy times out here): %v", err)
						}
						if line == "\n" {
							return ev.String()
						}
						ev.WriteString(line)
					}
				}
				if ev := readEvent(); ev != "data: 1\n" {
					t.Fatalf("first event %q", ev)
				}
				close(readOne)
				if ev := readEvent(); ev != "data: 2\n" {
					t.Fatalf("second event %q", ev)
				}
				if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
					t.Errorf("after the events: %q, %v", rest, err)
				}
			})
		}
	}
}

// TestInFlightSurvivesSwap removes a deployment while one of its requests is
// being served: the request completes with its full body.
func TestInFlightSurvivesSwap(t *testing.T) {
	const size = 1 << 20
	arrived := make(chan struct{})
	release := make(chan struct{})
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, strings.Repeat("x", size))
	}))
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	rec := newRecorder()
	d := static("slow", proxy.NewBackend("slow-1", addr, false))
	d.Metrics = rec
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{d, catchAll}))
	base := startProxy(t, h)
	c := newClient(t)

	slow := sendAsync(c, base+"/", "slow.test")
	select {
	case <-arrived:
	case <-time.After(hangGuard):
		t.Fatal("request never reached the backend")
	}
	h.Swap(table())
	if resp, _ := get(t, c, base+"/", "slow.test"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("new request after delete: %d, want 404", resp.StatusCode)
	}
	close(release)
	r := waitResult(t, slow)
	if r.status != http.StatusOK || len(r.body) != size || r.vmID != "slow-1" {
		t.Fatalf("in-flight request: %d, %d bytes from %q", r.status, len(r.body), r.vmID)
	}
	if o := rec.next(t); o != (observation{200, false}) {
		t.Errorf("observed %+v", o)
	}
}

// h2cClient speaks HTTP/2 with prior knowledge over plain TCP.
func h2cClient(t testing.TB) *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestH2C sends HTTP/2 prior-knowledge requests through the proxy to an
// HTTP/1.1 upstream.
func TestH2C(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	base := startProxy(t, h)
	c := h2cClient(t)
	resp, body := send(t, c, http.MethodPost, base+"/h2?x=1", "app.test", strings.NewReader("over h2c"), nil)
	if resp.ProtoMajor != 2 {
		t.Fatalf("client spoke %s, want HTTP/2", resp.Proto)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Vm-Id") != "app-1" {
		t.Fatalf("status %d from %q: %q", resp.StatusCode, resp.Header.Get("X-Vm-Id"), body)
	}
	e := decodeEcho(t, body)
	if e.Method != "POST" || e.URI != "/h2?x=1" || e.Host != "app.test" || e.Body != "over h2c" {
		t.Errorf("upstream saw %+v", e)
	}
	if got := e.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q", got)
	}
	resp, body = get(t, c, base+"/", "")
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Errorf("second request: %s %d %q", resp.Proto, resp.StatusCode, body)
	}
}
