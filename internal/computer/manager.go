package computer

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/inventory"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
)

// Store is what the Manager needs of package store.
type Store interface {
	CreateComputer(ctx context.Context, c store.Computer, facts ...store.NewComputerFact) (store.Computer, error)
	Computer(ctx context.Context, id string) (store.Computer, error)
	Computers(ctx context.Context, namespace string) ([]store.Computer, error)
	UpdateComputer(ctx context.Context, id string, fn func(*store.Computer) error) (store.Computer, error)
	DeleteComputer(ctx context.Context, id string) error
	ReserveComputerSlot(ctx context.Context, id string, limit store.SlotLimit, fn func(*store.Computer, store.ActiveOn) error, facts ...store.NewComputerFact) (store.SlotReservation, store.Computer, error)
	ReleaseComputerSlot(ctx context.Context, id string, fn func(*store.Computer)) (store.Computer, error)
	ComputerSlots(ctx context.Context) ([]string, error)
	EnqueueComputer(ctx context.Context, id string, fn func(*store.Computer)) (int, store.Computer, error)
	ComputerQueue(ctx context.Context) ([]string, error)
	PutComputerHost(ctx context.Context, hostID string, h store.ComputerHost) error
	ComputerHosts(ctx context.Context) (map[string]store.ComputerHost, error)
	OpenUsage(ctx context.Context, u store.UsageInterval) error
	OpenComputerRuntime(ctx context.Context, u store.UsageInterval, fn func(*store.Computer) error, facts ...store.NewComputerFact) (store.Computer, error)
	EndUsage(ctx context.Context, runtimeID string, endedAt int64) error
	OpenUsages(ctx context.Context) ([]store.UsageInterval, error)
	PendingUsage(ctx context.Context, now int64, checkpoint time.Duration, limit int) ([]store.UsageInterval, error)
	AcknowledgeUsage(ctx context.Context, acks []store.UsageAck) error
	RequestRecycle(ctx context.Context, r store.Recycle) error
	FinishRecycle(ctx context.Context, runtimeID string) error
	PendingRecycles(ctx context.Context) ([]store.Recycle, error)
	AppendComputerFact(ctx context.Context, computerID, dedupe string, at int64, body []byte, mustExist bool) (int64, bool, error)
	ComputerFacts(ctx context.Context, computerID string, after int64, limit int) ([]store.ComputerFact, error)
	LastComputerFactSeq(ctx context.Context, computerID string) (int64, error)
	DeleteComputerFactsBefore(ctx context.Context, at int64) (int64, error)
	PutComputerPort(ctx context.Context, computerID string, p store.ComputerPort) (store.ComputerPort, error)
	DeleteComputerPort(ctx context.Context, computerID string, port int) error
	ComputerPorts(ctx context.Context, computerID string) ([]store.ComputerPort, error)
}

// Options configure a Manager. Store, Drivers and DataDir are required.
type Options struct {
	Store Store
	// Drivers are the vm drivers by name (the fleet's): "process" backs
	// KindProcess, "container" KindContainer, VMDriver KindVM.
	Drivers map[string]vm.Driver
	// DataDir holds the workspaces: <DataDir>/computers/<id>/workspace.
	DataDir string
	// HostID is this host's id: an on-box-vm backing runs here only when
	// its hostId is this one. Empty means "local".
	HostID string
	// FleetHostID, in a fleet, is this host's fleet id: an on-box-vm
	// backing naming it runs here as well (the fleet routes a create
	// naming another host's id to that host).
	FleetHostID string
	// VMDriver names the driver of on-box-vm backings; empty means the
	// first of "kvm" and "libvirt" in Drivers: the drivers that share the
	// workspace into the guest (firecracker cannot, and refuses it).
	VMDriver string
	// Inventory, if set, is the host's start-up listing of the drivers
	// (package inventory), shared with the fleet: New registers with it
	// for vm.OwnerComputer sandboxes, adopts those of its Computers, and
	// leaves the orphans to its sweep, which asks Claims. Without one,
	// New lists the drivers itself and destroys its orphans at once,
	// leaving other owners' replicas alone.
	Inventory *inventory.Inventory

	// DefaultBackings are used by Computers created without backings;
	// empty means [{kind: process}].
	DefaultBackings []Backing
	// DefaultSize is the size of Computers created without one; default
	// vm.DefaultSize.
	DefaultSize string
	// DefaultIdleTimeout applies to Computers created without one; default
	// 10 minutes.
	DefaultIdleTimeout time.Duration

	// FleetLimit, when positive, is the number of fleet slots (Computers
	// starting or running at once). Otherwise the limit is the sum over
	// the host capacity registry of maxActive − reservedHeadroom, or
	// DefaultFleetLimit while the registry is empty.
	FleetLimit int
	// RetryAfter is what a capacity answer tells callers to wait; default
	// 5s.
	RetryAfter time.Duration
	// FleetSlots, when set, are the fleet-wide Computer slots of a fleet
	// of hosts (berth serve --fleet-slots): a start reserves one before it
	// takes this host's slot, and gives it back with it. A full fleet
	// answers *CapacityError (or queues the start) as a full host does;
	// one that cannot be reached, ErrFleetUnavailable.
	FleetSlots FleetSlots

	// Tick is the period of the idle, exit, recycle and queue loop;
	// default 1s.
	Tick time.Duration
	// Checkpoint is the usage ledger's checkpointMs; default 60s.
	Checkpoint time.Duration
	// FactRetention is how long facts are kept; default 7 days, negative
	// keeps them forever.
	FactRetention time.Duration
	// RecycleAfter, when positive, recycles sandboxes older than that at a
	// quiet moment (QuietFor without activity, no use held, no process
	// running); the workspace is kept.
	RecycleAfter time.Duration
	// Prepare readies a sandbox's spec before each start: an image that
	// is a registry reference is pulled for the Computer's namespace (or
	// its use proved), and the image's run defaults filled in. Nil starts
	// the spec as it is.
	Prepare func(ctx context.Context, namespace string, spec *vm.Spec) error
	// QuietFor is how long a Computer must have been inactive to be
	// recycled; default 1 minute.
	QuietFor time.Duration
	// BootTimeout bounds the wait for a new sandbox's agent; default 30s.
	BootTimeout time.Duration
	// StopGrace is what a sandbox gets between SIGTERM and SIGKILL when it
	// is put to sleep; default 5s.
	StopGrace time.Duration

	// BaseDomain names exposed ports: <port>-<id>.<BaseDomain>.
	BaseDomain string

	// Now is the clock; tests replace it. Default time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// FleetSlots are fleet-wide Computer slots, held beside this host's own
// (createFleetSlots across hosts): Reserve is atomic across the fleet and
// free for a Computer that holds a slot already; Release is idempotent.
type FleetSlots interface {
	Reserve(ctx context.Context, computerID string) (FleetReservation, error)
	Release(ctx context.Context, computerID string) error
}

// FleetReservation is a fleet's answer to Reserve: reserved, or capacity
// with its limit and how long to wait. An unavailable fleet is Reserve's
// error.
type FleetReservation struct {
	Reserved   bool
	Running    int
	Limit      int
	RetryAfter time.Duration
}

// LocalHost is the host id of this host when Options.HostID is empty.
const LocalHost = "local"

// DefaultFleetLimit is the slot limit with no FleetLimit and no host
// registered.
const DefaultFleetLimit = 16

// MaxPendingUsage bounds PendingUsage (the contract's pending()).
const MaxPendingUsage = 64

// Manager runs the Computers of this host. It is safe for concurrent use.
type Manager struct {
	o   Options
	st  Store
	log *slog.Logger
	now func() time.Time

	nonce uint64 // sandbox name nonces; advanced under mu

	mu    sync.Mutex
	lives map[string]*live

	factMu sync.Mutex
	factCh map[string]chan struct{}

	kick chan struct{} // wakes the loop to drain the queue

	lastExpiry time.Time // of facts; guarded by mu

	adopted map[string]bool // sandboxes re-adopted at start-up (Claims); guarded by mu
}

// live is the in-memory side of one Computer: the lock that serializes its
// lifecycle, and what it takes to reach and judge a running sandbox.
type live struct {
	mu sync.Mutex // held across lifecycle transitions (start, sleep, delete)

	// Guarded by mu:
	client    *agent.Client // nil unless running
	driver    vm.Driver
	sandbox   string
	startedAt time.Time       // of the sandbox, for recycling
	reported  map[string]bool // background processes whose exit is recorded

	am         sync.Mutex // guards uses and lastActive, so activity never waits for a transition
	uses       int
	lastActive time.Time
}

func (l *live) touch(t time.Time) {
	l.am.Lock()
	if t.After(l.lastActive) {
		l.lastActive = t
	}
	l.am.Unlock()
}

func (l *live) activity() (uses int, last time.Time) {
	l.am.Lock()
	defer l.am.Unlock()
	return l.uses, l.lastActive
}

// New returns a Manager and reconciles the stored Computers with the
// sandboxes the drivers run: a Computer whose sandbox still runs is
// re-adopted, one whose sandbox vanished goes to sleep, and sandboxes no
// Computer claims are destroyed. Call Run for the loops.
func New(ctx context.Context, o Options) (*Manager, error) {
	if o.Store == nil || o.DataDir == "" || o.Drivers == nil {
		return nil, errors.New("computer: Options.Store, Drivers and DataDir are required")
	}
	if len(o.DefaultBackings) == 0 {
		o.DefaultBackings = []Backing{{Kind: KindProcess}}
	}
	if err := validateBackings(o.DefaultBackings); err != nil {
		return nil, fmt.Errorf("computer: DefaultBackings: %w", err)
	}
	if o.DefaultSize == "" {
		o.DefaultSize = vm.DefaultSize
	}
	if err := validateSize(o.DefaultSize); err != nil {
		return nil, fmt.Errorf("computer: DefaultSize: %w", err)
	}
	if o.HostID == "" {
		o.HostID = LocalHost
	}
	if o.VMDriver == "" {
		for _, n := range []string{"kvm", "libvirt"} {
			if o.Drivers[n] != nil {
				o.VMDriver = n
				break
			}
		}
	}
	defaults := []struct {
		d   *time.Duration
		def time.Duration
	}{
		{&o.DefaultIdleTimeout, 10 * time.Minute}, {&o.RetryAfter, 5 * time.Second}, {&o.Tick, time.Second},
		{&o.Checkpoint, time.Minute}, {&o.QuietFor, time.Minute}, {&o.BootTimeout, 30 * time.Second},
		{&o.StopGrace, 5 * time.Second},
	}
	for _, d := range defaults {
		if *d.d <= 0 {
			*d.d = d.def
		}
	}
	if o.FactRetention == 0 {
		o.FactRetention = 7 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		o: o, st: o.Store, log: o.Log, now: o.Now,
		nonce:  uint64(time.Now().UnixNano()) ^ mrand.Uint64()>>16,
		lives:  map[string]*live{},
		factCh: map[string]chan struct{}{},
		kick:   make(chan struct{}, 1),
	}
	if err := os.MkdirAll(filepath.Join(o.DataDir, "computers"), 0o700); err != nil {
		return nil, fmt.Errorf("computer: %w", err)
	}
	if err := m.reconcile(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// Claims reports whether a sandbox listed at start-up is a Computer's that
// New re-adopted (inventory.Claims); any other vm.OwnerComputer replica is
// an orphan.
func (m *Manager) Claims(f inventory.Found) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return f.Instance.Owner.Kind == vm.OwnerComputer && m.adopted[f.Instance.ID]
}

func (m *Manager) live(id string) *live {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.lives[id]
	if !ok {
		l = &live{lastActive: m.now()}
		m.lives[id] = l
	}
	return l
}

// storeErr maps a store error to the Manager's.
func (m *Manager) storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("%w: %v", ErrExists, err)
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrNotFound), errors.Is(err, errNoHost):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// workspace is the host directory of a Computer's files.
func (m *Manager) workspace(id string) string {
	return filepath.Join(m.o.DataDir, "computers", id, "workspace")
}

// Workspace returns the host directory holding Computer id's files.
func (m *Manager) Workspace(id string) string { return m.workspace(id) }

func newRuntimeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "rt_" + hex.EncodeToString(b[:])
}

// view turns a record into a Computer.
func (m *Manager) view(ctx context.Context, c store.Computer) (Computer, error) {
	var bs []Backing
	if err := json.Unmarshal([]byte(c.Backings), &bs); err != nil {
		return Computer{}, fmt.Errorf("computer: %s: stored backings: %w", c.ID, err)
	}
	out := Computer{
		ID: c.ID, Namespace: c.Namespace, Image: c.Image, Size: c.Size, IdleTimeout: c.IdleTimeout,
		Backings: bs, State: State{State: c.State}, Active: parseBacking(c.Active),
		CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt,
	}
	if c.State == StateQueued {
		q, err := m.st.ComputerQueue(ctx)
		if err != nil {
			return Computer{}, m.storeErr(err)
		}
		pos := slices.Index(q, c.ID) + 1
		if pos == 0 {
			pos = len(q) + 1 // dequeued this instant; about to start
		}
		out.State.Position = &pos
	}
	return out, nil
}

// Create stores a new Computer (sleeping) with an empty workspace, and
// starts it when req.Start (admission applies: *CapacityError when full;
// the Computer exists then anyway).
func (m *Manager) Create(ctx context.Context, req CreateRequest) (Computer, error) {
	if req.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		req.ID = "c" + hex.EncodeToString(b[:])
	}
	if err := validateID(req.ID); err != nil {
		return Computer{}, err
	}
	if err := validateNamespace(req.Namespace); err != nil {
		return Computer{}, err
	}
	if req.Size == "" {
		req.Size = m.o.DefaultSize
	}
	if err := validateSize(req.Size); err != nil {
		return Computer{}, err
	}
	switch {
	case req.IdleTimeout < 0:
		return Computer{}, fmt.Errorf("%w: idleTimeout must not be negative", ErrInvalid)
	case req.IdleTimeout == 0:
		req.IdleTimeout = m.o.DefaultIdleTimeout
	case req.IdleTimeout < time.Second:
		return Computer{}, fmt.Errorf("%w: idleTimeout must be at least 1s (got %s)", ErrInvalid, req.IdleTimeout)
	}
	if len(req.Image) > 512 {
		return Computer{}, fmt.Errorf("%w: image: longer than 512 characters", ErrInvalid)
	}
	if len(req.Backings) == 0 {
		req.Backings = m.o.DefaultBackings
	}
	if err := validateBackings(req.Backings); err != nil {
		return Computer{}, err
	}
	bj, _ := json.Marshal(req.Backings)
	ws := m.workspace(req.ID)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return Computer{}, fmt.Errorf("computer: creating the workspace: %w", err)
	}
	// The record and its create fact are one commit.
	rec, err := m.st.CreateComputer(ctx, store.Computer{
		ID: req.ID, Namespace: req.Namespace, Image: req.Image, Size: req.Size, IdleTimeout: req.IdleTimeout,
		Backings: string(bj), State: StateSleeping,
	}, m.lifecycleFacts(req.ID, State{State: StateSleeping}, "create")...)
	if err != nil {
		// The workspace may be the existing Computer's: keep it.
		return Computer{}, m.storeErr(err)
	}
	m.notifyFacts(req.ID)
	if req.Start {
		c, err := m.Start(ctx, req.ID, false)
		if err != nil {
			// A create that was asked to start and could not leaves
			// nothing behind: the caller sees one failed request, not a
			// Computer it did not get. Removed even if the caller has gone.
			if derr := m.Delete(context.WithoutCancel(ctx), req.ID); derr != nil {
				m.log.Warn("removing a Computer whose start failed", "computer", req.ID, "err", derr)
			}
			return Computer{}, err
		}
		return c, nil
	}
	return m.view(ctx, rec)
}

// Get returns one Computer.
func (m *Manager) Get(ctx context.Context, id string) (Computer, error) {
	rec, err := m.st.Computer(ctx, id)
	if err != nil {
		return Computer{}, m.storeErr(err)
	}
	return m.view(ctx, rec)
}

// List returns the Computers of a namespace ("" for all), by id.
func (m *Manager) List(ctx context.Context, namespace string) ([]Computer, error) {
	recs, err := m.st.Computers(ctx, namespace)
	if err != nil {
		return nil, m.storeErr(err)
	}
	out := make([]Computer, 0, len(recs))
	for _, r := range recs {
		c, err := m.view(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Start makes Computer id run. A running Computer is returned as is. When
// every slot is taken, Start answers *CapacityError, or with wait queues the
// start (State queued with its position) and returns at once; the queue is
// first in, first out and starts Computers as slots free up.
func (m *Manager) Start(ctx context.Context, id string, wait bool) (Computer, error) {
	l := m.live(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, err := m.startLocked(ctx, l, id, wait, "start")
	if err != nil {
		return Computer{}, err
	}
	return m.view(ctx, rec)
}

// errNoHost aborts a reservation when no backing has room.
var errNoHost = errors.New("computer: no backing has room")

// startLocked is Start with l.mu held.
func (m *Manager) startLocked(ctx context.Context, l *live, id string, wait bool, via string) (store.Computer, error) {
	rec, err := m.st.Computer(ctx, id)
	if err != nil {
		return store.Computer{}, m.storeErr(err)
	}
	if rec.State == StateRunning && l.client != nil {
		return rec, nil
	}
	if rec.State == StateQueued && wait {
		return rec, nil
	}
	if rec.State == StateRunning || rec.State == StateStarting {
		// Recorded as running, but this process runs no sandbox for it (a
		// failed adoption): start afresh; its slot is re-reserved for free.
		m.endRuntime(ctx, rec, "restart")
	}
	return m.admitAndLaunch(ctx, l, rec, wait, via, nil)
}

// admitAndLaunch reserves a slot (choosing the first backing in fallback
// order that this host can run and that has room, skipping those in
// failed) and launches the sandbox, falling back to the next backing when
// one fails to start.
func (m *Manager) admitAndLaunch(ctx context.Context, l *live, rec store.Computer, wait bool, via string, failed []string) (store.Computer, error) {
	id := rec.ID
	var bs []Backing
	if err := json.Unmarshal([]byte(rec.Backings), &bs); err != nil {
		return rec, fmt.Errorf("computer: %s: stored backings: %w", id, err)
	}
	hosts, err := m.st.ComputerHosts(ctx)
	if err != nil {
		return rec, m.storeErr(err)
	}
	// The fleet's slot first (free when it is held already): a full fleet
	// is answered before anything is written here.
	if fr, err := m.reserveFleet(ctx, id); err != nil {
		return rec, err
	} else if !fr.Reserved {
		if rec.State == StateRunning || rec.State == StateStarting {
			// Recorded as running with no sandbox here (a restart
			// without a fleet slot, a recycle): it sleeps until there is
			// room, rather than keep this host's slot.
			// (A recycle records its own sleeping fact.)
			m.releaseTo(ctx, id, StateSleeping)
			if via != "recycle" {
				m.emitLifecycle(ctx, id, State{State: StateSleeping}, via+": the fleet is full")
			}
		}
		if wait {
			pos, queued, err := m.st.EnqueueComputer(ctx, id, func(c *store.Computer) { c.State = StateQueued })
			if err != nil {
				return rec, m.storeErr(err)
			}
			m.emitLifecycle(ctx, id, State{State: StateQueued, Position: &pos}, via)
			return queued, nil
		}
		return rec, &CapacityError{Limit: fr.Limit, RetryAfter: cmp.Or(fr.RetryAfter, m.o.RetryAfter)}
	}
	var (
		unusable []string // backings this host cannot run, with why
		hostFull bool
	)
	pick := func(c *store.Computer, activeOn store.ActiveOn) error {
		unusable, hostFull = unusable[:0], false
		for _, b := range bs {
			if slices.ContainsFunc(failed, func(f string) bool { return strings.HasPrefix(f, b.String()+": ") }) {
				continue
			}
			name, _, err := m.driverFor(b)
			if err != nil {
				unusable = append(unusable, err.Error())
				continue
			}
			if h, ok := hosts[m.hostKey(b.HostID)]; ok && b.Kind == KindVM {
				n, err := activeOn(backingJSON(b))
				if err != nil {
					return err
				}
				if n >= h.MaxActive-h.ReservedHeadroom {
					hostFull = true
					continue
				}
			}
			m.mu.Lock()
			m.nonce++
			nonce := m.nonce
			m.mu.Unlock()
			c.State, c.Active, c.Driver = StateStarting, backingJSON(b), name
			c.Sandbox = vm.Owner{Kind: vm.OwnerComputer, ID: id}.Name(nonce)
			c.RuntimeID = newRuntimeID()
			return nil
		}
		return errNoHost
	}
	// The starting fact is appended by the reservation itself (only when
	// it reserves): the slot, the state and the fact are one commit, made
	// before the sandbox starts.
	res, chosen, err := m.st.ReserveComputerSlot(ctx, id, store.SlotLimit{Fixed: m.o.FleetLimit, Default: DefaultFleetLimit}, pick,
		m.lifecycleFacts(id, State{State: StateStarting}, via)...)
	switch {
	case errors.Is(err, errNoHost) && !hostFull:
		// Nothing here can run it (or everything failed): waiting would
		// not help.
		m.releaseTo(ctx, id, StateSleeping)
		if len(failed) > 0 {
			m.emitLifecycle(ctx, id, State{State: StateSleeping}, via+": no backing started")
			return rec, fmt.Errorf("computer: %s: no backing started: %s", id, strings.Join(append(failed, unusable...), "; "))
		}
		return rec, fmt.Errorf("%w: backings: none can run on this host: %s", ErrInvalid, strings.Join(unusable, "; "))
	case err != nil && !errors.Is(err, errNoHost):
		m.releaseFleet(ctx, id)
		return rec, m.storeErr(err)
	case err != nil || !res.Reserved:
		if len(failed) > 0 {
			// Fell back onto full hosts: give the slot back.
			m.releaseTo(ctx, id, StateSleeping)
		} else {
			m.releaseFleet(ctx, id)
		}
		if wait {
			pos, queued, err := m.st.EnqueueComputer(ctx, id, func(c *store.Computer) { c.State = StateQueued })
			if err != nil {
				return rec, m.storeErr(err)
			}
			m.emitLifecycle(ctx, id, State{State: StateQueued, Position: &pos}, via)
			return queued, nil
		}
		return rec, &CapacityError{Limit: res.Limit, RetryAfter: m.o.RetryAfter}
	}
	m.notifyFacts(id)
	running, err := m.launch(ctx, l, chosen, via)
	if err != nil {
		b := parseBacking(chosen.Active)
		m.log.Warn("computer: sandbox did not start", "computer", id, "backing", b.String(), "err", err)
		return m.admitAndLaunch(ctx, l, chosen, false, via, append(failed, b.String()+": "+err.Error()))
	}
	return running, nil
}

// hostKey is the host id an on-box-vm backing's hostId names: this host's
// fleet id is this host.
func (m *Manager) hostKey(id string) string {
	if m.o.FleetHostID != "" && id == m.o.FleetHostID {
		return m.o.HostID
	}
	return id
}

// driverFor resolves a backing to a driver of this host.
func (m *Manager) driverFor(b Backing) (string, vm.Driver, error) {
	var name string
	switch b.Kind {
	case KindProcess:
		name = "process"
	case KindContainer:
		name = "container"
	case KindVM:
		if m.hostKey(b.HostID) != m.o.HostID {
			return "", nil, fmt.Errorf("%s: host %q is not this host (%q)", b, b.HostID, m.o.HostID)
		}
		name = m.o.VMDriver
	}
	d := m.o.Drivers[name]
	if d == nil {
		return "", nil, fmt.Errorf("%s: no %q driver on this host", b, name)
	}
	return name, d, nil
}

// launch starts the sandbox a reservation chose, waits for its agent and
// records it running (with the running fact, via via).
func (m *Manager) launch(ctx context.Context, l *live, rec store.Computer, via string) (store.Computer, error) {
	d := m.o.Drivers[rec.Driver]
	ad, ok := d.(vm.AgentDialer)
	if !ok {
		return rec, fmt.Errorf("driver %s cannot reach an agent", rec.Driver)
	}
	ws := m.workspace(rec.ID)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return rec, err
	}
	spec := vm.Spec{
		Name: rec.Sandbox, Owner: vm.Owner{Kind: vm.OwnerComputer, ID: rec.ID}, Image: rec.Image, SizeClass: rec.Size,
		Workspace: ws, Env: map[string]string{"BERTH_COMPUTER": rec.ID},
	}
	if parseBacking(rec.Active).Kind == KindProcess {
		spec.Image = "" // the process backing runs on the host's own files
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.o.BootTimeout)
	defer cancel()
	if spec.Image != "" && m.o.Prepare != nil {
		// A pull counts against the boot timeout: a Computer that cannot
		// get its image in time fails its start rather than hanging it.
		if err := m.o.Prepare(bctx, rec.Namespace, &spec); err != nil {
			return rec, fmt.Errorf("computer: image %s: %w", rec.Image, err)
		}
	}
	if _, err := d.Start(bctx, spec); err != nil {
		return rec, err
	}
	sandbox := rec.Sandbox
	client := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return ad.DialAgent(ctx, sandbox) })
	if err := waitAgent(bctx, d, sandbox, client); err != nil {
		client.Close()
		if serr := d.Stop(context.WithoutCancel(ctx), sandbox, 0); serr != nil && !errors.Is(serr, vm.ErrNotFound) {
			m.log.Warn("computer: removing a sandbox that did not boot", "sandbox", sandbox, "err", serr)
		}
		return rec, err
	}
	started := m.now()
	startedMS := started.UnixMilli()
	// The usage interval opens, the state turns running and the running
	// fact is appended in one transaction: one commit between the agent's
	// answer and the first exec, and no runtime half recorded.
	out, err := m.st.OpenComputerRuntime(ctx,
		store.UsageInterval{RuntimeID: rec.RuntimeID, ComputerID: rec.ID, Backing: rec.Active, StartedAt: startedMS},
		func(c *store.Computer) error {
			c.State = StateRunning
			return nil
		}, m.lifecycleFacts(rec.ID, State{State: StateRunning}, via)...)
	if err != nil {
		client.Close()
		d.Stop(context.WithoutCancel(ctx), sandbox, 0)
		// The transaction rolled back, so there is no interval to end; this
		// only covers a commit whose failure was reported after all
		// (ending an unknown runtime does nothing).
		m.st.EndUsage(context.WithoutCancel(ctx), rec.RuntimeID, startedMS)
		return rec, m.storeErr(err)
	}
	m.notifyFacts(rec.ID)
	l.client, l.driver, l.sandbox, l.startedAt = client, d, sandbox, started
	l.touch(m.now())
	return out, nil
}

// waitAgent polls the new sandbox's agent until it answers, the sandbox
// ends, or ctx ends. It polls every millisecond at most while an agent
// would normally be booting (a container's agent answers some 15 ms after
// the driver's Start returns), then backs off.
func waitAgent(ctx context.Context, d vm.Driver, sandbox string, c *agent.Client) error {
	const (
		fastFor  = 250 * time.Millisecond
		fastWait = time.Millisecond
		slowWait = 5 * time.Millisecond
	)
	began := time.Now()
	wait := 200 * time.Microsecond
	for i := 0; ; i++ {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Info(actx)
		cancel()
		if err == nil {
			return nil
		}
		if i%16 == 15 {
			if in, ierr := d.Inspect(ctx, sandbox); ierr == nil && in.State.Terminal() {
				return fmt.Errorf("the sandbox ended before its agent answered: %s", in.Reason)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent did not answer: %w (last: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, fastWait)
		if time.Since(began) > fastFor {
			wait = slowWait
		}
	}
}

// releaseTo frees a Computer's slot and queue place and sets its state,
// clearing the sandbox fields.
func (m *Manager) releaseTo(ctx context.Context, id, state string) {
	_, err := m.st.ReleaseComputerSlot(context.WithoutCancel(ctx), id, func(c *store.Computer) {
		c.State, c.Active, c.Driver, c.Sandbox, c.RuntimeID = state, "", "", "", ""
	})
	if err != nil {
		m.log.Error("computer: releasing a slot", "computer", id, "err", err)
	}
	m.releaseFleet(ctx, id)
	m.poke()
}

// reserveFleet reserves Computer id's fleet slot, when there is a fleet.
func (m *Manager) reserveFleet(ctx context.Context, id string) (FleetReservation, error) {
	if m.o.FleetSlots == nil {
		return FleetReservation{Reserved: true}, nil
	}
	r, err := m.o.FleetSlots.Reserve(ctx, id)
	if err != nil {
		return r, fmt.Errorf("%w: %w", ErrFleetUnavailable, err)
	}
	return r, nil
}

// releaseFleet gives Computer id's fleet slot back, when there is a fleet.
// A release that fails leaves the slot to the host's lease: it is freed
// when this host leaves the fleet or dies.
func (m *Manager) releaseFleet(ctx context.Context, id string) {
	if m.o.FleetSlots == nil {
		return
	}
	if err := m.o.FleetSlots.Release(context.WithoutCancel(ctx), id); err != nil {
		m.log.Error("computer: releasing a fleet slot", "computer", id, "err", err)
	}
}

// endRuntime destroys the sandbox of rec (if any), closes its usage
// interval and records the exits of its processes; the slot is kept.
func (m *Manager) endRuntime(ctx context.Context, rec store.Computer, via string) {
	ctx = context.WithoutCancel(ctx)
	l := m.live(rec.ID)
	if l.client != nil {
		// Last look: exits not yet recorded, and processes about to be
		// killed (recorded with a null exit code).
		m.collectProcesses(ctx, l, rec.ID, true)
		l.client.Close()
	}
	d := l.driver
	if d == nil {
		d = m.o.Drivers[rec.Driver]
	}
	if d != nil && rec.Sandbox != "" {
		grace := m.o.StopGrace
		if via == viaFence {
			grace = 0
		}
		if err := d.Stop(ctx, rec.Sandbox, grace); err != nil && !errors.Is(err, vm.ErrNotFound) {
			m.log.Error("computer: stopping a sandbox", "computer", rec.ID, "sandbox", rec.Sandbox, "err", err)
		}
	}
	if rec.RuntimeID != "" {
		m.closeInterval(ctx, rec, m.now().UnixMilli(), via)
	}
	l.client, l.driver, l.sandbox, l.startedAt, l.reported = nil, nil, "", time.Time{}, nil
}

// closeInterval ends a runtime's usage interval and records the interval
// fact.
func (m *Manager) closeInterval(ctx context.Context, rec store.Computer, endedAt int64, via string) {
	open, err := m.st.OpenUsages(ctx)
	if err == nil {
		err = m.st.EndUsage(ctx, rec.RuntimeID, endedAt)
	}
	if err != nil {
		m.log.Error("computer: closing a usage interval", "computer", rec.ID, "runtime", rec.RuntimeID, "err", err)
		return
	}
	for _, u := range open {
		if u.RuntimeID == rec.RuntimeID {
			m.emitInterval(ctx, u, max(endedAt, u.ObservedAt), true, via)
		}
	}
}

// emitInterval records an interval fact of a runtime.
func (m *Manager) emitInterval(ctx context.Context, u store.UsageInterval, observedAt int64, ended bool, via string) {
	f := Fact{Kind: FactInterval, ComputerID: u.ComputerID, RuntimeID: u.RuntimeID, Backing: parseBacking(u.Backing),
		StartedAt: u.StartedAt, ObservedAt: observedAt, Ended: ended, Provenance: Provenance{Actor: Actor, Via: via}}
	if _, err := m.emit(ctx, f, "", false); err != nil {
		m.log.Warn("computer: recording an interval fact", "computer", u.ComputerID, "err", err)
	}
}

// sleepLocked stops Computer id's sandbox (if any), keeping its workspace,
// and frees its slot. via says why (stop, idle, ...).
func (m *Manager) sleepLocked(ctx context.Context, l *live, id, via string) error {
	rec, err := m.st.Computer(ctx, id)
	if err != nil {
		return m.storeErr(err)
	}
	if rec.State == StateSleeping && l.client == nil {
		return nil
	}
	m.endRuntime(ctx, rec, via)
	m.releaseTo(ctx, id, StateSleeping)
	m.emitLifecycle(ctx, id, State{State: StateSleeping}, via)
	return nil
}

// Stop puts Computer id to sleep now: its sandbox (and every process in
// it) stops, its workspace stays, its slot frees. A queued start is
// cancelled. Stopping a sleeping Computer does nothing.
func (m *Manager) Stop(ctx context.Context, id string) error {
	l := m.live(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	return m.sleepLocked(ctx, l, id, "stop")
}

// viaFence is how Fence stops a Computer.
const viaFence = "fleet fence"

// Fence stops Computer id at once, its processes killed with no grace:
// its host lost the Computer's fleet slot (the fleet's lease), and another
// host may start a Computer in it before a graceful stop would end. Its
// workspace stays, as after Stop.
func (m *Manager) Fence(ctx context.Context, id string) error {
	l := m.live(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	return m.sleepLocked(ctx, l, id, viaFence)
}

// Delete stops Computer id and removes it with its workspace and ports.
func (m *Manager) Delete(ctx context.Context, id string) error {
	l := m.live(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := m.sleepLocked(ctx, l, id, "delete"); err != nil {
		return err
	}
	if err := m.st.DeleteComputer(ctx, id); err != nil {
		return m.storeErr(err)
	}
	m.mu.Lock()
	delete(m.lives, id)
	m.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(m.o.DataDir, "computers", id)); err != nil {
		return fmt.Errorf("computer: removing the workspace of %s: %w", id, err)
	}
	return nil
}

// SetBackings replaces Computer id's fallback list. A running Computer
// whose active backing is no longer listed moves (sleep, then start on the
// new list), keeping its workspace.
func (m *Manager) SetBackings(ctx context.Context, id string, bs []Backing) (Computer, error) {
	if len(bs) == 0 {
		bs = m.o.DefaultBackings
	}
	if err := validateBackings(bs); err != nil {
		return Computer{}, err
	}
	bj, _ := json.Marshal(bs)
	l := m.live(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, err := m.st.UpdateComputer(ctx, id, func(c *store.Computer) error {
		c.Backings = string(bj)
		return nil
	})
	if err != nil {
		return Computer{}, m.storeErr(err)
	}
	if (rec.State == StateRunning || rec.State == StateStarting) && !slices.Contains(bs, parseBacking(rec.Active)) {
		m.endRuntime(ctx, rec, "backings")
		if rec, err = m.admitAndLaunch(ctx, l, rec, false, "backings", nil); err != nil {
			var ce *CapacityError
			if errors.As(err, &ce) {
				m.releaseTo(ctx, id, StateSleeping)
			}
			return Computer{}, err
		}
	}
	return m.view(ctx, rec)
}

// Use wakes Computer id if needed (admission applies: *CapacityError),
// marks activity, and returns a client for its sandbox's agent and a
// release func. The Computer does not go idle while a use is held; release
// (idempotent) counts as activity.
func (m *Manager) Use(ctx context.Context, id string) (*agent.Client, func(), error) {
	l := m.live(id)
	l.mu.Lock()
	// A client means a running sandbox (it is set on start and cleared on
	// every stop, under l.mu): a running Computer's use needs no store read.
	if l.client == nil {
		if _, err := m.startLocked(ctx, l, id, false, "use"); err != nil {
			l.mu.Unlock()
			return nil, nil, err
		}
	}
	c := l.client
	l.am.Lock()
	l.uses++
	l.lastActive = m.now()
	l.am.Unlock()
	l.mu.Unlock()
	var once sync.Once
	return c, func() {
		once.Do(func() {
			l.am.Lock()
			l.uses--
			l.lastActive = m.now()
			l.am.Unlock()
		})
	}, nil
}

// Touch records activity without a session (traffic to an exposed port,
// say), pushing the idle deadline back.
func (m *Manager) Touch(id string) {
	m.mu.Lock()
	l, ok := m.lives[id]
	m.mu.Unlock()
	if ok {
		l.touch(m.now())
	}
}

// poke wakes the loop to start queued Computers.
func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}
