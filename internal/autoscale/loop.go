package autoscale

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Loop runs step once at start, then again whenever interval has passed
// since the previous step ended, and at once when a value arrives on poke.
// It returns nil when ctx ends, and an error only for bad arguments.
//
// Pokes are how cold-start waiters and spec writes nudge the autoscaler
// without waiting out the interval (app-lb.md §4.2). They coalesce: pokes
// that are already queued when the loop wakes are all answered by one step.
// A poke that arrives while step runs is not lost — it runs one more step
// right after — because that step might be the one that sees what the poke
// was about. Senders should use Poke on a channel with a buffer of one, so
// they never block and at most one poke is ever queued.
//
// A nil poke channel is never ready, so the loop runs on the interval alone;
// a closed one is ignored from then on. The interval is measured from the
// end of a step, so a slow step (a daemon that takes seconds to list its
// VMs) is never followed by a burst of catch-up steps. step receives the
// time it was called for, read once, so one step sees one "now".
//
// app-lb reconciles every 2 s and every 200 ms while a VM boots; run two
// Loops, or poke the loop from a booting VM's own timer, for the fast tick.
func Loop(ctx context.Context, interval time.Duration, poke <-chan struct{}, step func(now time.Time)) error {
	if interval <= 0 {
		return fmt.Errorf("autoscale: loop interval must be positive, got %v", interval)
	}
	if step == nil {
		return errors.New("autoscale: loop step must not be nil")
	}
	if ctx.Err() != nil {
		return nil
	}
	step(time.Now())
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case _, ok := <-poke:
			if !ok {
				poke = nil
				continue
			}
			poke = drainPokes(poke)
		}
		// select picks at random among ready cases; do not start a step
		// after ctx has ended just because a tick was ready too.
		if ctx.Err() != nil {
			return nil
		}
		step(time.Now())
		t.Reset(interval)
	}
}

// drainPokes discards pokes already queued on c, so that they coalesce into
// the step about to run. It returns c, or nil once c is closed.
func drainPokes(c <-chan struct{}) <-chan struct{} {
	for {
		select {
		case _, ok := <-c:
			if !ok {
				return nil
			}
		default:
			return c
		}
	}
}

// Poke asks the Loop reading c to run a step now, without blocking. With a
// buffer of one on c, repeated pokes before the loop wakes cost nothing.
func Poke(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
