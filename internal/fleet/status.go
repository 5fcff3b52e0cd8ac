package fleet

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// Errors of Pick and Evict.
var (
	ErrNoReplica       = errors.New("fleet: no such replica")
	ErrReplicaStarting = errors.New("fleet: the replica has not started serving yet")
	ErrReplicaDraining = errors.New("fleet: the replica is draining")
	ErrNoRunning       = errors.New("fleet: no running replica")
)

// ReplicaView describes one replica for the admin API.
type ReplicaView struct {
	ID       string
	Addr     string
	Phase    string // pending, ready or draining
	Status   string // the driver's last state
	InFlight int
	Healthy  bool
	Draining bool
	Since    time.Time // ready since (ready/draining), created (pending)
}

// Status is a pool's state for the admin API.
type Status struct {
	Desired    int
	Ready      int // serving, not draining
	Draining   int
	Pending    int // booting or being created
	InFlight   int
	Waiters    int
	Suspended  int
	Failures   int
	BackoffFor time.Duration // 0: may create now
	Replicas   []ReplicaView // ready and draining first (by age), then pending
}

// Status reports the pool.
func (p *Pool) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	st := Status{
		Desired: p.desired, Pending: p.creating, Waiters: int(p.waiters.Load()),
		Suspended: len(p.suspended), Failures: p.backoff.Failures, BackoffFor: p.backoff.Remaining(now),
	}
	for _, r := range p.replicas {
		v := ReplicaView{ID: r.id, Addr: r.addr, Phase: r.phase.String(), Status: r.lastStatus}
		switch r.phase {
		case pending:
			st.Pending++
			v.Since = r.created
			if v.Status == "" {
				v.Status = "booting"
			}
		default:
			v.InFlight = int(r.backend.InFlight())
			v.Healthy = r.backend.Healthy()
			v.Draining = r.phase == draining
			v.Since = r.readyAt
			st.InFlight += v.InFlight
			if v.Draining {
				st.Draining++
			} else {
				st.Ready++
			}
		}
		st.Replicas = append(st.Replicas, v)
	}
	slices.SortFunc(st.Replicas, func(a, b ReplicaView) int {
		if (a.Phase == "pending") != (b.Phase == "pending") {
			if a.Phase == "pending" {
				return 1
			}
			return -1
		}
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	return st
}

// Pick chooses a replica for an exec or shell session and takes a slot on
// it, which keeps it from being scaled away under the session; it returns
// the replica's id, and release to call when done. With an id, that
// replica must be serving. Without one, the least-loaded ready replica is
// chosen; when there is none and wake is true, the pool scales up and Pick
// waits like a held request (and, like one, fails at once with a
// *StartError when no replica can start).
func (p *Pool) Pick(ctx context.Context, id string, wake bool) (sandbox string, release func(), err error) {
	if id != "" {
		p.mu.Lock()
		r, ok := p.replicas[id]
		p.mu.Unlock()
		switch {
		case !ok:
			return "", nil, ErrNoReplica
		case r.phase == pending:
			return "", nil, ErrReplicaStarting
		case r.phase == draining:
			return "", nil, ErrReplicaDraining
		}
		if !r.backend.AcquireBackend() {
			return "", nil, ErrReplicaDraining
		}
		return r.id, r.backend.Release, nil
	}
	since := time.Now()
	for first := true; ; first = false {
		if id, release, ok := p.backends.Acquire(); ok {
			return id, release, nil
		}
		if !wake {
			return "", nil, ErrNoRunning
		}
		if err := p.Await(ctx, since, first); err != nil {
			if ctx.Err() != nil {
				return "", nil, ctx.Err()
			}
			return "", nil, err
		}
	}
}

// Evict retires one replica: with force it is stopped at once ("killed"),
// otherwise it drains and is reaped when idle ("draining").
func (p *Pool) Evict(ctx context.Context, id string, force bool) (killed bool, err error) {
	p.mu.Lock()
	r, ok := p.replicas[id]
	if !ok {
		p.mu.Unlock()
		return false, ErrNoReplica
	}
	if !force && r.phase != pending {
		if r.phase == ready {
			r.phase, r.drainAt = draining, time.Now()
			r.backend.Drain("evicted", r.drainAt)
		}
		p.mu.Unlock()
		p.Poke()
		return false, nil
	}
	if r.stopBoot != nil {
		r.stopBoot()
	}
	delete(p.replicas, id)
	if r.backend != nil {
		p.backends.Remove(id)
	}
	p.mu.Unlock()
	err = p.driver().Stop(ctx, id, 0)
	if errors.Is(err, vm.ErrNotFound) {
		err = nil
	}
	if err == nil {
		p.workspaceStopped(ctx, id)
	}
	p.Poke()
	return true, err
}
