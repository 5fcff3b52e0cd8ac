package proxy_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/berth-dev/berth/internal/proxy"
)

// BenchmarkProxy forwards GETs over real loopback TCP: client → proxy server
// → backend server. Most of the cost is the two HTTP hops; allocations show
// what the proxy adds on top of them.
func BenchmarkProxy(b *testing.B) {
	payload := []byte("hello from the backend\n")
	_, addr := startBackend(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(payload)
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
	base := startProxy(b, h)
	c := newClient(b)
	req, err := http.NewRequest(http.MethodGet, base+"/bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Host = "bench.test"
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || n != int64(len(payload)) {
			b.Fatalf("status %d, %d bytes, %v", resp.StatusCode, n, err)
		}
	}
}
