package telemetry

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"testing"
	"time"
)

// BenchmarkLogSearch searches one deployment's 1,000,000 stored lines
// for a word in one line of 100 (and one in 1 of 10,000), a page of 200,
// and reports the p50 of the searches:
//
//	go test -run '^$' -bench BenchmarkLogSearch -benchtime 200x ./internal/telemetry/
func BenchmarkLogSearch(b *testing.B) {
	const total = 1_000_000
	dir := b.TempDir()
	s, err := Open(Options{Dir: dir, QueueSize: 1 << 16, Batch: 5000, MaxBytes: 8 << 30, Retention: 365 * 24 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	start := time.Now().Add(-time.Hour)
	for i := range total {
		msg := fmt.Sprintf("request %d served upstream ok user%d", i, i%977)
		switch {
		case i%10000 == 0:
			msg += " rareword"
		case i%100 == 0:
			msg += " timeout talking to db"
		}
		for {
			before := s.Stats().Dropped
			s.Line(Line{Time: start.Add(time.Duration(i) * 3 * time.Millisecond), Namespace: "default", Deployment: "web", Source: "stdout", Level: "info", Message: msg})
			if s.Stats().Dropped == before {
				break
			}
			time.Sleep(time.Millisecond) // the queue is full: let the writer catch up (loading only)
		}
	}
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if fi, err := os.Stat(dir + "/" + FileName); err == nil {
		b.Logf("%d rows, %d MB", total, fi.Size()>>20)
	}
	for _, q := range []string{"timeout", "rareword", "talking to db"} {
		b.Run(q, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				t0 := time.Now()
				rows, _, err := s.Logs(ctx, LogQuery{Namespace: "default", Deployment: "web", From: 0, To: time.Now().UnixMilli(), Q: q, Limit: 200})
				took = append(took, time.Since(t0))
				if err != nil || len(rows) != 100 && len(rows) != 200 {
					b.Fatalf("%d rows, %v", len(rows), err)
				}
			}
			sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		})
	}
}

// BenchmarkAccess is the request path's cost of a record: copying it into
// the queue (the writer drains it concurrently).
func BenchmarkAccess(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	a := Access{Time: time.Now(), Method: "GET", Path: "/api/items/42", Status: 200, Duration: time.Millisecond, Bytes: 512,
		Host: "web.example.com", Client: netip.MustParseAddr("192.0.2.7"), Backend: "127.0.0.1:40123", Deployment: "web", Namespace: "default"}
	b.ReportAllocs()
	for b.Loop() {
		s.Access(&a)
	}
}

// BenchmarkWriter is the writer's cost of one access record: queued,
// batched and committed (with its index entry and metric bucket); the
// op is one record.
func BenchmarkWriter(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), QueueSize: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	a := Access{Time: time.Now(), Method: "GET", Path: "/api/items/42", Status: 200, Duration: time.Millisecond, Bytes: 512,
		Host: "web.example.com", Client: netip.MustParseAddr("192.0.2.7"), Backend: "127.0.0.1:40123", Deployment: "web", Namespace: "default"}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		s.Access(&a)
		if n++; n%1000 == 0 {
			s.Flush(context.Background())
		}
	}
	s.Flush(context.Background())
	if st := s.Stats(); st.Dropped > 0 {
		b.Fatalf("%d dropped", st.Dropped)
	}
}
