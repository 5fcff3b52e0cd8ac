package registry

// Placement: in a fleet, each vm deployment's replicas run on one host,
// the one the fleet's scheduler picks (Options.Place); every other host
// forwards the deployment's requests to it over the hop.

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/spec"
)

// Placement is where a vm deployment's replicas run (Options.Place).
type Placement struct {
	// Here: on this host, from its pool, as without a fleet.
	Here bool
	// HostID and Addr, when not Here, are the fleet host that runs them
	// and its hop listener (host:port): this host runs no replica of the
	// deployment and forwards its requests there, with
	// Options.HopTLS(HostID). Neither: the deployment is being placed,
	// and its requests are answered 503 with a Retry-After.
	HostID, Addr string
}

// placedElsewhere connects vm deployment e to the host pl names, or to
// nothing while it is being placed; activate's part for a deployment
// whose replicas do not run here. prev is the entry it replaces.
func (r *Registry) placedElsewhere(e, prev *Entry, pl Placement) {
	id := e.Spec.ID
	if pl.Addr == "" || pl.HostID == "" {
		e.dp.Unavailable = fmt.Sprintf("deployment %s is being placed on a fleet host; retry shortly", id)
		return
	}
	if prev != nil && prev.placement == pl && prev.Pool != nil && prev.VMPool == nil {
		// The same host: its connections stay.
		e.Pool, e.dp.Pool, e.dp.Forwarded = prev.Pool, prev.Pool, true
		e.dp.Unavailable = fmt.Sprintf("deployment %s is moving between fleet hosts; retry shortly", id)
		return
	}
	var c *tls.Config
	if r.o.HopTLS != nil {
		c = r.o.HopTLS(pl.HostID)
	}
	if c == nil {
		e.dp.Unavailable = fmt.Sprintf("deployment %s runs on fleet host %s, and this host has no hop to it (no fleet certificate)", id, pl.HostID)
		return
	}
	b := proxy.NewBackend(pl.Addr, pl.Addr, true)
	b.TLS, b.Scheme, b.TLSConfig = true, "https", c
	e.Pool = proxy.NewPool(b)
	e.dp.Pool, e.dp.Forwarded = e.Pool, true
	e.dp.Unavailable = fmt.Sprintf("deployment %s is moving between fleet hosts; retry shortly", id)
}

// Placed re-reads where vm deployment id runs (Options.Place) and, if
// that changed, publishes it. When its replicas stop running here, the
// data plane routes its requests elsewhere first; then, with drain, the
// requests in flight on the local replicas finish (for up to the
// deployment's drain_timeout_secs) before its pool is removed, its
// replicas stopped; without drain (a fenced host) the pool is removed at
// once. It reports whether the deployment exists and is a vm one.
//
// Calls for one deployment must not overlap, and what Place answers for
// it must not change back to here while one runs (the caller serialises
// its changes): a pool being removed is not to be ensured again.
func (r *Registry) Placed(ctx context.Context, id string, drain bool) bool {
	r.mu.Lock()
	e := r.deps[id]
	if e == nil || e.Kind != apitype.KindVM {
		r.mu.Unlock()
		return false
	}
	if r.o.Place == nil || r.o.Place(id) == e.placement && e.placed {
		r.mu.Unlock()
		return true
	}
	ne, err := r.build(e.Spec, e, false)
	if err != nil {
		r.mu.Unlock()
		r.o.Log.Error("could not place a deployment", "id", id, "err", err)
		return true
	}
	ne.Revision, ne.CreatedAt, ne.UpdatedAt = e.Revision, e.CreatedAt, e.UpdatedAt
	r.activateFrom(ne, e)
	r.deps[id] = ne
	r.publishLocked(id)
	var gone *proxy.Pool
	if e.VMPool != nil && ne.VMPool == nil && r.o.Pools != nil {
		gone = r.replicas[id]
		delete(r.replicas, id)
	}
	timeout := secs(spec.Scaling(e.Spec.Scaling).DrainTimeoutSecs)
	r.mu.Unlock()
	if gone == nil {
		return true
	}
	if drain {
		waitIdle(ctx, gone, timeout)
	}
	r.o.Pools.Remove(ctx, id)
	r.o.Log.Info("stopped a deployment's replicas: it runs elsewhere now", "id", id, "host", ne.placement.HostID, "drained", drain)
	return true
}

// waitIdle waits until no request is in flight on p's backends, at most
// timeout.
func waitIdle(ctx context.Context, p *proxy.Pool, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		busy := false
		for _, b := range p.Backends() {
			if b.InFlight() > 0 {
				busy = true
			}
		}
		if !busy {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// changed tells Options.Changed of a write or delete (e nil).
func (r *Registry) changed(id string, e *Entry) {
	if r.o.Changed != nil {
		r.o.Changed(id, e)
	}
}
