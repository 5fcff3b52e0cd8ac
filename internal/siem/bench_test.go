package siem

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

func benchRequest() Request {
	return Request{Time: time.Now(), Client: netip.MustParseAddr("203.0.113.9"), Method: "GET", Host: "app.example",
		Path: "/api/items/42", RawQuery: "page=2&sort=name", UserAgent: "Mozilla/5.0", Status: 200, Duration: time.Millisecond,
		Bytes: 512, Deployment: "web", Namespace: "team", Scheme: "bearer", Credentialed: true}
}

// BenchmarkObserveRequest is the cost on the proxy's request path.
//
// "accepted": every observation is queued (the queue is swapped out, as
// Flush does, with the timer stopped), the cost a proxy pays while the
// analyser keeps up. "parallel": parallel callers with the real analyser
// (Run); at this benchmark's rate it cannot keep up, so most observations
// take the cheaper dropped path (reported as dropped/op).
func BenchmarkObserveRequest(b *testing.B) {
	b.Run("accepted", func(b *testing.B) {
		e, err := New(Options{})
		if err != nil {
			b.Fatal(err)
		}
		spare := make([]Request, 0, e.o.QueueCapacity)
		r := benchRequest()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if i%e.o.QueueCapacity == e.o.QueueCapacity-1 {
				b.StopTimer()
				got := e.reqs
				e.reqs = spare
				clear(got)
				spare = got[:0]
				b.StartTimer()
			}
			e.ObserveRequest(&r)
		}
		if e.dropped != 0 {
			b.Fatalf("%d dropped", e.dropped)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		e, err := New(Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go e.Run(ctx)
		r := benchRequest()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				e.ObserveRequest(&r)
			}
		})
		b.StopTimer()
		s := e.Stats()
		b.ReportMetric(float64(s.Dropped)/float64(max(s.Observed, 1)), "dropped/op")
	})
}

// BenchmarkAnalyse is the analyser's cost per request (off the request
// path): 256 sources, signatures scanned, query included.
func BenchmarkAnalyse(b *testing.B) {
	e, err := New(Options{Config: Config{RateThreshold: 1 << 30}})
	if err != nil {
		b.Fatal(err)
	}
	r := benchRequest()
	r.Credentialed = false
	t0 := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.Time = t0.Add(time.Duration(i) * time.Microsecond)
		r.Client = netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
		e.ObserveRequest(&r)
		if i%1024 == 1023 {
			e.Flush()
		}
	}
	e.Flush()
}
