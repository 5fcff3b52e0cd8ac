package proxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/proxy/proxytest"
	"github.com/berth-dev/berth/internal/tracing"
)

// BenchmarkTraceCost is BenchmarkFrontEndKeepAlive's plaintext exchange
// with tracing off and on (every request sampled, its spans exported over
// OTLP/HTTP to a loopback collector that discards them). cpu-ns/op is the
// process's CPU time (user and system, every goroutine: client, front end,
// forwarder, upstream, and with tracing the batch processor and exporter)
// per request, so on minus off is what tracing costs a request.
func BenchmarkTraceCost(b *testing.B) {
	const req = "GET /bench?q=1 HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"
	addr := proxytest.RawUpstream(b, 100)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(collector.Close)
	// berth serve collects at 400% heap growth (cmd/berth): measure as it runs.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	run := func(b *testing.B, o proxy.Options) {
		h := proxy.New(o)
		h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
		paddr, _ := startH1(b, h, proxy.H1Options{})
		q := proxytest.NewQuietClient(b, paddr, req)
		b.ReportAllocs()
		before := proxy.CPUTime()
		for b.Loop() {
			if st, n := q.Do(); st != http.StatusOK || n != 100 {
				b.Fatalf("status %d, %d bytes", st, n)
			}
		}
		b.ReportMetric(float64(proxy.CPUTime()-before)/float64(b.N), "cpu-ns/op")
	}
	b.Run("off", func(b *testing.B) { run(b, proxy.Options{}) })
	b.Run("on", func(b *testing.B) {
		tr, err := tracing.New(tracing.Config{Endpoint: strings.TrimPrefix(collector.URL, "http://"), Insecure: true, Sample: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close(context.Background())
		run(b, proxy.Options{Tracer: tr.Tracer()})
		tr.Flush(context.Background())
		if tr.Dropped() != 0 {
			b.Logf("%d spans dropped (of %d)", tr.Dropped(), tr.Dropped()+tr.Exported())
		}
	})
}
