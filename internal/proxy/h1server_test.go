package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/proxy/proxytest"
	"github.com/berth-dev/berth/internal/route"
)

// TestH1FrontEndSuite runs every test of this package again with startProxy
// serving through the HTTP/1.1 front end (see frontEnd), in a child process
// of the test binary: once as configured, once watching every request.
func TestH1FrontEndSuite(t *testing.T) {
	if frontEnd != "" {
		t.Skip("already the front end's run")
	}
	for _, mode := range []string{"h1", "h1-watch"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"-test.run=^(Test|Example)", "-test.skip=^TestH1FrontEndSuite$", "-test.count=1"}
			if testing.Short() {
				args = append(args, "-test.short")
			}
			if testing.Verbose() {
				args = append(args, "-test.v")
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], args...)
			cmd.Env = append(os.Environ(), "BERTH_PROXY_FRONTEND="+mode)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the suite through the front end failed: %v\n%s", err, out)
			}
			if testing.Verbose() {
				t.Logf("%s", out)
			}
		})
	}
}

// startH1 serves h through an H1Server on a loopback listener and returns its
// address and the server (closed with the test).
func startH1(t testing.TB, h *proxy.Handler, o proxy.H1Options) (string, *proxy.H1Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	fe := h.NewH1Server(&http.Server{Handler: h, Protocols: p}, o)
	served := make(chan error, 1)
	go func() { served <- fe.Serve(ln) }()
	t.Cleanup(func() {
		fe.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return ln.Addr().String(), fe
}

// rawConn is a client connection speaking raw HTTP/1.x.
type rawConn struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(hangGuard))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatal(err)
	}
}

// response reads one response (to a request with method) and its body.
func (rc *rawConn) response(method string) (*http.Response, string) {
	rc.t.Helper()
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		rc.t.Fatalf("reading a response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		rc.t.Fatalf("reading a response body: %v", err)
	}
	return resp, string(b)
}

// closed reports whether the server closed the connection: the next read
// finds its end (EOF or a reset), not data and not the hang guard.
func (rc *rawConn) closed() bool {
	rc.t.Helper()
	b, err := rc.br.ReadByte()
	if err == nil {
		rc.t.Errorf("unexpected byte %q after the response", b)
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true
}

// echoProxy is a Handler routing everything to an echo backend, whose
// requests are counted.
func echoProxy(t testing.TB) (*proxy.Handler, *atomic.Int64) {
	var n atomic.Int64
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		echoHandler().ServeHTTP(w, r)
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	return h, &n
}

// TestH1Refusals sends requests that could be read two ways, or are malformed:
// each is answered with its error status and the connection is closed, and no
// backend sees anything.
func TestH1Refusals(t *testing.T) {
	h, seen := echoProxy(t)
	addr, _ := startH1(t, h, proxy.H1Options{MaxHeaderBytes: 8 << 10})
	tests := []struct {
		name   string
		raw    string
		status int
	}{
		{"CL and TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"TE and CL", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", 400},
		{"differing CLs", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 30\r\n\r\nxGET /smuggled HTTP/1.1\r\n\r\n", 400},
		{"TE not chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400},
		{"TE with space before colon", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n", 400},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", 400},
		{"bare CR", "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\rX-B: 2\r\n\r\n", 400},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\x002\r\n\r\n", 400},
		{"bad header name", "GET / HTTP/1.1\r\nHost: a\r\nX A: 1\r\n\r\n", 400},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"malformed request line", "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"head too large", "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("x", 16<<10) + "\r\n\r\n", 431},
		{"too many fields", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-A: 1\r\n", 300) + "\r\n", 431},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := dialRaw(t, addr)
			rc.send(tt.raw)
			resp, body := rc.response("GET")
			if resp.StatusCode != tt.status {
				t.Errorf("status %d (%q), want %d", resp.StatusCode, body, tt.status)
			}
			if !resp.Close {
				t.Error("the answer does not say Connection: close")
			}
			if !rc.closed() {
				t.Error("the connection stayed open")
			}
		})
	}
	if n := seen.Load(); n != 0 {
		t.Errorf("the backend saw %d requests", n)
	}
}

// TestH1SlowHeaders: a client that never finishes its head is disconnected
// after the read-header timeout, without an answer.
func TestH1SlowHeaders(t *testing.T) {
	h, seen := echoProxy(t)
	addr, _ := startH1(t, h, proxy.H1Options{ReadHeaderTimeout: 50 * time.Millisecond})
	for _, first := range []bool{true, false} {
		rc := dialRaw(t, addr)
		if !first {
			rc.send("GET /one HTTP/1.1\r\nHost: a\r\n\r\n")
			if resp, _ := rc.response("GET"); resp.StatusCode != 200 {
				t.Fatalf("first request: %d", resp.StatusCode)
			}
		}
		rc.send("GET / HTTP/1.1\r\nHost: a\r\nX-Slow: ")
		if !rc.closed() {
			t.Errorf("first request %v: the connection stayed open", first)
		}
	}
	if n := seen.Load(); n != 1 {
		t.Errorf("the backend saw %d requests, want 1", n)
	}
}

// TestH1IdleTimeout: a kept-alive connection with no next request is closed
// after the idle timeout.
func TestH1IdleTimeout(t *testing.T) {
	h, _ := echoProxy(t)
	addr, _ := startH1(t, h, proxy.H1Options{IdleTimeout: 50 * time.Millisecond})
	rc := dialRaw(t, addr)
	rc.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, _ := rc.response("GET"); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("status %d, close %v", resp.StatusCode, resp.Close)
	}
	if !rc.closed() {
		t.Error("the idle connection stayed open")
	}
}

// TestH1KeepAliveAndPipelining sends several requests in one write, with
// bodies in both framings: the answers come back in order on the same
// connection, which then goes on.
func TestH1KeepAliveAndPipelining(t *testing.T) {
	h, _ := echoProxy(t)
	addr, _ := startH1(t, h, proxy.H1Options{})
	rc := dialRaw(t, addr)
	rc.send("GET /1 HTTP/1.1\r\nHost: a\r\n\r\n" +
		"POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello" +
		"POST /3 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=x\r\nabc\r\n2\r\nde\r\n0\r\nX-Unannounced: t\r\n\r\n" +
		"HEAD /4 HTTP/1.1\r\nHost: a\r\n\r\n" +
		"GET /5 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	want := []struct{ method, uri, body string }{
		{"GET", "/1", ""}, {"POST", "/2", "hello"}, {"POST", "/3", "abcde"}, {"HEAD", "/4", ""}, {"GET", "/5", ""},
	}
	for _, w := range want {
		resp, body := rc.response(w.method)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: status %d %q", w.method, w.uri, resp.StatusCode, body)
		}
		if w.method == "HEAD" {
			if body != "" {
				t.Errorf("HEAD answered with a body %q", body)
			}
			continue
		}
		e := decodeEcho(t, body)
		if e.Method != w.method || e.URI != w.uri || e.Body != w.body {
			t.Errorf("answer %q, want %s %s %q", body, w.method, w.uri, w.body)
		}
		if e.Header.Get("X-Unannounced") != "" {
			t.Errorf("an unannounced request trailer became a header")
		}
		if resp.Close != (w.uri == "/5") {
			t.Errorf("%s: Connection: close is %v", w.uri, resp.Close)
		}
	}
	if !rc.closed() {
		t.Error("the connection stayed open after Connection: close")
	}
}

// TestH1HTTP10: an HTTP/1.0 request without keep-alive is answered and the
// connection closed; with keep-alive the connection goes on, and an answer of
// unknown length is delimited by the close.
func TestH1HTTP10(t *testing.T) {
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			io.WriteString(w, "streamed")
			w.(http.Flusher).Flush()
			return
		}
		io.WriteString(w, r.Proto+" "+r.Host)
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	paddr, _ := startH1(t, h, proxy.H1Options{})

	rc := dialRaw(t, paddr)
	rc.send("GET / HTTP/1.0\r\n\r\n")
	if resp, body := rc.response("GET"); resp.StatusCode != 200 || body != "HTTP/1.1 "+addr {
		t.Errorf("HTTP/1.0: %d %q", resp.StatusCode, body)
	}
	if !rc.closed() {
		t.Error("HTTP/1.0 without keep-alive: the connection stayed open")
	}

	rc = dialRaw(t, paddr)
	rc.send("GET / HTTP/1.0\r\nHost: a.test\r\nConnection: keep-alive\r\n\r\n")
	resp, body := rc.response("GET")
	if resp.StatusCode != 200 || body != "HTTP/1.1 a.test" || resp.Header.Get("Connection") != "keep-alive" {
		t.Errorf("HTTP/1.0 keep-alive: %d %q, Connection %q", resp.StatusCode, body, resp.Header.Get("Connection"))
	}
	rc.send("GET /stream HTTP/1.0\r\nHost: a.test\r\nConnection: keep-alive\r\n\r\n")
	resp, body = rc.response("GET")
	if resp.StatusCode != 200 || body != "streamed" || resp.ContentLength != -1 || len(resp.TransferEncoding) != 0 {
		t.Errorf("HTTP/1.0 stream: %d %q, length %d, %q", resp.StatusCode, body, resp.ContentLength, resp.TransferEncoding)
	}
	if !rc.closed() {
		t.Error("HTTP/1.0 stream: the connection stayed open")
	}
}

// TestH1HandOffs checks what goes to net/http: Expect: 100-continue, a site,
// OPTIONS * and an absolute-form target, each answered as net/http would, on
// a connection that keeps working.
func TestH1HandOffs(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	site := &proxy.Deployment{ID: "docs", Site: http.FileServerFS(fstest.MapFS{"index.html": {Data: []byte("<p>docs</p>")}})}
	h := proxy.New(proxy.Options{})
	h.Swap(table(
		entry{site, []route.Rule{{PathPrefix: "/docs", StripPrefix: true}}},
		entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll},
	))
	paddr, _ := startH1(t, h, proxy.H1Options{})

	rc := dialRaw(t, paddr)
	rc.send("POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("Expect: 100-continue: %v, %v", resp, err)
	}
	rc.send("data")
	if resp, body := rc.response("POST"); resp.StatusCode != 200 || decodeEcho(t, body).Body != "data" {
		t.Errorf("after 100 Continue: %d %q", resp.StatusCode, body)
	}
	rc.send("GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, body := rc.response("GET"); resp.StatusCode != 200 || decodeEcho(t, body).URI != "/after" {
		t.Errorf("next request on the handed-off connection: %d %q", resp.StatusCode, body)
	}

	rc = dialRaw(t, paddr)
	rc.send("GET /docs/ HTTP/1.1\r\nHost: a\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, body := rc.response("GET"); resp.StatusCode != 200 || body != "<p>docs</p>" {
		t.Errorf("site: %d %q", resp.StatusCode, body)
	}
	if resp, body := rc.response("GET"); resp.StatusCode != 200 || decodeEcho(t, body).URI != "/x" {
		t.Errorf("pipelined after the site: %d %q", resp.StatusCode, body)
	}

	rc = dialRaw(t, paddr)
	rc.send("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\nGET http://a.test/abs HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, _ := rc.response("OPTIONS"); resp.StatusCode != 200 || resp.Header.Get("Content-Length") != "0" {
		t.Errorf("OPTIONS *: %d, %q", resp.StatusCode, resp.Header)
	}
	if resp, body := rc.response("GET"); resp.StatusCode != 200 || decodeEcho(t, body).URI != "/abs" {
		t.Errorf("absolute-form: %d %q", resp.StatusCode, body)
	}
}

// TestH1Shutdown: Shutdown closes idle connections at once, lets the request
// in progress finish (closing its connection after the answer), refuses new
// connections, and returns once all is done.
func TestH1Shutdown(t *testing.T) {
	arrived := make(chan string, 1)
	g := newGate("A", arrived)
	_, addr := startBackend(t, g)
	t.Cleanup(g.open)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("A", addr, false)), catchAll}))
	paddr, fe := startH1(t, h, proxy.H1Options{})

	idle := dialRaw(t, paddr)
	idle.send("GET /idle HTTP/1.1\r\nHost: a\r\n\r\n")
	waitArrival(t, arrived)
	g.open()
	if resp, _ := idle.response("GET"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}

	g2 := newGate("B", arrived)
	_, addr2 := startBackend(t, g2)
	t.Cleanup(g2.open)
	h.Swap(table(entry{static("app", proxy.NewBackend("B", addr2, false)), catchAll}))
	busy := dialRaw(t, paddr)
	busy.send("GET /busy HTTP/1.1\r\nHost: a\r\n\r\n")
	waitArrival(t, arrived)

	done := make(chan error, 1)
	go func() { done <- fe.Shutdown(context.Background()) }()
	if !idle.closed() {
		t.Error("the idle connection stayed open")
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a request in progress", err)
	default:
	}
	g2.open()
	resp, body := busy.response("GET")
	if resp.StatusCode != 200 || body != "done by B" || !resp.Close {
		t.Errorf("request in progress: %d %q, close %v", resp.StatusCode, body, resp.Close)
	}
	if !busy.closed() {
		t.Error("the busy connection stayed open after its answer")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Shutdown never returned")
	}
	if c, err := net.Dial("tcp", paddr); err == nil {
		c.Close()
		t.Error("a new connection was accepted after Shutdown")
	}
}

// TestH1PanicRecovered: a panic while serving is answered 500, the
// connection closed, and the server goes on.
func TestH1PanicRecovered(t *testing.T) {
	h := proxy.New(proxy.Options{Resolve: func(w http.ResponseWriter, r *http.Request, host string) (*proxy.Deployment, func(), bool) {
		if host == "panic.test" {
			panic("resolver bug")
		}
		return nil, nil, false
	}})
	addr, _ := startH1(t, h, proxy.H1Options{})
	rc := dialRaw(t, addr)
	rc.send("GET / HTTP/1.1\r\nHost: panic.test\r\n\r\n")
	if resp, _ := rc.response("GET"); resp.StatusCode != 500 {
		t.Errorf("status %d, want 500", resp.StatusCode)
	}
	if !rc.closed() {
		t.Error("the connection stayed open after a panic")
	}
	rc = dialRaw(t, addr)
	rc.send("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if resp, body := rc.response("GET"); resp.StatusCode != 404 || body != "no deployment matches this request\n" {
		t.Errorf("after the panic: %d %q", resp.StatusCode, body)
	}
}

// BenchmarkH1 measures the front end end to end over loopback TCP with a
// keep-alive client and upstream that allocate nothing (proxytest), so the
// allocations and most of the CPU reported are the front end's and the
// forwarder's.
func BenchmarkH1(b *testing.B) {
	addr := proxytest.RawUpstream(b, 100)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
	paddr, _ := startH1(b, h, proxy.H1Options{})
	q := proxytest.NewQuietClient(b, paddr, "GET /bench?q=1 HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	b.ReportAllocs()
	for b.Loop() {
		if st, n := q.Do(); st != 200 || n != 100 {
			b.Fatalf("status %d, %d bytes", st, n)
		}
	}
}

// TestH1ClientGoneAfterBody: a client that sent its whole body and hangs up
// while the backend works cancels the backend's request, as it does for a
// request without a body (TestForwardClientGone).
func TestH1ClientGoneAfterBody(t *testing.T) {
	arrived := make(chan string, 1)
	canceled := make(chan struct{})
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		arrived <- "A"
		<-r.Context().Done()
		close(canceled)
	}))
	be := proxy.NewBackend("A", addr, false)
	rec := newRecorder()
	d := static("app", be)
	d.Metrics = rec
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{d, catchAll}))
	paddr, _ := startH1(t, h, proxy.H1Options{})

	for _, framing := range []string{"Content-Length: 5\r\n\r\nhello", "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"} {
		rc := dialRaw(t, paddr)
		rc.send("POST /slow HTTP/1.1\r\nHost: app.test\r\n" + framing)
		waitArrival(t, arrived)
		rc.c.Close()
		select {
		case <-canceled:
		case <-time.After(hangGuard):
			t.Fatalf("%q: the backend's request was not canceled when the client left", framing)
		}
		if o := rec.next(t); o != (observation{499, true}) {
			t.Errorf("%q: observed %+v, want 499 failed", framing, o)
		}
		canceled = make(chan struct{})
	}
	if err := h.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := be.InFlight(); n != 0 {
		t.Errorf("in flight = %d", n)
	}
}

// TestH1ClientGoneOnKeptConnection: the hang-up watch, whose timer is left
// pending from one request to the next, still watches a slow request that
// follows quick ones on the same connection, and one that follows a slow
// request's watch.
func TestH1ClientGoneOnKeptConnection(t *testing.T) {
	arrived := make(chan string, 1)
	canceled := make(chan struct{}, 1)
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/quick":
			io.WriteString(w, "quick")
		case "/slow-answered":
			time.Sleep(2 * *proxy.WatchAfter) // long enough to be watched, then answered
			io.WriteString(w, "slow")
		default:
			arrived <- r.URL.Path
			<-r.Context().Done()
			canceled <- struct{}{}
		}
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("A", addr, false)), catchAll}))
	paddr, _ := startH1(t, h, proxy.H1Options{})

	for _, before := range [][]string{{"/quick", "/quick", "/quick"}, {"/slow-answered", "/quick"}} {
		rc := dialRaw(t, paddr)
		for _, p := range before {
			rc.send("GET " + p + " HTTP/1.1\r\nHost: app.test\r\n\r\n")
			if resp, body := rc.response("GET"); resp.StatusCode != 200 || body == "" {
				t.Fatalf("%s: %d %q", p, resp.StatusCode, body)
			}
		}
		rc.send("GET /hang HTTP/1.1\r\nHost: app.test\r\n\r\n")
		waitArrival(t, arrived)
		rc.c.Close()
		select {
		case <-canceled:
		case <-time.After(hangGuard):
			t.Fatalf("after %v: the backend's request was not canceled when the client left", before)
		}
	}
}
