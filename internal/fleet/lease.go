package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// renewTimeout bounds one Renew call, so a slow driver cannot stall a step
// for long.
const renewTimeout = 5 * time.Second

// renewLeases is the TTL backstop's berth half (app-lb §4.2): every replica
// is created with a lease of Template.TTL (vm.ttl_seconds) that its sandbox
// enforces, and while berth runs it renews the lease of every replica the
// pool tracks — pending, ready, draining and suspended alike — to now + TTL
// once more than half of the TTL has passed since the last renewal. It runs
// at most once per step. If berth is gone for good, nobody renews, and the
// replicas end by themselves within one TTL.
//
// Suspended replicas are renewed too: they are the pool's (the next scale-up
// resumes them), and a replica thawed with a passed lease would end at
// once. Left behind by a berth that never returns, a suspended replica is
// frozen with its sandbox and cannot act on its lease; it ends as soon as
// anything resumes it, and a berth over the same state adopts and renews it
// first.
//
// The time of the last renewal is known for replicas this berth created
// (their lease starts at Start, which is after created); for replicas it
// adopted or found suspended it is not, so they are renewed at the first
// step. A renewal that fails is retried at the next step; a replica the
// driver no longer knows is left to observe.
func (p *Pool) renewLeases(ctx context.Context, cfg *Config, now time.Time) {
	ttl := cfg.Template.TTL
	l, ok := p.driver().(vm.Leaser)
	if !ok || ttl <= 0 {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if p.leases == nil {
		p.leases = map[string]time.Time{}
	}
	tracked := make(map[string]bool, len(p.replicas)+len(p.suspended))
	var due []string
	check := func(id string, fresh time.Time) {
		tracked[id] = true
		last, known := p.leases[id]
		if !known && !fresh.IsZero() {
			last = fresh
			p.leases[id] = last
		}
		if last.IsZero() || now.Sub(last) > ttl/2 {
			due = append(due, id)
		}
	}
	for id, r := range p.replicas {
		var fresh time.Time
		if !r.adopted {
			fresh = r.created
		}
		check(id, fresh)
	}
	for _, id := range p.suspended {
		check(id, time.Time{})
	}
	for id := range p.leases {
		if !tracked[id] {
			delete(p.leases, id)
		}
	}
	p.mu.Unlock()

	for _, id := range due {
		rctx, cancel := context.WithTimeout(ctx, renewTimeout)
		err := l.Renew(rctx, id, now.Add(ttl))
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			p.mu.Lock()
			if p.leases != nil {
				p.leases[id] = now
			}
			p.mu.Unlock()
		case errors.Is(err, vm.ErrNotFound):
			// Gone: observe gives it up after MissingGrace.
		default:
			p.m.log.Warn("could not renew a replica's lease; retrying at the next step", "deployment", p.id, "replica", id, "err", err)
		}
	}
}
