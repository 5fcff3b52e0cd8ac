package server

// Placement of vm deployments in a fleet: each vm deployment is one unit
// of the fleet's scheduler, "deployment/<id>", all its replicas on the one
// host the scheduler picks (scaled by concurrency there); every other host
// forwards its requests to that host's hop listener. It is on when the
// fleet is, with the store on etcd (every host holds the same
// deployments); otherwise every host runs replicas of every vm deployment
// it has, as before.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/placement"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/vm"
)

// unitPrefix is the prefix of vm deployments' units.
const unitPrefix = "deployment/"

// placer places this host's vm deployments and tells the registry where
// each runs (registry.Options.Place, Fence, Changed).
type placer struct {
	m   *etcdfleet.Member
	log *slog.Logger

	mu sync.Mutex
	// where is what Place answers, by deployment; absent: being placed.
	where map[string]registry.Placement
	// queued are the units to submit (a nil request: to withdraw), by
	// deployment, for the submit loop.
	queued map[string]*placement.Request
	// vms are the vm deployments submitted: a write that makes one
	// another kind, or its delete, withdraws it.
	vms  map[string]bool
	kick chan struct{}
	// fence asks the watch loop to stop every deployment running here.
	fence chan struct{}
}

// placing says whether this host places its vm deployments: a fleet
// member with the store on etcd (or a test's per-host stores holding the
// same deployments: Options.placeVMs).
func (s *Server) placing() bool {
	return s.fleetHost != nil && (s.etcdStore != nil || s.o.placeVMs)
}

func newPlacer(m *etcdfleet.Member, log *slog.Logger) *placer {
	return &placer{
		m: m, log: log, where: map[string]registry.Placement{}, queued: map[string]*placement.Request{}, vms: map[string]bool{},
		kick: make(chan struct{}, 1), fence: make(chan struct{}, 1),
	}
}

// place is registry.Options.Place.
func (p *placer) place(id string) registry.Placement {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.where[id]
}

// holds is registry.Options.Fence: this host creates a replica of a
// placed deployment only while it holds the deployment's assignment,
// read linearizably.
func (p *placer) holds(ctx context.Context, id string) error {
	ok, _, err := p.m.Holds(ctx, unitPrefix+id, p.m.ID())
	switch {
	case err != nil:
		return fmt.Errorf("fleet: reading deployment %s's placement before a replica create: %w", id, err)
	case !ok:
		return fmt.Errorf("fleet: host %s no longer runs deployment %s: the fleet's scheduler placed it elsewhere, or has not placed it", p.m.ID(), id)
	}
	return nil
}

// changed is registry.Options.Changed: a vm deployment's unit is
// submitted (again, when what it asks changed), any other's withdrawn.
// It runs under the registry's lock: it only queues.
func (p *placer) changed(id string, e *registry.Entry) {
	var r *placement.Request
	if e != nil && e.Kind == apitype.KindVM && e.Spec.VM != nil {
		r = unitRequest(&e.Spec)
	}
	p.mu.Lock()
	if r == nil && !p.vms[id] {
		p.mu.Unlock()
		return // never a vm deployment here: nothing to withdraw
	}
	if r != nil {
		p.vms[id] = true
	} else {
		delete(p.vms, id)
	}
	p.queued[id] = r
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// unitRequest is what vm deployment s asks of the scheduler: one unit,
// its driver, image and, when it names a size class, that size's CPU and
// memory.
func unitRequest(s *apitype.DeploymentSpec) *placement.Request {
	r := &placement.Request{Unit: unitPrefix + s.ID, Group: s.ID, Driver: string(s.VM.Driver), Image: s.VM.Image}
	if s.VM.SizeClass != "" {
		if sz, ok := vm.Sizes[string(s.VM.SizeClass)]; ok {
			r.CPUMillis, r.MemoryBytes = int64(sz.VCPUs)*1000, int64(sz.MemoryMB)<<20
		}
	}
	return r
}

// fenced stops every deployment running here at once (the host's lease
// may have lapsed: its assignments may be another's by now); they start
// again, Holds permitting, once the assignments say they are still here.
func (p *placer) fenced() {
	select {
	case p.fence <- struct{}{}:
	default:
	}
}

// runPlacement is the placement's background loop: the scheduler's
// candidate, the submit loop, and the watch of every assignment and host.
func (s *Server) runPlacement(ctx context.Context) error {
	p := s.placer
	if p == nil {
		return nil
	}
	sched := p.m.StartScheduler()
	defer sched.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.submitLoop(ctx) })
	p.watchLoop(ctx, s.registry)
	return nil
}

// submitLoop submits and withdraws the queued units, retrying failures.
func (p *placer) submitLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		p.mu.Lock()
		q := p.queued
		p.queued = map[string]*placement.Request{}
		p.mu.Unlock()
		failed := false
		for id, r := range q {
			var err error
			if r == nil {
				err = p.m.Withdraw(ctx, unitPrefix+id)
			} else {
				err = p.m.Submit(ctx, *r)
			}
			if err == nil {
				continue
			}
			if ctx.Err() != nil {
				return
			}
			p.log.Warn("fleet: submitting a deployment to the scheduler; retrying", "deployment", id, "err", err)
			failed = true
			p.mu.Lock()
			if _, newer := p.queued[id]; !newer {
				p.queued[id] = r
			}
			p.mu.Unlock()
		}
		if failed {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			select {
			case p.kick <- struct{}{}:
			default:
			}
		}
	}
}

// watchLoop follows every assignment and every host's hop address, and
// re-places (registry.Placed) each deployment whose placement changed,
// one change at a time per deployment. A change waits for the previous
// one's drains (a deployment that moved away): a fence waits for them too.
func (p *placer) watchLoop(ctx context.Context, reg *registry.Registry) {
	assigns := p.m.WatchAllAssignments(ctx)
	hosts := p.m.Watch(ctx)
	var (
		units map[string]string // deployment → host
		hops  = map[string]string{}
	)
	for {
		fence := false
		select {
		case <-ctx.Done():
			return
		case as, ok := <-assigns:
			if !ok {
				return
			}
			units = map[string]string{}
			for _, a := range as {
				if id, ok := strings.CutPrefix(a.Unit, unitPrefix); ok {
					units[id] = a.Host
				}
			}
		case hs, ok := <-hosts:
			if !ok {
				return
			}
			hops = map[string]string{}
			for _, h := range hs {
				hops[h.ID] = h.HopAddress
			}
		case <-p.fence:
			fence = true
		}
		if units == nil {
			continue // before the first list: all are being placed
		}
		if fence {
			p.stopHere(ctx, reg)
		}
		want := map[string]registry.Placement{}
		for id, host := range units {
			switch {
			case host == p.m.ID():
				want[id] = registry.Placement{Here: true}
			case hops[host] != "":
				want[id] = registry.Placement{HostID: host, Addr: hops[host]}
			}
		}
		p.apply(ctx, reg, want, true)
	}
}

// stopHere stops at once the replicas of every deployment placed here.
func (p *placer) stopHere(ctx context.Context, reg *registry.Registry) {
	p.mu.Lock()
	want := map[string]registry.Placement{}
	n := 0
	for id, pl := range p.where {
		if !pl.Here {
			want[id] = pl
		} else {
			n++
		}
	}
	p.mu.Unlock()
	if n > 0 {
		p.log.Warn("fleet: this host may have lost its lease: stopping the replicas of the deployments placed here", "host", p.m.ID(), "deployments", n)
	}
	p.apply(ctx, reg, want, false)
}

// apply makes want the placements, re-placing every deployment whose
// placement changed, all at once, and waits for them.
func (p *placer) apply(ctx context.Context, reg *registry.Registry, want map[string]registry.Placement, drain bool) {
	p.mu.Lock()
	var changed []string
	for id, pl := range want {
		if p.where[id] != pl {
			changed = append(changed, id)
		}
	}
	for id := range p.where {
		if _, ok := want[id]; !ok {
			changed = append(changed, id)
		}
	}
	p.where = want
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range changed {
		wg.Go(func() {
			if reg.Placed(ctx, id, drain) {
				pl := want[id]
				p.log.Info("fleet: placed a deployment", "deployment", id, "here", pl.Here, "host", pl.HostID)
			}
		})
	}
	wg.Wait()
}
