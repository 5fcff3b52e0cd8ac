package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/tracing"
)

// BenchmarkTraceHooks is the tracing work of one proxied request through
// the front end, without the network: the server span, the route span, one
// upstream attempt (with its traceparent) and the export of all three over
// OTLP/HTTP to a loopback collector that discards them. cpu-ns/op is the
// process's CPU time per request, the batch processor's and exporter's
// goroutines included: what tracing adds to a request (sample 1: every
// request recorded), apart from the noise of two loopback HTTP hops that
// BenchmarkTraceCost measures it in.
func BenchmarkTraceHooks(b *testing.B) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(collector.Close)
	// berth serve collects at 400% heap growth (cmd/berth): measure as it runs.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	for _, sample := range []float64{1, 0} {
		name := "sampled"
		if sample == 0 {
			name = "unsampled"
		}
		b.Run(name, func(b *testing.B) {
			tr, err := tracing.New(tracing.Config{Endpoint: strings.TrimPrefix(collector.URL, "http://"), Insecure: true, Sample: sample})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close(context.Background())
			h := New(Options{Tracer: tr.Tracer()})
			c := &h1conn{peer: netip.MustParseAddr("127.0.0.1"), now: time.Now()}
			c.w.c = c
			w := &c.w
			r := &http.Request{Method: "GET", Host: "bench.test", URL: &url.URL{Path: "/bench"}, ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"User-Agent": {"bench"}}}
			d := &Deployment{ID: "bench", Namespace: "ns"}
			be := NewBackend("bench-1", "127.0.0.1:8080", false)
			b.ReportAllocs()
			before := cpuTime()
			for b.Loop() {
				delete(r.Header, "Traceparent") // (the last attempt's): berth starts each trace
				_, _, t := h.startTrace(w, r)
				t.routed(t.child("route"), d)
				s := t.attempt(r.Header, r.Method, be, 0)
				attemptDone(s, 200, false, nil)
				w.status = 200
				endTrace(w, t)
			}
			tr.Flush(context.Background())
			b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
			if tr.Dropped() != 0 {
				b.Logf("%d spans dropped", tr.Dropped())
			}
		})
	}
}

func cpuTime() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
