package etcdfleet

// The scheduler: one leader at a time, elected through etcd
// (concurrency.Election on scheduler/, on a session of its own lease),
// places the units asked for (units/) on the live hosts with
// placement.Place and writes assign/ and unplaced/ in transactions that
// compare its election key's creation revision: once it is deposed (its
// session's lease lapsed, another elected) every write it tries fails.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/berth-dev/berth/internal/fleet/placement"
)

// Errors of the scheduler.
var (
	// ErrNotLeader: the term is over (its session lost, or another
	// scheduler elected): the write was refused.
	ErrNotLeader = errors.New("etcdfleet: this scheduler no longer leads")
	// ErrNoLeader: no scheduler is elected.
	ErrNoLeader = errors.New("etcdfleet: no scheduler leads")
)

// maxOpsPerTxn keeps the scheduler's transactions under etcd's default
// --max-txn-ops (128), the leadership comparison included.
const maxOpsPerTxn = 100

// resyncEvery is how often a leader places again without a change seen.
const resyncEvery = 30 * time.Second

// Term is one leadership of the scheduler, won by Campaign.
type Term struct {
	m      *Member
	sess   *concurrency.Session
	el     *concurrency.Election
	cancel context.CancelFunc
	once   sync.Once
}

// Campaign waits until this host leads the scheduler and returns its
// term, on a session of its own lease (Options.LeaseTTL). It fails when
// ctx ends first (its candidacy withdrawn).
func (m *Member) Campaign(ctx context.Context) (*Term, error) {
	ttl := int64((m.o.LeaseTTL + time.Second - 1) / time.Second)
	gctx, gcancel := m.opctx(ctx)
	g, err := m.cli.Grant(gctx, max(ttl, 1))
	gcancel()
	if err != nil {
		return nil, fmt.Errorf("etcdfleet: granting the scheduler's lease: %w", err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	sess, err := concurrency.NewSession(m.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(int(max(ttl, 1))), concurrency.WithContext(sctx))
	if err != nil {
		scancel()
		m.revoke(g.ID)
		return nil, fmt.Errorf("etcdfleet: the scheduler's session: %w", err)
	}
	t := &Term{m: m, sess: sess, el: concurrency.NewElection(sess, m.electionPrefix()), cancel: scancel}
	cctx, ccancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-sess.Done():
			ccancel()
		case <-cctx.Done():
		}
	}()
	err = t.el.Campaign(cctx, m.host.ID)
	ccancel()
	if err == nil {
		select {
		case <-sess.Done():
			err = ErrNotLeader
		default:
		}
	}
	if err != nil {
		t.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("etcdfleet: campaigning for the scheduler: %w", err)
	}
	return t, nil
}

// Epoch is the term's number: its election key's creation revision,
// larger for every later term.
func (t *Term) Epoch() int64 { return t.el.Rev() }

// Done is closed when the term's session ends (its lease lost or
// Close): the leader must stop acting.
func (t *Term) Done() <-chan struct{} { return t.sess.Done() }

// Close ends the term: its session's lease is revoked, and the next
// candidate is elected at once.
func (t *Term) Close() {
	t.once.Do(func() {
		t.sess.Close() // revokes the lease, bounded by its TTL
		t.cancel()
	})
}

// guard holds while this term's election key is the one it created.
func (t *Term) guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(t.el.Key()), "=", t.el.Rev())
}

// commit applies ops in transactions guarded by the term, maxOpsPerTxn
// at a time; ErrNotLeader once the term is over.
func (t *Term) commit(ctx context.Context, ops []clientv3.Op) error {
	for len(ops) > 0 {
		n := min(len(ops), maxOpsPerTxn)
		r, err := t.m.cli.Txn(ctx).If(t.guard()).Then(ops[:n]...).Commit()
		if err != nil {
			return fmt.Errorf("etcdfleet: writing assignments: %w", err)
		}
		if !r.Succeeded {
			return ErrNotLeader
		}
		ops = ops[n:]
	}
	return nil
}

// Assign writes assignments, guarded by the term: ErrNotLeader once it is
// over. The scheduler writes them itself; this is for operators' tools
// (and tests of the fence).
func (t *Term) Assign(ctx context.Context, as ...Assignment) error {
	ctx, cancel := t.m.opctx(ctx)
	defer cancel()
	var ops []clientv3.Op
	for _, a := range as {
		if err := ValidUnitID(a.Unit); err != nil {
			return err
		}
		if err := ValidHostID(a.Host); err != nil {
			return fmt.Errorf("etcdfleet: unit %s: %w", a.Unit, err)
		}
		a.Epoch = t.Epoch()
		if a.Since.IsZero() {
			a.Since = time.Now().UTC()
		}
		body, _ := json.Marshal(a)
		ops = append(ops, clientv3.OpPut(t.m.assignPrefix()+a.Unit, string(body)))
	}
	return t.commit(ctx, ops)
}

// Leader is the host id of the scheduler's leader (ErrNoLeader when none).
func (m *Member) Leader(ctx context.Context) (string, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	g, err := m.cli.Get(ctx, m.electionPrefix()+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("etcdfleet: reading the scheduler's leader: %w", err)
	}
	if len(g.Kvs) == 0 {
		return "", ErrNoLeader
	}
	return string(g.Kvs[0].Value), nil
}

// Scheduler campaigns for the leadership and, while it leads, places the
// units: at once, then after every change of the hosts, their states or
// the units asked for (a host whose lease lapses, drained, a unit
// submitted or withdrawn), and every 30 s. When its term ends it stops
// acting and campaigns again.
type Scheduler struct {
	m    *Member
	stop context.CancelFunc
	done chan struct{}

	mu   sync.Mutex
	term *Term
}

// StartScheduler runs a scheduler candidate for this host until Close.
func (m *Member) StartScheduler() *Scheduler {
	ctx, stop := context.WithCancel(context.Background())
	s := &Scheduler{m: m, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.run(ctx)
	}()
	return s
}

// IsLeader says whether this scheduler leads now, as far as it knows
// (its writes are fenced either way).
func (s *Scheduler) IsLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term == nil {
		return false
	}
	select {
	case <-s.term.Done():
		return false
	default:
		return true
	}
}

// Close stops the scheduler; a term it holds ends, so that another
// candidate leads at once.
func (s *Scheduler) Close() {
	s.stop()
	<-s.done
}

func (s *Scheduler) setTerm(t *Term) {
	s.mu.Lock()
	s.term = t
	s.mu.Unlock()
}

func (s *Scheduler) run(ctx context.Context) {
	log := s.m.o.Log
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		t, err := s.m.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("fleet: campaigning for the scheduler", "host", s.m.host.ID, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		log.Info("fleet: this host leads the scheduler", "host", s.m.host.ID, "epoch", t.Epoch())
		s.setTerm(t)
		err = s.lead(ctx, t)
		s.setTerm(nil)
		t.Close()
		if ctx.Err() == nil {
			log.Warn("fleet: the scheduler's term ended; campaigning again", "host", s.m.host.ID, "err", err)
		}
	}
}

// lead places the units until the term or ctx ends.
func (s *Scheduler) lead(ctx context.Context, t *Term) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-t.Done():
			cancel()
		case <-lctx.Done():
		}
	}()
	for {
		err := s.leadOnce(lctx, t)
		if errors.Is(err, ErrNotLeader) {
			return err
		}
		if lctx.Err() != nil {
			return ErrNotLeader
		}
		s.m.o.Log.Warn("fleet: scheduling", "err", err)
		select {
		case <-lctx.Done():
			return ErrNotLeader
		case <-time.After(time.Second):
		}
	}
}

// leadOnce places the units, then again after every relevant change,
// until an error.
func (s *Scheduler) leadOnce(ctx context.Context, t *Term) error {
	rev, err := s.reconcile(ctx, t)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.m.cli.Watch(wctx, s.m.o.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	tick := time.NewTicker(resyncEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case w, ok := <-wch:
			if !ok {
				return errors.New("etcdfleet: the scheduler's watch ended")
			}
			if err := w.Err(); err != nil {
				return err
			}
			if !s.relevant(w.Events) {
				continue
			}
		}
		if _, err := s.reconcile(ctx, t); err != nil {
			return err
		}
	}
}

// relevant: a change the placement depends on (hosts, states, units).
func (s *Scheduler) relevant(evs []*clientv3.Event) bool {
	p := s.m.o.Prefix
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		if strings.HasPrefix(k, p+"hosts/") || strings.HasPrefix(k, p+"state/") || strings.HasPrefix(k, p+"units/") {
			return true
		}
	}
	return false
}

// reconcile reads the fleet at one revision, places the units and writes
// what changed under the term; it returns the revision read.
func (s *Scheduler) reconcile(ctx context.Context, t *Term) (int64, error) {
	m := s.m
	octx, cancel := m.opctx(ctx)
	defer cancel()
	r, err := m.cli.Txn(octx).Then(
		clientv3.OpGet(m.o.Prefix+"hosts/", clientv3.WithPrefix()),
		clientv3.OpGet(m.o.Prefix+"state/", clientv3.WithPrefix()),
		clientv3.OpGet(m.unitsPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(m.assignPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(m.unplacedPrefix(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcdfleet: reading the fleet to place: %w", err)
	}
	hosts := m.placementHosts(r.Responses[0].GetResponseRange().Kvs, r.Responses[1].GetResponseRange().Kvs)
	now := time.Now().UTC()
	var (
		reqs []placement.Request
		bad  []UnplacedUnit
	)
	wanted := map[string]bool{}
	for _, kv := range r.Responses[2].GetResponseRange().Kvs {
		unit := strings.TrimPrefix(string(kv.Key), m.unitsPrefix())
		wanted[unit] = true
		var q placement.Request
		if err := json.Unmarshal(kv.Value, &q); err != nil {
			bad = append(bad, UnplacedUnit{Unit: unit, Code: placement.Invalid, Reason: fmt.Sprintf("unreadable request: %v", err)})
			continue
		}
		q.Unit = unit
		reqs = append(reqs, q)
	}
	current := map[string]string{}
	assigned := map[string]Assignment{}
	for _, kv := range r.Responses[3].GetResponseRange().Kvs {
		if a, ok := m.decodeAssignment(kv.Key, kv.Value, kv.ModRevision); ok {
			current[a.Unit] = a.Host
			assigned[a.Unit] = a
		} else {
			assigned[strings.TrimPrefix(string(kv.Key), m.assignPrefix())] = Assignment{}
		}
	}
	unplacedNow := map[string]UnplacedUnit{}
	for _, kv := range r.Responses[4].GetResponseRange().Kvs {
		var u UnplacedUnit
		_ = json.Unmarshal(kv.Value, &u)
		unplacedNow[strings.TrimPrefix(string(kv.Key), m.unplacedPrefix())] = u
	}

	as, un := placement.Place(hosts, reqs, current)
	for _, u := range un {
		bad = append(bad, UnplacedUnit{Unit: u.Unit, Code: u.Code, Reason: u.Reason})
	}
	var ops []clientv3.Op
	moved := 0
	for _, a := range as {
		if cur, ok := assigned[a.Unit]; !ok || cur.Host != a.Host {
			body, _ := json.Marshal(Assignment{Unit: a.Unit, Group: a.Group, Host: a.Host, Epoch: t.Epoch(), Since: now})
			ops = append(ops, clientv3.OpPut(m.assignPrefix()+a.Unit, string(body)))
			moved++
		}
		if _, ok := unplacedNow[a.Unit]; ok {
			ops = append(ops, clientv3.OpDelete(m.unplacedPrefix()+a.Unit))
		}
	}
	for _, u := range bad {
		if _, ok := assigned[u.Unit]; ok {
			ops = append(ops, clientv3.OpDelete(m.assignPrefix()+u.Unit))
		}
		if cur, ok := unplacedNow[u.Unit]; !ok || cur.Code != u.Code || cur.Reason != u.Reason {
			u.Epoch, u.Since = t.Epoch(), now
			body, _ := json.Marshal(u)
			ops = append(ops, clientv3.OpPut(m.unplacedPrefix()+u.Unit, string(body)))
		}
	}
	for unit := range assigned {
		if !wanted[unit] {
			ops = append(ops, clientv3.OpDelete(m.assignPrefix()+unit))
		}
	}
	for unit := range unplacedNow {
		if !wanted[unit] {
			ops = append(ops, clientv3.OpDelete(m.unplacedPrefix()+unit))
		}
	}
	if len(ops) == 0 {
		return r.Header.Revision, nil
	}
	if err := t.commit(octx, ops); err != nil {
		return 0, err
	}
	m.o.Log.Info("fleet: placed the units", "epoch", t.Epoch(), "assigned", moved, "unplaced", len(bad), "units", len(wanted))
	return r.Header.Revision, nil
}

// placementHosts makes the live hosts and their states placement's hosts.
func (m *Member) placementHosts(hostKVs, stateKVs []*mvccpb.KeyValue) []placement.Host {
	states := map[string]State{}
	for _, kv := range stateKVs {
		var s stateRecord
		if json.Unmarshal(kv.Value, &s) == nil {
			states[strings.TrimPrefix(string(kv.Key), m.o.Prefix+"state/")] = s.State
		}
	}
	var out []placement.Host
	for _, kv := range hostKVs {
		var h Host
		if err := json.Unmarshal(kv.Value, &h); err != nil {
			continue
		}
		st := placement.Active
		switch states[h.ID] {
		case Cordoned:
			st = placement.Cordoned
		case Draining:
			st = placement.Draining
		}
		out = append(out, placement.Host{
			ID: h.ID, Drivers: h.Drivers, State: st,
			CPUMillis: int64(h.Capacity.CPUs) * 1000, MemoryBytes: h.Capacity.MemoryBytes,
			MaxActive: h.Capacity.MaxActive, ReservedHeadroom: h.Capacity.ReservedHeadroom,
			Images: h.Images,
		})
	}
	return out
}

func sortAssignments(as []Assignment) {
	slices.SortFunc(as, func(a, b Assignment) int { return strings.Compare(a.Unit, b.Unit) })
}
