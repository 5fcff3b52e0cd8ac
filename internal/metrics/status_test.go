package metrics

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStatusCountsClasses(t *testing.T) {
	var c StatusCounts
	for _, code := range []int{200, 204, 299, 301, 304, 399, 400, 404, 499, 500, 502, 599, 101, 0, -1, 600, 999} {
		c.Record(code)
	}
	c.RecordError()
	c.RecordError()
	want := StatusCountsSnapshot{
		Total: 19, // 17 statuses (5 of them unclassified) + 2 errors
		C2xx:  3, C3xx: 3, C4xx: 3, C5xx: 3,
		Errors: 2,
	}
	if diff := cmp.Diff(want, c.Snapshot()); diff != "" {
		t.Errorf("Snapshot mismatch (-want +got):\n%s", diff)
	}
}

func TestStatusCountsConcurrent(t *testing.T) {
	var c StatusCounts
	const goroutines, per = 8, 2000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := range per {
				if i%10 == 0 {
					c.RecordError()
				} else {
					c.Record(200 + 100*(i%4))
				}
			}
		})
	}
	wg.Wait()
	s := c.Snapshot()
	if s.Total != goroutines*per {
		t.Errorf("Total = %d, want %d", s.Total, goroutines*per)
	}
	if s.Errors != goroutines*per/10 {
		t.Errorf("Errors = %d, want %d", s.Errors, goroutines*per/10)
	}
}

func TestStatusCountsAdd(t *testing.T) {
	a := StatusCountsSnapshot{Total: 10, C2xx: 5, C3xx: 1, C4xx: 2, C5xx: 1, Errors: 1}
	b := StatusCountsSnapshot{Total: 7, C2xx: 1, C3xx: 2, C4xx: 1, C5xx: 2, Errors: 1}
	want := StatusCountsSnapshot{Total: 17, C2xx: 6, C3xx: 3, C4xx: 3, C5xx: 3, Errors: 2}
	if diff := cmp.Diff(want, a.Add(b)); diff != "" {
		t.Errorf("Add mismatch (-want +got):\n%s", diff)
	}
}
