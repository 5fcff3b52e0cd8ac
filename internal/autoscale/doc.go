// Package autoscale holds the scaling decisions for pools of VM replicas
// (app-lb.md §4): how many replicas a pool should have, which replicas to
// create or drain to get there, when a boot failure holds creation off, when
// a drain or a boot is over, and a small loop to run a reconcile step on a
// timer or on demand.
//
// Every decision is a pure function of its inputs — a Policy, an
// Observation of the pool, and the current time — in the manner of
// Knative's scaler and Nomad's reconciler. Nothing here does I/O, reads the
// clock or keeps state between calls, so the pool manager owns all state and
// the tests can walk through a timeline with exact times. Loop is the one
// exception: it reads the clock so that the manager does not have to.
//
// A reconcile step in the pool manager looks like this:
//
//	now := time.Now()
//	want := autoscale.Desired(policy, observation, now)
//	plan := autoscale.MakePlan(want, replicas, pending, backoff, now)
//	// create plan.Create VMs; mark plan.Drain as draining
//	// for each draining replica: if done, _ := autoscale.DrainDone(...); done { reap }
//	// for each booting VM: if autoscale.BootExpired(...) { kill; backoff = backoff.Fail(now) }
package autoscale
