// Package etcdfleet makes the berth hosts pointed at one etcd cluster a
// fleet: each host registers itself under a lease it keeps alive (a host
// whose lease lapses is down and disappears from the list), operators
// cordon, drain and uncordon hosts, and Computers hold fleet-wide slots,
// never more than the fleet's limit across every host however many start
// at once.
//
// # Keys
//
// Under Options.Prefix (default /berth/fleet/):
//
//	hosts/<id>          Host (JSON), on the host's lease
//	state/<id>          the host's cordoned or draining state (JSON), on no
//	                    lease: it outlives restarts; absent means active
//	slots/<n>           the Computer id holding slot n (0 ≤ n < limit), on
//	                    the holder's host's lease
//	computers/<id>      which host and slot hold Computer id (JSON), on the
//	                    same lease
//	reports/<id>        the host's gateway report (views.go), on its lease
//	services/<s>/<peer> a member of service s, on its publisher's lease
//	config/control-plane the control-plane configuration, on no lease
//	crl                 the fleet CA's revocation list (DER), on no lease
//	                    (crl.go)
//	units/, assign/,    the units asked for, the host each is assigned to
//	unplaced/,          and why some have none, and the election of the
//	scheduler/          scheduler that writes them: see assign.go
//
// A slot is claimed in one transaction that creates slots/<n> and
// computers/<id> only if neither exists (CreateRevision == 0), so two
// hosts can never take one slot and a Computer never holds two; at most
// limit slot keys can exist at once. Every slot lives on its host's lease:
// a host that dies frees its slots when its lease lapses. A claim runs
// to its answer even when its caller gives up (which then releases it),
// and a sweep frees the slots etcd holds for this host that none of its
// Computers holds (a claim whose answer never came, a failed release). A
// host is fenced when it cannot be sure its lease lives: once the TTL,
// less a margin, has passed since it sent the last renewal etcd
// acknowledged (a partition, or etcd without a quorum), it stops counting
// its Computers' slots and tells its caller to stop them (OnFenced) —
// before etcd can expire the lease and give the slots to another host, so
// a fleet never runs more Computers than its limit. It then registers
// again under a new lease, holding nothing.
//
// Package etcdfleet knows nothing of Computers beyond their ids: the
// Computer manager reserves through an interface it declares.
package etcdfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults.
const (
	DefaultPrefix     = "/berth/fleet/"
	DefaultLeaseTTL   = 5 * time.Second
	DefaultRetryAfter = 5 * time.Second
	// DefaultOpTimeout bounds each call whose context has no deadline.
	DefaultOpTimeout = 10 * time.Second
)

// Errors.
var (
	// ErrNoHost: no host of that id is registered or has a state.
	ErrNoHost = errors.New("etcdfleet: no such host")
	// ErrHostTaken: another live berth is registered with this host id.
	ErrHostTaken = errors.New("etcdfleet: the host id is registered by another berth")
	// ErrCordoned: this host is cordoned or draining and takes no new
	// Computer slots.
	ErrCordoned = errors.New("etcdfleet: this host is cordoned")
	// ErrHeldElsewhere: the Computer holds a slot through another host.
	ErrHeldElsewhere = errors.New("etcdfleet: the Computer holds a fleet slot on another host")
	// ErrNoLimit: Reserve on a member with no slot limit.
	ErrNoLimit = errors.New("etcdfleet: no fleet slot limit is configured")
	// ErrClosed: the member has left the fleet.
	ErrClosed = errors.New("etcdfleet: the member has left the fleet")
)

// Capacity is a host's capacity: the Computer contract's hostCapacitySchema
// (maxActive, reservedHeadroom) plus its CPUs and memory.
type Capacity struct {
	MaxActive        int   `json:"max_active"`
	ReservedHeadroom int   `json:"reserved_headroom"`
	CPUs             int   `json:"cpus"`
	MemoryBytes      int64 `json:"memory_bytes"`
}

// Host is what a berth registers of itself.
type Host struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	// HopAddress is the host's hop listener (host:port; package
	// fleet/hop), where the other hosts send requests for its replicas;
	// empty when it runs none.
	HopAddress string   `json:"hop_address,omitempty"`
	Drivers    []string `json:"drivers"`
	Capacity   Capacity `json:"capacity"`
	// Images are the images the host has locally (placement prefers a
	// host that has a unit's image).
	Images    []string  `json:"images,omitempty"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
}

// State is a host's scheduling state.
type State string

// The states. Cordoned and draining hosts take no new Computer slots nor
// units; a scheduler moves a draining host's units (see scheduler.go).
const (
	Active   State = "active"
	Cordoned State = "cordoned"
	Draining State = "draining"
)

// HostView is a live host as listed: its registration, its state and the
// fleet slots its Computers hold.
type HostView struct {
	Host
	State      State
	StateSince time.Time // zero when active
	Slots      int
}

// Kind is a reservation's outcome (the contract's FleetSlotReservation).
type Kind string

// The kinds.
const (
	Reserved    Kind = "reserved"
	AtCapacity  Kind = "capacity"
	Unavailable Kind = "unavailable"
)

// Reservation is the answer to Reserve: reserved{running},
// capacity{running, limit, retryAfterSeconds} or unavailable{cause}.
type Reservation struct {
	Kind              Kind
	Running           int
	Limit             int
	RetryAfterSeconds int
	Err               error
}

// Options configure a Member.
type Options struct {
	// Prefix is the fleet's key prefix; default DefaultPrefix.
	Prefix string
	// LeaseTTL is the registration lease's time to live; default
	// DefaultLeaseTTL (etcd rounds it to whole seconds, at least one).
	LeaseTTL time.Duration
	// SlotLimit is the fleet-wide number of Computer slots; 0 means no
	// limit (Reserve answers ErrNoLimit). Every host of a fleet should
	// have the same limit: a host with a smaller one admits fewer.
	SlotLimit int
	// RetryAfter is what a capacity answer tells callers to wait; default
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// OpTimeout bounds each call whose context has no deadline; default
	// DefaultOpTimeout.
	OpTimeout time.Duration
	// SweepEvery is how often the member frees the slots etcd holds for
	// this host that none of its Computers holds (a claim whose outcome
	// its caller never learnt, a release that failed); default 30 s.
	SweepEvery time.Duration
	// OnFenced is called, on a goroutine of its own, with the Computers
	// this host held slots for when it can no longer be sure its lease
	// lives: the lease's time to live has passed since the last renewal
	// etcd acknowledged was sent (a partition, or etcd without a quorum),
	// so etcd may have expired it and handed the slots to other hosts
	// (and this host's units to others: it is called with no Computers
	// too). The caller must stop those Computers, and the units it runs;
	// the member no longer counts them, and registers again as soon as
	// etcd answers. Nil: nobody is told.
	OnFenced func(computers []string)
	Log      *slog.Logger
}

// Member is this host in the fleet: its registration, kept alive, and its
// Computers' slots.
type Member struct {
	cli  *clientv3.Client
	o    Options
	stop context.CancelFunc
	done chan struct{}

	mu    sync.Mutex
	host  Host
	lease clientv3.LeaseID
	// validUntil is when lease may have lapsed at the latest: the send
	// time of the last grant or renewal etcd acknowledged, plus the TTL
	// it acknowledged. etcd cannot expire the lease before then.
	validUntil time.Time
	held       map[string]int // Computer id → slot, of this host
	// pending counts the Reserve calls under way, by Computer id: the
	// sweep leaves their keys alone.
	pending map[string]int
	closed  bool
}

type holder struct {
	Host  string `json:"host"`
	Slot  int    `json:"slot"`
	Lease int64  `json:"lease"`
}

type stateRecord struct {
	State State     `json:"state"`
	Since time.Time `json:"since"`
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.SweepEvery <= 0 {
		o.SweepEvery = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

func (m *Member) hostKey(id string) string  { return m.o.Prefix + "hosts/" + id }
func (m *Member) stateKey(id string) string { return m.o.Prefix + "state/" + id }
func (m *Member) compKey(id string) string  { return m.o.Prefix + "computers/" + id }
func (m *Member) slotsPrefix() string       { return m.o.Prefix + "slots/" }
func (m *Member) slotKey(n int) string      { return fmt.Sprintf("%s%06d", m.slotsPrefix(), n) }

// ValidHostID checks a host id: 1–63 letters, digits, '-', '_' or '.'.
func ValidHostID(id string) error {
	if id == "" || len(id) > 63 {
		return fmt.Errorf("etcdfleet: host id %q: want 1 to 63 characters", id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("etcdfleet: host id %q: only letters, digits, '-', '_' and '.'", id)
		}
	}
	return nil
}

// Join registers h under a new lease and keeps the lease alive until
// Leave. A host id registered by a berth that still lives is refused
// (ErrHostTaken) once that registration has had its lease's time to lapse
// (a berth restarted at once finds its own, whose lease has not).
func Join(ctx context.Context, cli *clientv3.Client, h Host, o Options) (*Member, error) {
	o.defaults()
	if err := ValidHostID(h.ID); err != nil {
		return nil, err
	}
	if h.StartedAt.IsZero() {
		h.StartedAt = time.Now()
	}
	m := &Member{cli: cli, o: o, host: h, held: map[string]int{}, pending: map[string]int{}, done: make(chan struct{})}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	lease, valid, err := m.grant(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.register(ctx, lease, &valid); err != nil {
		m.revoke(lease)
		return nil, err
	}
	m.lease, m.validUntil = lease, valid
	rctx, stop := context.WithCancel(context.Background())
	m.stop = stop
	go func() {
		var wg sync.WaitGroup
		wg.Go(func() { m.keepAlive(rctx) })
		wg.Go(func() { m.sweepLoop(rctx) })
		wg.Wait()
		close(m.done)
	}()
	return m, nil
}

func (m *Member) opctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, m.o.OpTimeout)
}

func (m *Member) grant(ctx context.Context) (clientv3.LeaseID, time.Time, error) {
	ttl := int64((m.o.LeaseTTL + time.Second - 1) / time.Second)
	sent := time.Now()
	g, err := m.cli.Grant(ctx, max(ttl, 1))
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("etcdfleet: granting a lease: %w", err)
	}
	return g.ID, sent.Add(time.Duration(g.TTL) * time.Second), nil
}

func (m *Member) revoke(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), m.o.OpTimeout)
	defer cancel()
	if _, err := m.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		m.o.Log.Warn("fleet: revoking the lease", "err", err)
	}
}

// register puts the host key on lease, unless another lease holds it: then
// it waits for that registration to lapse, at most its TTL and a second,
// renewing lease meanwhile and moving *valid (its validUntil) on.
func (m *Member) register(ctx context.Context, lease clientv3.LeaseID, valid *time.Time) error {
	m.mu.Lock()
	h := m.host
	m.mu.Unlock()
	body, err := json.Marshal(h)
	if err != nil {
		return err
	}
	key := m.hostKey(h.ID)
	deadline := time.Now().Add(m.o.LeaseTTL + 2*time.Second)
	for {
		r, err := m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(body), clientv3.WithLease(lease))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return fmt.Errorf("etcdfleet: registering host %s: %w", h.ID, err)
		}
		if r.Succeeded {
			return nil
		}
		kvs := r.Responses[0].GetResponseRange().Kvs
		if len(kvs) > 0 && clientv3.LeaseID(kvs[0].Lease) == lease {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s (wait for it to stop, or give this berth another --host-id)", ErrHostTaken, h.ID)
		}
		// The wait may outlast lease's own TTL (nothing else keeps it
		// alive before Join returns): renew it meanwhile.
		sent := time.Now()
		ka, err := m.cli.KeepAliveOnce(ctx, lease)
		if err != nil {
			return fmt.Errorf("etcdfleet: registering host %s: %w", h.ID, err)
		}
		*valid = sent.Add(time.Duration(ka.TTL) * time.Second)
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdfleet: registering host %s: %w", h.ID, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// keepAlive keeps the lease alive; when it is lost (or may be), it
// fences the host and registers again under a new lease.
func (m *Member) keepAlive(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		m.mu.Lock()
		lease := m.lease
		m.mu.Unlock()
		if lease != 0 {
			err := m.renew(ctx, lease)
			if ctx.Err() != nil {
				return
			}
			m.o.Log.Warn("fleet: lost the host's lease; registering again", "host", m.host.ID, "err", err)
			m.fence(lease)
		}
		if err := m.rejoin(ctx); err != nil {
			m.o.Log.Warn("fleet: registering again", "host", m.host.ID, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff + rand.N(backoff)):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// errFenced ends renew when the lease may have lapsed.
var errFenced = errors.New("etcdfleet: no renewal acknowledged within the lease's time to live")

// renew renews lease every third of its TTL until etcd says it is gone,
// or until it may be (validUntil passes with no acknowledged renewal).
// Each renewal is one KeepAliveOnce, timed from its sending: the lease
// then lives at least TTL past that instant, whatever the answer's delay.
func (m *Member) renew(ctx context.Context, lease clientv3.LeaseID) error {
	every := max(m.o.LeaseTTL/3, 100*time.Millisecond)
	for {
		m.mu.Lock()
		valid := m.validUntil
		m.mu.Unlock()
		// A margin before the lease may lapse: the fence must be up before
		// etcd could hand the slots out, however late this goroutine runs.
		left := time.Until(valid) - min(time.Second, m.o.LeaseTTL/5)
		if left <= 0 {
			return errFenced
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, min(left, every))
		r, err := m.cli.KeepAliveOnce(rctx, lease)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return err
		case err == nil && r.TTL > 0:
			m.mu.Lock()
			if until := sent.Add(time.Duration(r.TTL) * time.Second); m.lease == lease && until.After(m.validUntil) {
				m.validUntil = until
			}
			m.mu.Unlock()
		case err == nil:
			return rpctypes.ErrLeaseNotFound
		}
		wait := every - time.Since(sent)
		if err != nil {
			wait = min(wait, 200*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(max(wait, 10*time.Millisecond)):
		}
	}
}

// fence drops lease and the slots held under it, and tells OnFenced
// which Computers held them. The lease is revoked if etcd still answers,
// so that its slots free at once rather than when it lapses.
func (m *Member) fence(lease clientv3.LeaseID) {
	m.mu.Lock()
	if m.lease != lease {
		m.mu.Unlock()
		return
	}
	m.lease = 0
	ids := make([]string, 0, len(m.held))
	for id := range m.held {
		ids = append(ids, id)
	}
	m.held = map[string]int{}
	m.mu.Unlock()
	slices.Sort(ids)
	if len(ids) > 0 {
		m.o.Log.Warn("fleet: this host may have lost its lease: its Computers' fleet slots are no longer its own", "host", m.host.ID, "computers", strings.Join(ids, ","))
	}
	if m.o.OnFenced != nil {
		// With no Computers too: the units assigned to this host may be
		// another's by now (WatchAssignments, Holds).
		go m.o.OnFenced(ids)
	}
	go m.revoke(lease)
}

func (m *Member) rejoin(ctx context.Context) error {
	octx, cancel := m.opctx(ctx)
	defer cancel()
	lease, valid, err := m.grant(octx)
	if err != nil {
		return err
	}
	if err := m.register(octx, lease, &valid); err != nil {
		m.revoke(lease)
		return err
	}
	m.mu.Lock()
	m.lease, m.validUntil = lease, valid
	m.mu.Unlock()
	m.o.Log.Info("fleet: registered again", "host", m.host.ID)
	return nil
}

// ID is this host's id.
func (m *Member) ID() string { return m.host.ID }

// Limit is the fleet slot limit (0: none).
func (m *Member) Limit() int { return m.o.SlotLimit }

// Update re-registers this host with fn applied to its record (its
// address, once the listeners are bound).
func (m *Member) Update(ctx context.Context, fn func(*Host)) error {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	id := m.host.ID
	fn(&m.host)
	m.host.ID = id
	h, lease := m.host, m.lease
	m.mu.Unlock()
	if lease == 0 {
		return nil // rejoin registers the new record
	}
	body, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if _, err := m.cli.Put(ctx, m.hostKey(id), string(body), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("etcdfleet: updating host %s: %w", id, err)
	}
	return nil
}

// Leave stops keeping the lease alive and revokes it: the host leaves the
// list and its Computers' slots are freed at once. Its state is kept.
func (m *Member) Leave(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.stop()
	<-m.done
	m.mu.Lock()
	lease := m.lease
	m.lease = 0
	m.held = map[string]int{}
	m.mu.Unlock()
	if lease == 0 {
		return nil
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	if _, err := m.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("etcdfleet: revoking the lease: %w", err)
	}
	return nil
}

// Reserve takes a fleet slot for Computer computerID on this host: reserved
// when it gets one (or already holds one: reserving again is free),
// capacity when every slot of the fleet is held, unavailable (with the
// error returned too) when etcd cannot be reached, the Computer holds a
// slot through another host, or this host is cordoned or draining.
func (m *Member) Reserve(ctx context.Context, computerID string) (Reservation, error) {
	fail := func(err error) (Reservation, error) { return Reservation{Kind: Unavailable, Err: err}, err }
	if computerID == "" {
		return fail(errors.New("etcdfleet: a Computer id is required"))
	}
	if m.o.SlotLimit <= 0 {
		return fail(ErrNoLimit)
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	m.mu.Lock()
	m.pending[computerID]++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		if m.pending[computerID]--; m.pending[computerID] <= 0 {
			delete(m.pending, computerID)
		}
		m.mu.Unlock()
	}()
	ck := m.compKey(computerID)
	for attempt := 0; ; attempt++ {
		m.mu.Lock()
		lease, closed, self := m.lease, m.closed, m.host.ID
		m.mu.Unlock()
		if closed {
			return fail(ErrClosed)
		}
		if lease == 0 {
			return fail(errors.New("etcdfleet: this host has lost its lease and is registering again"))
		}
		r, err := m.cli.Txn(ctx).Then(
			clientv3.OpGet(ck),
			clientv3.OpGet(m.slotsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
			clientv3.OpGet(m.stateKey(self)),
		).Commit()
		if err != nil {
			return fail(fmt.Errorf("etcdfleet: reading the slots: %w", err))
		}
		slots := r.Responses[1].GetResponseRange().Kvs
		running := len(slots)
		if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			var h holder
			if err := json.Unmarshal(kvs[0].Value, &h); err != nil {
				return fail(fmt.Errorf("etcdfleet: %s: %w", ck, err))
			}
			if h.Host != self {
				return fail(fmt.Errorf("%w: %s holds it", ErrHeldElsewhere, h.Host))
			}
			if clientv3.LeaseID(kvs[0].Lease) == lease {
				// Held already. Rewritten, so that a sweep that read the key
				// before this call began cannot delete it after (its
				// delete compares the revision it read).
				t, err := m.cli.Txn(ctx).
					If(clientv3.Compare(clientv3.ModRevision(ck), "=", kvs[0].ModRevision)).
					Then(clientv3.OpPut(ck, string(kvs[0].Value), clientv3.WithLease(lease))).Commit()
				if err != nil {
					return fail(fmt.Errorf("etcdfleet: confirming %s's slot: %w", computerID, err))
				}
				if !t.Succeeded || !m.hold(computerID, h.Slot, lease) {
					continue
				}
				return Reservation{Kind: Reserved, Running: running, Limit: m.o.SlotLimit}, nil
			}
			// Ours under a lease on its way out (re-registered meanwhile):
			// wait for it to go, then claim again.
			if err := m.pause(ctx, attempt); err != nil {
				return fail(err)
			}
			continue
		}
		if kvs := r.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
			var s stateRecord
			if json.Unmarshal(kvs[0].Value, &s) == nil && s.State != Active {
				return fail(fmt.Errorf("%w (%s)", ErrCordoned, s.State))
			}
		}
		if running >= m.o.SlotLimit {
			return Reservation{Kind: AtCapacity, Running: running, Limit: m.o.SlotLimit, RetryAfterSeconds: int((m.o.RetryAfter + time.Second - 1) / time.Second)}, nil
		}
		n, ok := pickFree(slots, m.slotsPrefix(), m.o.SlotLimit)
		if !ok {
			// Every slot below our limit is held, some by keys above it (a
			// host with a larger limit).
			return Reservation{Kind: AtCapacity, Running: running, Limit: m.o.SlotLimit, RetryAfterSeconds: int((m.o.RetryAfter + time.Second - 1) / time.Second)}, nil
		}
		sk := m.slotKey(n)
		body, _ := json.Marshal(holder{Host: self, Slot: n, Lease: int64(lease)})
		// The claim runs to its answer even when the caller gives up
		// meanwhile (a canceled request may still commit, after a release
		// would have looked): bounded by OpTimeout, not by ctx.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), m.o.OpTimeout)
		c, err := m.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(sk), "=", 0), clientv3.Compare(clientv3.CreateRevision(ck), "=", 0)).
			Then(
				clientv3.OpPut(sk, computerID, clientv3.WithLease(lease)),
				clientv3.OpPut(ck, string(body), clientv3.WithLease(lease)),
				clientv3.OpGet(m.slotsPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()),
			).Commit()
		ccancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The lease lapsed under us; keepAlive registers again.
			if err := m.pause(ctx, attempt); err != nil {
				return fail(err)
			}
			continue
		}
		if err != nil {
			// etcd did not answer in OpTimeout: the claim may or may not
			// have committed. The Computer held no slot before it, so undo
			// it: a caller told "unavailable" must not hold a slot. What
			// this misses (etcd unreachable, or the claim committing after
			// the release looked) the sweep frees.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.o.OpTimeout)
			if rerr := m.Release(rctx, computerID); rerr != nil {
				m.o.Log.Warn("fleet: undoing a claim of unknown outcome", "computer", computerID, "err", rerr)
			}
			cancel()
			return fail(fmt.Errorf("etcdfleet: claiming slot %d: %w", n, err))
		}
		if !c.Succeeded {
			if attempt > 2 {
				if err := m.pause(ctx, attempt); err != nil {
					return fail(err)
				}
			}
			continue
		}
		if !m.hold(computerID, n, lease) {
			continue // the lease changed meanwhile: claim again under the new one
		}
		if ctx.Err() != nil {
			// The caller gave up: it will not run the Computer.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.o.OpTimeout)
			if rerr := m.Release(rctx, computerID); rerr != nil {
				m.o.Log.Warn("fleet: releasing a slot its caller gave up on", "computer", computerID, "err", rerr)
			}
			cancel()
			return fail(fmt.Errorf("etcdfleet: reserving a slot: %w", ctx.Err()))
		}
		return Reservation{Kind: Reserved, Running: int(c.Responses[2].GetResponseRange().Count), Limit: m.o.SlotLimit}, nil
	}
}

// pickFree picks a random slot below limit that no key of slots holds:
// hosts reserving at once mostly pick different ones, so few claims fail.
// While most slots are free it samples (a few tries), else it lists the
// free ones.
func pickFree(slots []*mvccpb.KeyValue, prefix string, limit int) (int, bool) {
	taken := make(map[int]bool, len(slots))
	for _, kv := range slots {
		if n, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), prefix)); err == nil {
			taken[n] = true
		}
	}
	if 2*len(slots) < limit {
		for range 32 {
			if n := rand.N(limit); !taken[n] {
				return n, true
			}
		}
	}
	var free []int
	for n := range limit {
		if !taken[n] {
			free = append(free, n)
		}
	}
	if len(free) == 0 {
		return 0, false
	}
	return free[rand.N(len(free))], true
}

// hold records a slot of this host's, unless the lease it was claimed
// under is no longer the member's.
func (m *Member) hold(id string, slot int, lease clientv3.LeaseID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease != lease || m.closed {
		return false
	}
	m.held[id] = slot
	return true
}

// pause waits a little before attempt+1, growing with attempts, or fails
// when ctx ends.
func (m *Member) pause(ctx context.Context, attempt int) error {
	d := time.Duration(min(attempt+1, 50)) * time.Millisecond
	select {
	case <-ctx.Done():
		return fmt.Errorf("etcdfleet: reserving a slot: %w", ctx.Err())
	case <-time.After(d/2 + rand.N(d)):
		return nil
	}
}

// Release frees the slot Computer computerID holds through this host; it
// does nothing when it holds none (or holds one through another host).
func (m *Member) Release(ctx context.Context, computerID string) error {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	m.mu.Lock()
	delete(m.held, computerID)
	self, lease := m.host.ID, m.lease
	m.mu.Unlock()
	if lease == 0 {
		// Fenced: every key of this host's is on a lease that is gone or
		// going (and revoked if etcd answers); there is nothing to free.
		return nil
	}
	ck := m.compKey(computerID)
	for {
		g, err := m.cli.Get(ctx, ck)
		if err != nil {
			return fmt.Errorf("etcdfleet: releasing %s: %w", computerID, err)
		}
		if len(g.Kvs) == 0 {
			return nil
		}
		var h holder
		if err := json.Unmarshal(g.Kvs[0].Value, &h); err != nil {
			return fmt.Errorf("etcdfleet: %s: %w", ck, err)
		}
		if h.Host != self {
			return nil
		}
		sk := m.slotKey(h.Slot)
		r, err := m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(ck), "=", g.Kvs[0].ModRevision)).
			Then(clientv3.OpDelete(ck), clientv3.OpDelete(sk)).Commit()
		if err != nil {
			return fmt.Errorf("etcdfleet: releasing %s: %w", computerID, err)
		}
		if r.Succeeded {
			return nil
		}
	}
}

// sweepLoop frees, every SweepEvery, the slots etcd holds for this host
// that none of its Computers holds.
func (m *Member) sweepLoop(ctx context.Context) {
	t := time.NewTicker(m.o.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := m.sweep(ctx); err != nil && ctx.Err() == nil {
				m.o.Log.Warn("fleet: sweeping this host's slots", "err", err)
			} else if n > 0 {
				m.o.Log.Info("fleet: freed slots no Computer of this host holds", "slots", n)
			}
		}
	}
}

// sweep deletes this host's computers/ keys (and their slots) that no
// Reserve under way and no held slot accounts for. Each delete compares
// the revision it read: a Reserve that confirmed or claimed the key since
// wins.
func (m *Member) sweep(ctx context.Context) (int, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	g, err := m.cli.Get(ctx, m.o.Prefix+"computers/", clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	freed := 0
	for _, kv := range g.Kvs {
		var h holder
		if json.Unmarshal(kv.Value, &h) != nil || h.Host != m.host.ID {
			continue
		}
		id := strings.TrimPrefix(string(kv.Key), m.o.Prefix+"computers/")
		m.mu.Lock()
		_, held := m.held[id]
		busy := m.pending[id] > 0
		m.mu.Unlock()
		if held || busy {
			continue
		}
		r, err := m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(string(kv.Key)), clientv3.OpDelete(m.slotKey(h.Slot))).Commit()
		if err != nil {
			return freed, err
		}
		if r.Succeeded {
			freed++
		}
	}
	return freed, nil
}

// Count is the number of fleet slots held, by every host.
func (m *Member) Count(ctx context.Context) (int, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	r, err := m.cli.Get(ctx, m.slotsPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcdfleet: counting the slots: %w", err)
	}
	return int(r.Count), nil
}

// Hosts lists the live hosts by id, read at one revision.
func (m *Member) Hosts(ctx context.Context) ([]HostView, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	hs, _, err := m.hosts(ctx)
	return hs, err
}

// hosts lists the live hosts and says at which revision.
func (m *Member) hosts(ctx context.Context) ([]HostView, int64, error) {
	r, err := m.cli.Txn(ctx).Then(
		clientv3.OpGet(m.o.Prefix+"hosts/", clientv3.WithPrefix()),
		clientv3.OpGet(m.o.Prefix+"state/", clientv3.WithPrefix()),
		clientv3.OpGet(m.o.Prefix+"computers/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("etcdfleet: listing the hosts: %w", err)
	}
	states := map[string]stateRecord{}
	for _, kv := range r.Responses[1].GetResponseRange().Kvs {
		var s stateRecord
		if json.Unmarshal(kv.Value, &s) == nil {
			states[strings.TrimPrefix(string(kv.Key), m.o.Prefix+"state/")] = s
		}
	}
	slots := map[string]int{}
	for _, kv := range r.Responses[2].GetResponseRange().Kvs {
		var h holder
		if json.Unmarshal(kv.Value, &h) == nil {
			slots[h.Host]++
		}
	}
	var out []HostView
	for _, kv := range r.Responses[0].GetResponseRange().Kvs {
		var h Host
		if err := json.Unmarshal(kv.Value, &h); err != nil {
			m.o.Log.Warn("fleet: unreadable host record", "key", string(kv.Key), "err", err)
			continue
		}
		v := HostView{Host: h, State: Active, Slots: slots[h.ID]}
		if s, ok := states[h.ID]; ok && s.State != Active {
			v.State, v.StateSince = s.State, s.Since
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b HostView) int { return strings.Compare(a.ID, b.ID) })
	return out, r.Header.Revision, nil
}

// SetState cordons, drains or (Active) uncordons host id, which must be
// registered now or have a state. The state is kept without a lease, so it
// outlives the host's restarts.
func (m *Member) SetState(ctx context.Context, id string, s State) error {
	switch s {
	case Active, Cordoned, Draining:
	default:
		return fmt.Errorf("etcdfleet: unknown host state %q", s)
	}
	if err := ValidHostID(id); err != nil {
		return fmt.Errorf("%w: %w", ErrNoHost, err)
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	hk, sk := m.hostKey(id), m.stateKey(id)
	known := clientv3.Compare(clientv3.CreateRevision(hk), ">", 0)
	var op clientv3.Op
	if s == Active {
		op = clientv3.OpDelete(sk)
	} else {
		body, _ := json.Marshal(stateRecord{State: s, Since: time.Now().UTC()})
		op = clientv3.OpPut(sk, string(body))
	}
	// Registered now, or known by its state.
	for _, cmp := range []clientv3.Cmp{known, clientv3.Compare(clientv3.CreateRevision(sk), ">", 0)} {
		r, err := m.cli.Txn(ctx).If(cmp).Then(op).Commit()
		if err != nil {
			return fmt.Errorf("etcdfleet: setting host %s %s: %w", id, s, err)
		}
		if r.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("%w: %q", ErrNoHost, id)
}

// Watch sends the host list after every change to the hosts, their
// states or their Computers' slots until ctx ends, the latest only when
// the reader falls behind; the first list is sent at once. The channel is
// closed when ctx ends.
func (m *Member) Watch(ctx context.Context) <-chan []HostView {
	out := make(chan []HostView, 1)
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			if err := m.watchOnce(ctx, out); err != nil && ctx.Err() == nil {
				m.o.Log.Warn("fleet: watching the hosts", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return out
}

// watchOnce lists the hosts, then watches from the revision after the
// list's, listing again after every change, until the watch fails.
func (m *Member) watchOnce(ctx context.Context, out chan []HostView) error {
	list := func() (int64, error) {
		lctx, cancel := m.opctx(ctx)
		defer cancel()
		hs, rev, err := m.hosts(lctx)
		if err != nil {
			return 0, err
		}
		sendLatest(out, hs)
		return rev, nil
	}
	rev, err := list()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for w := range m.cli.Watch(wctx, m.o.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := w.Err(); err != nil {
			return err
		}
		if !m.listed(w.Events) {
			continue // assignments, the scheduler's election: not in the list
		}
		if _, err := list(); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// listed: some of evs change the host list (hosts, states, Computers'
// slots).
func (m *Member) listed(evs []*clientv3.Event) bool {
	for _, ev := range evs {
		k := strings.TrimPrefix(string(ev.Kv.Key), m.o.Prefix)
		if strings.HasPrefix(k, "hosts/") || strings.HasPrefix(k, "state/") || strings.HasPrefix(k, "computers/") {
			return true
		}
	}
	return false
}
