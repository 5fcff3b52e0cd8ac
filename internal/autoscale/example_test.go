package autoscale_test

import (
	"fmt"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
)

func ExampleDesired() {
	p := autoscale.Policy{Max: 5, Target: 10, ScaleToZeroAfter: 5 * time.Minute}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	fmt.Println(autoscale.Desired(p, autoscale.Observation{InFlight: 25, Ready: 1, LastActive: now}, now))
	fmt.Println(autoscale.Desired(p, autoscale.Observation{Waiters: 1}, now))
	// Idle for a minute: the last replica is kept.
	fmt.Println(autoscale.Desired(p, autoscale.Observation{Ready: 3, LastActive: now.Add(-time.Minute)}, now))
	// Idle for five minutes: the pool goes to zero.
	fmt.Println(autoscale.Desired(p, autoscale.Observation{Ready: 1, LastActive: now.Add(-5 * time.Minute)}, now))
	// Output:
	// 3
	// 1
	// 1
	// 0
}

func ExampleMakePlan() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ready := []autoscale.Replica{
		{ID: "vm-a", InFlight: 2, LastActive: now},
		{ID: "vm-b", LastActive: now.Add(-time.Second)},
		{ID: "vm-c", LastActive: now.Add(-time.Minute)},
	}
	fmt.Println(autoscale.MakePlan(1, ready, 0, autoscale.Backoff{}, now).Drain)
	fmt.Println(autoscale.MakePlan(5, ready, 1, autoscale.Backoff{}, now).Create)
	// Output:
	// [vm-c vm-b]
	// 1
}

func ExampleBackoff() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var b autoscale.Backoff
	for range 3 {
		b = b.Fail(now)
		fmt.Println(b.Failures, b.Remaining(now))
	}
	fmt.Println(b.Reset().Active(now))
	// Output:
	// 1 30s
	// 2 1m0s
	// 3 2m0s
	// false
}
