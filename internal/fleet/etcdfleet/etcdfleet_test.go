package etcdfleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
)

// join registers host id on its own client of c.
func join(t *testing.T, c *etcdtest.Cluster, id string, o etcdfleet.Options) *etcdfleet.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := etcdfleet.Join(ctx, c.Client(t), etcdfleet.Host{ID: id, Address: id + ":9090", Drivers: []string{"process"}, Version: "test"}, o)
	if err != nil {
		t.Fatalf("join %s: %v", id, err)
	}
	t.Cleanup(func() { m.Leave(context.Background()) })
	return m
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing after a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hostIDs(t *testing.T, m *etcdfleet.Member) []string {
	t.Helper()
	hs, err := m.Hosts(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range hs {
		ids = append(ids, h.ID)
	}
	return ids
}

// TestConcurrentReserve: 100 Computers reserve at once through three hosts
// against a fleet limit of 10: exactly 10 get a slot, the other 90 a
// capacity answer, and etcd holds 10 distinct slots.
func TestConcurrentReserve(t *testing.T) {
	c := etcdtest.Start(t, 1)
	o := etcdfleet.Options{SlotLimit: 10, RetryAfter: 3 * time.Second}
	hosts := []*etcdfleet.Member{join(t, c, "a", o), join(t, c, "b", o), join(t, c, "c", o)}
	var (
		mu       sync.Mutex
		kinds    = map[etcdfleet.Kind]int{}
		reserved = map[string]*etcdfleet.Member{}
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range 100 {
		m := hosts[i%3]
		id := fmt.Sprintf("cmp-%03d", i)
		wg.Go(func() {
			<-start
			r, err := m.Reserve(ctxT(t), id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("reserve %s: %v", id, err)
				return
			}
			kinds[r.Kind]++
			switch r.Kind {
			case etcdfleet.Reserved:
				reserved[id] = m
				if r.Running < 1 || r.Running > 10 {
					t.Errorf("reserved %s with running %d", id, r.Running)
				}
			case etcdfleet.AtCapacity:
				if r.Limit != 10 || r.RetryAfterSeconds != 3 || r.Running != 10 {
					t.Errorf("capacity answer %+v", r)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if kinds[etcdfleet.Reserved] != 10 || kinds[etcdfleet.AtCapacity] != 90 {
		t.Fatalf("kinds %v, want 10 reserved and 90 capacity", kinds)
	}
	if n, err := hosts[0].Count(ctxT(t)); err != nil || n != 10 {
		t.Fatalf("count %d %v, want 10", n, err)
	}
	// The slots are distinct keys, each naming a Computer that was told
	// it reserved.
	g, err := c.Client(t).Get(ctxT(t), etcdfleet.DefaultPrefix+"slots/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, kv := range g.Kvs {
		id := string(kv.Value)
		if reserved[id] == nil || seen[id] {
			t.Errorf("slot %s holds %q: not a reserved Computer, or twice", kv.Key, id)
		}
		seen[id] = true
	}
	if len(seen) != 10 {
		t.Fatalf("%d slot keys", len(seen))
	}
	// The host list counts each host's slots.
	hs, err := hosts[1].Hosts(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, h := range hs {
		total += h.Slots
	}
	if len(hs) != 3 || total != 10 {
		t.Fatalf("hosts %+v: want 3 holding 10 slots", hs)
	}

	// Reserving again is free, on the host that holds the slot.
	var id string
	var owner *etcdfleet.Member
	for k, v := range reserved {
		id, owner = k, v
		break
	}
	r, err := owner.Reserve(ctxT(t), id)
	if err != nil || r.Kind != etcdfleet.Reserved || r.Running != 10 {
		t.Fatalf("re-reserve: %+v %v", r, err)
	}
	// Through another host it is refused, not booked twice.
	other := hosts[0]
	if other == owner {
		other = hosts[1]
	}
	if r, err := other.Reserve(ctxT(t), id); !errors.Is(err, etcdfleet.ErrHeldElsewhere) || r.Kind != etcdfleet.Unavailable {
		t.Fatalf("reserve through another host: %+v %v", r, err)
	}
	if n, _ := owner.Count(ctxT(t)); n != 10 {
		t.Fatalf("count %d after re-reserving", n)
	}
	// A new Computer finds the fleet full; a release makes room for it.
	if r, _ := owner.Reserve(ctxT(t), "late"); r.Kind != etcdfleet.AtCapacity {
		t.Fatalf("late reserve: %+v", r)
	}
	if err := owner.Release(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if err := owner.Release(ctxT(t), id); err != nil { // idempotent
		t.Fatal(err)
	}
	if n, _ := owner.Count(ctxT(t)); n != 9 {
		t.Fatalf("count %d after a release, want 9", n)
	}
	if r, err := other.Reserve(ctxT(t), "late"); err != nil || r.Kind != etcdfleet.Reserved || r.Running != 10 {
		t.Fatalf("late reserve after a release: %+v %v", r, err)
	}
}

// TestLeaseLossFreesSlots: a host that leaves (its lease revoked) and a host
// whose lease expires (a short TTL, its berth gone without a word) drop out
// of the host list, and their Computers' slots are freed.
func TestLeaseLossFreesSlots(t *testing.T) {
	c := etcdtest.Start(t, 1)
	o := etcdfleet.Options{SlotLimit: 6, LeaseTTL: time.Second}
	a, b := join(t, c, "a", o), join(t, c, "b", o)
	for i := range 3 {
		for _, m := range []*etcdfleet.Member{a, b} {
			if r, err := m.Reserve(ctxT(t), fmt.Sprintf("%s-%d", m.ID(), i)); err != nil || r.Kind != etcdfleet.Reserved {
				t.Fatalf("reserve: %+v %v", r, err)
			}
		}
	}
	if ids := hostIDs(t, a); fmt.Sprint(ids) != "[a b]" {
		t.Fatalf("hosts %v", ids)
	}
	if r, _ := a.Reserve(ctxT(t), "more"); r.Kind != etcdfleet.AtCapacity {
		t.Fatalf("full fleet answered %+v", r)
	}
	watch := a.Watch(ctxT(t))

	// b leaves cleanly: its lease is revoked, at once.
	if err := b.Leave(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.Count(ctxT(t)); n != 3 {
		t.Fatalf("count %d after b left, want 3", n)
	}
	if ids := hostIDs(t, a); fmt.Sprint(ids) != "[a]" {
		t.Fatalf("hosts %v after b left", ids)
	}
	// The watch sees the change too.
	waitFor(t, "the watch to list a alone", func() bool {
		select {
		case hs := <-watch:
			return len(hs) == 1 && hs[0].ID == "a" && hs[0].Slots == 3
		default:
			return false
		}
	})

	// c's berth dies: its client goes away without revoking, and its lease
	// expires after its TTL.
	cc := c.Client(t)
	dead, err := etcdfleet.Join(ctxT(t), cc, etcdfleet.Host{ID: "c"}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // its keep-alive loop, retrying on a closed client
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		dead.Leave(ctx)
	})
	if r, err := dead.Reserve(ctxT(t), "c-0"); err != nil || r.Kind != etcdfleet.Reserved {
		t.Fatalf("reserve on c: %+v %v", r, err)
	}
	if ids := hostIDs(t, a); fmt.Sprint(ids) != "[a c]" {
		t.Fatalf("hosts %v", ids)
	}
	cc.Close() // no more keep-alives
	waitFor(t, "c's lease to lapse", func() bool {
		n, err := a.Count(ctxT(t))
		return err == nil && n == 3 && fmt.Sprint(hostIDs(t, a)) == "[a]"
	})
	// The freed slots are there to take.
	for i := range 3 {
		if r, err := a.Reserve(ctxT(t), fmt.Sprintf("new-%d", i)); err != nil || r.Kind != etcdfleet.Reserved {
			t.Fatalf("reserve after the lapse: %+v %v", r, err)
		}
	}
}

// TestCordon: a cordoned or draining host takes no new slots (the
// Computers holding one keep it), the state is listed and outlives the
// host's restart, and uncordon lets it take slots again.
func TestCordon(t *testing.T) {
	c := etcdtest.Start(t, 1)
	o := etcdfleet.Options{SlotLimit: 4}
	a, b := join(t, c, "a", o), join(t, c, "b", o)
	if r, err := b.Reserve(ctxT(t), "x"); err != nil || r.Kind != etcdfleet.Reserved {
		t.Fatal(r, err)
	}
	if err := a.SetState(ctxT(t), "b", etcdfleet.Cordoned); err != nil {
		t.Fatal(err)
	}
	if err := a.SetState(ctxT(t), "nope", etcdfleet.Cordoned); !errors.Is(err, etcdfleet.ErrNoHost) {
		t.Fatalf("cordon of an unknown host: %v", err)
	}
	if r, err := b.Reserve(ctxT(t), "y"); !errors.Is(err, etcdfleet.ErrCordoned) || r.Kind != etcdfleet.Unavailable {
		t.Fatalf("reserve on a cordoned host: %+v %v", r, err)
	}
	if r, err := b.Reserve(ctxT(t), "x"); err != nil || r.Kind != etcdfleet.Reserved {
		t.Fatalf("re-reserve of a held slot on a cordoned host: %+v %v", r, err)
	}
	hs, _ := a.Hosts(ctxT(t))
	if len(hs) != 2 || hs[0].State != etcdfleet.Active || hs[1].State != etcdfleet.Cordoned || hs[1].StateSince.IsZero() {
		t.Fatalf("hosts %+v", hs)
	}
	// b restarts: the state is still there.
	if err := b.Leave(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := a.SetState(ctxT(t), "b", etcdfleet.Draining); err != nil {
		t.Fatalf("drain of a host that is down but known: %v", err)
	}
	b = join(t, c, "b", o)
	if hs, _ := a.Hosts(ctxT(t)); len(hs) != 2 || hs[1].State != etcdfleet.Draining {
		t.Fatalf("hosts after b's restart %+v", hs)
	}
	if _, err := b.Reserve(ctxT(t), "y"); !errors.Is(err, etcdfleet.ErrCordoned) {
		t.Fatalf("reserve on a draining host: %v", err)
	}
	if err := a.SetState(ctxT(t), "b", etcdfleet.Active); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Reserve(ctxT(t), "y"); err != nil || r.Kind != etcdfleet.Reserved {
		t.Fatalf("reserve after uncordon: %+v %v", r, err)
	}
}

// TestHostIDTaken: a second live berth with the same host id is refused.
func TestHostIDTaken(t *testing.T) {
	c := etcdtest.Start(t, 1)
	join(t, c, "a", etcdfleet.Options{LeaseTTL: time.Second})
	_, err := etcdfleet.Join(ctxT(t), c.Client(t), etcdfleet.Host{ID: "a"}, etcdfleet.Options{LeaseTTL: time.Second})
	if !errors.Is(err, etcdfleet.ErrHostTaken) {
		t.Fatalf("second join: %v", err)
	}
	if _, err := etcdfleet.Join(ctxT(t), c.Client(t), etcdfleet.Host{ID: "a/b"}, etcdfleet.Options{}); err == nil {
		t.Fatal("a host id with a slash was accepted")
	}
}

// TestLeaderLoss: in a 3-member cluster, the leader stops while hosts
// reserve and release. Each Reserve either succeeds or fails; none that
// succeeded is lost once a new leader is elected, and etcd's slots are
// exactly the reservations acknowledged and not released.
func TestLeaderLoss(t *testing.T) {
	c := etcdtest.Start(t, 3)
	// A limit no run reaches (6 workers × 2000 attempts, a third kept):
	// every answer is reserved or an error.
	o := etcdfleet.Options{SlotLimit: 5000, OpTimeout: 15 * time.Second}
	hosts := []*etcdfleet.Member{join(t, c, "a", o), join(t, c, "b", o), join(t, c, "c", o)}
	var (
		mu      sync.Mutex
		held    = map[string]*etcdfleet.Member{} // acknowledged
		unknown = map[string]*etcdfleet.Member{} // failed: may or may not have committed
		failed  int
		wg      sync.WaitGroup
	)
	stopped := make(chan struct{})
	for w := range 6 {
		m := hosts[w%3]
		wg.Go(func() {
			after := 0 // attempts since the leader stopped
			for i := 0; i < 2000 && after < 20; i++ {
				select {
				case <-stopped:
					after++
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := m.Reserve(ctx, id)
				cancel()
				mu.Lock()
				switch {
				case err != nil:
					failed++
					unknown[id] = m
				case r.Kind == etcdfleet.Reserved:
					held[id] = m
				default:
					t.Errorf("reserve %s: %+v", id, r)
				}
				mu.Unlock()
				if i%3 != 0 && err == nil {
					// Release two in three; only an acknowledged release counts.
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					if err := m.Release(ctx, id); err == nil {
						mu.Lock()
						delete(held, id)
						mu.Unlock()
					} else {
						mu.Lock()
						delete(held, id)
						unknown[id] = m
						mu.Unlock()
					}
					cancel()
				}
			}
		})
	}
	// Let some work through, then stop the leader.
	waitFor(t, "some reservations", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(held) > 20
	})
	leader := c.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	c.Members[leader].Close()
	close(stopped)
	wg.Wait()
	// A new leader: the remaining two members agree.
	waitFor(t, "a new leader", func() bool {
		for i, m := range c.Members {
			if i != leader && m.IsLeader() {
				return true
			}
		}
		return false
	})
	// Settle the ones whose outcome is unknown: release them (through
	// the host that tried), which is idempotent.
	for id, m := range unknown {
		if err := m.Release(ctxT(t), id); err != nil {
			t.Fatalf("release %s after the election: %v", id, err)
		}
	}
	n, err := hosts[0].Count(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(held) {
		t.Fatalf("etcd holds %d slots, %d reservations were acknowledged and kept", n, len(held))
	}
	for id, m := range held {
		r, err := m.Reserve(ctxT(t), id)
		if err != nil || r.Kind != etcdfleet.Reserved || r.Running != n {
			t.Fatalf("acknowledged reservation %s: %+v %v", id, r, err)
		}
	}
	if after := len(held) + len(unknown); after == 0 {
		t.Fatal("no reservation was made")
	}
	t.Logf("%d kept, %d failed during the election", len(held), failed)
}

// TestRejoinAfterLeaseLoss: a live host whose lease is revoked under it
// (as when etcd expired it) registers again under a new lease, and holds
// no slot: its Computers' slots may be another host's by then, so it tells
// its caller to stop them (OnFenced) instead of claiming them again.
func TestRejoinAfterLeaseLoss(t *testing.T) {
	c := etcdtest.Start(t, 1)
	fenced := make(chan []string, 1)
	o := etcdfleet.Options{SlotLimit: 3, OnFenced: func(ids []string) { fenced <- ids }}
	a := join(t, c, "a", o)
	for _, id := range []string{"x", "y"} {
		if r, err := a.Reserve(ctxT(t), id); err != nil || r.Kind != etcdfleet.Reserved {
			t.Fatal(r, err)
		}
	}
	raw := c.Client(t)
	g, err := raw.Get(ctxT(t), etcdfleet.DefaultPrefix+"hosts/a")
	if err != nil || len(g.Kvs) != 1 {
		t.Fatal(g, err)
	}
	old := clientv3.LeaseID(g.Kvs[0].Lease)
	if _, err := raw.Revoke(ctxT(t), old); err != nil {
		t.Fatal(err)
	}
	select {
	case ids := <-fenced:
		if strings.Join(ids, ",") != "x,y" {
			t.Fatalf("fenced %v, want [x y]", ids)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the host was never fenced")
	}
	waitFor(t, "a to register again, holding nothing", func() bool {
		g, err := raw.Get(ctxT(t), etcdfleet.DefaultPrefix+"hosts/a")
		if err != nil || len(g.Kvs) != 1 || clientv3.LeaseID(g.Kvs[0].Lease) == old {
			return false
		}
		hs, err := a.Hosts(ctxT(t))
		return err == nil && len(hs) == 1 && hs[0].Slots == 0
	})
	// Reserving again takes a new slot, on the new lease.
	if r, err := a.Reserve(ctxT(t), "x"); err != nil || r.Kind != etcdfleet.Reserved || r.Running != 1 {
		t.Fatalf("reserve after the rejoin: %+v %v", r, err)
	}
	s, err := raw.Get(ctxT(t), etcdfleet.DefaultPrefix+"slots/", clientv3.WithPrefix())
	if err != nil || len(s.Kvs) != 1 {
		t.Fatal(s, err)
	}
	for _, kv := range s.Kvs {
		if clientv3.LeaseID(kv.Lease) == old || kv.Lease == 0 {
			t.Fatalf("slot %s on lease %x", kv.Key, kv.Lease)
		}
	}
}

// TestGivenUpReserveHoldsNothing: a Reserve whose caller gives up (a
// deadline that ends mid-call, at any step) answers an error and leaves
// no slot behind once the sweep has run; only the reservations answered
// reserved hold one, and none of them is swept.
func TestGivenUpReserveHoldsNothing(t *testing.T) {
	c := etcdtest.Start(t, 1)
	m := join(t, c, "a", etcdfleet.Options{SlotLimit: 1000, SweepEvery: 100 * time.Millisecond})
	reserved, failed := 0, 0
	var ids []string
	for i := range 300 {
		d := time.Duration(200+i*13) * time.Microsecond // 0.2 ms to 4 ms
		ctx, cancel := context.WithTimeout(context.Background(), d)
		r, err := m.Reserve(ctx, fmt.Sprintf("c%d", i))
		cancel()
		switch {
		case err != nil:
			failed++
		case r.Kind == etcdfleet.Reserved:
			reserved++
			ids = append(ids, fmt.Sprintf("c%d", i))
		default:
			t.Fatalf("reserve: %+v", r)
		}
	}
	if n, err := m.Count(ctxT(t)); err != nil || n < reserved {
		t.Fatalf("%d slots held, %d reservations answered reserved: %v", n, reserved, err)
	}
	waitFor(t, "the given-up claims to be swept", func() bool {
		n, err := m.Count(ctxT(t))
		if err == nil && n < reserved {
			t.Fatalf("the sweep freed an acknowledged slot: %d held, %d reserved", n, reserved)
		}
		return err == nil && n == reserved
	})
	// Every acknowledged one is still there, and reserving it again is
	// free.
	for _, id := range ids {
		if r, err := m.Reserve(ctxT(t), id); err != nil || r.Kind != etcdfleet.Reserved || r.Running != reserved {
			t.Fatalf("re-reserve of %s: %+v %v, want reserved with %d running", id, r, err, reserved)
		}
	}
	t.Logf("%d reserved, %d given up", reserved, failed)
}
