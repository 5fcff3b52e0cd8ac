package autoscale

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// t0 is an arbitrary fixed instant for the pure-function tests.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// defaults is the app-lb default policy (app-lb.md §2.5).
var defaults = Policy{
	Min: 0, Max: 5, Warm: 0, Target: 10,
	ScaleToZeroAfter: 300 * time.Second,
	DrainTimeout:     30 * time.Second,
	BootTimeout:      300 * time.Second,
	ColdStartTimeout: 120 * time.Second,
}

// with returns defaults changed by f.
func with(f func(*Policy)) Policy {
	p := defaults
	f(&p)
	return p
}

func TestDesired(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	tests := []struct {
		name string
		p    Policy
		o    Observation
		want int
	}{
		// The reference's unit cases (app-lb.md §4.1).
		{"ref: 25 in flight, target 10", defaults, Observation{InFlight: 25, Ready: 1, LastActive: t0}, 3},
		{"ref: min 2 max 4 idle", with(func(p *Policy) { p.Min, p.Max = 2, 4 }), Observation{Ready: 2}, 2},
		{"ref: warm 2 idle", with(func(p *Policy) { p.Warm = 2 }), Observation{Ready: 2}, 2},
		{"ref: warm 2, 10 in flight", with(func(p *Policy) { p.Warm = 2 }), Observation{InFlight: 10, Ready: 2, LastActive: t0}, 3},
		{"ref: scale to zero after 0, idle", with(func(p *Policy) { p.ScaleToZeroAfter = 0 }), Observation{Ready: 1, LastActive: t0}, 0},
		{"ref: scale to zero after 0, one in flight", with(func(p *Policy) { p.ScaleToZeroAfter = 0 }), Observation{InFlight: 1, Ready: 1, LastActive: t0}, 1},
		{"ref: max 0, idle", with(func(p *Policy) { p.Max = 0 }), Observation{}, 0},
		{"ref: max 0, loaded", with(func(p *Policy) { p.Max = 0 }), Observation{InFlight: 100, Waiters: 7}, 0},

		// Demand.
		{"waiters count as demand", defaults, Observation{Waiters: 1}, 1},
		{"in flight plus waiters", defaults, Observation{InFlight: 15, Waiters: 6, Ready: 2, LastActive: t0}, 3},
		{"exact multiple", defaults, Observation{InFlight: 20, Ready: 2, LastActive: t0}, 2},
		{"clamped to max", defaults, Observation{InFlight: 60, Ready: 5, LastActive: t0}, 5},
		{"target 0 counts as 1", with(func(p *Policy) { p.Target = 0 }), Observation{InFlight: 3}, 3},
		{"negative target counts as 1", with(func(p *Policy) { p.Target = -4 }), Observation{InFlight: 3}, 3},
		{"warm added to load", with(func(p *Policy) { p.Warm = 1; p.Max = 10 }), Observation{InFlight: 31}, 5},
		{"warm clamped to max", with(func(p *Policy) { p.Warm = 4 }), Observation{InFlight: 30}, 5},

		// Scale-to-zero delay: only the last replica waits.
		{"idle within window keeps last replica", defaults, Observation{Ready: 3, LastActive: ago(time.Minute)}, 1},
		{"idle just inside window", defaults, Observation{Ready: 1, LastActive: ago(300*time.Second - time.Nanosecond)}, 1},
		{"idle exactly the window", defaults, Observation{Ready: 1, LastActive: ago(300 * time.Second)}, 0},
		{"idle past window", defaults, Observation{Ready: 3, LastActive: ago(time.Hour)}, 0},
		{"never active is idle forever", defaults, Observation{Ready: 2}, 0},
		{"nothing ready, nothing kept", defaults, Observation{Pending: 1, LastActive: ago(time.Second)}, 0},
		{"load drop scales down at once", defaults, Observation{InFlight: 5, Ready: 3, LastActive: t0}, 1},
		{"activity in the future counts as recent", defaults, Observation{Ready: 1, LastActive: t0.Add(time.Hour)}, 1},
		{"no window even with activity in the future", with(func(p *Policy) { p.ScaleToZeroAfter = 0 }), Observation{Ready: 1, LastActive: t0.Add(time.Hour)}, 0},
		{"negative window is no window", with(func(p *Policy) { p.ScaleToZeroAfter = -time.Hour }), Observation{Ready: 1, LastActive: t0.Add(time.Hour)}, 0},
		{"hold never exceeds max", with(func(p *Policy) { p.Max = 0 }), Observation{Ready: 2, LastActive: t0}, 0},
		{"min above zero needs no hold", with(func(p *Policy) { p.Min = 2 }), Observation{Ready: 4, LastActive: ago(time.Second)}, 2},

		// Bad policies shrink rather than grow.
		{"min above max: max wins", with(func(p *Policy) { p.Min, p.Max = 7, 3 }), Observation{}, 3},
		{"negative max", with(func(p *Policy) { p.Max = -1 }), Observation{InFlight: 5}, 0},
		{"negative min and warm", with(func(p *Policy) { p.Min, p.Warm = -3, -3 }), Observation{InFlight: 5}, 1},
		{"negative counts are no demand", with(func(p *Policy) { p.ScaleToZeroAfter = 0 }), Observation{InFlight: -5, Waiters: -1}, 0},
		{"huge demand saturates", with(func(p *Policy) { p.Max = math.MaxInt; p.Target = 1; p.Warm = math.MaxInt }),
			Observation{InFlight: math.MaxInt, Waiters: math.MaxInt}, math.MaxInt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Desired(tt.p, tt.o, t0); got != tt.want {
				t.Errorf("Desired(%+v, %+v) = %d, want %d", tt.p, tt.o, got, tt.want)
			}
		})
	}
}

// formula is app-lb's clamp(ceil(demand/target) + warm, min, max) without
// the scale-to-zero delay, written independently of Desired for the
// property test.
func formula(p Policy, o Observation) int {
	demand := max(o.InFlight, 0) + max(o.Waiters, 0)
	target := max(p.Target, 1)
	needed := int(math.Ceil(float64(demand) / float64(target)))
	return min(max(needed+max(p.Warm, 0), max(p.Min, 0)), max(p.Max, 0))
}

func TestDesiredProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		p := Policy{
			Min:              rng.IntN(8) - 1,
			Max:              rng.IntN(12) - 1,
			Warm:             rng.IntN(5) - 1,
			Target:           rng.IntN(25) - 2,
			ScaleToZeroAfter: time.Duration(rng.IntN(600)) * time.Second,
		}
		o := Observation{
			InFlight: rng.IntN(200) - 5,
			Waiters:  rng.IntN(20) - 2,
			Ready:    rng.IntN(12),
			Pending:  rng.IntN(4),
		}
		if rng.IntN(5) > 0 {
			o.LastActive = t0.Add(-time.Duration(rng.IntN(900)) * time.Second)
		}
		now := t0
		got := Desired(p, o, now)
		demand := max(o.InFlight, 0) + max(o.Waiters, 0)

		if got < 0 || got > max(p.Max, 0) {
			t.Fatalf("#%d: Desired(%+v, %+v) = %d, outside [0, max]", i, p, o, got)
		}
		if p.Min <= p.Max && got < p.Min {
			t.Fatalf("#%d: Desired(%+v, %+v) = %d, below min", i, p, o, got)
		}
		if demand > 0 && p.Max > 0 && got == 0 {
			t.Fatalf("#%d: Desired(%+v, %+v) = 0 with demand %d", i, p, o, demand)
		}
		// The delay only ever turns the formula's 0 into 1.
		if f := formula(p, o); got != f && (f != 0 || got != 1) {
			t.Fatalf("#%d: Desired(%+v, %+v) = %d, formula says %d", i, p, o, got, f)
		}
		// Monotone in demand: more requests never ask for fewer replicas.
		more := o
		if rng.IntN(2) == 0 {
			more.InFlight = max(more.InFlight, 0) + 1 + rng.IntN(30)
		} else {
			more.Waiters = max(more.Waiters, 0) + 1 + rng.IntN(30)
		}
		if g2 := Desired(p, more, now); g2 < got {
			t.Fatalf("#%d: Desired(%+v, %+v) = %d < %d with less demand %+v", i, p, more, g2, got, o)
		}
		// Monotone in time: waiting longer never asks for more.
		if g2 := Desired(p, o, now.Add(time.Duration(rng.IntN(900))*time.Second)); g2 > got {
			t.Fatalf("#%d: Desired(%+v, %+v) later = %d > %d", i, p, o, g2, got)
		}
	}
}

func BenchmarkDesired(b *testing.B) {
	p := with(func(p *Policy) { p.Warm = 1 })
	obs := []Observation{
		{InFlight: 25, Waiters: 3, Ready: 3, LastActive: t0},
		{Ready: 2, LastActive: t0.Add(-time.Minute)},
		{Waiters: 1},
	}
	var sink int
	for i := 0; b.Loop(); i++ {
		sink += Desired(p, obs[i%len(obs)], t0)
	}
	_ = sink
}
