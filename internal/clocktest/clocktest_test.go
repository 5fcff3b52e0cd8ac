package clocktest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/clocktest"
)

func TestClock(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := clocktest.New(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("Now() = %v, want %v", got, t0)
	}
	c.Add(90 * time.Second)
	if got, want := c.Now(), t0.Add(90*time.Second); !got.Equal(want) {
		t.Fatalf("after Add: Now() = %v, want %v", got, want)
	}
	c.Add(-time.Minute)
	if got, want := c.Now(), t0.Add(30*time.Second); !got.Equal(want) {
		t.Fatalf("after Add(-1m): Now() = %v, want %v", got, want)
	}
	t1 := t0.Add(-24 * time.Hour)
	c.Set(t1)
	if got := c.Now(); !got.Equal(t1) {
		t.Fatalf("after Set: Now() = %v, want %v", got, t1)
	}
}

// TestClockConcurrent is for -race: readers and movers at once.
func TestClockConcurrent(t *testing.T) {
	c := clocktest.New(time.Unix(0, 0))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				c.Add(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), time.Unix(4, 0); !got.Equal(want) {
		t.Fatalf("Now() = %v, want %v", got, want)
	}
}
