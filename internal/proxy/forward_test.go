package proxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/proxy"
)

// countConns counts the connections a test server accepts.
func countConns(s *httptest.Server) *atomic.Int64 {
	var n atomic.Int64
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

// TestForwardReusesConnections checks that sequential requests share one
// kept-alive upstream connection and leave nothing in flight.
func TestForwardReusesConnections(t *testing.T) {
	up := httptest.NewUnstartedServer(echoHandler())
	conns := countConns(up)
	up.Start()
	t.Cleanup(up.Close)
	be := proxy.NewBackend("app-1", strings.TrimPrefix(up.URL, "http://"), false)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", be), catchAll}))
	base := startProxy(t, h)
	c := newClient(t)
	for i := range 20 {
		resp, body := get(t, c, base+"/n", "app.test")
		if resp.StatusCode != http.StatusOK || decodeEcho(t, body).URI != "/n" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 sequential requests opened %d upstream connections, want 1", n)
	}
	if n := be.InFlight(); n != 0 {
		t.Errorf("in flight = %d after the requests", n)
	}
}

// TestForwardStaleConnection has the backend close every kept-alive
// connection after one response: the next request, written into a connection
// the backend has closed, must still be answered.
func TestForwardStaleConnection(t *testing.T) {
	for _, wait := range []bool{false, true} {
		name := "reused at once"
		if wait {
			name = "reused after the close arrived"
		}
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			closed := make(chan struct{}, 16)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						// One response announced as keep-alive, then hang up.
						defer func() { c.Close(); closed <- struct{}{} }()
						br := bufio.NewReader(c)
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						io.Copy(io.Discard, req.Body)
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					}()
				}
			}()
			h := proxy.New(proxy.Options{})
			h.Swap(table(entry{static("app", proxy.NewBackend("one-shot", ln.Addr().String(), false)), catchAll}))
			base := startProxy(t, h)
			c := newClient(t)
			for i := range 3 {
				resp, body := get(t, c, base+"/", "app.test")
				if resp.StatusCode != http.StatusOK || body != "ok" {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
				}
				if wait {
					select {
					case <-closed:
					case <-time.After(hangGuard):
						t.Fatal("backend never closed the connection")
					}
				}
			}
		})
	}
}

// TestForwardHopByHop checks that hop-by-hop headers, and headers named in
// Connection, are dropped in both directions while end-to-end ones pass,
// and that a client's X-Berth-Hop (the hop between fleet hosts' origin)
// and the hop's admin marks never reach a backend.
func TestForwardHopByHop(t *testing.T) {
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "X-Backend-Private")
		w.Header().Set("X-Backend-Private", "secret")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Backend-Public", "yes")
		echoHandler().ServeHTTP(w, r)
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	base := startProxy(t, h)
	resp, body := send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, http.Header{
		"Connection":          {"X-Client-Private"},
		"X-Client-Private":    {"dropped"},
		"Proxy-Authorization": {"Basic Zm9vOmJhcg=="},
		"Forwarded":           {"for=203.0.113.9"},
		"X-Berth-Hop":         {"posing-as-a-fleet-host"},
		"X-Berth-Hop-Admin":   {"alpha"},
		"X-Berth-Hop-Client":  {"192.0.2.1:1"},
		"X-Berth-Hop-Ungated": {"1"},
		"Te":                  {"trailers, deflate"},
		"X-Client-Public":     {"kept"},
	})
	e := decodeEcho(t, body)
	for _, k := range []string{"X-Client-Private", "Proxy-Authorization", "Forwarded", "X-Berth-Hop", "Connection", "X-Berth-Hop-Admin", "X-Berth-Hop-Client", "X-Berth-Hop-Ungated"} {
		if v, ok := e.Header[k]; ok {
			t.Errorf("upstream got %s: %q", k, v)
		}
	}
	if got := e.Header.Get("X-Client-Public"); got != "kept" {
		t.Errorf("upstream got X-Client-Public %q", got)
	}
	if got := e.Header.Get("Te"); got != "trailers" {
		t.Errorf("upstream got Te %q, want trailers", got)
	}
	if got := resp.Header.Get("X-Backend-Private"); got != "" {
		t.Errorf("client got X-Backend-Private %q", got)
	}
	if got := resp.Header.Get("Keep-Alive"); got != "" {
		t.Errorf("client got Keep-Alive %q", got)
	}
	if got := resp.Header.Get("X-Backend-Public"); got != "yes" {
		t.Errorf("client got X-Backend-Public %q", got)
	}
}

// TestForwardBodies sends request bodies in both framings, with and without
// trailers, and reads a chunked response with trailers.
func TestForwardBodies(t *testing.T) {
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Trailer", "X-Sum")
		w.Header().Set("X-Framing", strings.Join(r.TransferEncoding, ",")+"|"+r.Header.Get("Content-Length"))
		w.Header().Set("X-Req-Trailer", r.Trailer.Get("X-Checksum"))
		w.Write(b)
		w.(http.Flusher).Flush() // forces a chunked response
		w.Header().Set("X-Sum", "42")
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	base := startProxy(t, h)
	c := newClient(t)
	payload := strings.Repeat("0123456789", 10000)

	tests := []struct {
		name        string
		body        func() io.Reader // nil: no body
		length      int64
		trailer     http.Header
		wantFraming string
		wantTrailer string
	}{
		{"no body", nil, 0, nil, "|0", ""}, // a POST says its empty body is empty
		{"content-length", func() io.Reader { return strings.NewReader(payload) }, int64(len(payload)), nil, "|100000", ""},
		{"chunked", func() io.Reader { return io.MultiReader(strings.NewReader(payload)) }, -1, nil, "chunked|", ""},
		{"chunked with trailer", func() io.Reader { return io.MultiReader(strings.NewReader(payload)) }, -1, http.Header{"X-Checksum": {"abc"}}, "chunked|", "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			var body io.Reader
			want := ""
			if tt.body != nil {
				body, want = tt.body(), payload
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "app.test"
			req.ContentLength = tt.length
			req.Trailer = tt.trailer
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || string(got) != want {
				t.Fatalf("status %d, %d bytes back, want %d", resp.StatusCode, len(got), len(want))
			}
			if f := resp.Header.Get("X-Framing"); f != tt.wantFraming {
				t.Errorf("upstream saw framing %q, want %q", f, tt.wantFraming)
			}
			if v := resp.Header.Get("X-Req-Trailer"); v != tt.wantTrailer {
				t.Errorf("upstream saw request trailer %q, want %q", v, tt.wantTrailer)
			}
			if v := resp.Trailer.Get("X-Sum"); v != "42" {
				t.Errorf("response trailer X-Sum = %q, want 42", v)
			}
		})
	}
}

// TestForwardEarlyAnswer has the backend refuse a large upload without
// reading it: the client gets the refusal, nothing hangs, and the next
// request is served.
func TestForwardEarlyAnswer(t *testing.T) {
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("Connection", "close")
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		io.WriteString(w, "fine")
	}))
	be := proxy.NewBackend("app-1", addr, false)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", be), catchAll}))
	base := startProxy(t, h)
	c := newClient(t)
	big := strings.Repeat("x", 4<<20) // more than the socket buffers hold
	resp, body := send(t, c, http.MethodPost, base+"/upload", "app.test", strings.NewReader(big), nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("upload: %d %q, want 413", resp.StatusCode, body)
	}
	if resp, body := get(t, c, base+"/", "app.test"); resp.StatusCode != http.StatusOK || body != "fine" {
		t.Errorf("next request: %d %q", resp.StatusCode, body)
	}
	if n := be.InFlight(); n != 0 {
		t.Errorf("in flight = %d", n)
	}
}

// TestForwardBrokenResponse has the backend promise more bytes than it sends:
// the client must see the response fail, not a short body taken as whole.
func TestForwardBrokenResponse(t *testing.T) {
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly this")
		bw.Flush()
	}))
	rec := newRecorder()
	d := static("app", proxy.NewBackend("app-1", addr, false))
	d.Metrics = rec
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{d, catchAll}))
	base := startProxy(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	req.Host = "app.test"
	// The short response fits in berth's write buffer, so the client may
	// see the connection cut before the head or while reading the body;
	// either way it must not get a whole-looking response.
	if resp, err := newClient(t).Do(req); err == nil {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("read a truncated body without error: %q", b)
		}
	}
	if o := rec.next(t); o != (observation{200, false}) {
		t.Errorf("observed %+v", o)
	}
}

// TestForwardClientGone checks that a client hanging up while the backend
// works cancels the backend's request and frees the slot.
func TestForwardClientGone(t *testing.T) {
	arrived := make(chan string, 1)
	canceled := make(chan struct{})
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	base := startProxy(t, h)

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /slow HTTP/1.1\r\nHost: app.test\r\n\r\n")
	waitArrival(t, arrived)
	conn.Close()
	select {
	case <-canceled:
	case <-time.After(hangGuard):
		t.Fatal("the backend's request was not canceled when the client left")
	}
	if o := rec.next(t); o != (observation{499, true}) {
		t.Errorf("observed %+v, want 499 failed", o)
	}
	if err := h.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := be.InFlight(); n != 0 {
		t.Errorf("in flight = %d", n)
	}
}

// TestForwardTLS checks an https backend through the forwarder, with the
// CA given in Options.TLSClientConfig, and a refused certificate without it.
func TestForwardTLS(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "plaintext", http.StatusBadRequest)
			return
		}
		echoHandler().ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	addr := strings.TrimPrefix(up.URL, "https://")
	tbl := table(entry{static("secure", proxy.NewBackend("https://"+addr, addr, true)), catchAll})

	cfg := up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	h := proxy.New(proxy.Options{TLSClientConfig: cfg})
	h.Swap(tbl)
	base := startProxy(t, h)
	c := newClient(t)
	for range 2 {
		resp, body := get(t, c, base+"/s?q=1", "secure.test")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %q", resp.StatusCode, body)
		}
		if e := decodeEcho(t, body); e.Host != "secure.test" || e.URI != "/s?q=1" {
			t.Errorf("upstream saw Host %q URI %q", e.Host, e.URI)
		}
	}

	// A backend of its own: kept-alive connections belong to the Backend,
	// and the one above already has a verified one.
	untrusting := proxy.New(proxy.Options{TLSClientConfig: &tls.Config{}})
	untrusting.Swap(table(entry{static("secure", proxy.NewBackend("https://"+addr, addr, true)), catchAll}))
	resp, _ := get(t, c, startProxy(t, untrusting)+"/", "secure.test")
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("unknown CA: status %d, want 502", resp.StatusCode)
	}
}

// holder is a proxy.Holder that adds a backend to the pool on the first wait,
// or gives up when add is nil.
type holder struct {
	mu    sync.Mutex
	pool  *proxy.Pool
	add   *proxy.Backend
	waits int
}

func (h *holder) Await(ctx context.Context, since time.Time, first bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waits++
	if h.add == nil {
		return errors.New("gave up")
	}
	h.pool.Set([]*proxy.Backend{h.add})
	return nil
}

func (h *holder) RetryAfter() time.Duration { return 3 * time.Second }

// TestForwardColdStartHold checks that the forwarder holds a request for an
// empty pool with a Holder, as the ReverseProxy path does.
func TestForwardColdStartHold(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	pool := proxy.NewPool()
	hold := &holder{pool: pool, add: proxy.NewBackend("vm-1", addr, false)}
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{&proxy.Deployment{ID: "vm", Pool: pool, Hold: hold}, catchAll}))
	base := startProxy(t, h)
	resp, body := get(t, newClient(t), base+"/", "vm.test")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Vm-Id") != "vm-1" {
		t.Fatalf("held request: %d from %q: %q", resp.StatusCode, resp.Header.Get("X-Vm-Id"), body)
	}
	if resp.Header.Get("X-Berth-Cold-Start") == "" {
		t.Error("held response lacks X-Berth-Cold-Start")
	}

	giveUp := &holder{pool: proxy.NewPool()}
	h.Swap(table(entry{&proxy.Deployment{ID: "vm", Pool: giveUp.pool, Hold: giveUp}, catchAll}))
	resp, body = get(t, newClient(t), base+"/", "vm.test")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "3" ||
		body != "no replica became available within cold_start_timeout_secs\n" {
		t.Errorf("gave up: %d Retry-After %q %q", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// cannotStart is a proxy.Refusal.
type cannotStart struct{ retry time.Duration }

func (cannotStart) Error() string {
	return "create failed: open /var/lib/berth/secret: permission denied"
}
func (cannotStart) PublicMessage() string {
	return `deployment "vm" cannot start: a secret named in vm.env_from could not be read`
}
func (c cannotStart) RetryAfter() time.Duration { return c.retry }

// failingHolder holds a request until fail is closed, then refuses it, as
// a pool does whose create fails while requests wait.
type failingHolder struct {
	held chan struct{} // a request is held
	fail chan struct{}
}

func (h *failingHolder) Await(ctx context.Context, since time.Time, first bool) error {
	h.held <- struct{}{}
	select {
	case <-h.fail:
		return cannotStart{retry: 2500 * time.Millisecond}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *failingHolder) RetryAfter() time.Duration { return time.Hour }

// TestHeldRequestRefusedAtOnce: a request held for a cold start is
// answered as soon as its Holder refuses it (the pool's create failed): a
// 503 with the Holder's public message, not its error, and a Retry-After
// from the refusal rounded up, not the timed-out hold's.
func TestHeldRequestRefusedAtOnce(t *testing.T) {
	hold := &failingHolder{held: make(chan struct{}), fail: make(chan struct{})}
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{&proxy.Deployment{ID: "vm", Pool: proxy.NewPool(), Hold: hold}, catchAll}))
	base := startProxy(t, h)
	go func() {
		<-hold.held // the request is held: now the create fails
		close(hold.fail)
	}()
	resp, body := get(t, newClient(t), base+"/", "vm.test")
	if resp.StatusCode != http.StatusServiceUnavailable ||
		body != `deployment "vm" cannot start: a secret named in vm.env_from could not be read`+"\n" {
		t.Errorf("refused hold: %d %q", resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "3" {
		t.Errorf("Retry-After %q, want 3 (2.5s rounded up)", ra)
	}
}

// TestForwardBodilessResponses checks responses that carry no body whatever
// their headers say (HEAD, 204, 304): the client gets the head, and the
// upstream connection stays usable for the next request.
func TestForwardBodilessResponses(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.Header().Set("Etag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		}
	}))
	conns := countConns(up)
	up.Start()
	t.Cleanup(up.Close)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", strings.TrimPrefix(up.URL, "http://"), false)), catchAll}))
	base := startProxy(t, h)
	c := newClient(t)
	tests := []struct {
		method, path string
		status       int
		length, body string
	}{
		{http.MethodHead, "/", 200, "5", ""},
		{http.MethodGet, "/204", 204, "", ""},
		{http.MethodGet, "/304", 304, "", ""},
		{http.MethodGet, "/", 200, "5", "hello"},
	}
	for _, tt := range tests {
		resp, body := send(t, c, tt.method, base+tt.path, "app.test", nil, nil)
		if resp.StatusCode != tt.status || body != tt.body {
			t.Errorf("%s %s: %d %q", tt.method, tt.path, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Content-Length"); got != tt.length {
			t.Errorf("%s %s: Content-Length %q, want %q", tt.method, tt.path, got, tt.length)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("upstream connections = %d, want 1 (each response left it reusable)", n)
	}
}
