package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
)

type phase int

const (
	pending phase = iota
	ready
	draining
)

func (p phase) String() string {
	return [...]string{"pending", "ready", "draining"}[p]
}

// replica is one replica the pool tracks. Guarded by Pool.mu.
type replica struct {
	id      string
	key     string // the Config.Key it was created from
	phase   phase
	addr    string
	created time.Time     // create requested
	pull    time.Duration // its image was pulled for, before created (Config.Prepare)
	started time.Time     // driver.Start returned
	readyAt time.Time
	drainAt time.Time
	missing time.Time // first time the driver did not know it
	backend Backend   // set when it became ready
	adopted bool
	// background says it may run at a low CPU priority (backgrounder): a
	// rollout's candidate, or an adopted replica (a candidate of a berth
	// killed mid-rollout, perhaps), until it gets the normal one back.
	background bool
	stopBoot   context.CancelFunc
	bootErr    string
	lastStatus string
}

// Pool is one vm deployment's replicas. The data plane reads Backends; the
// reconcile loop and the boot probes write it.
type Pool struct {
	m        *Manager
	id       string
	cfg      atomic.Pointer[Config]
	backends Backends
	poke     chan struct{}
	waiters  atomic.Int64

	mu         sync.Mutex // guards the fields below
	replicas   map[string]*replica
	creating   int      // creates whose driver.Start has not returned
	suspended  []string // retained replicas, oldest first
	backoff    autoscale.Backoff
	lastActive time.Time // kept when the last backend leaves
	desired    int
	leases     map[string]time.Time // replica id → last lease renewal; see renewLeases
	readyCh    chan struct{}        // closed (and replaced) when a replica becomes ready
	failedCh   chan struct{}        // closed (and replaced) when a create or a boot fails
	lastFail   *StartError          // the last failed create or boot; nil after a success or a spec write
	ro         *rollout             // the rollout in progress (rollout.go), or nil
	cancel     context.CancelFunc
	done       chan struct{}
	closed     bool

	// tasks are the goroutines the pool starts besides its loop (creates,
	// boot probes, reaps, stops): wait and destroy wait for them, so that
	// none outlives the pool and uses a driver after berth closed it.
	tasks sync.WaitGroup

	watched     map[string]bool // replica ids whose end watchLocked waits for
	watchCtx    context.Context // ends those waits
	stopWatches context.CancelFunc
	watchWG     sync.WaitGroup // the waits under way
}

func newPool(m *Manager, cfg Config) *Pool {
	p := &Pool{
		m: m, id: cfg.Deployment, backends: cfg.Backends, poke: make(chan struct{}, 1),
		replicas: map[string]*replica{}, readyCh: make(chan struct{}), failedCh: make(chan struct{}),
	}
	p.watchCtx, p.stopWatches = context.WithCancel(context.Background())
	p.cfg.Store(&cfg)
	return p
}

// driver is the driver of the pool's current configuration. A driver change
// is a template change (the Key includes vm.driver), so replicas of the old
// driver are retired through the old one (see driverOf).
func (p *Pool) driver() vm.Driver {
	d := p.m.o.Drivers[p.cfg.Load().Driver]
	if d == nil {
		return missingDriver{p.cfg.Load().Driver}
	}
	return d
}

// driverOf finds the driver that runs replica id: the pool's current one,
// or, after a vm.driver change, the one the replica was created with.
func (p *Pool) driverOf(ctx context.Context, id string) vm.Driver {
	cur := p.driver()
	if _, err := cur.Inspect(ctx, id); !errors.Is(err, vm.ErrNotFound) || len(p.m.o.Drivers) == 1 {
		return cur
	}
	for _, d := range p.m.o.Drivers {
		if _, err := d.Inspect(ctx, id); err == nil {
			return d
		}
	}
	return cur
}

// Driver returns the driver the pool's replicas run on.
func (p *Pool) Driver() vm.Driver { return p.driver() }

// missingDriver fails every call: the spec names a driver this host does not
// have (validation normally refuses such a spec).
type missingDriver struct{ name string }

func (d missingDriver) err() error {
	return fmt.Errorf("fleet: driver %q is not available on this host: %w", d.name, vm.ErrUnavailable)
}
func (d missingDriver) Start(context.Context, vm.Spec) (vm.Instance, error) {
	return vm.Instance{}, d.err()
}
func (d missingDriver) Stop(context.Context, string, time.Duration) error { return d.err() }
func (d missingDriver) Inspect(context.Context, string) (vm.Instance, error) {
	return vm.Instance{}, d.err()
}
func (d missingDriver) List(context.Context) ([]vm.Instance, error) { return nil, d.err() }

// Config returns the pool's current configuration.
func (p *Pool) Config() *Config { return p.cfg.Load() }

func (p *Pool) start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.done != nil {
		return
	}
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		autoscale.Loop(ctx, p.m.o.Tick, p.poke, func(now time.Time) { p.step(ctx, now) })
	}()
	p.prewarmLocked()
}

// prewarmer is a driver that can make ready ahead of a Start what Starts
// of spec would take from it (spare sandboxes), in the background: the
// process and container drivers.
type prewarmer interface {
	// Prewarm returns at once; what it makes is bounded by the driver.
	Prewarm(spec vm.Spec)
}

// backgrounder is a driver that can start a replica at a low CPU priority
// and give it the normal one later: the process and container drivers. A
// rollout's candidates start so (StartBackground), while the previous
// replicas serve: on a small host their boot (the runtime, the sandbox's
// init, the app's own start-up) would otherwise take CPU from the
// replicas serving and from the data plane, and raise the latency of
// every request during the rollout. A candidate gets the normal priority
// back (Foreground) when its probe passed, just before it takes traffic,
// or once half its boot_timeout_secs has passed, so that a busy host
// slows a rollout down but does not fail it. Every other create (a
// scale-up, a cold start from zero, which a request waits for) starts at
// the normal priority. A driver that is no backgrounder starts candidates
// as any replica: the priority is a hint.
type backgrounder interface {
	StartBackground(ctx context.Context, spec vm.Spec) (vm.Instance, error)
	// Foreground is idempotent; an adopted replica (perhaps a candidate of
	// a berth killed mid-rollout) gets it too.
	Foreground(ctx context.Context, id string) error
}

// foreground gives replica r the normal CPU priority (backgrounder) if it
// may not have it (replica.background): a failure is logged, the priority
// being a hint.
func (p *Pool) foreground(ctx context.Context, r *replica) {
	p.mu.Lock()
	need := r.background
	r.background = false
	p.mu.Unlock()
	if need {
		p.restorePriority(ctx, r.id)
	}
}

// restorePriority is foreground's call to the driver.
func (p *Pool) restorePriority(ctx context.Context, id string) {
	b, ok := p.driverOf(ctx, id).(backgrounder)
	if !ok {
		return
	}
	if err := b.Foreground(ctx, id); err != nil && ctx.Err() == nil {
		p.m.log.Warn("could not give a replica its normal CPU priority", "deployment", p.id, "replica", id, "err", err)
	}
}

// prewarmLocked asks the driver of a started pool that scales from zero
// to make its spares ready, so that even the first scale from zero after
// berth starts (or after the spec changed) finds one. A pool that keeps
// replicas starts them at once, and its driver makes spares after that.
// One with mounts is not prewarmed: its mounts are known only at each
// create (Config.Mounts), and a spare, already running, could not take
// them (the container driver starts such replicas cold).
func (p *Pool) prewarmLocked() {
	cfg := p.cfg.Load()
	w, ok := p.driver().(prewarmer)
	if !ok || p.done == nil || p.closed || cfg.Policy.Min > 0 || cfg.Policy.Max == 0 || cfg.Mounts != nil {
		return
	}
	spec := cfg.Template
	spec.Owner = vm.Owner{Kind: vm.OwnerDeployment, ID: p.id}
	spec.Deployment = p.id
	w.Prewarm(spec)
}

// wait stops the loop and waits for it (berth shutting down; replicas keep
// running).
func (p *Pool) wait() {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.stopWatches() // under mu: no watchLocked adds to watchWG after it
	p.mu.Unlock()
	p.watchWG.Wait()
	if cancel != nil {
		cancel()
		<-done
	}
	p.tasks.Wait()
}

// Poke asks the loop to reconcile now.
func (p *Pool) Poke() { autoscale.Poke(p.poke) }

func (p *Pool) update(cfg Config) {
	p.mu.Lock()
	old := p.cfg.Swap(&cfg)
	p.backoff, p.lastFail = p.backoff.Reset(), nil
	var evs []RolloutEvent
	if old.Key != cfg.Key {
		// The template changed: a rollout (rollout.go) replaces the
		// replicas of the old one, candidates first, or, when none is
		// ready, they are retired at once. A spec write has no context
		// of its own here, and the stops outlast any (stopAll).
		evs = p.beginRolloutLocked(old, &cfg, time.Now())
		ctx := context.Background()
		suspended := p.suspended
		p.suspended = nil
		p.tasks.Go(func() { p.stopAll(ctx, suspended) })
	} else if p.ro != nil && cfg.Revision != old.Revision {
		// Same template, another spec (scaling, health): the rollout
		// goes on, for the new revision.
		p.m.log.Info("rollout continues for a new revision of the same template", "deployment", p.id, "revision", short(cfg.Revision))
		evs = append(evs, RolloutEvent{Revision: old.Revision, From: p.ro.from.Revision, Status: RolloutSuperseded, Phase: p.ro.phase,
			Error: "superseded by a newer spec (revision " + short(cfg.Revision) + ")"},
			RolloutEvent{Revision: cfg.Revision, From: p.ro.from.Revision, Status: RolloutRunning, Phase: p.ro.phase})
	}
	p.prewarmLocked()
	p.mu.Unlock()
	p.emit(evs)
	p.Poke()
}

// retireLocked takes a replica out of service: a pending one is stopped, a
// ready one drains.
func (p *Pool) retireLocked(ctx context.Context, r *replica, now time.Time) {
	switch r.phase {
	case pending:
		if r.stopBoot != nil {
			r.stopBoot()
		}
		delete(p.replicas, r.id)
		p.tasks.Go(func() { p.stopAll(ctx, []string{r.id}) })
	case ready:
		r.phase, r.drainAt = draining, now
		r.backend.Drain("retired", now)
	}
}

// stopAll stops replicas. The stops outlast ctx's end: a replica left
// running would outlive its deployment, or be adopted as the current
// template's by the next berth.
func (p *Pool) stopAll(ctx context.Context, ids []string) {
	ctx = context.WithoutCancel(ctx)
	for _, id := range ids {
		if err := p.driverOf(ctx, id).Stop(ctx, id, 10*time.Second); err != nil && !errors.Is(err, vm.ErrNotFound) {
			p.m.log.Error("could not stop a replica", "deployment", p.id, "replica", id, "err", err)
			continue
		}
		if rec := p.m.o.Records; rec != nil {
			if err := rec.ForgetReplica(ctx, id); err != nil {
				p.m.log.Warn("could not forget a stopped replica's template", "deployment", p.id, "replica", id, "err", err)
			}
		}
		p.workspaceStopped(ctx, id)
	}
}

func (p *Pool) destroy(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	cancel, done := p.cancel, p.done
	p.stopWatches() // under mu: no watchLocked adds to watchWG after it
	p.mu.Unlock()
	p.watchWG.Wait()
	if cancel != nil {
		cancel()
		<-done
	}
	p.mu.Lock()
	ids := slices.Clone(p.suspended)
	for id, r := range p.replicas {
		if r.stopBoot != nil {
			r.stopBoot()
		}
		if r.backend != nil {
			p.backends.Remove(id)
		}
		ids = append(ids, id)
	}
	p.replicas, p.suspended = map[string]*replica{}, nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); p.stopAll(ctx, []string{id}) }()
	}
	wg.Wait()
	p.tasks.Wait()
}

// adopt takes over replicas a previous berth process left running; their
// boot probes end with ctx.
//
// A replica whose recorded template (Options.Records) is not the pool's
// is stopped, not adopted: a rollout's candidate or previous replica left
// by a berth killed mid-rollout, which the rollout's settlement at start-up
// decided against. So is one without a record when the deployment has
// recorded replicas; when it has none (replicas of an older berth) every
// one is adopted, as before records.
func (p *Pool) adopt(ctx context.Context, insts []vm.Instance) {
	cfg := p.cfg.Load()
	var digests map[string]string
	if rec := p.m.o.Records; rec != nil && len(insts) > 0 {
		var err error
		if digests, err = rec.ReplicaDigests(ctx, p.id); err != nil {
			p.m.log.Warn("could not read the replicas' templates; adopting them as the current one", "deployment", p.id, "err", err)
		}
	}
	want := KeyDigest(cfg.Key)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, in := range insts {
		switch {
		case in.State == vm.StateSuspended:
			p.suspended = append(p.suspended, in.ID)
		case in.State.Terminal():
			p.tasks.Go(func() { p.stopAll(ctx, []string{in.ID}) })
		case len(digests) > 0 && digests[in.ID] != want:
			// Another template's, or unknown while others are recorded
			// (a crash between its Start and its record): stopping it
			// costs a create, serving the wrong revision would not be
			// safe.
			p.m.log.Info("stopping a running replica of another template", "deployment", p.id, "replica", in.ID)
			p.tasks.Go(func() { p.stopAll(ctx, []string{in.ID}) })
		default:
			r := &replica{id: in.ID, key: cfg.Key, phase: pending, addr: in.Addr, created: now, started: now, adopted: true, background: true}
			p.replicas[in.ID] = r
			p.m.log.Info("adopting a running replica", "deployment", p.id, "replica", in.ID, "addr", in.Addr)
			p.bootLocked(ctx, r)
		}
	}
}

// step is one reconcile: observe replicas, retire what failed or idled,
// decide, act.
func (p *Pool) step(ctx context.Context, now time.Time) {
	cfg := p.cfg.Load()
	p.renewLeases(ctx, cfg, now)
	p.observe(ctx, cfg, now)

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	obs := autoscale.Observation{Waiters: int(p.waiters.Load()), Pending: p.creating, LastActive: p.lastActive}
	var serving []autoscale.Replica
	var reap []*replica
	for _, r := range p.replicas {
		switch r.phase {
		case pending:
			obs.Pending++
		case ready, draining:
			n := int(r.backend.InFlight())
			obs.InFlight += n
			last := r.backend.LastUsed()
			if last.After(obs.LastActive) {
				obs.LastActive = last
			}
			if r.phase == ready {
				obs.Ready++
				serving = append(serving, autoscale.Replica{ID: r.id, InFlight: n, LastActive: last})
			} else {
				since := r.drainAt
				if last.After(since) {
					since = last
				}
				if done, forced := autoscale.DrainDone(n, since, cfg.Policy.DrainTimeout, now); done {
					if forced {
						p.m.log.Warn("drain timed out; stopping a replica with requests in flight", "deployment", p.id, "replica", r.id, "in_flight", n)
					}
					reap = append(reap, r)
				}
			}
		}
	}
	p.lastActive = obs.LastActive
	desired := autoscale.Desired(cfg.Policy, obs, now)
	p.desired = desired
	var plan autoscale.Plan
	var evs []RolloutEvent
	if p.ro != nil {
		// A rollout decides instead of the autoscaler until it ends.
		plan.Create, evs = p.rolloutStepLocked(ctx, cfg, now)
		if p.ro == nil {
			cfg = p.cfg.Load() // reverted
		}
	} else {
		plan = autoscale.MakePlan(desired, serving, obs.Pending, p.backoff, now)
	}
	for _, id := range plan.Drain {
		r := p.replicas[id]
		r.phase, r.drainAt = draining, now
		r.backend.Drain("scale down", now)
		if m := cfg.Metrics; m != nil {
			m.Autoscale.VMsDrained.Add(1)
		}
	}
	if m := cfg.Metrics; m != nil {
		if plan.Create > 0 {
			m.Autoscale.ScaleUpEvents.Add(1)
		}
		if len(plan.Drain) > 0 {
			m.Autoscale.ScaleDownEvents.Add(1)
		}
	}
	for _, r := range reap {
		delete(p.replicas, r.id)
		p.backends.Remove(r.id)
	}
	p.creating += plan.Create
	if p.ro != nil && p.drainingLocked() {
		// A rollout waits on a drain: look again soon rather than at
		// the next tick, so it goes on once the replica is idle.
		time.AfterFunc(rolloutRecheck, p.Poke)
	}
	p.mu.Unlock()
	p.emit(evs)

	for _, r := range reap {
		p.tasks.Go(func() { p.reap(ctx, cfg, r) })
	}
	for range plan.Create {
		p.tasks.Go(func() { p.create(ctx) })
	}
}

// observe asks the driver about every tracked replica and retires those
// that died or took too long to boot.
func (p *Pool) observe(ctx context.Context, cfg *Config, now time.Time) {
	p.mu.Lock()
	rs := slices.Collect(maps.Values(p.replicas))
	p.mu.Unlock()
	for _, r := range rs {
		in, err := p.driverOf(ctx, r.id).Inspect(ctx, r.id)
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		if p.replicas[r.id] != r {
			p.mu.Unlock()
			continue
		}
		switch {
		case errors.Is(err, vm.ErrNotFound):
			if r.missing.IsZero() {
				r.missing = now
			}
			if now.Sub(r.missing) >= p.m.o.MissingGrace {
				p.bootFailedLocked(cfg, r, "its replica disappeared before it became ready")
				p.failLocked(cfg, r, now, "the replica disappeared", "its replica disappeared before it became ready")
			}
		case err != nil:
			p.m.log.Warn("could not inspect a replica", "deployment", p.id, "replica", r.id, "err", err)
		case in.State.Terminal():
			reason := in.Reason
			if reason == "" {
				reason = string(in.State)
			}
			p.bootFailedLocked(cfg, r, "its replica stopped before it became ready")
			p.failLocked(cfg, r, now, reason, "its replica stopped before it became ready")
			p.tasks.Go(func() { p.stopAll(ctx, []string{r.id}) })
		case r.phase == pending && autoscale.BootExpired(r.created, cfg.Policy.BootTimeout, now):
			if m := cfg.Metrics; m != nil {
				m.Autoscale.BootTimeouts.Add(1)
			}
			reason := fmt.Sprintf("did not become ready within boot_timeout_secs (%s)", cfg.Policy.BootTimeout)
			if r.bootErr != "" {
				reason += "; last probe: " + r.bootErr
			}
			if tail := p.logTail(ctx, r.id); tail != "" {
				reason += "; last output: " + tail
			}
			p.issue(cfg, IssueBootTimeout, fmt.Sprintf("replica %s did not become ready within boot_timeout_secs (%s)", r.id, cfg.Policy.BootTimeout))
			p.failLocked(cfg, r, now, reason, "its replica did not become ready within boot_timeout_secs")
			p.tasks.Go(func() { p.stopAll(ctx, []string{r.id}) })
		default:
			r.missing = time.Time{}
			r.lastStatus = string(in.State)
			if r.background && r.phase == pending && cfg.Policy.BootTimeout > 0 && now.Sub(r.created) >= cfg.Policy.BootTimeout/2 {
				// Booting at a low priority for half its boot
				// timeout: the host is busy; a slower rollout beats
				// a failed one. While its Start is still under way
				// (the runtime's work), again at the next look, once
				// the whole sandbox is there.
				r.background = r.started.IsZero()
				p.tasks.Go(func() { p.restorePriority(ctx, r.id) })
			}
		}
		p.mu.Unlock()
	}
}

// failLocked removes a replica that will not serve. A replica that never
// became ready counts as a boot failure and extends the backoff; public
// says what went wrong for the data plane's clients (see StartError).
func (p *Pool) failLocked(cfg *Config, r *replica, now time.Time, reason, public string) {
	if r.stopBoot != nil {
		r.stopBoot()
	}
	delete(p.replicas, r.id)
	if p.candidateFailedLocked(r, reason) {
		p.m.log.Warn("rollout candidate failed", "deployment", p.id, "replica", r.id, "reason", reason)
		if r.backend != nil {
			p.backends.Remove(r.id)
		}
		return
	}
	if r.phase == pending {
		p.startFailedLocked(cfg, fmt.Sprintf("replica %s failed to boot: %s", r.id, reason), public, now)
		p.m.log.Warn("replica failed to boot", "deployment", p.id, "replica", r.id, "reason", reason, "backoff", p.backoff.Remaining(now))
	} else {
		p.m.log.Warn("replica stopped serving", "deployment", p.id, "replica", r.id, "reason", reason)
		p.backends.Remove(r.id)
	}
}

// bootFailedLocked reports a replica that ended before it became ready
// (one that stopped serving is no boot failure).
func (p *Pool) bootFailedLocked(cfg *Config, r *replica, public string) {
	if r.phase == pending {
		p.issue(cfg, IssueBootFailed, fmt.Sprintf("replica %s: %s", r.id, public))
	}
}

// issue hands an issue to cfg.Issues, if anyone listens.
func (p *Pool) issue(cfg *Config, what, detail string) {
	if cfg.Issues != nil {
		cfg.Issues(Issue{What: what, Detail: detail})
	}
}

func (p *Pool) logTail(ctx context.Context, id string) string {
	lr, ok := p.driver().(vm.LogReader)
	if !ok {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	lines, err := lr.Logs(ctx, id, 20)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, l := range lines {
		if b.Len() > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(l.Text)
	}
	s := b.String()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// create starts one replica (or resumes a retained one) and begins probing it.
func (p *Pool) create(ctx context.Context) {
	cfg := p.cfg.Load()
	spec := cfg.Template
	var prepErr error
	var pull time.Duration
	if cfg.Prepare != nil {
		t := time.Now()
		prepErr = cfg.Prepare(ctx, &spec)
		pull = time.Since(t)
	}
	select {
	case p.m.creates <- struct{}{}:
	case <-ctx.Done():
		p.mu.Lock()
		p.creating--
		p.mu.Unlock()
		return
	}
	defer func() { <-p.m.creates }()
	now := time.Now()
	var fenceErr error
	if cfg.Fence != nil && prepErr == nil {
		fenceErr = cfg.Fence(ctx)
	}
	if fenceErr == nil {
		if r := p.resume(ctx, cfg, now); r != nil {
			return
		}
	}
	spec.Owner = vm.Owner{Kind: vm.OwnerDeployment, ID: p.id}
	spec.Name = p.m.name(spec.Owner)
	spec.Deployment = p.id
	spec.Env = maps.Clone(spec.Env)
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	err := prepErr
	public := "its replica could not be created"
	if err != nil {
		public = "its image (vm.image) could not be readied: pulled from its registry, or its config (such as its user) applied"
	} else if fenceErr != nil {
		err, public = fenceErr, "this host does not run it now: the fleet placed it on another host, or has not placed it yet"
	} else if cfg.Env != nil {
		var secret map[string]string
		if secret, err = cfg.Env(ctx); err == nil {
			maps.Copy(spec.Env, secret) // a secret wins over a literal
		} else {
			public = "the secrets named in vm.env_from could not be read"
		}
	}
	if err == nil && cfg.Mounts != nil {
		if spec.Mounts, err = cfg.Mounts(ctx); err != nil {
			public = "the mounts named in vm.mounts are not ready"
		}
	}
	if err == nil && cfg.Workspace != nil {
		if err = cfg.Workspace.Seed(ctx, &spec); err != nil {
			public = "its workspace (vm.workspace or vm.workspace_archive) could not be readied"
		}
	}
	if err == nil {
		// Fail fast on a driver that its last re-check found broken.
		err = p.m.DriverProblem(cfg.Driver)
	}
	r := &replica{id: spec.Name, key: cfg.Key, phase: pending, created: now, pull: pull}
	var in vm.Instance
	if err == nil {
		p.mu.Lock()
		// Tracked before Start, so nothing is orphaned; from here it counts
		// as a pending replica, no longer as a create (counting it as both
		// made a step under-create and leave the rest to the next tick).
		p.replicas[r.id] = r
		p.creating--
		candidate := p.ro != nil
		p.mu.Unlock()
		var recorded chan error
		if rec := p.m.o.Records; rec != nil && candidate {
			// A rollout's candidate is recorded before its Start: a berth
			// killed mid-rollout must tell it from the previous replicas.
			if err = rec.RecordReplica(ctx, p.id, r.id, KeyDigest(cfg.Key)); err != nil {
				err = fmt.Errorf("recording the replica's template: %w", err)
			}
		} else if rec != nil {
			// Any other replica is of the only template the pool runs:
			// recorded alongside its Start, off a cold start's path. One
			// a crash left unrecorded is stopped at adoption (see adopt)
			// unless its deployment has no recorded replica at all.
			recorded = make(chan error, 1)
			go func() { recorded <- rec.RecordReplica(context.WithoutCancel(ctx), p.id, r.id, KeyDigest(cfg.Key)) }()
		}
		if err == nil {
			if b, ok := p.driver().(backgrounder); ok && candidate {
				p.mu.Lock()
				r.background = true
				p.mu.Unlock()
				in, err = b.StartBackground(ctx, spec)
			} else {
				in, err = p.driver().Start(ctx, spec)
			}
		}
		if recorded != nil {
			if rerr := <-recorded; rerr != nil {
				p.m.log.Warn("could not record a replica's template", "deployment", p.id, "replica", r.id, "err", rerr)
			}
		}
	} else {
		p.mu.Lock()
		p.creating--
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		delete(p.replicas, r.id)
		if ctx.Err() != nil {
			return // berth is stopping or the deployment went away: not the deployment's failure
		}
		p.tasks.Go(func() { p.stopAll(ctx, []string{r.id}) }) // the outcome is unknown: make sure
		p.issue(cfg, IssueCreateFailed, "this deployment cannot start a replica: "+public+" (the admin API has the full error: berth describe deployment "+p.id+")")
		if p.candidateFailedLocked(r, "create failed: "+err.Error()) {
			return
		}
		p.startFailedLocked(cfg, err.Error(), public, time.Now())
		p.m.log.Warn("replica create failed", "deployment", p.id, "err", err, "backoff", p.backoff.Remaining(time.Now()))
		select {
		case p.m.recheck <- struct{}{}: // is the driver still there?
		default:
		}
		return
	}
	if m := cfg.Metrics; m != nil {
		m.Autoscale.VMsCreated.Add(1)
	}
	if p.replicas[r.id] != r || p.closed || r.key != p.cfg.Load().Key {
		// Retired or removed while starting, or of a template the pool
		// no longer runs (a rollout superseded or reverted meanwhile).
		delete(p.replicas, r.id)
		p.tasks.Go(func() { p.stopAll(ctx, []string{r.id}) })
		return
	}
	r.addr, r.started = in.Addr, time.Now()
	p.bootLocked(ctx, r)
}

// resume brings back the oldest retained replica, if any.
func (p *Pool) resume(ctx context.Context, cfg *Config, now time.Time) *replica {
	s, ok := p.driver().(vm.Suspender)
	if !ok {
		return nil
	}
	p.mu.Lock()
	if len(p.suspended) == 0 {
		p.mu.Unlock()
		return nil
	}
	id := p.suspended[0]
	p.suspended = p.suspended[1:]
	r := &replica{id: id, key: cfg.Key, phase: pending, created: now}
	p.replicas[id] = r
	p.creating-- // counted as a pending replica now (see create)
	p.mu.Unlock()
	in, err := s.Resume(ctx, id)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		delete(p.replicas, id)
		p.creating++ // create goes on to start a fresh one
		p.m.log.Warn("could not resume a retained replica; creating a fresh one", "deployment", p.id, "replica", id, "err", err)
		p.tasks.Go(func() { p.stopAll(ctx, []string{id}) })
		return nil
	}
	r.addr, r.started = in.Addr, time.Now()
	p.bootLocked(ctx, r)
	return r
}

// bootLocked starts probing a pending replica until it is ready, or ctx
// ends, and watches it for its end.
func (p *Pool) bootLocked(ctx context.Context, r *replica) {
	p.watchLocked(r)
	ctx, cancel := context.WithCancel(ctx)
	r.stopBoot = cancel
	cfg := p.cfg.Load()
	p.tasks.Go(func() {
		defer cancel()
		var t *time.Timer
		defer func() {
			if t != nil {
				t.Stop()
			}
		}()
		var last string
		for wait := time.Duration(0); ; {
			pctx, pcancel := context.WithTimeout(ctx, max(cfg.Timeout, time.Second))
			err := probe(pctx, cfg, r.addr)
			pcancel()
			if err == nil {
				// The normal priority before the first request.
				p.foreground(ctx, r)
				p.promote(r)
				return
			}
			if msg := err.Error(); msg != last {
				// Kept for the boot timeout's reason: why the replica
				// never became ready (a refused connection, a wrong
				// status or expected_header), not only that it did not.
				last = msg
				p.mu.Lock()
				r.bootErr = msg
				p.mu.Unlock()
			}
			wait = nextBootProbe(wait, p.m.o.BootProbe)
			if wait < time.Millisecond {
				p.m.sleepFine(wait)
				if ctx.Err() != nil {
					return
				}
				continue
			}
			if t == nil {
				t = time.NewTimer(wait)
			} else {
				t.Reset(wait)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// firstBootProbe is the wait after a booting replica's first probe; each
// wait is a quarter longer than the last, up to Options.BootProbe. A
// trivial app listens a few milliseconds after its Start returns, when
// the probes are still well under a millisecond apart, so noticing it
// adds a fraction of one; a slow one is probed every BootProbe.
const firstBootProbe = 200 * time.Microsecond

// sleepFine sleeps d, under a millisecond, to the microsecond: a Go
// timer that short fires about a millisecond late in a process with
// nothing else to do (the runtime's network poller waits in whole
// milliseconds), which would space the first boot probes a millisecond
// apart whatever nextBootProbe says. The thread sleeps in the kernel;
// ctx is checked after.
func sleepFine(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// nextBootProbe is the wait after the one of last (0 at the first probe),
// at most longest.
func nextBootProbe(last, longest time.Duration) time.Duration {
	if last == 0 {
		return min(firstBootProbe, longest)
	}
	return min(last+last/4, longest)
}

// watchLocked learns that replica r ended from its driver, where the
// driver can tell (vm.Waiter), and reconciles at once instead of at the
// next tick. The watch ends with the replica or the pool.
func (p *Pool) watchLocked(r *replica) {
	w, ok := p.driver().(vm.Waiter)
	if !ok || p.watched[r.id] || p.watchCtx.Err() != nil {
		return
	}
	if p.watched == nil {
		p.watched = map[string]bool{}
	}
	p.watched[r.id] = true
	ctx, id := p.watchCtx, r.id
	p.watchWG.Add(1)
	go func() {
		defer p.watchWG.Done()
		w.Wait(ctx, id)
		p.mu.Lock()
		delete(p.watched, id)
		p.mu.Unlock()
		if ctx.Err() == nil {
			p.Poke()
		}
	}()
}

// promote makes a replica that passed its probe serve traffic.
func (p *Pool) promote(r *replica) {
	cfg := p.cfg.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.replicas[r.id] != r || r.phase != pending || p.closed {
		return
	}
	if r.key != cfg.Key {
		// Of a template the pool no longer runs: never served.
		delete(p.replicas, r.id)
		p.tasks.Go(func() { p.stopAll(context.Background(), []string{r.id}) })
		return
	}
	now := time.Now()
	r.phase, r.readyAt, r.stopBoot = ready, now, nil
	r.backend = p.backends.Add(r.id, r.addr, r.created, r.started, now, r.pull)
	p.backoff, p.lastFail = p.backoff.Reset(), nil
	if m := cfg.Metrics; m != nil && !r.adopted {
		m.ObserveColdStart(now.Sub(r.created))
	}
	close(p.readyCh)
	p.readyCh = make(chan struct{})
	if p.ro != nil {
		p.Poke() // the rollout may go on
	}
	p.m.log.Info("replica ready", "deployment", p.id, "replica", r.id, "addr", r.addr, "boot", now.Sub(r.created).Round(time.Millisecond))
}

// reap ends a drained replica: suspended under idle_action retain, stopped
// otherwise.
func (p *Pool) reap(ctx context.Context, cfg *Config, r *replica) {
	if m := cfg.Metrics; m != nil {
		m.Autoscale.VMsReaped.Add(1)
	}
	if s, ok := p.driver().(vm.Suspender); ok && cfg.Retain && r.key == cfg.Key {
		if err := s.Suspend(ctx, r.id); err == nil {
			p.workspaceSuspended(ctx, r.id)
			p.mu.Lock()
			p.suspended = append(p.suspended, r.id)
			p.mu.Unlock()
			return
		} else {
			p.m.log.Warn("could not suspend a replica; stopping it", "deployment", p.id, "replica", r.id, "err", err)
		}
	}
	p.stopAll(ctx, []string{r.id})
}

// MaxWaiters bounds how many requests one pool holds for a cold start.
const MaxWaiters = 10000

// ErrColdStartTimeout means no replica became ready in time.
var ErrColdStartTimeout = errors.New("fleet: no replica became available within cold_start_timeout_secs")

// StartError is why a pool cannot start a replica now: its last create or
// boot failed, no replica is ready or on its way, and the boot backoff
// holds the next attempt off. Await returns it, so a request is answered at
// once instead of being held for a replica that will not come; the data
// plane answers it with a 503 (it is a proxy.Refusal).
//
// It carries the failure twice. Detail is what berth logs and records as
// last_create_error: the driver's error or the app's output, which may name
// host paths and print whatever the app prints (a secret it was given, say).
// Reason is berth's own words for the kind of failure and carries nothing
// from the driver or the app; only Reason reaches the data plane's clients
// (anyone on the internet who can reach a route), Detail only admin API
// callers, who can already read last_create_error.
type StartError struct {
	Deployment string
	Reason     string        // for the data plane's clients
	Detail     string        // for operators
	Retry      time.Duration // until the backoff ends
}

func (e *StartError) Error() string {
	return fmt.Sprintf("deployment %q cannot start: %s", e.Deployment, e.Detail)
}

// PublicMessage is the data plane's 503 body.
func (e *StartError) PublicMessage() string {
	return fmt.Sprintf("deployment %q cannot start: %s (the admin API has the full error: berth describe deployment %s)", e.Deployment, e.Reason, e.Deployment)
}

// RetryAfter is how long until the backoff lets the pool try again.
func (e *StartError) RetryAfter() time.Duration { return e.Retry }

// startFailedLocked records a failed create or boot: the backoff grows,
// last_create_error is set, and held requests are released to see it.
func (p *Pool) startFailedLocked(cfg *Config, detail, public string, now time.Time) {
	p.backoff = p.backoff.Fail(now)
	p.lastFail = &StartError{Deployment: p.id, Reason: public, Detail: detail}
	if m := cfg.Metrics; m != nil {
		m.Autoscale.RecordCreateFailure(detail, now)
	}
	close(p.failedCh)
	p.failedCh = make(chan struct{})
}

// cannotStartLocked returns the StartError a request gets instead of a
// hold, or nil when a hold may end in a replica: one is ready (perhaps
// unhealthy for now), booting or being created, or the backoff is over.
func (p *Pool) cannotStartLocked(now time.Time) *StartError {
	if p.lastFail == nil || !p.backoff.Active(now) || p.creating > 0 {
		return nil
	}
	for _, r := range p.replicas {
		if r.phase != draining {
			return nil
		}
	}
	e := *p.lastFail
	e.Retry = p.backoff.Remaining(now)
	return &e
}

// Await is the data plane's cold-start hold: a request that found no ready
// replica waits here, counted as demand, until a replica becomes ready (it
// returns nil and the caller picks again) or cold_start_timeout_secs since
// the request started waiting have passed (ErrColdStartTimeout). A pool
// that cannot start a replica (see StartError) answers at once, and
// releases the requests it holds as soon as a create or boot fails. since
// is when the request first waited; first says whether this is its first
// wait, for the cold_start_waits counter.
func (p *Pool) Await(ctx context.Context, since time.Time, first bool) error {
	cfg := p.cfg.Load()
	if cfg.Policy.Max == 0 {
		return ErrColdStartTimeout
	}
	m := cfg.Metrics
	p.mu.Lock()
	ready, failed := p.readyCh, p.failedCh
	closed := p.closed
	cannot := p.cannotStartLocked(time.Now())
	p.mu.Unlock()
	if closed {
		return ErrColdStartTimeout
	}
	if cannot != nil {
		return cannot
	}
	if first && m != nil {
		m.Autoscale.ColdStartWaits.Add(1)
	}
	// The hold is a bounded queue: past MaxWaiters a request is refused at
	// once rather than piling up goroutines and sockets.
	if p.waiters.Add(1) > MaxWaiters {
		p.waiters.Add(-1)
		if m != nil {
			m.Autoscale.ColdStartTimeouts.Add(1)
		}
		p.issue(cfg, IssueColdStartExpiry, fmt.Sprintf("a request was refused: %d requests were already waiting and no replica became available", MaxWaiters))
		return ErrColdStartTimeout
	}
	defer p.waiters.Add(-1)
	p.Poke()
	left := time.Until(since.Add(cfg.Policy.ColdStartTimeout))
	if left <= 0 {
		if m != nil {
			m.Autoscale.ColdStartTimeouts.Add(1)
		}
		p.coldStartExpired(cfg)
		return ErrColdStartTimeout
	}
	t := time.NewTimer(left)
	defer t.Stop()
	for {
		select {
		case <-ready:
			if m != nil {
				m.Autoscale.ColdStartHits.Add(1)
			}
			return nil
		case <-failed:
			// A create or boot failed; unless another replica is on its
			// way, none will come before the backoff ends.
			p.mu.Lock()
			failed = p.failedCh
			cannot = p.cannotStartLocked(time.Now())
			p.mu.Unlock()
			if cannot != nil {
				return cannot
			}
		case <-t.C:
			if m != nil {
				m.Autoscale.ColdStartTimeouts.Add(1)
			}
			p.coldStartExpired(cfg)
			return ErrColdStartTimeout
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// coldStartExpired reports a request that waited cold_start_timeout_secs
// for a replica in vain.
func (p *Pool) coldStartExpired(cfg *Config) {
	p.issue(cfg, IssueColdStartExpiry, fmt.Sprintf("a request waited %s and no replica became available", cfg.Policy.ColdStartTimeout))
}

// RetryAfter is the Retry-After a timed-out hold answers with.
func (p *Pool) RetryAfter() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.backoff.Remaining(time.Now()); d > 0 {
		return d
	}
	return 5 * time.Second
}
