package spares_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm/spares"
)

// waitUntil polls cond, failing after a generous hang guard.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type recorder struct {
	mu      sync.Mutex
	dropped []int
}

func (r *recorder) drop(s int) {
	r.mu.Lock()
	r.dropped = append(r.dropped, s)
	r.mu.Unlock()
}

func (r *recorder) got() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(slices.Values(r.dropped))
}

// TestPool: Fill makes N spares per kind, Take hands out usable ones and
// drops the others, a spare of a kind no longer wanted is dropped once
// made, and Close drops what is left and makes no more.
func TestPool(t *testing.T) {
	var r recorder
	p := spares.New(spares.Config[string, int]{N: 2, Drop: r.drop})
	var next atomic.Int32
	mk := func() (int, error) { return int(next.Add(1)), nil }
	p.Fill("a", nil, mk)
	waitUntil(t, "two spares", func() bool { return len(p.Ready("a")) == 2 })
	if s, ok := p.Take(context.Background(), "b", 0, func(int) bool { return true }); ok {
		t.Fatalf("Take of a kind without spares = %d", s)
	}
	// The oldest is unusable: dropped, and the next one is taken.
	first := p.Ready("a")[0]
	s, ok := p.Take(context.Background(), "a", 0, func(s int) bool { return s != first })
	if !ok || s == first {
		t.Fatalf("Take = %d, %v; want the spare after %d", s, ok, first)
	}
	waitUntil(t, "the unusable spare to be dropped", func() bool { return slices.Equal(r.got(), []int{first}) })

	// A kind that is no longer wanted when its spare is made: dropped.
	gate := make(chan struct{})
	wanted := atomic.Bool{}
	wanted.Store(true)
	p.Fill("c", func(string) bool { return wanted.Load() }, func() (int, error) { <-gate; return 100, nil })
	wanted.Store(false)
	close(gate)
	waitUntil(t, "the unwanted spare to be dropped", func() bool { return slices.Contains(r.got(), 100) })
	if len(p.Ready("c")) != 0 {
		t.Error("a spare of an unwanted kind was kept")
	}

	p.Close()
	if len(p.Ready("a")) != 0 {
		t.Error("Close left ready spares")
	}
	p.Fill("a", nil, mk)
	if len(p.Ready("a")) != 0 {
		t.Error("Fill made spares after Close")
	}
}

// TestPoolFailures: after MaxFailures failed makes in a row the pool
// makes no more, and says so.
func TestPoolFailures(t *testing.T) {
	var failures atomic.Int32
	var last atomic.Int32
	p := spares.New(spares.Config[string, int]{N: 1, Drop: func(int) {}, Failed: func(_ string, _ error, n int) {
		failures.Add(1)
		last.Store(int32(n))
	}})
	defer p.Close()
	var makes atomic.Int32
	fail := func() (int, error) { makes.Add(1); return 0, errors.New("no") }
	for i := 0; i < spares.MaxFailures+2; i++ {
		p.Fill("a", nil, fail)
		waitUntil(t, "the make to fail", func() bool { return failures.Load() == min(int32(i+1), spares.MaxFailures) })
	}
	if n := makes.Load(); n != spares.MaxFailures {
		t.Errorf("%d makes, want %d: the pool kept making failing spares", n, spares.MaxFailures)
	}
	if last.Load() != spares.MaxFailures {
		t.Errorf("Failed was last told %d failures, want %d", last.Load(), spares.MaxFailures)
	}
}

// TestTakeWaits: Take with a wait gets a spare still being made.
func TestTakeWaits(t *testing.T) {
	p := spares.New(spares.Config[string, int]{N: 1, Drop: func(int) {}})
	defer p.Close()
	gate := make(chan struct{})
	p.Fill("a", nil, func() (int, error) { <-gate; return 7, nil })
	got := make(chan int, 1)
	go func() {
		s, _ := p.Take(context.Background(), "a", time.Minute, func(int) bool { return true })
		got <- s
	}()
	close(gate)
	if s := <-got; s != 7 {
		t.Fatalf("Take = %d, want the spare being made (7)", s)
	}
}
