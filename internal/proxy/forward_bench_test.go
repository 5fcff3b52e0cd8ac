package proxy_test

import (
	"net/http"
	"testing"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/proxy/proxytest"
)

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
	addr := proxytest.RawUpstream(b, 100)
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
