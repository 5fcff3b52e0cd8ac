package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/route"
)

// hangGuard bounds every wait in these tests. It is not a timing assertion:
// it only turns a would-be deadlock (say, a buffering proxy) into a failure.
const hangGuard = 10 * time.Second

// startProxy serves h with a real http.Server on a loopback listener, with
// HTTP/1.1 and h2c enabled, and returns its base URL. See frontEnd.
func startProxy(t testing.TB, h http.Handler, configure ...func(*http.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: p}
	for _, f := range configure {
		f(srv)
	}
	if ph, ok := h.(*proxy.Handler); ok && frontEnd != "" {
		fe := ph.NewH1Server(srv, proxy.H1Options{})
		go fe.Serve(ln)
		t.Cleanup(func() { fe.Close() })
		return "http://" + ln.Addr().String()
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// frontEnd selects what startProxy serves a *proxy.Handler with: net/http
// (empty), or the HTTP/1.1 front end with net/http as its fallback ("h1"; and
// "h1-watch", where every request's connection is watched for the client
// hanging up, which is otherwise done only for slow ones).
// TestH1FrontEndSuite runs the whole package's tests again with each.
var frontEnd = os.Getenv("BERTH_PROXY_FRONTEND")

func init() {
	if frontEnd == "h1-watch" {
		*proxy.WatchAfter = time.Nanosecond
	}
}

// newClient returns an HTTP/1.1 client that does not follow redirects and is
// torn down with the test.
func newClient(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// startBackend starts a loopback upstream and returns it with its host:port.
// It is closed when the test ends; register release channels after calling
// this so that they are closed first and blocked handlers can return.
func startBackend(t testing.TB, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s, strings.TrimPrefix(s.URL, "http://")
}

// deadAddr returns a loopback address nobody listens on: connecting to it is
// refused.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// echoed is what echoHandler reports about the request it received.
type echoed struct {
	Method string
	URI    string
	Host   string
	Header http.Header
	Body   string
}

// echoHandler answers every request with a JSON description of it.
func echoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(echoed{
			Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header, Body: string(b),
		})
	})
}

func decodeEcho(t testing.TB, body string) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("backend answer %q is not an echo: %v", body, err)
	}
	return e
}

// static returns a static deployment over the given backends.
func static(id string, bs ...*proxy.Backend) *proxy.Deployment {
	return &proxy.Deployment{ID: id, Pool: proxy.NewPool(bs...)}
}

// entry is one deployment with its routes, for table.
type entry struct {
	d     *proxy.Deployment
	rules []route.Rule
}

// table builds a routing table in the given order.
func table(es ...entry) *proxy.Table {
	var b route.Builder[*proxy.Deployment]
	for _, e := range es {
		b.Add(e.d.ID, e.d, e.rules)
	}
	return b.Build()
}

// send performs one request with an explicit Host header and returns the
// response with its body read.
func send(t testing.TB, c *http.Client, method, url, host string, body io.Reader, hdr http.Header) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, url, host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s (Host %s): reading body: %v", method, url, host, err)
	}
	return resp, string(b)
}

// get is send for a plain GET.
func get(t testing.TB, c *http.Client, url, host string) (*http.Response, string) {
	t.Helper()
	return send(t, c, http.MethodGet, url, host, nil, nil)
}

// observation is one Recorder.Observe call.
type observation struct {
	status int
	failed bool
}

// recorder is a proxy.Recorder that hands every observation to the test.
type recorder struct {
	ch chan observation
}

func newRecorder() *recorder { return &recorder{ch: make(chan observation, 64)} }

func (r *recorder) Observe(status int, _ time.Duration, failed bool) {
	r.ch <- observation{status, failed}
}

// next returns the next observation, failing the test if none comes.
func (r *recorder) next(t testing.TB) observation {
	t.Helper()
	select {
	case o := <-r.ch:
		return o
	case <-time.After(hangGuard):
		t.Fatal("no observation recorded")
		return observation{}
	}
}

// gate is a backend handler that parks every request until released, and
// reports each arrival (by the backend's name) on arrived.
type gate struct {
	name    string
	arrived chan string
	release chan struct{}
	once    sync.Once
}

func newGate(name string, arrived chan string) *gate {
	return &gate{name: name, arrived: arrived, release: make(chan struct{})}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	g.arrived <- g.name
	select {
	case <-g.release:
	case <-r.Context().Done():
		return
	}
	io.WriteString(w, "done by "+g.name)
}

// open releases every parked and future request. Safe to call twice.
func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// waitArrival returns the name of the backend the next parked request reached.
func waitArrival(t testing.TB, arrived <-chan string) string {
	t.Helper()
	select {
	case n := <-arrived:
		return n
	case <-time.After(hangGuard):
		t.Fatal("request never reached a backend")
		return ""
	}
}

// result is the outcome of a request sent in the background.
type result struct {
	status int
	vmID   string
	body   string
	err    error
}

// sendAsync starts a GET in the background.
func sendAsync(c *http.Client, url, host string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			ch <- result{err: err}
			return
		}
		req.Host = host
		resp, err := c.Do(req)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- result{status: resp.StatusCode, vmID: resp.Header.Get("X-Vm-Id"), body: string(b), err: err}
	}()
	return ch
}

func waitResult(t testing.TB, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("background request: %v", r.err)
		}
		return r
	case <-time.After(hangGuard):
		t.Fatal("background request never finished")
		return result{}
	}
}
