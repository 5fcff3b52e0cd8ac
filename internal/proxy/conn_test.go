package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/route"
)

// TestIdleConnClosedByBackend checks the liveness check on reuse: a backend
// that closes each connection after one response makes the pooled connection
// dead, and a POST (which is never replayed) must still get through on a
// fresh one instead of failing on the dead one.
func TestIdleConnClosedByBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	closed := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { c.Close(); closed <- struct{}{} }()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}()
		}
	}()

	b := NewBackend("one-shot", ln.Addr().String(), false)
	var rb route.Builder[*Deployment]
	rb.Add("app", &Deployment{ID: "app", Pool: NewPool(b)}, []route.Rule{{PathPrefix: "/"}})
	h := New(Options{})
	h.Swap(rb.Build())
	for i := range 3 {
		req := httptest.NewRequest(http.MethodPost, "http://app.test/", strings.NewReader("data"))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK || w.Body.String() != "ok" {
			t.Fatalf("POST %d: %d %q", i, w.Code, w.Body.String())
		}
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("backend never closed the connection")
		}
	}
}
