package autoscale

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// sim is a pool manager in miniature: the Loop step promotes booted
// replicas, computes Desired and MakePlan, applies the plan and reaps
// drained replicas, the way the real one will, with VMs that boot in a
// fixed time and requests spread evenly over the serving replicas.
type sim struct {
	mu         sync.Mutex
	p          Policy
	boot       time.Duration
	load       int       // requests the clients hold open
	lastActive time.Time // pool-wide
	ready      []Replica
	pending    []time.Time // creation times
	backoff    Backoff
	created    int
	log        []simStep
}

type simStep struct {
	at             time.Time
	desired, ready int
}

// setLoad changes the number of open requests at now; starting or finishing
// requests is activity.
func (s *sim) setLoad(n int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.load = n
	s.lastActive = now
}

func (s *sim) step(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()

	booting := s.pending[:0]
	for _, c := range s.pending {
		if now.Sub(c) < s.boot {
			booting = append(booting, c)
			continue
		}
		s.ready = append(s.ready, Replica{ID: fmt.Sprintf("vm-%03d", s.created)})
		s.created++
		s.backoff = s.backoff.Reset()
	}
	s.pending = booting

	var serving []*Replica
	for i := range s.ready {
		if !s.ready[i].Draining {
			serving = append(serving, &s.ready[i])
		}
	}
	o := Observation{Ready: len(serving), Pending: len(s.pending), LastActive: s.lastActive}
	if len(serving) == 0 {
		o.Waiters = s.load
	} else {
		o.InFlight = s.load
		for i, r := range serving {
			r.InFlight = s.load / len(serving)
			if i < s.load%len(serving) {
				r.InFlight++
			}
			if r.InFlight > 0 {
				r.LastActive = now
			}
		}
		if s.load > 0 {
			o.LastActive, s.lastActive = now, now
		}
	}

	want := Desired(s.p, o, now)
	plan := MakePlan(want, s.ready, len(s.pending), s.backoff, now)
	for range plan.Create {
		s.pending = append(s.pending, now)
	}
	for _, id := range plan.Drain {
		for i := range s.ready {
			if s.ready[i].ID == id {
				s.ready[i].Draining = true
				s.ready[i].InFlight = 0 // its requests move to the others
			}
		}
	}
	kept := s.ready[:0]
	for _, r := range s.ready {
		if r.Draining {
			if done, _ := DrainDone(r.InFlight, r.LastActive, s.p.DrainTimeout, now); done {
				continue
			}
		}
		kept = append(kept, r)
	}
	s.ready = kept
	s.log = append(s.log, simStep{at: now, desired: want, ready: len(s.ready)})
}

func (s *sim) snapshot() (log []simStep, ready, pending, created int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]simStep(nil), s.log...), len(s.ready), len(s.pending), s.created
}

// TestTimeline steps the load from 0 to 10× the target and back to 0, and
// checks the pool follows: up on the first tick after the load appears,
// down to the idle size when it goes, holding the last replica until
// ScaleToZeroAfter has passed.
func TestTimeline(t *testing.T) {
	const (
		tick   = 2 * time.Second
		boot   = 9 * time.Second
		window = 5 * time.Minute
	)
	tests := []struct {
		name     string
		p        Policy
		up       int // replicas at 10× target load
		idle     int // replicas once idle past the window
		idleHold int // replicas while idle inside the window
	}{
		{"scale to zero", Policy{Max: 20, Target: 10}, 10, 0, 1},
		{"capped by max", Policy{Max: 5, Target: 10}, 5, 0, 1},
		{"warm pool", Policy{Max: 20, Warm: 2, Target: 10}, 12, 2, 2},
		{"min replicas", Policy{Min: 3, Max: 20, Target: 4}, 10, 3, 3},
		{"no delay", Policy{Max: 20, Target: 10, ScaleToZeroAfter: -1}, 10, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := tt.p
				p.DrainTimeout = 30 * time.Second
				if p.ScaleToZeroAfter == 0 {
					p.ScaleToZeroAfter = window
				}
				s := &sim{p: p, boot: boot}
				start := time.Now()
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- Loop(ctx, tick, nil, s.step) }()

				time.Sleep(5 * time.Second)
				loadAt := time.Now()
				s.setLoad(10*p.Target, loadAt)
				time.Sleep(56 * time.Second) // off the 2 s ticks, so no step races the drop
				synctest.Wait()
				if _, ready, pending, created := s.snapshot(); ready != tt.up || pending != 0 || created != tt.up {
					t.Fatalf("under load: ready %d, pending %d, created %d; want %d, 0, %d",
						ready, pending, created, tt.up, tt.up)
				}

				dropAt := time.Now()
				s.setLoad(0, dropAt)
				time.Sleep(window + 20*time.Second)
				synctest.Wait()
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("Loop = %v", err)
				}

				log, ready, _, created := s.snapshot()
				if ready != tt.idle || created != tt.up {
					t.Errorf("at the end: ready %d, created %d; want %d, %d", ready, created, tt.idle, tt.up)
				}
				sawUp := false
				for _, st := range log {
					var want int
					switch {
					case !st.at.After(loadAt):
						want = min(max(p.Min, p.Warm), p.Max)
					case st.at.Before(dropAt):
						want = tt.up
						if !sawUp {
							sawUp = true
							if got := st.at.Sub(loadAt); got > tick {
								t.Errorf("first step under load %v after it appeared, want within one tick", got)
							}
						}
					case st.at.Sub(dropAt) < p.ScaleToZeroAfter:
						want = tt.idleHold
					default:
						want = tt.idle
					}
					if st.desired != want {
						t.Errorf("at %v: desired %d, want %d", st.at.Sub(start), st.desired, want)
					}
					// Drains of idle replicas finish within the step, so
					// after the drop the pool is exactly its desired size.
					if st.at.After(dropAt) && st.ready != want {
						t.Errorf("at %v: ready %d, want %d", st.at.Sub(start), st.ready, want)
					}
				}
				if !sawUp {
					t.Error("no step saw the load")
				}
			})
		})
	}
}

// TestColdStart checks that a request waiting on an empty pool, with a poke,
// gets a replica created at once rather than at the next tick, and that a
// boot failure backs creates off.
func TestColdStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sim{p: Policy{Max: 3, Target: 10, ScaleToZeroAfter: time.Minute}, boot: 5 * time.Second}
		poke := make(chan struct{}, 1)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go Loop(ctx, time.Hour, poke, s.step)
		synctest.Wait()
		if _, _, pending, _ := s.snapshot(); pending != 0 {
			t.Fatalf("idle pool started %d replicas", pending)
		}

		time.Sleep(time.Minute)
		s.setLoad(1, time.Now())
		Poke(poke)
		synctest.Wait()
		if _, _, pending, _ := s.snapshot(); pending != 1 {
			t.Fatalf("after a waiter's poke: %d pending, want 1", pending)
		}

		// The boot fails: the manager records it and drops the VM. Another
		// poke must not create again inside the backoff.
		s.mu.Lock()
		s.pending = nil
		s.backoff = s.backoff.Fail(time.Now())
		s.mu.Unlock()
		time.Sleep(10 * time.Second)
		Poke(poke)
		synctest.Wait()
		if _, _, pending, _ := s.snapshot(); pending != 0 {
			t.Fatalf("created %d inside the backoff, want 0", pending)
		}
		time.Sleep(20 * time.Second)
		Poke(poke)
		synctest.Wait()
		if _, _, pending, _ := s.snapshot(); pending != 1 {
			t.Fatalf("after the backoff: %d pending, want 1", pending)
		}
	})
}
