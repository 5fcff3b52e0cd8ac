package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// Store is what the Manager needs of package store.
type Store interface {
	RateLimits(ctx context.Context) ([]store.RateLimit, error)
	PutRateLimit(ctx context.Context, x store.RateLimit) (store.RateLimit, error)
	DeleteRateLimit(ctx context.Context, deployment string) error
}

// Errors of the Manager.
var (
	// ErrNoDeployment is a Put for a deployment the store does not have.
	ErrNoDeployment = errors.New("ratelimit: no such deployment")
	// ErrNotFound is a deployment without a rate limit.
	ErrNotFound = errors.New("ratelimit: the deployment has no rate limit")
)

// Options configure a Manager.
type Options struct {
	// Changed is called after a deployment's limit was put or deleted
	// (durably), with no lock of the Manager's held: the server
	// recompiles the deployment's data-plane view there
	// (registry.Refresh), which asks Limiter for the new one.
	Changed func(deployment string)
	// Now is the limiters' clock; nil is time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// Manager keeps the deployments' limiters, loaded from the store; every
// change is durable before it returns. Safe for concurrent use.
//
// Replacing a deployment's limit replaces its Limiter: the counts start
// afresh (every client with a full bucket and nothing in flight; requests
// admitted under the old Limiter leave it, not the new one, so for as long
// as they last a client may have up to twice concurrent_per_client in
// flight).
type Manager struct {
	st Store
	o  Options

	wmu sync.Mutex // serialises Put, Delete and Forget across their store writes
	mu  sync.RWMutex
	lim map[string]*Limiter
}

// NewManager loads every stored limit. A stored limit that no longer validates is
// logged and skipped (not deleted).
func NewManager(ctx context.Context, st Store, o Options) (*Manager, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	rows, err := st.RateLimits(ctx)
	if err != nil {
		return nil, fmt.Errorf("load rate limits: %w", err)
	}
	m := &Manager{st: st, o: o, lim: make(map[string]*Limiter, len(rows))}
	for _, r := range rows {
		l, err := NewLimiter(fromStore(r), o.Now)
		if err != nil {
			o.Log.Error("skipping a stored rate limit that no longer validates", "deployment", r.Deployment, "err", err)
			continue
		}
		m.lim[r.Deployment] = l
	}
	return m, nil
}

func fromStore(r store.RateLimit) apitype.RateLimit {
	return apitype.RateLimit{RequestsPerSec: r.RequestsPerSec, Burst: r.Burst, ConcurrentPerClient: r.ConcurrentPerClient, MaxClients: r.MaxClients}
}

// Put validates rl, stores it as deployment's limit and puts its Limiter in
// place (replacing any before it), and returns it normalized. An invalid rl
// is a *web.FieldError; a deployment the store does not have, ErrNoDeployment.
func (m *Manager) Put(ctx context.Context, deployment string, rl apitype.RateLimit) (apitype.RateLimit, error) {
	l, err := NewLimiter(rl, m.o.Now)
	if err != nil {
		return apitype.RateLimit{}, err
	}
	rl = l.Spec()
	if err := m.put(ctx, deployment, rl, l); err != nil {
		return apitype.RateLimit{}, err
	}
	m.changed(deployment)
	return rl, nil
}

func (m *Manager) put(ctx context.Context, deployment string, rl apitype.RateLimit, l *Limiter) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	_, err := m.st.PutRateLimit(ctx, store.RateLimit{Deployment: deployment, RequestsPerSec: rl.RequestsPerSec,
		Burst: rl.Burst, ConcurrentPerClient: rl.ConcurrentPerClient, MaxClients: rl.MaxClients})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %q", ErrNoDeployment, deployment)
	case err != nil:
		return fmt.Errorf("the rate limit was not saved: %w", err)
	}
	m.mu.Lock()
	m.lim[deployment] = l
	m.mu.Unlock()
	return nil
}

// Delete removes deployment's limit; ErrNotFound when it has none.
func (m *Manager) Delete(ctx context.Context, deployment string) error {
	if err := m.delete(ctx, deployment); err != nil {
		return err
	}
	m.changed(deployment)
	return nil
}

func (m *Manager) delete(ctx context.Context, deployment string) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	err := m.st.DeleteRateLimit(ctx, deployment)
	switch {
	case errors.Is(err, store.ErrNotFound):
		m.forgetLocked(deployment) // (the store is the authority)
		return fmt.Errorf("%w: %q", ErrNotFound, deployment)
	case err != nil:
		return fmt.Errorf("the rate limit was not deleted: %w", err)
	}
	m.forgetLocked(deployment)
	return nil
}

// Forget drops deployment's Limiter from memory, without a store write:
// for a deployment that was deleted, whose stored limit went with it
// (store.DeleteDeployment). The server calls it from the registry's
// Options.Forget, so that a deployment created again under the same id
// starts without a limit, as it would after a restart.
func (m *Manager) Forget(deployment string) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.forgetLocked(deployment)
}

func (m *Manager) forgetLocked(deployment string) {
	m.mu.Lock()
	delete(m.lim, deployment)
	m.mu.Unlock()
}

// Get returns deployment's limit (normalized), if it has one.
func (m *Manager) Get(deployment string) (apitype.RateLimit, bool) {
	if l := m.Limiter(deployment); l != nil {
		return l.Spec(), true
	}
	return apitype.RateLimit{}, false
}

// Limiter returns deployment's Limiter, or nil. Mind that a nil *Limiter
// in an interface is not a nil interface: a hook returning a
// proxy.Limiter must return a literal nil when this does.
func (m *Manager) Limiter(deployment string) *Limiter {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.lim[deployment]
}

func (m *Manager) changed(deployment string) {
	if m.o.Changed != nil {
		m.o.Changed(deployment)
	}
}

// Reload brings the limits held in memory in line with the store, without
// writing it: on a store several hosts share, the limits another host put
// or deleted. A deployment whose stored limit is the one it has keeps its
// Limiter (and its clients' counts); Options.Changed is called for each
// deployment whose limit changed, came or went. It serialises with this
// host's writes.
func (m *Manager) Reload(ctx context.Context) error {
	changed, err := m.reload(ctx)
	for _, id := range changed {
		m.changed(id)
	}
	return err
}

func (m *Manager) reload(ctx context.Context) ([]string, error) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	rows, err := m.st.RateLimits(ctx)
	if err != nil {
		return nil, fmt.Errorf("reload rate limits: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var changed []string
	stored := make(map[string]bool, len(rows))
	for _, r := range rows {
		stored[r.Deployment] = true
		old := m.lim[r.Deployment]
		if old != nil && old.Spec() == fromStore(r) {
			continue
		}
		l, err := NewLimiter(fromStore(r), m.o.Now)
		if err != nil {
			m.o.Log.Error("skipping a stored rate limit that no longer validates", "deployment", r.Deployment, "err", err)
			continue
		}
		if old != nil && old.Spec() == l.Spec() {
			continue
		}
		m.lim[r.Deployment] = l
		changed = append(changed, r.Deployment)
	}
	for id := range m.lim {
		if !stored[id] {
			delete(m.lim, id)
			changed = append(changed, id)
		}
	}
	return changed, nil
}
