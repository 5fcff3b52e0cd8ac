package certs

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkIssue measures one certificate order against pebble on
// loopback (PEBBLE_VA_NOSLEEP=1), HTTP-01 validated through
// ServeHTTPChallenge: new key, order, challenge, finalize, store, cache. The
// account is registered before the timer starts.
//
//	go test -run '^$' -bench BenchmarkIssue -benchtime 8x ./internal/certs/
//
// measures the latency of one order: about 0.52 s on 2 cores, nearly all of
// it acmez polling the authorization and the order (250 ms each). Past
// nine orders certmagic's internal rate limiter (RateLimitEvents per
// RateLimitEventsWindow, 10 per 10 s for an account) sets the pace, so
// -benchtime 20x measures that instead: 1.0 s per certificate.
func BenchmarkIssue(b *testing.B) {
	e := startEnv(b)
	m := e.newManager(b, "", func(o *Options) { o.noTLSALPN01 = true })
	ctx := testCtx(b)
	if err := m.obtain(ctx, hostOrder("warm.example.test")); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if err := m.obtain(ctx, hostOrder(fmt.Sprintf("bench%d.example.test", i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/cert")
}
