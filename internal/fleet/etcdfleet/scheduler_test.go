package etcdfleet_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/fleet/placement"
)

// leaderLease is the lease of the scheduler's elected leader's key.
func leaderLease(t *testing.T, cli *clientv3.Client) clientv3.LeaseID {
	t.Helper()
	g, err := cli.Get(ctxT(t), etcdfleet.DefaultPrefix+"scheduler/", clientv3.WithFirstCreate()...)
	if err != nil || len(g.Kvs) != 1 {
		t.Fatalf("the leader's key: %v %v", g, err)
	}
	return clientv3.LeaseID(g.Kvs[0].Lease)
}

func startScheduler(t *testing.T, m *etcdfleet.Member) *etcdfleet.Scheduler {
	s := m.StartScheduler()
	t.Cleanup(s.Close)
	return s
}

// TestSchedulerElection: of two schedulers exactly one leads, and etcd
// names it; when its session's lease is lost the other takes over, and
// the first, campaigning again, does not lead.
func TestSchedulerElection(t *testing.T) {
	c := etcdtest.Start(t, 1)
	o := etcdfleet.Options{LeaseTTL: 2 * time.Second}
	a, b := join(t, c, "a", o), join(t, c, "b", o)
	if _, err := a.Leader(ctxT(t)); !errors.Is(err, etcdfleet.ErrNoLeader) {
		t.Fatalf("leader before any scheduler: %v", err)
	}
	sa, sb := startScheduler(t, a), startScheduler(t, b)
	byID := map[string]*etcdfleet.Scheduler{"a": sa, "b": sb}
	var leader string
	waitFor(t, "a leader", func() bool {
		id, err := b.Leader(ctxT(t))
		if err != nil || !byID[id].IsLeader() {
			return false
		}
		leader = id
		return true
	})
	other := map[string]string{"a": "b", "b": "a"}[leader]
	if byID[other].IsLeader() {
		t.Fatalf("both schedulers lead")
	}
	raw := c.Client(t)
	if _, err := raw.Revoke(ctxT(t), leaderLease(t, raw)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other scheduler to take over", func() bool {
		id, err := a.Leader(ctxT(t))
		return err == nil && id == other && byID[other].IsLeader() && !byID[leader].IsLeader()
	})
	// The first campaigns again: it has a key, behind the leader's.
	waitFor(t, "the deposed scheduler to campaign again", func() bool {
		g, err := raw.Get(ctxT(t), etcdfleet.DefaultPrefix+"scheduler/", clientv3.WithPrefix())
		return err == nil && len(g.Kvs) == 2
	})
	if id, err := a.Leader(ctxT(t)); err != nil || id != other || byID[leader].IsLeader() {
		t.Fatalf("leader %q %v after the deposed one campaigned again", id, err)
	}
	// Closing the leader hands over at once (its lease revoked).
	byID[other].Close()
	waitFor(t, "the first to lead again", func() bool {
		id, err := a.Leader(ctxT(t))
		return err == nil && id == leader && byID[leader].IsLeader()
	})
}

// TestDeposedLeaderRefused: a leader whose lease is lost while it does
// not know it yet writes nothing once another is elected.
func TestDeposedLeaderRefused(t *testing.T) {
	c := etcdtest.Start(t, 1)
	o := etcdfleet.Options{LeaseTTL: 5 * time.Second}
	a, b := join(t, c, "a", o), join(t, c, "b", o)
	ta, err := a.Campaign(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ta.Close()
	if err := ta.Assign(ctxT(t), etcdfleet.Assignment{Unit: "u", Host: "a"}); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}
	won := make(chan *etcdfleet.Term, 1)
	go func() {
		tb, err := b.Campaign(ctxT(t))
		if err != nil {
			t.Error(err)
		}
		won <- tb
	}()
	raw := c.Client(t)
	if _, err := raw.Revoke(ctxT(t), leaderLease(t, raw)); err != nil {
		t.Fatal(err)
	}
	tb := <-won
	if tb == nil {
		t.FailNow()
	}
	defer tb.Close()
	if tb.Epoch() <= ta.Epoch() {
		t.Fatalf("epochs %d then %d", ta.Epoch(), tb.Epoch())
	}
	if err := ta.Assign(ctxT(t), etcdfleet.Assignment{Unit: "u", Host: "a2"}); !errors.Is(err, etcdfleet.ErrNotLeader) {
		t.Fatalf("the deposed leader's write: %v", err)
	}
	if ok, _, err := b.Holds(ctxT(t), "u", "a"); err != nil || !ok {
		t.Fatalf("u held by a: %v %v (the refused write changed it?)", ok, err)
	}
	if err := tb.Assign(ctxT(t), etcdfleet.Assignment{Unit: "u", Host: "b"}); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	as, err := a.Assignments(ctxT(t))
	if err != nil || len(as) != 1 || as[0].Host != "b" || as[0].Epoch != tb.Epoch() {
		t.Fatalf("assignments %+v %v", as, err)
	}
	if err := tb.Assign(ctxT(t), etcdfleet.Assignment{Unit: "bad unit", Host: "b"}); err == nil {
		t.Fatal("a unit id with a space was written")
	}
}

// recv takes the next list from ch, or gives up after a second.
func recv(ch <-chan []etcdfleet.Assignment) ([]etcdfleet.Assignment, bool) {
	select {
	case as, ok := <-ch:
		return as, ok
	case <-time.After(time.Second):
		return nil, false
	}
}

// placed maps unit → host of every assignment.
func placed(t *testing.T, m *etcdfleet.Member) map[string]string {
	as, err := m.Assignments(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	w := map[string]string{}
	for _, a := range as {
		w[a.Unit] = a.Host
	}
	return w
}

func perHost(w map[string]string) map[string]int {
	n := map[string]int{}
	for _, h := range w {
		n[h]++
	}
	return n
}

// TestRescheduleAfterHostLoss: 3 hosts, 6 replicas and a unit pinned to
// c; c leaves: its replicas move to a and b, c's own assignment watch
// delivers the loss, the pinned unit is unplaced with a reason. Then b
// drains (its units move), a is cordoned (it keeps its units, a new one
// finds no host) and uncordoned, and a withdrawn unit loses its
// assignment.
func TestRescheduleAfterHostLoss(t *testing.T) {
	cl := etcdtest.Start(t, 1)
	o := etcdfleet.Options{LeaseTTL: 2 * time.Second}
	a, b, c := join(t, cl, "a", o), join(t, cl, "b", o), join(t, cl, "c", o)
	startScheduler(t, a)
	startScheduler(t, b)
	for i := range 6 {
		if err := a.Submit(ctxT(t), placement.Request{Unit: fmt.Sprintf("deployment/web/%d", i), Group: "web", Driver: "process"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Submit(ctxT(t), placement.Request{Unit: "computer/c1", Driver: "process", Host: "c"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Submit(ctxT(t), placement.Request{Unit: "x", Driver: ""}); err == nil {
		t.Fatal("a request without a driver was accepted")
	}
	waitFor(t, "the 7 units to be placed", func() bool {
		w := placed(t, a)
		n := perHost(w)
		return len(w) == 7 && n["a"] == 2 && n["b"] == 2 && n["c"] == 3 && w["computer/c1"] == "c"
	})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	cw := c.WatchAssignments(ctx, "c")
	waitFor(t, "c's watch to list its 3 units", func() bool {
		as, ok := recv(cw)
		return ok && len(as) == 3
	})
	if ok, rev, err := c.Holds(ctxT(t), "computer/c1", "c"); err != nil || !ok || rev == 0 {
		t.Fatalf("c holds computer/c1: %v %d %v", ok, rev, err)
	}

	if err := c.Leave(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c's replicas to move to a and b", func() bool {
		w := placed(t, a)
		n := perHost(w)
		return len(w) == 6 && n["a"] == 3 && n["b"] == 3
	})
	waitFor(t, "c's watch to deliver the loss", func() bool {
		as, ok := recv(cw)
		return ok && len(as) == 0
	})
	for unit, host := range placed(t, a) {
		if ok, _, err := a.Holds(ctxT(t), unit, "c"); err != nil || ok {
			t.Fatalf("c still holds %s: %v", unit, err)
		}
		if ok, _, err := a.Holds(ctxT(t), unit, host); err != nil || !ok {
			t.Fatalf("%s does not hold %s: %v", host, unit, err)
		}
	}
	var un []etcdfleet.UnplacedUnit
	waitFor(t, "the pinned unit to be unplaced", func() bool {
		var err error
		un, err = a.Unplaced(ctxT(t))
		return err == nil && len(un) == 1
	})
	if un[0].Unit != "computer/c1" || un[0].Code != placement.UnknownHost || un[0].Reason == "" {
		t.Fatalf("unplaced %+v", un)
	}

	// b drains: its units go to a.
	if err := a.SetState(ctxT(t), "b", etcdfleet.Draining); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's units to move to a", func() bool {
		n := perHost(placed(t, a))
		return n["a"] == 6 && n["b"] == 0
	})
	// a is cordoned: it keeps them; a new unit has nowhere to go.
	if err := a.SetState(ctxT(t), "a", etcdfleet.Cordoned); err != nil {
		t.Fatal(err)
	}
	if err := a.Submit(ctxT(t), placement.Request{Unit: "deployment/web/6", Group: "web", Driver: "process"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new unit to be unplaced", func() bool {
		un, err := a.Unplaced(ctxT(t))
		return err == nil && len(un) == 2 && un[1].Unit == "deployment/web/6" && un[1].Code == placement.NoHost
	})
	if n := perHost(placed(t, a)); n["a"] != 6 || len(n) != 1 {
		t.Fatalf("after the cordon: %v, want a's 6 kept", n)
	}
	if err := a.SetState(ctxT(t), "a", etcdfleet.Active); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new unit to be placed on a", func() bool {
		un, err := a.Unplaced(ctxT(t))
		return err == nil && len(un) == 1 && placed(t, a)["deployment/web/6"] == "a"
	})
	if err := b.Withdraw(ctxT(t), "deployment/web/0"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the withdrawn unit's assignment to go", func() bool {
		_, ok := placed(t, a)["deployment/web/0"]
		return !ok
	})
}

// TestPartitionedHostComesBack: host c's lease is lost while its berth
// lives (as when it was cut off from etcd for longer than the TTL): its
// units move; when it registers again its watch has delivered their loss
// and Holds says no, and the units stay where they moved.
func TestPartitionedHostComesBack(t *testing.T) {
	cl := etcdtest.Start(t, 1)
	o := etcdfleet.Options{LeaseTTL: 2 * time.Second}
	a, _, c := join(t, cl, "a", o), join(t, cl, "b", o), join(t, cl, "c", o)
	startScheduler(t, a)
	for i := range 3 {
		if err := a.Submit(ctxT(t), placement.Request{Unit: fmt.Sprintf("deployment/api/%d", i), Group: "api", Driver: "process"}); err != nil {
			t.Fatal(err)
		}
	}
	var onC string
	waitFor(t, "one replica on each host", func() bool {
		w := placed(t, a)
		n := perHost(w)
		for u, h := range w {
			if h == "c" {
				onC = u
			}
		}
		return len(w) == 3 && n["a"] == 1 && n["b"] == 1 && n["c"] == 1
	})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	cw := c.WatchAssignments(ctx, "c")
	waitFor(t, "c's watch to list its unit", func() bool {
		as, ok := recv(cw)
		return ok && len(as) == 1 && as[0].Unit == onC
	})
	raw := cl.Client(t)
	g, err := raw.Get(ctxT(t), etcdfleet.DefaultPrefix+"hosts/c")
	if err != nil || len(g.Kvs) != 1 {
		t.Fatal(g, err)
	}
	old := clientv3.LeaseID(g.Kvs[0].Lease)
	if _, err := raw.Revoke(ctxT(t), old); err != nil {
		t.Fatal(err)
	}
	var moved string
	waitFor(t, "c's unit to move", func() bool {
		moved = placed(t, a)[onC]
		return moved != "" && moved != "c"
	})
	waitFor(t, "c's watch to deliver the move", func() bool {
		as, ok := recv(cw)
		return ok && len(as) == 0
	})
	waitFor(t, "c to register again", func() bool {
		g, err := raw.Get(ctxT(t), etcdfleet.DefaultPrefix+"hosts/c")
		return err == nil && len(g.Kvs) == 1 && clientv3.LeaseID(g.Kvs[0].Lease) != old
	})
	if ok, _, err := c.Holds(ctxT(t), onC, "c"); err != nil || ok {
		t.Fatalf("c holds %s after it moved: %v", onC, err)
	}
	// c's return is a change the scheduler sees; a unit it then places
	// lands on c, and the moved one stays where it went.
	if err := a.Submit(ctxT(t), placement.Request{Unit: "deployment/api/3", Group: "api", Driver: "process"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new replica on c", func() bool { return placed(t, a)["deployment/api/3"] == "c" })
	if h := placed(t, a)[onC]; h != moved {
		t.Fatalf("%s went from %s to %s", onC, moved, h)
	}
	if as, ok := recv(cw); !ok || len(as) != 1 || as[0].Unit != "deployment/api/3" {
		t.Fatalf("c's watch: %+v %v", as, ok)
	}
}

// TestSchedulingAcrossEtcdLeaderLoss: in a 3-member cluster the etcd
// leader stops while two schedulers and a host's assignment watch run
// (their watches resumed by the client, or failed and listed again);
// afterwards a lost host's units still move and its watch still delivers
// the loss. (c's Leave may fail mid-election; its lease then lapses.)
func TestSchedulingAcrossEtcdLeaderLoss(t *testing.T) {
	cl := etcdtest.Start(t, 3)
	o := etcdfleet.Options{OpTimeout: 15 * time.Second}
	a, b, c := join(t, cl, "a", o), join(t, cl, "b", o), join(t, cl, "c", o)
	startScheduler(t, a)
	startScheduler(t, b)
	for i := range 6 {
		if err := b.Submit(ctxT(t), placement.Request{Unit: fmt.Sprintf("deployment/web/%d", i), Group: "web", Driver: "process"}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "two replicas on each host", func() bool {
		n := perHost(placed(t, a))
		return n["a"] == 2 && n["b"] == 2 && n["c"] == 2
	})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	cw := c.WatchAssignments(ctx, "c")
	waitFor(t, "c's watch to list its 2 units", func() bool {
		as, ok := recv(cw)
		return ok && len(as) == 2
	})
	leader := cl.Leader()
	if leader < 0 {
		t.Fatal("no etcd leader")
	}
	cl.Members[leader].Close()
	waitFor(t, "a new etcd leader", func() bool {
		for i, m := range cl.Members {
			if i != leader && m.IsLeader() {
				return true
			}
		}
		return false
	})
	waitFor(t, "c to leave", func() bool { return c.Leave(ctxT(t)) == nil })
	waitFor(t, "c's replicas to move", func() bool {
		w := placed(t, a)
		n := perHost(w)
		return len(w) == 6 && n["a"] == 3 && n["b"] == 3
	})
	waitFor(t, "c's watch to deliver the loss", func() bool {
		as, ok := recv(cw)
		return ok && len(as) == 0
	})
	if _, err := a.Leader(ctxT(t)); err != nil {
		t.Fatalf("no scheduler leads after the etcd election: %v", err)
	}
}

// TestWatchAllAssignments: a host's watch of every assignment lists the
// units of every host, follows a unit that moves (its host leaves) and
// drops one that is withdrawn.
func TestWatchAllAssignments(t *testing.T) {
	cl := etcdtest.Start(t, 1)
	o := etcdfleet.Options{LeaseTTL: 2 * time.Second}
	a, b := join(t, cl, "a", o), join(t, cl, "b", o)
	startScheduler(t, a)
	for _, r := range []placement.Request{
		{Unit: "deployment/x", Group: "x", Driver: "process", Host: "a"},
		{Unit: "deployment/y", Group: "y", Driver: "process"},
	} {
		if err := a.Submit(ctxT(t), r); err != nil {
			t.Fatal(err)
		}
	}
	// The same request again writes nothing (every host submits the
	// deployments it holds).
	cli := cl.Client(t)
	g1, err := cli.Get(ctxT(t), etcdfleet.DefaultPrefix+"units/deployment/y")
	if err != nil || len(g1.Kvs) != 1 {
		t.Fatalf("the unit's key: %v %v", g1, err)
	}
	if err := b.Submit(ctxT(t), placement.Request{Unit: "deployment/y", Group: "y", Driver: "process"}); err != nil {
		t.Fatal(err)
	}
	if g2, err := cli.Get(ctxT(t), etcdfleet.DefaultPrefix+"units/deployment/y"); err != nil || g2.Kvs[0].ModRevision != g1.Kvs[0].ModRevision {
		t.Fatalf("an unchanged request was written again: %v %v", g2, err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	w := a.WatchAllAssignments(ctx)
	var last map[string]string
	until := func(what string, cond func(map[string]string) bool) {
		t.Helper()
		waitFor(t, what, func() bool {
			if as, ok := recv(w); ok {
				last = map[string]string{}
				for _, x := range as {
					last[x.Unit] = x.Host
				}
			}
			return last != nil && cond(last)
		})
	}
	until("both units listed", func(m map[string]string) bool { return m["deployment/x"] == "a" && m["deployment/y"] != "" })
	if len(last) != 2 {
		t.Fatalf("the watch lists %v, want 2 units", last)
	}
	// y goes to b: the pin moves it there.
	if err := a.Submit(ctxT(t), placement.Request{Unit: "deployment/y", Group: "y", Driver: "process", Host: "b"}); err != nil {
		t.Fatal(err)
	}
	until("y on b", func(m map[string]string) bool { return m["deployment/y"] == "b" && m["deployment/x"] == "a" })
	// b leaves: a unit pinned to it has no host, and leaves the list.
	if err := b.Leave(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	until("y to leave the list", func(m map[string]string) bool { _, ok := m["deployment/y"]; return !ok && m["deployment/x"] == "a" })
	if err := a.Withdraw(ctxT(t), "deployment/x"); err != nil {
		t.Fatal(err)
	}
	until("the withdrawn x to leave the list", func(m map[string]string) bool { return len(m) == 0 })
	cancel()
	for range w {
	}
}
