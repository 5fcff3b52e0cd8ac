package proxy_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/proxy"
)

// rawBackend serves every connection it accepts with serve, which is given
// each request read from it in turn (its body unread) and the connection to
// answer on. It is how these tests write backends that break HTTP/1.1 in
// ways net/http never would. It returns the address and a count of the
// connections accepted.
func rawBackend(t *testing.T, serve func(c net.Conn, br *bufio.Reader, req *http.Request) bool) (string, *atomic.Int64) {
	t.Helper()
	return rawBackendTLS(t, nil, serve)
}

// rawBackendTLS is rawBackend speaking TLS with cfg (nil: plaintext).
func rawBackendTLS(t *testing.T, cfg *tls.Config, serve func(c net.Conn, br *bufio.Reader, req *http.Request) bool) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil || !serve(c, br, req) {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), &conns
}

// idResponse is a complete response whose body names a request id.
func idResponse(id string) string {
	body := "id=" + id
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// signal hands a value to the test without ever blocking the backend.
func signal(ch chan string, v string) {
	select {
	case ch <- v:
	default:
	}
}

// awaitSignal waits for the backend to report that it sent its stray bytes,
// so that the next request goes out after they are on their way.
func awaitSignal(t *testing.T, ch <-chan string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangGuard):
		t.Fatal("the backend never sent its stray bytes")
	}
}

// misbehaviour is a backend that sends more than it was asked for.
type misbehaviour struct {
	name string
	// answer writes the response to req (whose X-Req-Id is id), with
	// whatever extra the backend sends, and then signals on strays (the
	// test sends the next request after that).
	answer func(c net.Conn, br *bufio.Reader, req *http.Request, id string, strays chan string)
	method string
	body   func(id string) string // the request body, if any
	status int
}

// TestUpstreamUnaskedBytes has backends send more than one response's worth
// of bytes on a kept-alive connection: a body on a HEAD, 204 or 304
// response, two responses to one request, an answer that comes before the
// request body is read (the body being taken for the next request). Many
// clients, one after another, each on its own connection to berth, must each
// get the response to their own request: the connection carrying stray
// bytes must never be reused.
func TestUpstreamUnaskedBytes(t *testing.T) {
	cases := []misbehaviour{
		{
			name:   "body on HEAD, one write",
			method: http.MethodHead, status: 200,
			answer: func(c net.Conn, _ *bufio.Reader, _ *http.Request, id string, strays chan string) {
				stray := idResponse(id + "-stray")
				io.WriteString(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(stray), stray))
				signal(strays, id)
			},
		},
		{
			name:   "body on HEAD, separate write",
			method: http.MethodHead, status: 200,
			answer: func(c net.Conn, _ *bufio.Reader, _ *http.Request, id string, strays chan string) {
				stray := idResponse(id + "-stray")
				io.WriteString(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(stray)))
				io.WriteString(c, stray)
				signal(strays, id)
			},
		},
		{
			name:   "body on 204",
			method: http.MethodGet, status: 204,
			answer: func(c net.Conn, _ *bufio.Reader, _ *http.Request, id string, strays chan string) {
				stray := idResponse(id + "-stray")
				io.WriteString(c, fmt.Sprintf("HTTP/1.1 204 No Content\r\nContent-Length: %d\r\n\r\n%s", len(stray), stray))
				signal(strays, id)
			},
		},
		{
			name:   "body on 304",
			method: http.MethodGet, status: 304,
			answer: func(c net.Conn, _ *bufio.Reader, _ *http.Request, id string, strays chan string) {
				io.WriteString(c, "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n")
				io.WriteString(c, idResponse(id+"-stray"))
				signal(strays, id)
			},
		},
		{
			name:   "two responses",
			method: http.MethodGet, status: 200,
			answer: func(c net.Conn, _ *bufio.Reader, _ *http.Request, id string, strays chan string) {
				io.WriteString(c, idResponse(id))
				io.WriteString(c, idResponse(id+"-second"))
				signal(strays, id)
			},
		},
		{
			name:   "answer before the request body",
			method: http.MethodPost, status: 200,
			// The body is itself a request, which a backend that answers
			// without reading the body will read as the next one.
			body: func(id string) string {
				return "GET /smuggled HTTP/1.1\r\nHost: x\r\nX-Req-Id: " + id + "-smuggled\r\n\r\n"
			},
			answer: func(c net.Conn, br *bufio.Reader, req *http.Request, id string, strays chan string) {
				io.WriteString(c, idResponse(id))
				if strings.HasSuffix(id, "-smuggled") {
					signal(strays, id)
				}
			},
		},
	}
	// A TLS backend's certificate, and a client configuration trusting it.
	certs := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(certs.Close)
	serverTLS := certs.TLS.Clone()
	clientTLS := certs.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	for _, tc := range cases {
		for _, overTLS := range []bool{false, true} {
			name := tc.name
			var cfg *tls.Config
			if overTLS {
				name += "/tls"
				cfg = serverTLS
			}
			t.Run(name, func(t *testing.T) { unaskedBytes(t, tc, cfg, clientTLS) })
		}
	}
}

// unaskedBytes is one case of TestUpstreamUnaskedBytes, against a backend
// speaking TLS with serverTLS (nil: plaintext).
func unaskedBytes(t *testing.T, tc misbehaviour, serverTLS, clientTLS *tls.Config) {
	strays := make(chan string, 1)
	addr, _ := rawBackendTLS(t, serverTLS, func(c net.Conn, br *bufio.Reader, req *http.Request) bool {
		id := req.Header.Get("X-Req-Id")
		switch {
		case strings.HasPrefix(id, "mis-") || strings.HasSuffix(id, "-smuggled"):
			tc.answer(c, br, req, id, strays)
		default:
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, idResponse(id))
		}
		return true
	})
	h := proxy.New(proxy.Options{TLSClientConfig: clientTLS})
	h.Swap(table(entry{static("app", proxy.NewBackend("raw", addr, serverTLS != nil)), catchAll}))
	base := startProxy(t, h)
	for i := range 30 {
		// A fresh client each time: another connection to berth, another
		// user.
		mis := fmt.Sprintf("mis-%d", i)
		var body io.Reader
		if tc.body != nil {
			body = strings.NewReader(tc.body(mis))
		}
		resp, got := send(t, newClient(t), tc.method, base+"/", "app.test", body, http.Header{"X-Req-Id": {mis}})
		if resp.StatusCode != tc.status {
			t.Fatalf("request %s: status %d %q, want %d", mis, resp.StatusCode, got, tc.status)
		}
		if tc.method != http.MethodHead && tc.status == 200 && got != "id="+mis {
			t.Fatalf("request %s got %q, the answer to another request", mis, got)
		}
		awaitSignal(t, strays)
		victim := fmt.Sprintf("victim-%d", i)
		resp, got = send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, http.Header{"X-Req-Id": {victim}})
		if resp.StatusCode != 200 || got != "id="+victim {
			t.Fatalf("request %s got %d %q, not its own response", victim, resp.StatusCode, got)
		}
	}
}

// TestUpstreamCleanReuse checks the other side of TestUpstreamUnaskedBytes:
// a backend that sends exactly its responses keeps one connection for many
// sequential clients, bodiless responses included.
func TestUpstreamCleanReuse(t *testing.T) {
	addr, conns := rawBackend(t, func(c net.Conn, _ *bufio.Reader, req *http.Request) bool {
		io.Copy(io.Discard, req.Body)
		id := req.Header.Get("X-Req-Id")
		switch {
		case req.Method == http.MethodHead:
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n")
		case strings.HasPrefix(id, "204"):
			io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		default:
			io.WriteString(c, idResponse(id))
		}
		return true
	})
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("raw", addr, false)), catchAll}))
	base := startProxy(t, h)
	for i := range 30 {
		id := fmt.Sprintf("%d-%d", []int{200, 204}[i%2], i)
		method := http.MethodGet
		if i%3 == 0 {
			method = http.MethodHead
		}
		resp, got := send(t, newClient(t), method, base+"/", "app.test", nil, http.Header{"X-Req-Id": {id}})
		if resp.StatusCode/100 != 2 {
			t.Fatalf("request %s: %d %q", id, resp.StatusCode, got)
		}
		if method == http.MethodGet && resp.StatusCode == 200 && got != "id="+id {
			t.Fatalf("request %s got %q", id, got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("30 clean exchanges used %d upstream connections, want 1", n)
	}
}

// TestUpstreamResponseTimeout has a backend that never answers some
// requests: they get 504 once the response timeout passes, and the clients
// after them get their own responses (the late answer, when it comes, lands
// on a connection berth has closed).
func TestUpstreamResponseTimeout(t *testing.T) {
	release := make(chan struct{})
	addr, _ := rawBackend(t, func(c net.Conn, _ *bufio.Reader, req *http.Request) bool {
		io.Copy(io.Discard, req.Body)
		id := req.Header.Get("X-Req-Id")
		if strings.HasPrefix(id, "slow") {
			<-release
		}
		_, err := io.WriteString(c, idResponse(id))
		return err == nil
	})
	t.Cleanup(func() { close(release) }) // after the backend's listener closes: registered later, runs first
	h := proxy.New(proxy.Options{UpstreamResponseTimeout: 50 * time.Millisecond})
	rec := newRecorder()
	d := static("app", proxy.NewBackend("raw", addr, false))
	d.Metrics = rec
	h.Swap(table(entry{d, catchAll}))
	base := startProxy(t, h)
	for i := range 10 {
		slow := fmt.Sprintf("slow-%d", i)
		var body io.Reader
		if i%2 == 1 {
			body = strings.NewReader("a body, written before the wait starts")
		}
		resp, got := send(t, newClient(t), http.MethodPost, base+"/", "app.test", body, http.Header{"X-Req-Id": {slow}})
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("request %s: %d %q, want 504", slow, resp.StatusCode, got)
		}
		if o := rec.next(t); o != (observation{504, true}) {
			t.Errorf("request %s observed %+v", slow, o)
		}
		fast := fmt.Sprintf("fast-%d", i)
		resp, got = send(t, newClient(t), http.MethodGet, base+"/", "app.test", nil, http.Header{"X-Req-Id": {fast}})
		if resp.StatusCode != 200 || got != "id="+fast {
			t.Fatalf("request %s: %d %q, not its own response", fast, resp.StatusCode, got)
		}
		rec.next(t)
	}
}

// TestUploadStreamed checks that a request body reaches the backend as it
// arrives, in both framings: the client sends the first piece and waits
// until the backend has read it before sending the rest, so a proxy that
// buffers (say, until 4 KiB) deadlocks and the hang guard fails the test.
func TestUploadStreamed(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		name := "content-length"
		if chunked {
			name = "chunked"
		}
		t.Run(name, func(t *testing.T) {
			gotFirst := make(chan struct{})
			_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				first := make([]byte, 5)
				if _, err := io.ReadFull(r.Body, first); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				close(gotFirst)
				rest, _ := io.ReadAll(r.Body)
				io.WriteString(w, string(first)+"+"+string(rest))
			}))
			h := proxy.New(proxy.Options{})
			h.Swap(table(entry{static("up", proxy.NewBackend("up-1", addr, false)), catchAll}))
			base := startProxy(t, h)
			c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(hangGuard))
			if chunked {
				io.WriteString(c, "POST /up HTTP/1.1\r\nHost: up.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
			} else {
				io.WriteString(c, "POST /up HTTP/1.1\r\nHost: up.test\r\nContent-Length: 10\r\n\r\nfirst")
			}
			select {
			case <-gotFirst:
			case <-time.After(hangGuard):
				t.Fatal("the first piece of the body never reached the backend")
			}
			if chunked {
				io.WriteString(c, "5\r\nlast!\r\n0\r\n\r\n")
			} else {
				io.WriteString(c, "last!")
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(body) != "first+last!" {
				t.Errorf("%d %q", resp.StatusCode, body)
			}
		})
	}
}
