package autoscale

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// steps records the times a Loop called its step.
type steps struct {
	mu    sync.Mutex
	times []time.Time
}

func (s *steps) step(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, now)
}

func (s *steps) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.times)
}

func (s *steps) last() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.times[len(s.times)-1]
}

// startLoop runs Loop in the bubble and returns a function that stops it
// and reports its result.
func startLoop(t *testing.T, interval time.Duration, poke <-chan struct{}, s *steps) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Loop(ctx, interval, poke, s.step) }()
	return func() error {
		cancel()
		return <-done
	}
}

func TestLoopInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s steps
		start := time.Now()
		stop := startLoop(t, 2*time.Second, nil, &s)
		synctest.Wait()
		if n := s.count(); n != 1 {
			t.Fatalf("after start: %d steps, want 1", n)
		}
		if !s.last().Equal(start) {
			t.Errorf("first step at %v, want the start", s.last().Sub(start))
		}
		time.Sleep(11 * time.Second)
		synctest.Wait()
		if n := s.count(); n != 6 { // 0, 2, 4, 6, 8, 10 s
			t.Fatalf("after 11s: %d steps, want 6", n)
		}
		if got := s.last().Sub(start); got != 10*time.Second {
			t.Errorf("last step at %v, want 10s", got)
		}
		if err := stop(); err != nil {
			t.Errorf("Loop returned %v after cancel, want nil", err)
		}
		time.Sleep(time.Minute)
		if n := s.count(); n != 6 {
			t.Errorf("%d steps after cancel, want still 6", n)
		}
	})
}

func TestLoopPoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s steps
		poke := make(chan struct{}, 1)
		start := time.Now()
		stop := startLoop(t, time.Minute, poke, &s)
		defer stop()
		synctest.Wait()

		time.Sleep(10 * time.Second)
		Poke(poke)
		synctest.Wait()
		if n := s.count(); n != 2 {
			t.Fatalf("after a poke: %d steps, want 2", n)
		}
		if got := s.last().Sub(start); got != 10*time.Second {
			t.Errorf("poked step at %v, want 10s (no wait for the interval)", got)
		}

		// The interval restarts after a poked step: the next tick is a
		// minute after the poke, not a minute after the start.
		time.Sleep(time.Minute - 10*time.Second)
		synctest.Wait()
		if n := s.count(); n != 2 {
			t.Errorf("at 60s: %d steps, want still 2", n)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := s.count(); n != 3 {
			t.Errorf("at 70s: %d steps, want 3", n)
		}
	})
}

func TestLoopCoalescesPokes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s steps
		poke := make(chan struct{}, 3)
		for range 3 {
			poke <- struct{}{}
		}
		stop := startLoop(t, time.Hour, poke, &s)
		defer stop()
		synctest.Wait()
		// One step at start, one for all three queued pokes.
		if n := s.count(); n != 2 {
			t.Fatalf("3 queued pokes: %d steps, want 2", n)
		}
		if len(poke) != 0 {
			t.Errorf("%d pokes left queued", len(poke))
		}
	})
}

func TestPokeDoesNotBlock(t *testing.T) {
	poke := make(chan struct{}, 1)
	for range 5 {
		Poke(poke)
	}
	if len(poke) != 1 {
		t.Errorf("5 pokes queued %d, want 1", len(poke))
	}
	Poke(make(chan struct{})) // unbuffered, nobody reading: must return
}

func TestLoopPokeDuringStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		poke := make(chan struct{}, 1)
		var s steps
		first := true
		step := func(now time.Time) {
			s.step(now)
			if first {
				first = false
				Poke(poke) // state changed while this step ran
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go Loop(ctx, time.Hour, poke, step)
		synctest.Wait()
		if n := s.count(); n != 2 {
			t.Errorf("poke during a step: %d steps, want 2", n)
		}
	})
}

func TestLoopClosedPoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s steps
		poke := make(chan struct{})
		close(poke)
		stop := startLoop(t, time.Second, poke, &s)
		// A loop spinning on the closed channel would never let Wait return.
		synctest.Wait()
		if n := s.count(); n != 1 {
			t.Fatalf("closed poke channel: %d steps, want 1", n)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n := s.count(); n != 4 {
			t.Errorf("closed poke channel after 3s: %d steps, want 4", n)
		}
		if err := stop(); err != nil {
			t.Errorf("Loop = %v, want nil", err)
		}
	})
}

func TestLoopCanceledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var s steps
	if err := Loop(ctx, time.Second, nil, s.step); err != nil {
		t.Errorf("Loop = %v, want nil", err)
	}
	if n := s.count(); n != 0 {
		t.Errorf("%d steps with a canceled context, want 0", n)
	}
}

func TestLoopBadArguments(t *testing.T) {
	var s steps
	for _, tt := range []struct {
		name     string
		interval time.Duration
		step     func(time.Time)
	}{
		{"zero interval", 0, s.step},
		{"negative interval", -time.Second, s.step},
		{"nil step", time.Second, nil},
	} {
		if err := Loop(t.Context(), tt.interval, nil, tt.step); err == nil {
			t.Errorf("%s: Loop returned nil, want an error", tt.name)
		}
	}
	if n := s.count(); n != 0 {
		t.Errorf("%d steps with bad arguments, want 0", n)
	}
}
