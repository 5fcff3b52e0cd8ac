package registry

// Placement: in a fleet, each vm deployment's replicas run on one host,
// the one the fleet's scheduler picks (Options.Place); every other host
// forwards the deployment's requests to it over the hop.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
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
		if prev != nil {
			// Requests held for the host it left wait for the next one.
			e.fwd = prev.fwd
		}
		return
	}
	if prev != nil && prev.placement == pl && prev.fwd != nil {
		// The same host: its connections stay.
		e.Pool, e.fwd = prev.Pool, prev.fwd
		e.dp.Pool, e.dp.Forwarded, e.dp.Hold = e.Pool, true, e.fwd
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
	if prev != nil && prev.fwd != nil {
		// Moved to another host: the requests held for the last one go
		// to it.
		e.fwd = prev.fwd
		e.fwd.pool.Set([]*proxy.Backend{b})
		e.fwd.moved()
	} else {
		e.fwd = newPlaceHold(r, id, proxy.NewPool(b))
	}
	e.fwd.mu.Lock()
	e.fwd.timeout = secs(spec.Scaling(e.Spec.Scaling).ColdStartTimeoutSecs)
	e.fwd.mu.Unlock()
	e.Pool = e.fwd.pool
	e.dp.Pool, e.dp.Forwarded, e.dp.Hold = e.Pool, true, e.fwd
	e.dp.Unavailable = fmt.Sprintf("deployment %s is moving between fleet hosts; retry shortly", id)
}

// placeHold is the proxy.Holder of a vm deployment placed on another
// host. A request whose connection to that host's hop listener cannot be
// made (the host is down: its berth killed, its lease not lapsed yet) is
// held instead of failed, counted as the deployment's cold start: until
// the scheduler places the deployment elsewhere (moved; a move here hands
// the request to the local pool's own holder, which starts a replica), or
// the host's hop listener takes connections again, or the deployment's
// cold-start timeout passes. Only the requests that were in flight on the
// dead host fail.
type placeHold struct {
	r    *Registry
	id   string
	pool *proxy.Pool // the hop listener's backend; kept across moves

	mu      sync.Mutex
	move    chan struct{} // closed at the next move
	timeout time.Duration // the deployment's cold-start timeout
}

func newPlaceHold(r *Registry, id string, pool *proxy.Pool) *placeHold {
	return &placeHold{r: r, id: id, pool: pool, move: make(chan struct{})}
}

// moved wakes the requests held for the deployment's last placement.
func (h *placeHold) moved() {
	h.mu.Lock()
	close(h.move)
	h.move = make(chan struct{})
	h.mu.Unlock()
}

// placeProbeEvery is how often a held request's host is tried again.
const placeProbeEvery = 250 * time.Millisecond

// Await implements proxy.Holder.
func (h *placeHold) Await(ctx context.Context, since time.Time, first bool) error {
	h.mu.Lock()
	move, timeout := h.move, h.timeout
	h.mu.Unlock()
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	deadline := since.Add(timeout)
	t := time.NewTicker(placeProbeEvery)
	defer t.Stop()
	for {
		// (Checked after move was taken, so a move just before is seen.)
		switch cur, ok := h.r.holder(h.id); {
		case !ok:
			return errPlaceHoldGone
		case cur != nil && cur != proxy.Holder(h):
			return cur.Await(ctx, since, first) // it runs here now
		}
		for _, b := range h.pool.Backends() {
			if b.Healthy() && !b.Draining() {
				return nil // a new host's, or the host is back
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-move:
			return nil
		case now := <-t.C:
			if !now.Before(deadline) {
				return errPlaceHoldTimeout
			}
			if h.reachable(ctx) {
				return nil
			}
		}
	}
}

var (
	errPlaceHoldTimeout = errors.New("registry: the deployment's fleet host did not come back, nor was the deployment placed elsewhere, within its cold-start timeout")
	errPlaceHoldGone    = errors.New("registry: the deployment was deleted while its request was held")
)

// reachable says whether the hop listener takes connections again, and
// if so marks its backend healthy.
func (h *placeHold) reachable(ctx context.Context) bool {
	ok := false
	for _, b := range h.pool.Backends() {
		d := net.Dialer{Timeout: placeProbeEvery}
		c, err := d.DialContext(ctx, "tcp", b.Addr)
		if err != nil {
			continue
		}
		c.Close()
		b.SetHealthy(true)
		ok = true
	}
	return ok
}

// RetryAfter implements proxy.Holder.
func (h *placeHold) RetryAfter() time.Duration { return 5 * time.Second }

// holder is the Holder deployment id's data plane entry has now; ok is
// false when there is no such deployment any more.
func (r *Registry) holder(id string) (h proxy.Holder, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.deps[id]
	if e == nil {
		return nil, false
	}
	if e.dp != nil {
		h = e.dp.Hold
	}
	return h, true
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
