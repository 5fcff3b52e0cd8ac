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
//	go test -run '^$' -bench BenchmarkIssue -benchtime 20x ./internal/certs/
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
