// Package ratelimit is berth's own per-deployment, per-client limiting
// (apitype.RateLimit; app-lb's contract has no such thing): a token bucket
// of requests per second with a burst, and a bound on the requests a client
// has in flight at once, enforced by the data plane before a deployment's
// gate sees a request (proxy.Deployment.Limit). A refused request is
// answered 429 with Retry-After.
//
// A [Limiter] is one deployment's limit. A client is a key made from its
// address: an IPv4 address (/32), or the /64 of an IPv6 address (a v4-mapped
// IPv6 address is its IPv4 address). Each key has a golang.org/x/time/rate
// bucket and an in-flight count, kept in an LRU bounded by max_clients, so
// the memory a deployment's limit takes is bounded however many addresses
// call on it.
//
// A [Manager] keeps the limiters by deployment, loaded from and written
// durably to the store (internal/store's rate_limits table).
//
// It imports none of the proxy, the registry, the admin API or the server
// (internal/archtest): the proxy declares the Limiter it calls, the registry
// asks for a deployment's through a hook, and the server connects them.
package ratelimit

import (
	"fmt"
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/web"
)

// Bounds of an apitype.RateLimit, and its defaults.
const (
	MaxRequestsPerSec      = 1e6
	MaxBurst               = 1_000_000
	MaxConcurrentPerClient = 100_000
	MaxMaxClients          = 1_000_000
	DefaultMaxClients      = 65536
)

// Normalize validates rl and returns it with its defaults filled in: burst
// ceil(requests_per_sec) when the rate is set and burst is not, max_clients
// DefaultMaxClients when unset. An invalid rl is a *web.FieldError.
func Normalize(rl apitype.RateLimit) (apitype.RateLimit, error) {
	bad := func(field, format string, args ...any) (apitype.RateLimit, error) {
		return apitype.RateLimit{}, &web.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch r := rl.RequestsPerSec; {
	case math.IsNaN(r) || math.IsInf(r, 0) || r < 0:
		return bad("requests_per_sec", "must be a positive number of requests per second (0 or absent: no rate limit)")
	case r > MaxRequestsPerSec:
		return bad("requests_per_sec", "must be at most %g", float64(MaxRequestsPerSec))
	}
	switch b := rl.Burst; {
	case b < 0:
		return bad("burst", "must be at least 1 (0 or absent: ceil(requests_per_sec))")
	case b > MaxBurst:
		return bad("burst", "must be at most %d", MaxBurst)
	case b > 0 && rl.RequestsPerSec == 0:
		return bad("burst", "needs requests_per_sec: a burst is the size of the rate's bucket")
	case b == 0 && rl.RequestsPerSec > 0:
		rl.Burst = int(math.Ceil(rl.RequestsPerSec))
	}
	switch c := rl.ConcurrentPerClient; {
	case c < 0:
		return bad("concurrent_per_client", "must not be negative (0 or absent: unlimited)")
	case c > MaxConcurrentPerClient:
		return bad("concurrent_per_client", "must be at most %d", MaxConcurrentPerClient)
	}
	switch m := rl.MaxClients; {
	case m < 0:
		return bad("max_clients", "must be at least 1 (0 or absent: %d)", DefaultMaxClients)
	case m > MaxMaxClients:
		return bad("max_clients", "must be at most %d", MaxMaxClients)
	case m == 0:
		rl.MaxClients = DefaultMaxClients
	}
	if rl.RequestsPerSec == 0 && rl.ConcurrentPerClient == 0 {
		return bad("requests_per_sec", "set requests_per_sec or concurrent_per_client (or both); to lift a deployment's limit, delete it")
	}
	return rl, nil
}

// ConcurrencyRetryAfter is the Retry-After of a request refused for the
// client's requests in flight: nothing says when one will end, so the
// shortest the header can say.
const ConcurrencyRetryAfter = time.Second

// Limiter is one deployment's per-client limit. Safe for concurrent use.
//
// Enter admits a request or refuses it; every Enter that admitted must be
// followed by exactly one Leave for the same address when the request ends.
// A known client costs no allocation on either (TestEnterAllocs).
//
// Memory is bounded by max_clients clients in an LRU, plus the clients
// with requests in flight. A client evicted from the LRU (the least
// recently seen, when a new one arrives at a full LRU) starts afresh, with a
// full bucket, when it comes back — unless it still has requests in
// flight: such a client is not forgotten but set aside (busy) with its
// bucket and count, and taken back into the LRU when it returns, so no
// eviction lets a client exceed concurrent_per_client. It is forgotten when
// its last request leaves. The busy set holds at most one client per
// request in flight, which the server bounds already.
type Limiter struct {
	spec  apitype.RateLimit // normalized
	limit rate.Limit        // 0: no rate limit
	burst int
	conc  int // 0: unlimited (nothing counted, Leave does nothing)
	now   func() time.Time

	mu      sync.Mutex
	clients *simplelru.LRU[netip.Addr, *client]
	busy    map[netip.Addr]*client // evicted with requests in flight
}

// client is one key's state; fields other than bucket are guarded by
// Limiter.mu.
type client struct {
	bucket   *rate.Limiter // nil without a rate limit
	inflight int
	busy     bool // in Limiter.busy, not in the LRU
}

// NewLimiter returns a Limiter enforcing rl (normalized and validated: an invalid
// rl is a *web.FieldError). now is its clock; nil is time.Now.
func NewLimiter(rl apitype.RateLimit, now func() time.Time) (*Limiter, error) {
	rl, err := Normalize(rl)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	l := &Limiter{spec: rl, limit: rate.Limit(rl.RequestsPerSec), burst: rl.Burst, conc: rl.ConcurrentPerClient, now: now,
		busy: map[netip.Addr]*client{}}
	l.clients, err = simplelru.NewLRU(rl.MaxClients, l.evicted)
	if err != nil {
		return nil, err // max_clients ≥ 1: not reached
	}
	return l, nil
}

// Spec is the (normalized) limit l enforces.
func (l *Limiter) Spec() apitype.RateLimit { return l.spec }

// Key is the client a request from a counts as: a's IPv4 address (a
// v4-mapped IPv6 address unmapped), or the /64 of its IPv6 address, without
// a zone. The invalid address (a peer that is not IP, such as a unix
// socket) is one client.
func Key(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is4() || !a.IsValid() {
		return a
	}
	p, _ := a.WithZone("").Prefix(64)
	return p.Addr()
}

// Enter admits a request from client, or refuses it with how long to wait
// before trying again: for the rate, the delay of a reservation of the
// client's bucket; for concurrency, ConcurrencyRetryAfter; either rounded up
// to whole seconds, at least one. Concurrency is checked first, so a request
// refused for it takes no token.
func (l *Limiter) Enter(client netip.Addr) (ok bool, retryAfter time.Duration) {
	k := Key(client)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.lookup(k)
	if l.conc > 0 && c.inflight >= l.conc {
		return false, ConcurrencyRetryAfter
	}
	if c.bucket != nil && !c.bucket.AllowN(now, 1) {
		// Refused: the time a reservation would have to wait, and the
		// reservation given back (the bucket is used only under l.mu,
		// so it is given back whole).
		r := c.bucket.ReserveN(now, 1)
		d := r.DelayFrom(now)
		r.CancelAt(now)
		return false, wholeSeconds(d)
	}
	if l.conc > 0 {
		c.inflight++
	}
	return true, 0
}

// Leave ends a request Enter admitted.
func (l *Limiter) Leave(client netip.Addr) {
	if l.conc == 0 {
		return // nothing is counted
	}
	k := Key(client)
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.clients.Peek(k)
	if !ok {
		if c, ok = l.busy[k]; !ok {
			return // a Leave with no Enter: nothing to undo
		}
	}
	if c.inflight > 0 {
		c.inflight--
	}
	if c.busy && c.inflight == 0 {
		delete(l.busy, k) // evicted before, and now idle: forgotten
	}
}

// lookup returns k's client, marking it the most recently seen: from the
// LRU, taken back from the busy set, or new. l.mu is held.
func (l *Limiter) lookup(k netip.Addr) *client {
	if c, ok := l.clients.Get(k); ok {
		return c
	}
	c := l.busy[k]
	if c != nil {
		delete(l.busy, k)
		c.busy = false
	} else {
		c = &client{}
		if l.limit > 0 {
			c.bucket = rate.NewLimiter(l.limit, l.burst)
		}
	}
	l.clients.Add(k, c) // may evict another (l.evicted)
	return c
}

// evicted is the LRU's eviction callback (under l.mu): a client with
// requests in flight is set aside, not forgotten.
func (l *Limiter) evicted(k netip.Addr, c *client) {
	if c.inflight > 0 {
		c.busy = true
		l.busy[k] = c
	}
}

// clientCount is how many clients l remembers: in the LRU, and busy.
func (l *Limiter) clientCount() (lru, busy int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clients.Len(), len(l.busy)
}

// wholeSeconds rounds d up to whole seconds, at least one.
func wholeSeconds(d time.Duration) time.Duration {
	s := (d + time.Second - 1) / time.Second
	return max(s, 1) * time.Second
}
