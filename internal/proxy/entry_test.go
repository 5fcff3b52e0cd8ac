package proxy_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/proxy"
)

// These tests send attacks as raw bytes through startProxy, so they run on
// both front ends: net/http here, the HTTP/1.1 front end in
// TestH1FrontEndSuite.

// rawProxy serves h through startProxy and returns its host:port.
func rawProxy(t testing.TB, h *proxy.Handler) string {
	t.Helper()
	return strings.TrimPrefix(startProxy(t, h), "http://")
}

// countingEcho is an echo backend whose requests are counted, behind a
// Handler with options o.
func countingEcho(t testing.TB, o proxy.Options) (*proxy.Handler, *atomic.Int64) {
	var n atomic.Int64
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		echoHandler().ServeHTTP(w, r)
	}))
	h := proxy.New(o)
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	return h, &n
}

// wantEnvelope checks a JSON error envelope.
func wantEnvelope(t testing.TB, resp *http.Response, body string) {
	t.Helper()
	var env map[string]any
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil || len(env) != 1 || env["error"] == "" {
		t.Errorf("body %q is not the error envelope", body)
	}
}

// TestAbsoluteFormAndVersionsChecked: requests the front end used to hand to
// net/http before checking their fields (absolute-form targets, HTTP/1.2)
// get the same framing rules as any other: both Content-Length and
// Transfer-Encoding, or an obs-fold, are refused with 400 and the
// connection closed. net/http alone (which drops the Content-Length) must
// at least close the connection after such a request (RFC 9112 §6.3); it
// merges an obs-fold into the value before anyone can see it, so that case is
// the front end's only.
func TestAbsoluteFormAndVersionsChecked(t *testing.T) {
	h, seen := countingEcho(t, proxy.Options{})
	addr := rawProxy(t, h)
	tests := []struct {
		name, raw string
		h1Only    bool
	}{
		{"absolute-form CL+TE", "POST http://t.example/a HTTP/1.1\r\nHost: t.example\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
		{"absolute-form TE+CL", "POST http://t.example/a HTTP/1.1\r\nHost: t.example\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", false},
		{"HTTP/1.2 CL+TE", "POST /a HTTP/1.2\r\nHost: t.example\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
		{"absolute-form obs-fold", "GET http://t.example/a HTTP/1.1\r\nHost: t.example\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n", true},
		{"HTTP/1.2 obs-fold", "GET /a HTTP/1.2\r\nHost: t.example\r\nX-A: 1\r\n\tb\r\n\r\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.h1Only && frontEnd == "" {
				t.Skip("net/http folds the line before the handler sees it")
			}
			before := seen.Load()
			rc := dialRaw(t, addr)
			rc.send(tt.raw)
			resp, body := rc.response("GET")
			if frontEnd != "" {
				if resp.StatusCode != 400 {
					t.Errorf("status %d (%q), want 400", resp.StatusCode, body)
				}
				if n := seen.Load() - before; n != 0 {
					t.Errorf("the backend saw %d requests", n)
				}
			}
			if !resp.Close {
				t.Error("the answer does not say Connection: close")
			}
			if !rc.closed() {
				t.Error("the connection stayed open")
			}
		})
	}
	// What the front end now parses itself still works, on a connection
	// that goes on.
	rc := dialRaw(t, addr)
	rc.send("GET http://t.example/abs?q=1 HTTP/1.1\r\nHost: other.example\r\n\r\nGET /v HTTP/1.2\r\nHost: t.example\r\n\r\n")
	resp, body := rc.response("GET")
	if e := decodeEcho(t, body); resp.StatusCode != 200 || e.URI != "/abs?q=1" || e.Host != "t.example" {
		t.Errorf("absolute-form: %d %q", resp.StatusCode, body)
	}
	if resp, body := rc.response("GET"); resp.StatusCode != 200 || resp.Close || decodeEcho(t, body).URI != "/v" {
		t.Errorf("HTTP/1.2: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
}

// TestChunkSizes: a chunk size that overflows, is malformed, or promises
// 2^64 bytes ends the request with 400, not a 502 or a wait for ever.
// net/http cannot tell a 2^64 chunk from a slow upload; the body read
// timeout ends it there (408).
func TestChunkSizes(t *testing.T) {
	h, seen := countingEcho(t, proxy.Options{BodyReadTimeout: 200 * time.Millisecond})
	addr := rawProxy(t, h)
	head := "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
	tests := []struct {
		name, body string
		status     int // on net/http, when it differs
	}{
		{"overflow", "10000000000000000\r\nabc", 0},
		{"malformed", "1x\r\nabc", 0},
		{"empty", "\r\nabc", 0},
		{"bare LF", "3\nabc\r\n0\r\n\r\n", 0},
		{"no CRLF after data", "3\r\nabcd\r\n0\r\n\r\n", 0},
		{"2^64-1", "ffffffffffffffff\r\nabc", 408},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := dialRaw(t, addr)
			rc.send(head + tt.body)
			resp, body := rc.response("POST")
			want := 400
			if frontEnd == "" && tt.status != 0 {
				want = tt.status
			}
			if resp.StatusCode != want {
				t.Errorf("status %d (%q), want %d", resp.StatusCode, body, want)
			}
			if want != 400 || frontEnd == "" {
				wantEnvelope(t, resp, body)
			}
			if !rc.closed() {
				t.Error("the connection stayed open")
			}
		})
	}
	_ = seen
}

// TestRequestTrailersFiltered: request trailers that would reframe or
// reroute the request at the backend, or forge what berth writes, are not
// forwarded, announced or not; others are.
func TestRequestTrailersFiltered(t *testing.T) {
	got := make(chan http.Header, 1)
	_, baddr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- r.Trailer.Clone()
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", baddr, false)), catchAll}))
	addr := rawProxy(t, h)
	rc := dialRaw(t, addr)
	rc.send("POST /t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n" +
		"Trailer: Host, X-Forwarded-For, Connection, Te, Keep-Alive, X-Ok\r\n\r\n" +
		"3\r\nabc\r\n0\r\n" +
		"Host: evil.example\r\nX-Forwarded-For: 10.9.9.9\r\nConnection: close\r\nTe: trailers\r\nKeep-Alive: 1\r\n" +
		"Content-Length: 99\r\nTransfer-Encoding: chunked\r\nUpgrade: h2c\r\nX-Forwarded-Host: evil\r\nX-Ok: yes\r\n\r\n")
	resp, body := rc.response("POST")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %q", resp.StatusCode, body)
	}
	var tr http.Header
	select {
	case tr = <-got:
	case <-time.After(hangGuard):
		t.Fatal("the backend saw no request")
	}
	for k := range tr {
		if k != "X-Ok" {
			t.Errorf("trailer %s: %q was forwarded", k, tr[k])
		}
	}
	if tr.Get("X-Ok") != "yes" {
		t.Errorf("trailer X-Ok: %q, want yes (trailers %q)", tr.Get("X-Ok"), tr)
	}
}

// TestTraceRefused: TRACE is answered 405 with the JSON envelope, and never
// reaches a backend, in either HTTP/1 framing.
func TestTraceRefused(t *testing.T) {
	h, seen := countingEcho(t, proxy.Options{})
	addr := rawProxy(t, h)
	for _, raw := range []string{
		"TRACE / HTTP/1.1\r\nHost: a\r\nCookie: secret=1\r\n\r\n",
		"TRACE http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"TRACE / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi",
	} {
		rc := dialRaw(t, addr)
		rc.send(raw)
		resp, body := rc.response("TRACE")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") == "" {
			t.Errorf("%q: status %d, Allow %q, want 405 with Allow", raw, resp.StatusCode, resp.Header.Get("Allow"))
		}
		wantEnvelope(t, resp, body)
		if strings.Contains(body, "secret") {
			t.Errorf("the answer echoes the request: %q", body)
		}
	}
	if n := seen.Load(); n != 0 {
		t.Errorf("the backend saw %d requests", n)
	}
}

// TestH2CUpgradeNotForwarded: an Upgrade: h2c request is served as the plain
// HTTP/1.1 request it also is; the backend never sees the upgrade (which it
// could accept, turning the client's connection into a tunnel to it past
// every routing rule).
func TestH2CUpgradeNotForwarded(t *testing.T) {
	h, _ := countingEcho(t, proxy.Options{})
	addr := rawProxy(t, h)
	for _, up := range []string{"h2c", "H2C"} {
		rc := dialRaw(t, addr)
		rc.send("GET /h2c HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: " + up +
			"\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\nGET /next HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, body := rc.response("GET")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d %q", resp.StatusCode, body)
		}
		e := decodeEcho(t, body)
		if e.Header.Get("Upgrade") != "" || e.Header.Get("Http2-Settings") != "" || e.URI != "/h2c" {
			t.Errorf("the backend saw %q %q", e.URI, e.Header)
		}
		if resp, body := rc.response("GET"); resp.StatusCode != 200 || decodeEcho(t, body).URI != "/next" {
			t.Errorf("the connection did not go on as HTTP/1.1: %d %q", resp.StatusCode, body)
		}
	}
}

// TestBodyReadTimeout: a client that stops sending its body is answered 408
// (or, when the answer has begun, cut off) once BodyReadTimeout passes
// without a byte, and the backend's request is canceled: a trickle of bytes
// cannot hold a backend connection for ever.
func TestBodyReadTimeout(t *testing.T) {
	arrived := make(chan struct{}, 1)
	ended := make(chan error, 1)
	_, baddr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/early" {
			// (Without full duplex net/http reads the body before
			// it sends the head.)
			http.NewResponseController(w).EnableFullDuplex()
			w.WriteHeader(200)
			io.WriteString(w, "started")
			w.(http.Flusher).Flush()
		}
		arrived <- struct{}{}
		_, err := io.ReadAll(r.Body)
		ended <- err
	}))
	h := proxy.New(proxy.Options{BodyReadTimeout: 200 * time.Millisecond})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", baddr, false)), catchAll}))
	addr := rawProxy(t, h)

	for _, framing := range []string{"Content-Length: 10\r\n\r\nab", "Transfer-Encoding: chunked\r\n\r\n2\r\nab\r\n"} {
		rc := dialRaw(t, addr)
		rc.send("POST /slow HTTP/1.1\r\nHost: a\r\n" + framing)
		resp, body := rc.response("POST")
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("%q: status %d %q, want 408", framing, resp.StatusCode, body)
		}
		wantEnvelope(t, resp, body)
		if !rc.closed() {
			t.Errorf("%q: the connection stayed open", framing)
		}
		waitSignal(t, arrived)
		select {
		case err := <-ended:
			if err == nil {
				t.Errorf("%q: the backend read a whole body", framing)
			}
		case <-time.After(hangGuard):
			t.Fatalf("%q: the backend's request was never ended", framing)
		}

		rc = dialRaw(t, addr)
		rc.send("POST /early HTTP/1.1\r\nHost: a\r\n" + framing)
		resp, err := http.ReadResponse(rc.br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%q, early answer: %v %v", framing, resp, err)
		}
		b, err := io.ReadAll(resp.Body)
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%q, early answer: the body %q ended with %v, want it cut off", framing, b, err)
		}
		waitSignal(t, arrived)
		select {
		case <-ended:
		case <-time.After(hangGuard):
			t.Fatalf("%q, early answer: the backend's request was never ended", framing)
		}
	}
}

// TestContentLengthBodyStreamed: the first bytes of a Content-Length body
// reach the backend while the client still holds the rest (an upload is not
// buffered until 4 KiB have come).
func TestContentLengthBodyStreamed(t *testing.T) {
	first := make(chan string, 1)
	_, baddr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 3)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			first <- "error: " + err.Error()
			return
		}
		first <- string(buf)
		rest, _ := io.ReadAll(r.Body)
		io.WriteString(w, string(buf)+string(rest))
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", baddr, false)), catchAll}))
	addr := rawProxy(t, h)
	rc := dialRaw(t, addr)
	rc.send("POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc")
	select {
	case got := <-first:
		if got != "abc" {
			t.Fatalf("the backend read %q", got)
		}
	case <-time.After(hangGuard):
		t.Fatal("the first bytes never reached the backend")
	}
	rc.send("defghij")
	if resp, body := rc.response("POST"); resp.StatusCode != 200 || body != "abcdefghij" {
		t.Errorf("status %d %q", resp.StatusCode, body)
	}
}

// waitSignal waits for a signal on ch, failing the test if none comes.
func waitSignal(t testing.TB, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangGuard):
		t.Fatal("the backend never saw the request")
	}
}
