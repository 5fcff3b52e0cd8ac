package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
)

// A candidate-first rollout. When a pool that has ready replicas gets a new
// template (Config.Key), its replicas keep serving while candidates of the
// new template boot; a candidate serves only once its health probe passed
// (health.expected_header included). The previous replicas drain once as
// many candidates are ready as were serving (bounded by desired and by
// max_replicas); the pool's size is bounded by max_replicas + Options.Surge
// throughout, which makes the rollout rolling when the surge is smaller than
// the serving count: a previous replica drains for each candidate that is
// ready, never below the number that were serving. A candidate that fails
// (its create, its boot, boot_timeout_secs, a wrong expected_header, or its
// end while it served) fails the rollout: the pool goes back to the
// template it ran before (rollout.from), the candidates are stopped (ready
// ones drain first), and Options.OnRollout hears "failed" once they are
// gone. A pool with no ready replica switches at once ("succeeded" with
// readiness not verified). A template change during a rollout supersedes
// it: the superseded target's pending candidates stop, its ready ones count
// as previous replicas of the new rollout, which falls back to the same
// template as the one it superseded.

// Rollout outcomes, as Options.OnRollout hears them.
const (
	RolloutRunning    = "running"
	RolloutSucceeded  = "succeeded"
	RolloutFailed     = "failed"
	RolloutSuperseded = "superseded"
)

// Rollout phases.
const (
	PhaseCandidates = "candidates"        // booting candidates; the previous replicas serve
	PhaseDraining   = "draining_previous" // enough candidates serve; the previous replicas drain
	PhaseDone       = "done"
	PhaseSwitched   = "switched" // no replica was ready: the pool switched at once
	PhaseReverted   = "reverted" // a candidate failed: the pool runs the previous template
)

// RolloutEvent is one step of a rollout of a pool, for Options.OnRollout.
type RolloutEvent struct {
	Deployment string
	// Revision is the target's Config.Revision, From the revision the
	// pool falls back to on failure.
	Revision, From    string
	Status, Phase     string
	ReadinessVerified bool
	PreviousStopped   bool
	Error             string
	// Stopped are the candidates a failed rollout stopped.
	Stopped []string
}

// RolloutView is a pool's rollout in progress, for the admin API.
type RolloutView struct {
	Revision, From string
	Phase          string
	Want           int // candidates needed
	Ready          int // candidates serving
	Pending        int // candidates booting
	Previous       int // replicas of other templates still serving or draining
	Started        time.Time
}

// rolloutRecheck is how soon a rollout waiting on a draining replica
// reconciles again (instead of at the next tick).
const rolloutRecheck = 50 * time.Millisecond

// drainingLocked reports whether a replica is draining.
func (p *Pool) drainingLocked() bool {
	for _, r := range p.replicas {
		if r.phase == draining {
			return true
		}
	}
	return false
}

// rollout is a pool's rollout in progress. Guarded by Pool.mu.
type rollout struct {
	from    *Config // what a failure reverts to: the template the pool last ran settled
	want    int
	phase   string
	started time.Time
	failed  string   // why a candidate failed; the next step reverts
	gone    []string // failed candidates already out of the pool, stopped again by the revert
}

// KeyDigest is the digest of a template (Config.Key) that
// ReplicaRecords keep with each replica.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// ReplicaRecords keep the template each replica was created from, so that
// a restarted berth adopts only replicas of the deployment's current
// template and stops the others (a rollout's candidates, or its previous
// replicas, left by a berth killed mid-rollout). berth's store implements
// it.
type ReplicaRecords interface {
	// RecordReplica is called before the replica's Start.
	RecordReplica(ctx context.Context, deployment, id, keyDigest string) error
	// ReplicaDigests returns the recorded digest by replica id.
	ReplicaDigests(ctx context.Context, deployment string) (map[string]string, error)
	// ForgetReplica is called once the replica was stopped.
	ForgetReplica(ctx context.Context, id string) error
}

// Rollout reports the pool's rollout in progress, if any.
func (p *Pool) Rollout() (RolloutView, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ro == nil {
		return RolloutView{}, false
	}
	cfg := p.cfg.Load()
	v := RolloutView{Revision: cfg.Revision, From: p.ro.from.Revision, Phase: p.ro.phase, Want: p.ro.want, Started: p.ro.started, Pending: p.creating}
	for _, r := range p.replicas {
		switch {
		case r.key != cfg.Key:
			v.Previous++
		case r.phase == ready:
			v.Ready++
		case r.phase == pending:
			v.Pending++
		}
	}
	return v, true
}

// emit hands events to Options.OnRollout; never under p.mu.
func (p *Pool) emit(evs []RolloutEvent) {
	if p.m.o.OnRollout == nil {
		return
	}
	for _, ev := range evs {
		ev.Deployment = p.id
		p.m.o.OnRollout(ev)
	}
}

// beginRolloutLocked handles a template change (update): it starts,
// supersedes or skips a rollout and returns the events to emit.
func (p *Pool) beginRolloutLocked(old, cfg *Config, now time.Time) []RolloutEvent {
	var evs []RolloutEvent
	from := old
	if p.ro != nil {
		from = p.ro.from
		evs = append(evs, RolloutEvent{Revision: old.Revision, From: from.Revision, Status: RolloutSuperseded, Phase: p.ro.phase,
			Error: "superseded by a newer spec (revision " + short(cfg.Revision) + ")"})
		p.ro = nil
	}
	serving := 0
	for _, r := range p.replicas {
		if r.phase == ready {
			serving++
		}
	}
	ctx := context.Background()
	if serving == 0 || cfg.Policy.Max == 0 || cfg.Recreate {
		// Nothing serves, or replicas take turns: switch at once.
		for _, r := range p.replicas {
			if r.key != cfg.Key {
				p.retireLocked(ctx, r, now)
			}
		}
		return append(evs, RolloutEvent{Revision: cfg.Revision, From: from.Revision, Status: RolloutSucceeded, Phase: PhaseSwitched, PreviousStopped: true})
	}
	// Booting replicas of another template will never be wanted.
	for _, r := range p.replicas {
		if r.key != cfg.Key && r.phase == pending {
			p.retireLocked(ctx, r, now)
		}
	}
	want := min(serving, max(p.desired, 1), cfg.Policy.Max)
	p.ro = &rollout{from: from, want: max(want, 1), phase: PhaseCandidates, started: now}
	p.backoff, p.lastFail = p.backoff.Reset(), nil
	p.m.log.Info("rollout started", "deployment", p.id, "revision", short(cfg.Revision), "from", short(from.Revision), "candidates", p.ro.want)
	return append(evs, RolloutEvent{Revision: cfg.Revision, From: from.Revision, Status: RolloutRunning, Phase: PhaseCandidates})
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// candidateFailedLocked records that a candidate of the rollout in
// progress failed; the next step reverts. It reports whether r was one.
func (p *Pool) candidateFailedLocked(r *replica, reason string) bool {
	if p.ro == nil || r.key != p.cfg.Load().Key {
		return false
	}
	if p.ro.failed == "" {
		p.ro.failed = fmt.Sprintf("candidate %s: %s", r.id, reason)
	}
	p.ro.gone = append(p.ro.gone, r.id)
	p.Poke()
	return true
}

// rolloutStepLocked is step's decision while a rollout runs, in place of
// the autoscaler's plan: it returns how many candidates to create, and the
// events to emit.
func (p *Pool) rolloutStepLocked(ctx context.Context, cfg *Config, now time.Time) (create int, evs []RolloutEvent) {
	ro := p.ro
	if ro.failed != "" {
		return 0, p.revertLocked(ctx, cfg, now)
	}
	var oldReady []*replica
	var oldLive, candReady, candPending int
	for _, r := range p.replicas {
		if r.key != cfg.Key {
			oldLive++
			if r.phase == ready {
				oldReady = append(oldReady, r)
			}
			continue
		}
		switch r.phase {
		case ready:
			candReady++
		case pending:
			candPending++
		}
	}
	candPending += p.creating
	if candReady >= ro.want {
		if ro.phase != PhaseDraining {
			ro.phase = PhaseDraining
			evs = append(evs, RolloutEvent{Revision: cfg.Revision, From: ro.from.Revision, Status: RolloutRunning, Phase: PhaseDraining, ReadinessVerified: true})
		}
		for _, r := range oldReady {
			r.phase, r.drainAt = draining, now
			r.backend.Drain("rollout", now)
		}
		if oldLive == 0 {
			p.ro = nil
			p.m.log.Info("rollout succeeded", "deployment", p.id, "revision", short(cfg.Revision))
			evs = append(evs, RolloutEvent{Revision: cfg.Revision, From: ro.from.Revision, Status: RolloutSucceeded, Phase: PhaseDone, ReadinessVerified: true, PreviousStopped: true})
		}
		return 0, evs
	}
	room := cfg.Policy.Max + p.m.o.Surge - (oldLive + candReady + candPending)
	need := ro.want - candReady - candPending
	create = max(min(need, room), 0)
	if create == 0 && need > 0 && candPending == 0 && candReady > 0 && len(oldReady)+candReady > ro.want {
		// No room for the next candidate: one previous replica drains
		// for a ready one, never below the serving count.
		slices.SortFunc(oldReady, func(a, b *replica) int { return int(a.backend.InFlight() - b.backend.InFlight()) })
		r := oldReady[0]
		r.phase, r.drainAt = draining, now
		r.backend.Drain("rollout", now)
	}
	return create, evs
}

// revertLocked ends a failed rollout: the pool goes back to ro.from, and
// its candidates stop (ready ones drain first, in a task that emits
// "failed" once they are gone).
func (p *Pool) revertLocked(ctx context.Context, cfg *Config, now time.Time) []RolloutEvent {
	ro := p.ro
	p.ro = nil
	p.cfg.Store(ro.from)
	p.backoff, p.lastFail = p.backoff.Reset(), nil
	var cands []*replica
	for _, r := range p.replicas {
		if r.key == cfg.Key {
			cands = append(cands, r)
			if r.stopBoot != nil {
				r.stopBoot()
			}
			delete(p.replicas, r.id)
			if r.backend != nil {
				r.backend.Drain("rollout failed", now)
			}
		}
	}
	p.m.log.Warn("rollout failed; the previous template serves", "deployment", p.id, "revision", short(cfg.Revision), "why", ro.failed)
	ev := RolloutEvent{Revision: cfg.Revision, From: ro.from.Revision, Status: RolloutFailed, Phase: PhaseReverted, Error: ro.failed}
	drainFor := cfg.Policy.DrainTimeout
	gone := ro.gone
	p.tasks.Go(func() {
		ctx := context.WithoutCancel(ctx)
		for _, id := range gone {
			p.stopAll(ctx, []string{id})
			ev.Stopped = append(ev.Stopped, id)
		}
		for _, r := range cands {
			if r.backend != nil {
				deadline := time.Now().Add(drainFor)
				for r.backend.InFlight() > 0 && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				p.backends.Remove(r.id)
			}
			p.stopAll(ctx, []string{r.id})
			ev.Stopped = append(ev.Stopped, r.id)
		}
		p.emit([]RolloutEvent{ev})
		p.Poke()
	})
	return nil
}
