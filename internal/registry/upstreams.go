package registry

import (
	"context"
	"fmt"
	"sync"
	"syscall"
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

// probeParallel bounds the probes in flight at once.
const probeParallel = 32

// probeKeep bounds the probe connections Run keeps open between rounds (one
// per distinct HTTP check): a quarter of the file descriptors the process
// may open, at most 10,000, so that the proxy keeps the rest; checks beyond
// it connect for each probe.
func probeKeep() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur == 0 {
		return 256
	}
	return int(min(l.Cur/4, 10_000))
}

// Run probes static upstreams every ProbeInterval until ctx ends: failing
// backends leave the rotation, recovering ones rejoin it. Each distinct
// check (address, TLS, path, timeout) is probed once per interval however
// many deployments share it, the probes of a round are spread over the
// interval rather than fired at once, and an HTTP check keeps its
// connection between rounds (health.Prober).
func (r *Registry) Run(ctx context.Context) error {
	ps := map[health.Check]*health.Prober{}
	budget := health.NewBudget(probeKeep())
	defer func() {
		for _, p := range ps {
			p.Close()
		}
	}()
	t := time.NewTicker(ProbeInterval)
	defer t.Stop()
	for {
		r.probeRound(ctx, ps, budget, ProbeInterval)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ProbeOnce probes every distinct static upstream check once, now,
// concurrently (at most probeParallel at a time), and waits for the results.
func (r *Registry) ProbeOnce(ctx context.Context) {
	ps := map[health.Check]*health.Prober{}
	r.probeRound(ctx, ps, nil, 0)
	for _, p := range ps {
		p.Close()
	}
}

// probeJob is one distinct check and the static upstreams it decides.
type probeJob struct {
	c       health.Check
	targets []probeTarget
}

type probeTarget struct {
	id, ns string
	issues bool // the deployment publishes its issues (feed.issues)
	b      *proxy.Backend
}

// probeJobs groups the static upstreams by their check, in the order of
// their first deployment's id.
func (r *Registry) probeJobs() []*probeJob {
	var jobs []*probeJob
	byCheck := map[health.Check]*probeJob{}
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
			j := byCheck[c]
			if j == nil {
				j = &probeJob{c: c}
				byCheck[c] = j
				jobs = append(jobs, j)
			}
			j.targets = append(j.targets, probeTarget{e.Spec.ID, spec.Namespace(&e.Spec), wantsIssues(&e.Spec), b})
		}
	}
	return jobs
}

// probeRound runs one probe of each distinct check, starting them evenly
// over spread (at once when 0), with the probers in ps (updated: checks
// no longer in use are closed and dropped; new ones keep connections
// within budget), and waits for them.
func (r *Registry) probeRound(ctx context.Context, ps map[health.Check]*health.Prober, budget *health.Budget, spread time.Duration) {
	jobs := r.probeJobs()
	live := make(map[health.Check]bool, len(jobs))
	for _, j := range jobs {
		live[j.c] = true
		if ps[j.c] == nil {
			ps[j.c] = health.NewProber(j.c, budget)
		}
	}
	for c, p := range ps {
		if !live[c] {
			p.Close()
			delete(ps, c)
		}
	}
	sem := make(chan struct{}, probeParallel)
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	for i, j := range jobs {
		// Probe i is due at i/len(jobs) of the way through the spread;
		// waits shorter than minProbeWait are not worth a timer, so
		// probes go out in small batches.
		if due := start.Add(spread * time.Duration(i) / time.Duration(len(jobs))); spread > 0 {
			if wait := time.Until(due); wait >= minProbeWait {
				tm := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					tm.Stop()
					return
				case <-tm.C:
				}
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		p := ps[j.c]
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := p.Probe(ctx)
			if ctx.Err() != nil {
				return
			}
			for _, t := range j.targets {
				if t.b.SetHealthy(err == nil) {
					if err != nil {
						r.o.Log.Warn("upstream unhealthy", "deployment", t.id, "upstream", t.b.ID, "err", err)
					} else {
						r.o.Log.Info("upstream recovered", "deployment", t.id, "upstream", t.b.ID)
					}
					if t.issues && r.o.Issues != nil {
						if err != nil {
							r.o.Issues.Issue(t.ns, t.id, "upstream unhealthy", "upstream "+t.b.ID+" failed its health check; it is out of rotation until it passes again")
						} else {
							r.o.Issues.Issue(t.ns, t.id, "upstream recovered", "upstream "+t.b.ID+" passes its health check again; it is back in rotation")
						}
					}
				}
			}
		}()
	}
}

// minProbeWait is the shortest wait between spread probes.
const minProbeWait = 10 * time.Millisecond

func withPort(addr string, port int) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return fmt.Sprintf("%s:%d", addr[:i], port)
		}
	}
	return fmt.Sprintf("%s:%d", addr, port)
}
