package autoscale

import "time"

// Backoff is the boot-failure backoff (app-lb.md §4.2): after n consecutive
// failures the pool creates nothing for 30s × 2^(n-1), capped at one hour —
// 1→30s, 2→60s, 3→120s, …, 7→1920s, ≥8→3600s. It exists because a failing
// image was once recreated every two seconds (§12 "boot churn").
//
// A Backoff is a value: Fail and Reset return the new state. The zero value
// has no failures and is not active. The pool manager calls Fail for each
// replica that fails to boot (create refused, terminal state, boot timeout)
// and Reset when a replica passes its health check or the spec is written.
type Backoff struct {
	Failures int       // consecutive boot failures since the last success or spec write
	Until    time.Time // no creates before this time; zero when none failed
}

// Backoff delay bounds.
const (
	BackoffBase = 30 * time.Second // delay after the first failure
	BackoffMax  = time.Hour        // the delay never exceeds this
)

// BackoffDelay returns the wait after n consecutive failures; 0 for n <= 0.
func BackoffDelay(n int) time.Duration {
	switch {
	case n <= 0:
		return 0
	case n >= 8: // 30s × 2^7 = 3840s is already past the cap
		return BackoffMax
	}
	return min(BackoffBase<<(n-1), BackoffMax)
}

// Fail records one more boot failure at now and returns the new state,
// active until now + BackoffDelay(Failures+1).
func (b Backoff) Fail(now time.Time) Backoff {
	n := b.Failures
	if n < 0 {
		n = 0
	}
	if n < 1<<30 { // saturate instead of overflowing on absurd counts
		n++
	}
	return Backoff{Failures: n, Until: now.Add(BackoffDelay(n))}
}

// Reset returns the state after a successful boot or a spec write: no
// failures and no wait.
func (b Backoff) Reset() Backoff { return Backoff{} }

// Active reports whether the backoff still holds creates off at now.
func (b Backoff) Active(now time.Time) bool { return now.Before(b.Until) }

// Remaining returns how long the backoff still holds creates off at now,
// 0 when it is not active. It is what the pool view shows as
// boot_backoff_secs (null when 0).
func (b Backoff) Remaining(now time.Time) time.Duration {
	if !b.Active(now) {
		return 0
	}
	return b.Until.Sub(now)
}
