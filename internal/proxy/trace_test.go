package proxy_test

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/tracing"
	"github.com/berth-dev/berth/internal/tracing/otlptest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

const (
	clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan   = "00f067aa0ba902b7"
	clientParent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// traceHeaders is an upstream that records the trace context fields of
// the requests it gets.
type traceHeaders struct {
	mu            sync.Mutex
	parent, state []string
}

func (u *traceHeaders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.parent = append(u.parent, strings.Join(r.Header.Values("Traceparent"), "|"))
	u.state = append(u.state, strings.Join(r.Header.Values("Tracestate"), "|"))
	u.mu.Unlock()
	w.Write([]byte("ok\n"))
}

func (u *traceHeaders) got() (parent, state []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.parent...), append([]string(nil), u.state...)
}

// fronts serves h with net/http, then with berth's front end.
var fronts = []struct {
	name  string
	start func(testing.TB, *proxy.Handler) string
}{
	{"net-http", func(t testing.TB, h *proxy.Handler) string {
		srv := &http.Server{Handler: h}
		ln := listen(t)
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return "http://" + ln.Addr().String()
	}},
	{"h1", func(t testing.TB, h *proxy.Handler) string {
		addr, _ := startH1(t, h, proxy.H1Options{})
		return "http://" + addr
	}},
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func startTracing(t testing.TB) (*tracing.Tracing, *otlptest.Receiver) {
	recv := otlptest.Start(t)
	tr, err := tracing.New(tracing.Config{Endpoint: recv.Addr, Insecure: true, Sample: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close(context.Background()) })
	return tr, recv
}

// flushed exports what tr holds and returns the spans recv got, by name.
func flushed(t testing.TB, tr *tracing.Tracing, recv *otlptest.Receiver) map[string][]otlptest.Span {
	t.Helper()
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := map[string][]otlptest.Span{}
	for _, s := range recv.Spans() {
		m[s.Name] = append(m[s.Name], s)
	}
	return m
}

type passGate struct{}

func (passGate) Admit(http.ResponseWriter, *http.Request, bool) (int, bool) { return 0, true }

// TestTraceSpans: a proxied request is a server span, child of the client's
// traceparent, with children for the route, the guard, the gate and the
// upstream attempt; the upstream's traceparent names the attempt's span
// in the client's trace, and the client's tracestate reaches it.
func TestTraceSpans(t *testing.T) {
	for _, fe := range fronts {
		t.Run(fe.name, func(t *testing.T) {
			tr, recv := startTracing(t)
			up := &traceHeaders{}
			_, addr := startBackend(t, up)
			guard := func(netip.Addr, string, string, string, string, string) proxy.GuardVerdict { return proxy.GuardPass }
			h := proxy.New(proxy.Options{Tracer: tr.Tracer(), Guard: guard})
			d := static("app", proxy.NewBackend("app-1", addr, false))
			d.Namespace, d.Gate = "team", passGate{}
			h.Swap(table(entry{d, catchAll}))
			base := fe.start(t, h)
			resp, _ := send(t, newClient(t), http.MethodGet, base+"/hello", "app.test", nil,
				http.Header{"Traceparent": {clientParent}, "Tracestate": {"vendor=x"}, "User-Agent": {"trace-test"}})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			spans := flushed(t, tr, recv)
			srv := one(t, spans, "GET")
			if srv.TraceID != clientTrace || srv.ParentSpanID != clientSpan || srv.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("server span %+v: want kind server, child of %s in trace %s", srv, clientSpan, clientTrace)
			}
			for k, v := range map[string]string{
				"http.request.method": "GET", "url.path": "/hello", "server.address": "app.test", "url.scheme": "http",
				"http.response.status_code": "200", "berth.deployment": "app", "berth.namespace": "team",
				"user_agent.original": "trace-test", "client.address": "127.0.0.1",
			} {
				if srv.Attrs[k] != v {
					t.Errorf("server span %s = %q, want %q", k, srv.Attrs[k], v)
				}
			}
			for _, name := range []string{"route", "guard", "gate", "upstream"} {
				c := one(t, spans, name)
				if c.TraceID != clientTrace || c.ParentSpanID != srv.SpanID {
					t.Errorf("%s span %+v: want a child of the server span %s", name, c, srv.SpanID)
				}
			}
			if r := one(t, spans, "route"); r.Attrs["berth.deployment"] != "app" {
				t.Errorf("route span attributes %v", r.Attrs)
			}
			u := one(t, spans, "upstream")
			host, port, _ := strings.Cut(addr, ":")
			if u.Kind != tracepb.Span_SPAN_KIND_CLIENT || u.Attrs["server.address"] != host || u.Attrs["server.port"] != port ||
				u.Attrs["berth.backend"] != "app-1" || u.Attrs["berth.attempt"] != "1" || u.Attrs["http.response.status_code"] != "200" || u.Error {
				t.Errorf("upstream span %+v", u)
			}
			parent, state := up.got()
			if want := "00-" + clientTrace + "-" + u.SpanID + "-01"; len(parent) != 1 || parent[0] != want {
				t.Errorf("upstream got traceparent %q, want %q (berth's attempt span as parent)", parent, want)
			}
			if len(state) != 1 || state[0] != "vendor=x" {
				t.Errorf("upstream got tracestate %q, want the client's", state)
			}
		})
	}
}

// TestTraceStartsTrace: a request without a traceparent starts a trace;
// one with a malformed traceparent too, and the upstream never sees the
// client's malformed one, nor a tracestate without its traceparent.
func TestTraceStartsTrace(t *testing.T) {
	tr, recv := startTracing(t)
	up := &traceHeaders{}
	_, addr := startBackend(t, up)
	h := proxy.New(proxy.Options{Tracer: tr.Tracer()})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	base := startProxy(t, h)
	send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, nil)
	send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, http.Header{"Traceparent": {"00-zz-yy-01"}, "Tracestate": {"orphan=1"}})
	spans := flushed(t, tr, recv)
	if len(spans["GET"]) != 2 || len(spans["upstream"]) != 2 {
		t.Fatalf("spans %v", spans)
	}
	parent, state := up.got()
	for i, s := range spans["GET"] {
		if s.ParentSpanID != "" {
			t.Errorf("server span %d has parent %s; want a root", i, s.ParentSpanID)
		}
	}
	for i, p := range parent {
		u := spans["upstream"][i]
		if want := "00-" + u.TraceID + "-" + u.SpanID + "-01"; p != want {
			t.Errorf("request %d: upstream got traceparent %q, want %q", i, p, want)
		}
	}
	if state[1] != "" {
		t.Errorf("upstream got tracestate %q without the client's traceparent", state[1])
	}
}

// TestTraceOff: without a tracer the client's trace context reaches the
// upstream as it was sent.
func TestTraceOff(t *testing.T) {
	for _, fe := range fronts {
		t.Run(fe.name, func(t *testing.T) {
			up := &traceHeaders{}
			_, addr := startBackend(t, up)
			h := proxy.New(proxy.Options{})
			h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
			base := fe.start(t, h)
			send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, http.Header{"Traceparent": {clientParent}, "Tracestate": {"vendor=x"}})
			send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, nil)
			parent, state := up.got()
			if len(parent) != 2 || parent[0] != clientParent || state[0] != "vendor=x" || parent[1] != "" || state[1] != "" {
				t.Errorf("upstream got traceparent %q, tracestate %q; want the client's, and none when it sent none", parent, state)
			}
		})
	}
}

// TestTraceRetries: an attempt whose connection is refused is a span of
// its own, failed, before the attempt that succeeds.
func TestTraceRetries(t *testing.T) {
	tr, recv := startTracing(t)
	up := &traceHeaders{}
	_, addr := startBackend(t, up)
	h := proxy.New(proxy.Options{Tracer: tr.Tracer()})
	dead := proxy.NewBackend("dead-1", deadAddr(t), false)
	live := proxy.NewBackend("live-1", addr, false)
	live.SetHealthy(true)
	dead.SetHealthy(true)
	d := static("app", dead, live)
	h.Swap(table(entry{d, catchAll}))
	base := startProxy(t, h)
	// The least in-flight is picked first: with live busy, dead is.
	if !live.AcquireBackend() {
		t.Fatal("live backend unavailable")
	}
	if resp, _ := send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	live.Release()
	spans := flushed(t, tr, recv)
	ups := spans["upstream"]
	if len(ups) != 2 {
		t.Fatalf("upstream spans %+v, want 2", ups)
	}
	byAttempt := map[string]otlptest.Span{}
	for _, u := range ups {
		byAttempt[u.Attrs["berth.attempt"]] = u
	}
	first, second := byAttempt["1"], byAttempt["2"]
	if first.Attrs["berth.backend"] != "dead-1" || !first.Error || first.StatusMessage == "" {
		t.Errorf("first attempt %+v: want a failed span for dead-1", first)
	}
	if second.Attrs["berth.backend"] != "live-1" || second.Error || second.Attrs["http.response.status_code"] != "200" {
		t.Errorf("second attempt %+v: want live-1's 200", second)
	}
	if parent, _ := up.got(); len(parent) != 1 || !strings.Contains(parent[0], second.SpanID) {
		t.Errorf("upstream got traceparent %q, want the second attempt's span %s", parent, second.SpanID)
	}
}

// TestTraceHold: a request held for a cold start has a hold span, with the
// phases of its replica's start as children.
func TestTraceHold(t *testing.T) {
	tr, recv := startTracing(t)
	_, addr := startBackend(t, &traceHeaders{})
	pool := proxy.NewPool()
	hold := &phasedHolder{pool: pool, add: proxy.NewBackend("vm-1", addr, false)}
	h := proxy.New(proxy.Options{Tracer: tr.Tracer()})
	h.Swap(table(entry{&proxy.Deployment{ID: "vm", Pool: pool, Hold: hold}, catchAll}))
	base := startProxy(t, h)
	resp, _ := get(t, newClient(t), base+"/", "vm.test")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spans := flushed(t, tr, recv)
	srv, hs := one(t, spans, "GET"), one(t, spans, "hold")
	if hs.ParentSpanID != srv.SpanID || hs.Attrs["berth.backend"] != "vm-1" || hs.Error {
		t.Errorf("hold span %+v: want a child of the server span that found vm-1", hs)
	}
	if u := one(t, spans, "upstream"); u.StartUnixNano < hs.EndUnixNano {
		t.Errorf("the attempt starts before the hold ends")
	}
	// The replica's timeline, from the request's wait: 1 ms before its
	// create (0.5 of it pulling), 1 ms creating, 1 ms booting.
	at := hs.StartUnixNano
	for _, p := range []struct {
		name string
		d    uint64
	}{{"hold.queue", 500e3}, {"hold.pull", 500e3}, {"hold.create", 1e6}, {"hold.boot", 1e6}} {
		s := one(t, spans, p.name)
		if s.ParentSpanID != hs.SpanID || s.StartUnixNano != at || s.EndUnixNano-s.StartUnixNano != p.d {
			t.Errorf("%s span %+v: want a child of the hold from %d lasting %d ns", p.name, s, at, p.d)
		}
		at += p.d
	}
	if hs.Attrs["berth.hold.create_ms"] != "1" || hs.Attrs["berth.hold.boot_ms"] != "1" {
		t.Errorf("hold span attributes %v", hs.Attrs)
	}

	giveUp := &holder{pool: proxy.NewPool()}
	h.Swap(table(entry{&proxy.Deployment{ID: "vm", Pool: giveUp.pool, Hold: giveUp}, catchAll}))
	if resp, _ := get(t, newClient(t), base+"/", "vm.test"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("gave up: status %d", resp.StatusCode)
	}
	spans = flushed(t, tr, recv)
	if len(spans["hold"]) != 2 {
		t.Fatalf("hold spans %+v", spans["hold"])
	}
	for _, s := range spans["hold"] {
		if s.SpanID != hs.SpanID && (!s.Error || !strings.Contains(s.StatusMessage, "cold_start")) {
			t.Errorf("hold that gave up %+v: want an error naming the cold start timeout", s)
		}
	}
	for _, s := range spans["GET"] {
		if s.SpanID != srv.SpanID && (s.Attrs["http.response.status_code"] != "503" || !s.Error) {
			t.Errorf("server span of the request that gave up %+v", s)
		}
	}
}

// phasedHolder adds its backend on the first wait, with a timeline that
// starts 1 ms into the wait.
type phasedHolder struct {
	pool *proxy.Pool
	add  *proxy.Backend
}

func (h *phasedHolder) Await(ctx context.Context, since time.Time, first bool) error {
	h.add.Timeline = proxy.Timeline{Created: since.Add(time.Millisecond), Started: since.Add(2 * time.Millisecond),
		Ready: since.Add(3 * time.Millisecond), Pull: 500 * time.Microsecond}
	h.pool.Set([]*proxy.Backend{h.add})
	return nil
}

func (h *phasedHolder) RetryAfter() time.Duration { return time.Second }

// one returns the one span called name.
func one(t testing.TB, spans map[string][]otlptest.Span, name string) otlptest.Span {
	t.Helper()
	if len(spans[name]) != 1 {
		t.Fatalf("%d spans %q, want 1 (all: %v)", len(spans[name]), name, spans)
	}
	return spans[name][0]
}

// TestTraceReverseProxy: requests carried by ReverseProxy (a Transport
// given, or a protocol upgrade) have their attempts traced too.
func TestTraceReverseProxy(t *testing.T) {
	tr, recv := startTracing(t)
	up := &traceHeaders{}
	_, addr := startBackend(t, up)
	h := proxy.New(proxy.Options{Tracer: tr.Tracer(), Transport: proxy.NewTransport()})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	base := startProxy(t, h)
	send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, http.Header{"Traceparent": {clientParent}})
	spans := flushed(t, tr, recv)
	srv, u := one(t, spans, "GET"), one(t, spans, "upstream")
	if u.ParentSpanID != srv.SpanID || u.Attrs["http.response.status_code"] != "200" {
		t.Errorf("upstream span %+v, server span %s", u, srv.SpanID)
	}
	if parent, _ := up.got(); len(parent) != 1 || parent[0] != "00-"+clientTrace+"-"+u.SpanID+"-01" {
		t.Errorf("upstream got traceparent %q, want the attempt span %s", parent, u.SpanID)
	}
}

// TestTraceSampling: with a sample of 0 berth records none of the traces it
// starts, yet still names its span, unsampled, to the upstream; a client's
// sampled traceparent is followed (parent-based).
func TestTraceSampling(t *testing.T) {
	recv := otlptest.Start(t)
	tr, err := tracing.New(tracing.Config{Endpoint: recv.Addr, Insecure: true, Sample: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	up := &traceHeaders{}
	_, addr := startBackend(t, up)
	h := proxy.New(proxy.Options{Tracer: tr.Tracer()})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	base := startProxy(t, h)
	send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, nil)
	if spans := flushed(t, tr, recv); len(spans) != 0 {
		t.Errorf("unsampled trace exported %v", spans)
	}
	parent, _ := up.got()
	if len(parent) != 1 || len(parent[0]) != 55 || !strings.HasSuffix(parent[0], "-00") {
		t.Errorf("upstream got traceparent %q, want berth's unsampled span", parent)
	}
	send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, http.Header{"Traceparent": {clientParent}})
	spans := flushed(t, tr, recv)
	if srv := one(t, spans, "GET"); srv.TraceID != clientTrace {
		t.Errorf("server span %+v, want the client's sampled trace", srv)
	}
}
