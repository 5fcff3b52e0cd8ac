package autoscale

import (
	"math"
	"time"
)

// Policy is the scaling policy of one pool, with defaults already applied
// (see spec.Scaling). Negative counts and durations are treated as zero, and
// Max wins over Min and Warm when they disagree, so a policy that slipped
// past validation shrinks the pool rather than growing it past its cap.
type Policy struct {
	// Min is the fewest replicas the pool keeps, even when idle.
	Min int
	// Max is the most replicas the pool may have; 0 disables the pool.
	Max int
	// Warm is how many replicas the pool keeps beyond what demand needs,
	// so a burst finds capacity already booted.
	Warm int
	// Target is how many concurrent requests one replica is sized for.
	// Values below 1 count as 1.
	Target int

	// ScaleToZeroAfter is how long a pool with no demand keeps its last
	// replica before letting it go (see Desired).
	ScaleToZeroAfter time.Duration
	// DrainTimeout bounds how long a draining replica may keep requests
	// that show no activity (see DrainDone).
	DrainTimeout time.Duration
	// BootTimeout bounds how long a replica may take to become ready;
	// 0 waits forever (see BootExpired).
	BootTimeout time.Duration
	// ColdStartTimeout is how long a request may wait for a replica to
	// come up. Desired does not use it; it is here so that one value
	// carries the whole policy to the pool manager and the proxy.
	ColdStartTimeout time.Duration
}

// Observation is what the pool looks like now.
type Observation struct {
	InFlight   int       // requests in flight on all replicas, draining included
	Waiters    int       // requests held for a cold start
	Ready      int       // replicas serving (healthy, not draining)
	Pending    int       // replicas booting
	LastActive time.Time // latest request start/finish on any replica; zero = never
}

// Desired returns how many replicas the pool should have.
//
// The base value is app-lb's formula (§4.1):
//
//	demand  = InFlight + Waiters
//	needed  = ceil(demand / max(Target, 1))
//	desired = clamp(needed + Warm, Min, Max)
//
// Draining replicas' requests count in InFlight because they are load the
// pool is still carrying; waiters count because a pool at zero would
// otherwise never see demand and never scale up (app-lb's "cold-start 500s"
// incident, §12).
//
// Scale-to-zero delay. app-lb documents that an idle pool keeps its VM until
// it has been idle for scale_to_zero_after_secs, but its formula yields 0 as
// soon as demand is 0, so the setting does nothing (§4.1, §13). Desired
// honours the documented behaviour, and only for the last replica: when the
// formula says 0, the pool still has a ready replica, and the pool has been
// active within ScaleToZeroAfter (now - LastActive < ScaleToZeroAfter), the
// answer is 1. A zero LastActive means the pool never served a request, which
// counts as idle forever, so a pool that booted for nothing goes straight
// back to zero.
//
// Scale-down to a smaller non-zero count is not delayed: it follows load at
// once, as in app-lb. The reasons:
//
//   - Only the last replica saves a cold start. Replicas beyond the first
//     were sized for load that has gone; keeping them buys nothing that Warm
//     does not already buy on purpose.
//   - Desired stays monotone in demand. If an idle pool kept all of its
//     replicas, a pool with 0 requests would ask for more replicas than the
//     same pool with 1 request, and a trickle of requests would shrink it.
//   - A real stable window (Knative's) needs the peak demand over that
//     window, which an Observation does not carry. Keying it on LastActive
//     instead would pin a pool at its peak for as long as any request at all
//     arrives within the window.
//
// Worked examples with Target 10, Max 5 and ScaleToZeroAfter 5m unless given:
//
//	InFlight 25                                   → ceil(25/10) = 3
//	InFlight 0, Waiters 1                         → 1 (a cold start scales up from zero)
//	InFlight 60                                   → 6, clamped to Max → 5
//	Min 2, Max 4, idle                            → 0 + 0, clamped to Min → 2
//	Warm 2, idle                                  → 0 + 2 = 2
//	Warm 2, InFlight 10                           → 1 + 2 = 3
//	idle, Ready 3, last request 1m ago            → formula 0, held at 1
//	idle, Ready 3, last request 5m ago            → 0 (the window has passed)
//	idle, Ready 0, last request 1m ago            → 0 (nothing to keep)
//	InFlight 5, Ready 3                           → 1 (the two others drain now)
//	ScaleToZeroAfter 0, idle, Ready 1             → 0
//	ScaleToZeroAfter 0, InFlight 1                → 1
//	Max 0, InFlight 100                           → 0
//
// The result is always within [0, Max] and within [Min, Max] when Min <= Max;
// it is never 0 while demand > 0 unless Max is 0.
func Desired(p Policy, o Observation, now time.Time) int {
	maxN := max(p.Max, 0)
	if maxN == 0 {
		return 0
	}
	demand := addSat(max(o.InFlight, 0), max(o.Waiters, 0))
	target := max(p.Target, 1)
	needed := demand / target
	if demand%target != 0 {
		needed++
	}
	want := min(max(addSat(needed, max(p.Warm, 0)), max(p.Min, 0)), maxN)
	if want == 0 && o.Ready > 0 && p.ScaleToZeroAfter > 0 && now.Sub(o.LastActive) < p.ScaleToZeroAfter {
		// o.LastActive is not zero here: now - zero time saturates at the
		// largest Duration, which is never below ScaleToZeroAfter.
		return 1
	}
	return want
}

// addSat returns a+b for non-negative a and b, saturating at MaxInt so that
// absurd counts cannot wrap around to a negative replica count.
func addSat(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}
