package proxy

import (
	"crypto/tls"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Backend is one place a deployment's traffic can go: a static upstream or,
// later, a VM replica. Its counters are updated on the request path with
// atomics and survive routing-table swaps, because the gateway reuses Backend
// values across snapshots when the deployment's upstreams did not change.
type Backend struct {
	ID     string // what x-vm-id reports: the sandbox id, or the upstream as written
	Addr   string // host:port to dial
	TLS    bool   // speak HTTPS to the backend (SNI = host of Addr)
	Scheme string // "http" or "https"
	// TLSConfig, when set, is this backend's own TLS client
	// configuration, used instead of the gateway's base one (a fleet
	// peer over the hop: its client certificate, CA and server name).
	// Set it with TLS true, before the backend is published; the client
	// still speaks HTTP/1.1 only.
	TLSConfig *tls.Config
	// Timeline is when a replica backend was created, started and became
	// ready; zero for static upstreams. Set before the backend is published.
	Timeline Timeline

	inFlight atomic.Int64
	healthy  atomic.Bool
	draining atomic.Bool
	lastUsed atomic.Int64 // unix nanos of the last acquire or release

	conns connPool // idle connections of the forwarder
	vmID  []string // the X-Vm-Id header value, built once

	mu          sync.Mutex // guards drainReason, drainStart
	drainReason string
	drainStart  time.Time
}

// NewBackend returns a healthy, accepting backend.
func NewBackend(id, addr string, tls bool) *Backend {
	b := &Backend{ID: id, Addr: addr, TLS: tls, Scheme: "http", vmID: []string{id}}
	if tls {
		b.Scheme = "https"
	}
	b.healthy.Store(true)
	return b
}

// InFlight is the number of requests currently using the backend.
func (b *Backend) InFlight() int64 { return b.inFlight.Load() }

// Healthy reports the last probe or passive observation.
func (b *Backend) Healthy() bool { return b.healthy.Load() }

// SetHealthy records a probe result and reports whether it changed.
func (b *Backend) SetHealthy(ok bool) (changed bool) { return b.healthy.Swap(ok) != ok }

// Draining reports whether the backend refuses new requests.
func (b *Backend) Draining() bool { return b.draining.Load() }

// LastUsed is when a request last started or finished on the backend.
func (b *Backend) LastUsed() time.Time {
	n := b.lastUsed.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Drain stops new requests from reaching the backend; in-flight ones finish.
func (b *Backend) Drain(reason string, since time.Time) {
	b.mu.Lock()
	b.drainReason, b.drainStart = reason, since
	b.mu.Unlock()
	b.draining.Store(true)
}

// Undrain lets the backend take new requests again.
func (b *Backend) Undrain() {
	b.draining.Store(false)
	b.mu.Lock()
	b.drainReason, b.drainStart = "", time.Time{}
	b.mu.Unlock()
}

// DrainInfo returns the reason and start of a drain, if draining.
func (b *Backend) DrainInfo() (reason string, since time.Time, draining bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.drainReason, b.drainStart, b.draining.Load()
}

// vmIDHeader is the X-Vm-Id header value for responses from b. The slice is
// shared by all of them; its capacity equals its length, so an append by
// anyone makes a copy rather than writing into it.
func (b *Backend) vmIDHeader() []string {
	if len(b.vmID) == 1 && b.vmID[0] == b.ID {
		return b.vmID[:1:1]
	}
	return []string{b.ID} // a Backend built without NewBackend, or whose ID was changed
}

func (b *Backend) available() bool { return b.healthy.Load() && !b.draining.Load() }

func (b *Backend) release() { b.releaseAt(time.Now()) }

// releaseAt returns a slot at a time the caller read from the clock.
func (b *Backend) releaseAt(now time.Time) {
	b.inFlight.Add(-1)
	b.lastUsed.Store(now.UnixNano())
}

// Pool is the set of backends of one deployment. Membership is copy-on-write:
// readers load the slice without locking.
type Pool struct {
	members atomic.Pointer[[]*Backend]
	mu      sync.Mutex // serialises membership writers
}

// NewPool returns a pool with the given backends.
func NewPool(bs ...*Backend) *Pool {
	p := &Pool{}
	s := append([]*Backend(nil), bs...)
	p.members.Store(&s)
	return p
}

// Backends returns the current members. The slice must not be modified.
func (p *Pool) Backends() []*Backend {
	if s := p.members.Load(); s != nil {
		return *s
	}
	return nil
}

// Find returns the backend with the given ID.
func (p *Pool) Find(id string) *Backend {
	for _, b := range p.Backends() {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// Set replaces the membership.
func (p *Pool) Set(bs []*Backend) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := append([]*Backend(nil), bs...)
	p.members.Store(&s)
}

// Add appends b to the membership.
func (p *Pool) Add(b *Backend) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := append(slices.Clone(p.Backends()), b)
	p.members.Store(&s)
}

// Remove takes the backend with the given ID out of the membership; requests
// already on it finish.
func (p *Pool) Remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := slices.DeleteFunc(slices.Clone(p.Backends()), func(b *Backend) bool { return b.ID == id })
	p.members.Store(&s)
}

// errNoBackend means no backend is healthy and accepting.
var errNoBackend = errors.New("no healthy backend available for deployment")

// acquire picks the least-loaded available backend not in tried (ties go to
// the first in list order) and takes a slot on it. The drain check is repeated
// after the slot is taken so a concurrent Drain never loses a request to a
// backend that has started draining.
func (p *Pool) acquire(tried []*Backend, now time.Time) *Backend {
	for {
		var best *Backend
		var bestN int64
		for _, b := range p.Backends() {
			if !b.available() || contains(tried, b) {
				continue
			}
			if n := b.inFlight.Load(); best == nil || n < bestN {
				best, bestN = b, n
			}
		}
		if best == nil {
			return nil
		}
		best.inFlight.Add(1)
		if !best.draining.Load() {
			best.lastUsed.Store(now.UnixNano())
			return best
		}
		best.inFlight.Add(-1)
	}
}

func contains(s []*Backend, b *Backend) bool {
	for _, x := range s {
		if x == b {
			return true
		}
	}
	return false
}

// Timeline records how a replica came to serve, for the cold-start phases.
type Timeline struct {
	Created time.Time // create requested
	Started time.Time // the driver reported it running
	Ready   time.Time // its health probe passed
	// Pull is how long its image was pulled for before Created (a
	// registry reference this host did not have yet).
	Pull time.Duration
}

// Acquire takes a slot on the least-loaded available backend, or returns nil
// when none is available. The caller must call Release on it when done.
// Exec and shell sessions hold a slot this way for their lifetime, which
// keeps a replica from being scaled away under them.
func (p *Pool) Acquire() *Backend { return p.acquire(nil, time.Now()) }

// AcquireBackend takes a slot on b itself, refusing (false) when it is
// draining or unhealthy.
func (b *Backend) AcquireBackend() bool {
	if !b.available() {
		return false
	}
	b.inFlight.Add(1)
	if b.draining.Load() {
		b.inFlight.Add(-1)
		return false
	}
	b.lastUsed.Store(time.Now().UnixNano())
	return true
}

// Release returns a slot taken by Acquire or AcquireBackend.
func (b *Backend) Release() { b.release() }
