package autoscale

import (
	"cmp"
	"slices"
	"time"
)

// Replica is what MakePlan needs to know about one ready replica.
type Replica struct {
	ID         string
	InFlight   int       // requests in flight on this replica
	LastActive time.Time // latest request start/finish here; zero = never
	Draining   bool      // already being drained; MakePlan ignores it
}

// Plan is what a reconcile step should do to move the pool towards the
// desired count. At most one of Create and Drain is non-empty.
type Plan struct {
	// Create is how many replicas to start.
	Create int
	// Drain lists the replicas to mark draining, idlest first.
	Drain []string
}

// MakePlan turns a desired replica count into actions (app-lb.md §4.2 step
// 4). ready holds the pool's serving replicas; draining ones in it are
// skipped, because they are leaving whatever happens. pending is the number
// of replicas still booting.
//
//   - Scale up: when ready + pending < desired and the boot backoff is not
//     active, create the difference. Pending replicas count as capacity, so
//     a slow boot is not answered with another create on every tick.
//   - Scale down: when ready > desired, drain ready - desired of them,
//     picking the idlest: fewest in-flight requests, then least recently
//     active, then lowest ID so the choice is deterministic.
//
// Scale-down counts ready replicas only, never pending ones: a ready replica
// is not drained to make room for a booting one that may still fail. If the
// pending replicas turn out surplus, the step after they become ready drains
// the surplus instead.
//
// Worked examples with desired 3:
//
//	ready 1, pending 1             → Create 1
//	ready 1, pending 1, in backoff → nothing
//	ready 3, pending 2             → nothing (the two pending drain once ready)
//	ready a(2 in flight), b(0), c(0, active 1m ago), d(0, never active), desired 2
//	                               → Drain [d c]
//
// A negative desired counts as 0. The input slice is not modified.
func MakePlan(desired int, ready []Replica, pending int, backoff Backoff, now time.Time) Plan {
	desired = max(desired, 0)
	var serving []Replica
	for _, r := range ready {
		if !r.Draining {
			serving = append(serving, r)
		}
	}
	live := addSat(len(serving), max(pending, 0))
	if live < desired {
		if backoff.Active(now) {
			return Plan{}
		}
		return Plan{Create: desired - live}
	}
	if len(serving) <= desired {
		return Plan{}
	}
	slices.SortFunc(serving, idler)
	drain := make([]string, 0, len(serving)-desired)
	for _, r := range serving[:len(serving)-desired] {
		drain = append(drain, r.ID)
	}
	return Plan{Drain: drain}
}

// idler orders replicas idlest first: fewest in-flight requests, then
// least recently active (never active first), then by ID.
func idler(a, b Replica) int {
	if c := cmp.Compare(a.InFlight, b.InFlight); c != 0 {
		return c
	}
	if c := a.LastActive.Compare(b.LastActive); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// DrainDone reports whether a draining replica may be reaped: when it has
// no requests left, or, forced, when it has shown no activity for
// drainTimeout (app-lb.md §4.2 "reap drained"). The timeout counts from the
// last activity rather than from the start of the drain, so a replica still
// finishing requests keeps them; a request that outlives drainTimeout with
// nothing else happening (a stuck upload, an idle websocket) is cut off.
// A drainTimeout of 0 or less forces the reap at once.
//
//	inFlight 0                                       → done
//	inFlight 2, drainTimeout 30s, last active 10s ago → not done
//	inFlight 2, drainTimeout 30s, last active 30s ago → done, forced
func DrainDone(inFlight int, lastActive time.Time, drainTimeout time.Duration, now time.Time) (done, forced bool) {
	if inFlight <= 0 {
		return true, false
	}
	if now.Sub(lastActive) >= drainTimeout {
		return true, true
	}
	return false, false
}

// BootExpired reports whether a replica created at created has been booting
// for bootTimeout or longer. A bootTimeout of 0 or less waits forever, as
// boot_timeout_secs 0 does in app-lb.
//
//	bootTimeout 300s, created 299s ago → false
//	bootTimeout 300s, created 300s ago → true
//	bootTimeout 0, created a day ago   → false
func BootExpired(created time.Time, bootTimeout time.Duration, now time.Time) bool {
	return bootTimeout > 0 && now.Sub(created) >= bootTimeout
}
