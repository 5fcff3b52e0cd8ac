package metrics

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkObserveRequest is the proxy's per-request cost on one
// goroutine: must be tens of ns and 0 allocs.
func BenchmarkObserveRequest(b *testing.B) {
	d := NewDeployment()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d.ObserveRequest(200+(i&3)*100, time.Duration(i&1023)*time.Millisecond)
	}
}

// BenchmarkObserveRequestParallel is the same call from every CPU into one
// deployment, the worst case for cache-line contention.
func BenchmarkObserveRequestParallel(b *testing.B) {
	d := NewDeployment()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			d.ObserveRequest(200, time.Duration(i&1023)*time.Millisecond)
			i++
		}
	})
}

// BenchmarkRegistryGet is the lock-free lookup of an existing deployment.
func BenchmarkRegistryGet(b *testing.B) {
	r := NewRegistry()
	for _, id := range []string{"a", "b", "c", "api", "web", "worker"} {
		r.Get(id)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Get("api")
	}
}

func TestObserveRequestDoesNotAllocate(t *testing.T) {
	d := NewDeployment()
	r := NewRegistry()
	r.Get("api")
	allocs := testing.AllocsPerRun(1000, func() {
		r.Get("api").ObserveRequest(404, 7*time.Millisecond)
		d.ObserveError()
		d.ObserveColdStart(time.Second)
	})
	if allocs != 0 {
		t.Errorf("hot path allocates %v times per request, want 0", allocs)
	}
}

// BenchmarkRegistryAddTo10k creates one deployment's set in a registry of
// 10,000 (and deletes it): a write copies one shard, not the whole map.
func BenchmarkRegistryAddTo10k(b *testing.B) {
	r := NewRegistry()
	for i := range 10_000 {
		r.Get(fmt.Sprintf("mem-%05d", i))
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Get("new")
		r.Delete("new")
	}
}
