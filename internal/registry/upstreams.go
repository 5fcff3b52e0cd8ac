package registry

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/health"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/store"
)

// UpstreamStatus reports one static upstream's traffic state.
func UpstreamStatus(id string, b *proxy.Backend) apitype.UpstreamTrafficStatus {
	st := apitype.UpstreamTrafficStatus{
		DeploymentID: id,
		Upstream:     b.ID,
		State:        apitype.TrafficAccepting,
		Healthy:      b.Healthy(),
		InFlight:     int(b.InFlight()),
	}
	if reason, since, draining := b.DrainInfo(); draining {
		st.State = apitype.TrafficDraining
		if st.InFlight == 0 {
			st.State = apitype.TrafficDrained
		}
		if reason != "" {
			st.Reason = &reason
		}
		at := since.Unix()
		st.StartedAt = &at
	}
	return st
}

func (r *Registry) upstream(id, upstream string) (*Entry, *proxy.Backend, error) {
	e, ok := r.deps[id]
	if !ok {
		return nil, nil, ErrNotFound
	}
	if e.Kind != apitype.KindStatic || e.Pool == nil {
		return nil, nil, ErrNotStatic
	}
	b := e.Pool.Find(upstream)
	if b == nil {
		return nil, nil, ErrNoUpstream
	}
	return e, b, nil
}

// Drain cordons a static upstream: it takes no new requests, and those in
// flight finish. Unless force, it refuses to drain the last healthy accepting
// upstream. The drain is persisted before it takes effect, so it survives a
// restart.
func (r *Registry) Drain(ctx context.Context, id, upstream string, force bool, reason string) (apitype.UpstreamTrafficStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, b, err := r.upstream(id, upstream)
	if err != nil {
		return apitype.UpstreamTrafficStatus{}, err
	}
	if !b.Draining() && !force {
		others := false
		for _, o := range e.Pool.Backends() {
			if o != b && o.Healthy() && !o.Draining() {
				others = true
			}
		}
		if !others {
			return apitype.UpstreamTrafficStatus{}, ErrLastUpstream
		}
	}
	since := r.o.Now()
	if _, old, draining := b.DrainInfo(); draining {
		since = old
	}
	if err := r.o.Store.PutUpstreamDrain(ctx, store.UpstreamDrain{Deployment: id, Upstream: upstream, Reason: reason, StartedAt: since}); err != nil {
		return apitype.UpstreamTrafficStatus{}, fmt.Errorf("the drain was not saved: %w", err)
	}
	b.Drain(reason, since)
	return UpstreamStatus(id, b), nil
}

// Undrain lets a static upstream take traffic again (persisted first).
func (r *Registry) Undrain(ctx context.Context, id, upstream string) (apitype.UpstreamTrafficStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, b, err := r.upstream(id, upstream)
	if err != nil {
		return apitype.UpstreamTrafficStatus{}, err
	}
	if err := r.o.Store.DeleteUpstreamDrain(ctx, id, upstream); err != nil {
		return apitype.UpstreamTrafficStatus{}, fmt.Errorf("the uncordon was not saved: %w", err)
	}
	b.Undrain()
	return UpstreamStatus(id, b), nil
}

// ProbeInterval is how often static upstreams are probed (app-lb re-probes
// every autoscaler tick, 2 s).
const ProbeInterval = 2 * time.Second

// Run probes static upstreams every ProbeInterval until ctx ends: failing
// backends leave the rotation, recovering ones rejoin it.
func (r *Registry) Run(ctx context.Context) error {
	t := time.NewTicker(ProbeInterval)
	defer t.Stop()
	for {
		r.ProbeOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ProbeOnce probes every static upstream once, concurrently (at most 32 at a
// time), and waits for the results.
func (r *Registry) ProbeOnce(ctx context.Context) {
	type job struct {
		id string
		b  *proxy.Backend
		c  health.Check
	}
	var jobs []job
	for _, e := range r.List() {
		if e.Kind != apitype.KindStatic || e.Pool == nil {
			continue
		}
		hc := spec.Health(&e.Spec)
		for _, b := range e.Pool.Backends() {
			c := health.Check{Addr: b.Addr, TLS: b.TLS, Path: hc.Path, Timeout: hc.Timeout}
			if hc.Port != 0 {
				c.Addr = withPort(b.Addr, hc.Port)
			}
			jobs = append(jobs, job{e.Spec.ID, b, c})
		}
	}
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := health.Probe(ctx, j.c)
			if ctx.Err() != nil {
				return
			}
			if j.b.SetHealthy(err == nil) {
				if err != nil {
					r.o.Log.Warn("upstream unhealthy", "deployment", j.id, "upstream", j.b.ID, "err", err)
				} else {
					r.o.Log.Info("upstream recovered", "deployment", j.id, "upstream", j.b.ID)
				}
			}
		}()
	}
	wg.Wait()
}

func withPort(addr string, port int) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return fmt.Sprintf("%s:%d", addr[:i], port)
		}
	}
	return fmt.Sprintf("%s:%d", addr, port)
}
