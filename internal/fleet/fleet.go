// Package fleet runs the replica pools of vm deployments: it creates replicas
// through a vm.Driver, probes them until they are ready, hands ready ones to
// the data plane, scales each pool with the decisions of package autoscale,
// drains and retires replicas, backs off from failing boots, and re-adopts
// replicas that outlived a berth restart.
//
// One Manager owns every deployment replica on the host (vm.OwnerDeployment;
// package inventory hands them to it at start-up). Each deployment's Pool runs its
// own reconcile loop (autoscale.Loop): a step every two seconds and at once
// when poked — by a request held for a cold start, a replica that became
// ready, or a spec change. Requests that find no ready replica wait in Await
// (the data plane's cold-start hold) and count as demand until a replica is
// ready or their cold_start_timeout_secs has passed.
//
// The pool reads the time package directly (time.Now, its timers and
// tickers) and has no clock option: its time rules — missing grace,
// boot_timeout_secs, drain_timeout_secs, the backoff — are unit-tested in a
// testing/synctest bubble, which fakes the clock and the timers alike.
package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/health"
	"github.com/berth-dev/berth/internal/inventory"
	"github.com/berth-dev/berth/internal/metrics"
	"github.com/berth-dev/berth/internal/vm"
)

// Options configure a Manager.
type Options struct {
	// Drivers are the drivers replicas can run on, by name (the spec's
	// vm.driver). Driver, if set, is also registered as "process" — a
	// shorthand for tests with one driver.
	Drivers map[string]vm.Driver
	Driver  vm.Driver
	Log     *slog.Logger
	// Tick is the reconcile interval; default 2s.
	Tick time.Duration
	// BootProbe is the longest wait between two probes of a booting
	// replica; default 2ms. The waits start at 200µs and grow by a
	// quarter each (nextBootProbe), so an app that listens within a few
	// milliseconds of its Start is noticed within a fraction of one, and
	// noticing a slow one adds at most BootProbe. A probe of an app that
	// is not listening yet is one refused loopback connect, tens of
	// microseconds of CPU.
	BootProbe time.Duration
	// MaxCreates bounds concurrent creates across the fleet; default 8.
	MaxCreates int
	// MissingGrace is how long a replica may be absent from the driver's
	// listing before it is given up; default 10s.
	MissingGrace time.Duration
	// Inventory, if set, is the host's start-up listing of the drivers
	// (package inventory), shared with the other owners of sandboxes
	// (package computer): Run registers with it for vm.OwnerDeployment
	// replicas, adopts those whose deployment has a pool, and leaves the
	// orphans to its sweep, which asks Claims. Without one, Run lists the
	// drivers itself and destroys the replicas of deployments without a
	// pool at once, leaving other owners' replicas alone.
	Inventory *inventory.Inventory
	// CheckEvery is how often Run re-checks the drivers that can tell
	// whether they still work (vm.Checker: a libvirtd that died after
	// start-up, a runtime uninstalled); default 30s. A failed Start
	// re-checks its driver at once. Creates on a driver whose last check
	// failed fail at once with that reason.
	CheckEvery time.Duration
	// Surge is how many replicas beyond max_replicas a rollout may run
	// (rollout.go); default 1 (berth serve --rollout-surge).
	Surge int
	// OnRollout hears each step of every pool's rollouts; it is called
	// from the pool's goroutines, never under a pool's lock, and must not
	// block for long. Nil: nobody listens.
	OnRollout func(RolloutEvent)
	// Records keeps the template each replica was created from, for
	// adoption after a restart; nil: every running replica is adopted as
	// its deployment's current template.
	Records ReplicaRecords
}

// Manager owns all pools. Safe for concurrent use.
type Manager struct {
	o       Options
	log     *slog.Logger
	creates chan struct{}
	nonce   atomic.Uint64

	mu      sync.Mutex // guards pools, adopted, running
	pools   map[string]*Pool
	adopted map[string][]vm.Instance // by deployment: replicas found at start-up, not yet handed to a pool
	running bool                     // Run has started the pools it found; Ensure hands it new ones over starts

	starts   chan startReq // Ensure → Run: a pool created while Run runs, to start under Run's context
	stopping chan struct{} // closed once Run's context has ended: it starts no more pools

	recheck  chan struct{} // a Start failed: re-check the drivers now
	problems sync.Map      // driver name → error: its last Check failed

	// sleepFine is the boot probes' wait under a millisecond (the
	// package's sleepFine; tests in a synctest bubble use time.Sleep, on
	// the fake clock).
	sleepFine func(time.Duration)
}

// New returns a Manager. Call Run to start it.
func New(o Options) *Manager {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Tick <= 0 {
		o.Tick = 2 * time.Second
	}
	if o.BootProbe <= 0 {
		o.BootProbe = 2 * time.Millisecond
	}
	if o.MaxCreates <= 0 {
		o.MaxCreates = 8
	}
	if o.MissingGrace <= 0 {
		o.MissingGrace = 10 * time.Second
	}
	if o.CheckEvery <= 0 {
		o.CheckEvery = 30 * time.Second
	}
	if o.Surge <= 0 {
		o.Surge = 1
	}
	if o.Drivers == nil {
		o.Drivers = map[string]vm.Driver{}
	}
	if o.Driver != nil {
		if _, ok := o.Drivers["process"]; !ok {
			o.Drivers["process"] = o.Driver
		}
	}
	m := &Manager{o: o, log: o.Log, creates: make(chan struct{}, o.MaxCreates), pools: map[string]*Pool{}, starts: make(chan startReq), stopping: make(chan struct{}), recheck: make(chan struct{}, 1)}
	m.nonce.Store(uint64(time.Now().UnixNano()) ^ rand.Uint64()>>16)
	m.sleepFine = sleepFine
	return m
}

// Driver returns the driver with the given name, or nil.
func (m *Manager) Driver(name string) vm.Driver { return m.o.Drivers[name] }

// DriverNames lists the drivers replicas can run on, sorted.
func (m *Manager) DriverNames() []string { return slices.Sorted(maps.Keys(m.o.Drivers)) }

// Can reports whether the driver with the given name declares ability a
// (vm.Abilities); false for an unknown driver or one that declares none.
func (m *Manager) Can(driver string, a vm.Ability) bool {
	ab, ok := m.o.Drivers[driver].(vm.Abilities)
	return ok && slices.Contains(ab.Abilities(), a)
}

// Mounter reports whether the driver with the given name attaches
// vm.mounts (declares vm.CanMount) and whether writable ones too
// (vm.Mounter's WritableMounts): spec.Options.Mounter.
func (m *Manager) Mounter(driver string) (attaches, writable bool) {
	if !m.Can(driver, vm.CanMount) {
		return false, false
	}
	mt, ok := m.o.Drivers[driver].(vm.Mounter)
	return ok, ok && mt.WritableMounts()
}

// Run adopts the replicas that are already running (left by a previous berth
// process; see Options.Inventory), then keeps every pool reconciled until
// ctx ends. Pools created by Ensure while it runs are started by it, under
// ctx; once ctx has ended, none is. Replicas keep running when Run returns:
// a restarted berth re-adopts them.
func (m *Manager) Run(ctx context.Context) error {
	inv := m.o.Inventory
	if inv == nil {
		inv = inventory.New(m.o.Drivers, inventory.Options{Log: m.log})
	}
	if err := inv.List(ctx); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	byDep := map[string][]vm.Instance{}
	for _, f := range inv.Register(vm.OwnerDeployment, m.Claims) {
		byDep[f.Instance.Owner.ID] = append(byDep[f.Instance.Owner.ID], f.Instance)
	}
	m.mu.Lock()
	m.adopted = byDep
	m.running = true
	pools := slices.Collect(maps.Values(m.pools))
	m.mu.Unlock()
	for _, p := range pools {
		m.startPool(ctx, p)
	}
	var bg sync.WaitGroup
	defer bg.Wait()
	bg.Go(func() { m.checkDrivers(ctx) })
	// Replicas of deployments that no longer exist are orphans: deleting
	// a deployment destroys its replicas, so nothing else will ever claim
	// them. A shared inventory sweeps them once every owner has
	// registered; a private one at once.
	if m.o.Inventory == nil {
		bg.Go(func() { inv.Sweep(ctx, vm.OwnerDeployment) })
	}
	// Pools created from now on (Ensure) are started here, under ctx.
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case r := <-m.starts:
			m.startPool(ctx, r.p)
			close(r.done)
		}
	}
	close(m.stopping)
	// Every pool's loop and the goroutines it started (creates, probes,
	// stops) end before Run returns, so that none uses a driver its owner
	// closes next.
	m.mu.Lock()
	pools = slices.Collect(maps.Values(m.pools))
	m.mu.Unlock()
	for _, p := range pools {
		p.wait()
	}
	return nil
}

// startReq asks Run to start pool p, and is done once it has.
type startReq struct {
	p    *Pool
	done chan struct{}
}

// startPool hands pool p the replicas found at start-up for its deployment
// and starts its loop under ctx, Run's.
func (m *Manager) startPool(ctx context.Context, p *Pool) {
	m.mu.Lock()
	adopted := m.adopted[p.id]
	delete(m.adopted, p.id) // a later pool of the same id (deleted, re-created) gets none
	m.mu.Unlock()
	p.adopt(ctx, adopted)
	p.start(ctx)
}

// Claims reports whether a replica listed at start-up is the fleet's: its
// deployment has a pool (inventory.Claims).
func (m *Manager) Claims(f inventory.Found) bool {
	if f.Instance.Owner.Kind != vm.OwnerDeployment {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.pools[f.Instance.Owner.ID]
	return ok
}

// DriverProblem is why the driver named name cannot run replicas now, as
// its last re-check (vm.Checker) found, or nil.
func (m *Manager) DriverProblem(name string) error {
	if err, ok := m.problems.Load(name); ok {
		return err.(error)
	}
	return nil
}

// checkDrivers re-checks the drivers that are vm.Checkers every
// CheckEvery, and at once when a Start failed, until ctx ends.
func (m *Manager) checkDrivers(ctx context.Context) {
	t := time.NewTicker(m.o.CheckEvery)
	defer t.Stop()
	for {
		for _, name := range m.DriverNames() {
			c, ok := m.o.Drivers[name].(vm.Checker)
			if !ok {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := c.Check(cctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			switch _, had := m.problems.Load(name); {
			case err != nil && !had:
				m.log.Error("vm driver unavailable", "driver", name, "why", err)
			case err == nil && had:
				m.log.Info("vm driver available again", "driver", name)
			}
			if err != nil {
				m.problems.Store(name, err)
			} else {
				m.problems.Delete(name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.recheck:
		}
	}
}

// Config is what a deployment's spec asks of its pool.
type Config struct {
	Deployment string
	// Driver names the driver replicas run on (vm.driver).
	Driver string
	// Key identifies the replica template (e.g. the canonical JSON of the
	// spec's vm section). When it changes, the pool's replicas are replaced.
	Key string
	// Revision is the deployment's rollout_revision (the hex SHA-256 of
	// its canonical spec); it names the pool's rollouts (RolloutEvent).
	Revision   string
	Template   vm.Spec // Name and Deployment are filled per replica
	Policy     autoscale.Policy
	Retain     bool // idle_action: retain — suspend idle replicas instead of destroying them
	HealthPath string
	HealthPort int // 0: the app port
	HealthTCP  bool
	Timeout    time.Duration // health probe timeout
	// ExpectHeader, when set, makes a booting replica ready only once
	// its probe gets a 2xx with this exact header (health.expected_header).
	ExpectHeader, ExpectValue string
	// Env resolves secrets (vm.env_from) at each create; nil means none.
	// An error fails the create with that reason.
	Env func(ctx context.Context) (map[string]string, error)
	// Mounts resolves vm.mounts at each create into the host trees the
	// replica gets (Template.Mounts is replaced by what it returns); nil
	// means none. An error fails the create with that reason (a tree not
	// pulled yet, say).
	Mounts func(ctx context.Context) ([]vm.Mount, error)
	// Prepare readies a replica's spec before each create: it pulls the
	// image a registry reference names when this host lacks it, and fills
	// the image's defaults into what the spec leaves empty. It runs
	// before the create takes one of the manager's create slots, so a long
	// pull does not hold up other deployments' starts; callers waiting on
	// the same pull share it. nil means nothing to do. An error fails the
	// create with that reason.
	Prepare func(ctx context.Context, spec *vm.Spec) error
	// Fence runs right before each create (and resume of a retained
	// replica), once a create slot is taken: an error fails the create
	// with that reason (a fleet host that no longer holds the
	// deployment's placement). nil: none.
	Fence func(ctx context.Context) error
	// Workspace seeds each replica's workspace at create and captures it
	// when the replica stops (see Workspace); nil means none.
	Workspace Workspace
	// Recreate makes a template change switch at once, as a pool with
	// nothing serving does: the previous replicas retire before the new
	// template's start, instead of serving until candidates are ready.
	// It is for replicas that take turns, such as the one owner of a
	// durable workspace (vm.workspace), whose successor can only start
	// from what the previous one left once it has stopped.
	Recreate bool
	Metrics  *metrics.Deployment
	// Backends is where the pool publishes its ready replicas (required).
	// It is read when the pool is created; a later Ensure keeps the first.
	Backends Backends
	// Issues hears the pool's operational issues (its namespace's event
	// feed, when the spec asks for it); nil: nobody listens. It is called
	// with the pool's lock held: it must not block or call the pool.
	Issues func(Issue)
}

// Issue is an operational problem of a pool, for Config.Issues. What is
// its short name, one of the Issue* constants; Detail is berth's own words
// for it, never the driver's error or the app's output (which may name
// host paths or print a secret), since a feed can be served on the
// deployment's public routes (feed.expose).
type Issue struct {
	What, Detail string
}

// The issues a pool reports.
const (
	IssueCreateFailed    = "replica create failed"
	IssueBootFailed      = "replica failed to boot"
	IssueBootTimeout     = "replica boot timed out"
	IssueColdStartExpiry = "cold start timed out"
)

// Ensure creates the pool for cfg.Deployment or updates it. A changed Key
// replaces the replicas; any other change (scaling, health) applies to the
// replicas already running. Every call resets the boot backoff, as any spec
// write does in app-lb.
func (m *Manager) Ensure(cfg Config) *Pool {
	if cfg.Backends == nil {
		panic("fleet: Config.Backends is nil for deployment " + cfg.Deployment) // a programming error, before any lock is held
	}
	m.mu.Lock()
	p := m.pools[cfg.Deployment]
	if p == nil {
		p = newPool(m, cfg)
		m.pools[cfg.Deployment] = p
		running := m.running
		m.mu.Unlock()
		if running {
			// Run starts it under its context; once Run is stopping, the
			// pool is not started (berth is shutting down).
			r := startReq{p, make(chan struct{})}
			select {
			case m.starts <- r:
				<-r.done
			case <-m.stopping:
			}
		}
		return p
	}
	m.mu.Unlock()
	p.update(cfg)
	return p
}

// Remove destroys a deployment's pool and every replica it has, suspended
// ones included.
func (m *Manager) Remove(ctx context.Context, id string) {
	m.mu.Lock()
	p := m.pools[id]
	delete(m.pools, id)
	m.mu.Unlock()
	if p != nil {
		p.destroy(ctx)
	}
}

// Pool returns a deployment's pool.
func (m *Manager) Pool(id string) (*Pool, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pools[id]
	return p, ok
}

func (m *Manager) name(o vm.Owner) string { return o.Name(m.nonce.Add(1)) }

// probe checks a replica once.
func probe(ctx context.Context, cfg *Config, addr string) error {
	c := health.Check{Addr: addr, Timeout: cfg.Timeout}
	if cfg.HealthPort != 0 {
		c.Addr = withPort(addr, cfg.HealthPort)
	}
	if !cfg.HealthTCP {
		c.Path = cfg.HealthPath
		if c.Path == "" {
			c.Path = "/"
		}
		c.ExpectHeader, c.ExpectValue = cfg.ExpectHeader, cfg.ExpectValue
	}
	return health.Probe(ctx, c)
}

func withPort(addr string, port int) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return fmt.Sprintf("%s:%d", addr[:i], port)
		}
	}
	return fmt.Sprintf("%s:%d", addr, port)
}
