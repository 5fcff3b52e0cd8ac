package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/internal/route"
)

// TestIdleConnClosedByBackend checks the liveness check on reuse: a backend
// that closes each connection after one response makes the pooled connection
// dead, and a POST (which is never replayed) must still get through on a
// fresh one instead of failing on the dead one, and reach the backend once.
// With a body the pool peeks at the socket; without one the check is the
// request's own first read, before its head is written (connPool.get).
func TestIdleConnClosedByBackend(t *testing.T) {
	for _, body := range []string{"data", ""} {
		name := "with a body"
		if body == "" {
			name = "without a body"
		}
		t.Run(name, func(t *testing.T) { idleConnClosedByBackend(t, body) })
	}
}

func idleConnClosedByBackend(t *testing.T, body string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	closed := make(chan struct{}, 4)
	var served atomic.Int32
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
				served.Add(1)
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
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req := httptest.NewRequest(http.MethodPost, "http://app.test/", rd)
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
	if n := served.Load(); n != 3 {
		t.Fatalf("the backend served %d POSTs, want 3 (each sent once)", n)
	}
}

// TestWaitTimer checks the lazy response timer: a wait that ends in time
// leaves the connection alone even when the timer, armed by an earlier wait,
// fires during it; progress (extend) pushes the deadline back; a wait past
// its deadline aborts the connection and reports it.
func TestWaitTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = time.Minute
		var n atomic.Int32
		aborts := func() int32 { return n.Load() }
		w := &waitTimer{abort: func() { n.Add(1) }}

		w.start(d, time.Now()) // arms the timer for t+1m
		time.Sleep(d / 2)
		if w.stop() {
			t.Fatal("a wait of half the timeout expired")
		}
		w.start(d, time.Now()) // deadline t+1m30s; the timer still fires at t+1m
		time.Sleep(d * 3 / 4)
		if w.stop() || aborts() != 0 {
			t.Fatalf("a wait of 3/4 of the timeout expired (aborts %d)", aborts())
		}

		w.start(d, time.Now())
		for range 4 {
			time.Sleep(d / 2)
			w.extend()
		}
		if w.stop() || aborts() != 0 {
			t.Fatalf("a wait extended every half timeout expired (aborts %d)", aborts())
		}

		w.start(d, time.Now())
		time.Sleep(d + time.Second)
		w.extend() // too late: expiry is final
		if expired := w.stop(); !expired || aborts() != 1 {
			t.Fatalf("a wait past its deadline: expired %v, aborts %d", expired, aborts())
		}
		time.Sleep(2 * d) // an idle connection: the timer stops
		if aborts() != 1 {
			t.Fatalf("aborts %d while idle", aborts())
		}
		w.start(d, time.Now())
		if w.stop() {
			t.Fatal("a new wait started expired")
		}
	})
}
