package proxy_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/proxy"
)

// rawUpstream is a minimal keep-alive HTTP/1.1 server that answers every
// request head with the same 100-byte response. It allocates next to nothing,
// so the allocations BenchmarkForward reports are the proxy's.
func rawUpstream(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("x", 99) + "\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					// A request without a body ends at the first empty line.
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// discardWriter is a reusable http.ResponseWriter that keeps nothing.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// BenchmarkForward measures the handler alone: ServeHTTP called directly
// (no inbound server) for a GET forwarded over a kept-alive connection to a
// minimal upstream. Its allocations are the data plane's per-request garbage.
func BenchmarkForward(b *testing.B) {
	addr := rawUpstream(b)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
	req, err := http.NewRequest(http.MethodGet, "http://bench.test/path?q=1", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("User-Agent", "bench")
	req.Header.Set("Accept", "*/*")
	w := &discardWriter{h: make(http.Header)}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		w.n = 0
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK || w.n != 100 {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
	}
}
