// Package inventory is the one place that looks at every sandbox on this
// host's drivers when berth starts and decides whose each one is. It lists
// every driver once (List), hands each replica to whoever registered for its
// owner kind (Register: the fleet's pools for vm.OwnerDeployment, the
// Computer manager for vm.OwnerComputer), and destroys the true orphans
// (Sweep): replicas of an owner kind nobody registered, and replicas their
// kind's claimant does not claim.
//
// Ownership is the typed vm.Owner the drivers keep with each replica; for
// replicas of an older berth, which recorded none, it is the one the name
// implies (vm.ResolveOwner). Names decide nothing else.
//
// Run sweeps once, when every expected kind has registered and Grace has
// passed since the listing, so that a claimant that loads its deployments or
// Computers late is asked only once it knows them. Leases are not renewed
// here: a replica's lease is its deployment's vm.ttl_seconds, which its pool
// knows and renews (package fleet); Computers' sandboxes have none.
package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// DefaultGrace is Options.Grace's default.
const DefaultGrace = 10 * time.Second

// Options configure an Inventory.
type Options struct {
	// Expect lists the owner kinds whose claimants will register; Run
	// sweeps only once all of them have.
	Expect []vm.OwnerKind
	// Grace is how long after List Run waits at least before it sweeps;
	// default DefaultGrace.
	Grace time.Duration
	// StopGrace is what an orphan gets between the polite signal and the
	// kill; default 5s.
	StopGrace time.Duration
	Log       *slog.Logger
}

// Found is one replica a driver listed at start-up.
type Found struct {
	Driver   string      // the driver's name
	Instance vm.Instance // Instance.Owner is resolved (vm.ResolveOwner)
}

// Claims reports whether a claimant knows a replica of its kind: a pool for
// its deployment on its driver, a Computer whose sandbox it is. It is asked
// when Sweep runs.
type Claims func(Found) bool

// Inventory is the start-up listing of every driver. Safe for concurrent
// use.
type Inventory struct {
	drivers map[string]vm.Driver
	o       Options

	mu       sync.Mutex
	listed   bool
	listedAt time.Time
	found    []Found
	claims   map[vm.OwnerKind]Claims
	joined   chan struct{} // closed and replaced at each Register
	swept    chan struct{} // closed when Run has swept
}

// New returns an Inventory over drivers, by name. Call List next.
func New(drivers map[string]vm.Driver, o Options) *Inventory {
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Inventory{drivers: drivers, o: o, claims: map[vm.OwnerKind]Claims{}, joined: make(chan struct{}), swept: make(chan struct{})}
}

// List lists every driver, once: later calls do nothing. It fails if a
// driver cannot list its replicas.
func (inv *Inventory) List(ctx context.Context) error {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.listed {
		return nil
	}
	var found []Found
	for _, name := range slices.Sorted(maps.Keys(inv.drivers)) {
		insts, err := inv.drivers[name].List(ctx)
		if err != nil {
			return fmt.Errorf("inventory: listing %s replicas: %w", name, err)
		}
		for _, in := range insts {
			in.Owner = vm.ResolveOwner(in.Owner, in.ID)
			found = append(found, Found{Driver: name, Instance: in})
		}
	}
	inv.found, inv.listed, inv.listedAt = found, true, time.Now()
	return nil
}

// Register makes claims the claimant of owner kind kind and returns the
// replicas of that kind the drivers listed. List must have run; a kind has
// one claimant.
func (inv *Inventory) Register(kind vm.OwnerKind, claims Claims) []Found {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if !inv.listed {
		panic("inventory: Register before List")
	}
	if _, dup := inv.claims[kind]; dup {
		panic("inventory: a second claimant for owner kind " + string(kind))
	}
	inv.claims[kind] = claims
	close(inv.joined)
	inv.joined = make(chan struct{})
	var out []Found
	for _, f := range inv.found {
		if f.Instance.Owner.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

// Run waits until every kind of Options.Expect has registered and Grace has
// passed since List, sweeps once, and returns; it returns early, without
// sweeping, when ctx ends. List must have run.
func (inv *Inventory) Run(ctx context.Context) error {
	for {
		inv.mu.Lock()
		missing := slices.ContainsFunc(inv.o.Expect, func(k vm.OwnerKind) bool { return inv.claims[k] == nil })
		joined, at := inv.joined, inv.listedAt
		inv.mu.Unlock()
		if !missing {
			t := time.NewTimer(time.Until(at.Add(inv.o.Grace)))
			defer t.Stop()
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			inv.Sweep(ctx)
			close(inv.swept)
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-joined:
		}
	}
}

// Swept is closed once Run has swept.
func (inv *Inventory) Swept() <-chan struct{} { return inv.swept }

// Sweep destroys the orphans among the listed replicas of kinds (every kind
// when none is given): those of a kind nobody registered, and those their
// claimant does not claim. Each listed replica is swept at most once.
func (inv *Inventory) Sweep(ctx context.Context, kinds ...vm.OwnerKind) {
	inv.mu.Lock()
	var swept, keep []Found
	for _, f := range inv.found {
		if len(kinds) > 0 && !slices.Contains(kinds, f.Instance.Owner.Kind) {
			keep = append(keep, f)
		} else {
			swept = append(swept, f)
		}
	}
	inv.found = keep
	claims := maps.Clone(inv.claims)
	inv.mu.Unlock()
	// The claimants are asked without inv.mu held: they take their own
	// locks.
	for _, f := range swept {
		if c := claims[f.Instance.Owner.Kind]; c != nil && c(f) {
			continue
		}
		inv.o.Log.Warn("destroying an orphaned replica", "replica", f.Instance.ID, "driver", f.Driver, "owner", f.Instance.Owner.String())
		if err := inv.drivers[f.Driver].Stop(ctx, f.Instance.ID, inv.o.StopGrace); err != nil && !errors.Is(err, vm.ErrNotFound) {
			inv.o.Log.Error("could not destroy an orphaned replica", "replica", f.Instance.ID, "driver", f.Driver, "err", err)
		}
	}
}
