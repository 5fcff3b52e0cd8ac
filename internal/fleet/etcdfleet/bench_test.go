package etcdfleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/fleet/placement"
)

// BenchmarkReserveRelease is the write latency of a fleet slot on one
// embedded etcd member that fsyncs: each op is a Reserve (a read
// transaction and the claiming one) and a Release (a read and the
// deleting transaction), with 5 of 10 slots held by others.
func BenchmarkReserveRelease(b *testing.B) {
	c := etcdtest.Start(b, 1, etcdtest.Options{Fsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m, err := etcdfleet.Join(ctx, c.Client(b), etcdfleet.Host{ID: "bench"}, etcdfleet.Options{SlotLimit: 10})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Leave(ctx)
	for _, id := range []string{"h1", "h2", "h3", "h4", "h5"} {
		if _, err := m.Reserve(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		r, err := m.Reserve(ctx, "c")
		if err != nil || r.Kind != etcdfleet.Reserved {
			b.Fatal(r, err)
		}
		if err := m.Release(ctx, "c"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishFleetViews is one round of a host's periodic publish on
// one embedded etcd member that fsyncs: its report of 50 deployments (a
// put) and its 50 unchanged service memberships (a read, no write).
func BenchmarkPublishFleetViews(b *testing.B) {
	c := etcdtest.Start(b, 1, etcdtest.Options{Fsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m, err := etcdfleet.Join(ctx, c.Client(b), etcdfleet.Host{ID: "bench"}, etcdfleet.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Leave(ctx)
	var rep etcdfleet.Report
	var ms []etcdfleet.ServiceMember
	for i := range 50 {
		id := fmt.Sprintf("dep-%02d", i)
		rep.Deployments = append(rep.Deployments, etcdfleet.DeploymentReport{ID: id, Namespace: "default", Kind: "static", Pool: etcdfleet.Pool{Ready: 2}, Routes: []string{id + ".test/"}})
		ms = append(ms, etcdfleet.ServiceMember{Service: id, Peer: "10.0.0.1:80"})
	}
	for b.Loop() {
		if err := m.PublishReport(ctx, rep); err != nil {
			b.Fatal(err)
		}
		if err := m.PublishServices(ctx, ms); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRescheduleAfterHostLoss is the time from a host's berth
// vanishing without a word (its client closed: no more keep-alives, its
// 5 s lease left to lapse) to every unit it ran being assigned to the two
// survivors, a scheduler on each. Each op adds a fresh host and 9 new
// replicas (3 land on it), not timed, then loses it.
func BenchmarkRescheduleAfterHostLoss(b *testing.B) {
	c := etcdtest.Start(b, 1, etcdtest.Options{Fsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	o := etcdfleet.Options{LeaseTTL: 5 * time.Second}
	var survivors []*etcdfleet.Member
	for _, id := range []string{"a", "b"} {
		m, err := etcdfleet.Join(ctx, c.Client(b), etcdfleet.Host{ID: id, Drivers: []string{"process"}}, o)
		if err != nil {
			b.Fatal(err)
		}
		defer m.Leave(ctx)
		s := m.StartScheduler()
		defer s.Close()
		survivors = append(survivors, m)
	}
	a := survivors[0]
	poll := func(what string, cond func(map[string]string) bool) {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			as, err := a.Assignments(ctx)
			if err != nil {
				b.Fatal(err)
			}
			w := map[string]string{}
			for _, x := range as {
				w[x.Unit] = x.Host
			}
			if cond(w) {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("gave up waiting for %s: %v", what, w)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	i := 0
	for b.Loop() {
		b.StopTimer()
		victim := fmt.Sprintf("v%d", i)
		vc := c.Client(b)
		vm, err := etcdfleet.Join(ctx, vc, etcdfleet.Host{ID: victim, Drivers: []string{"process"}}, o)
		if err != nil {
			b.Fatal(err)
		}
		group := fmt.Sprintf("g%d", i)
		for r := range 9 {
			if err := a.Submit(ctx, placement.Request{Unit: fmt.Sprintf("deployment/%s/%d", group, r), Group: group, Driver: "process"}); err != nil {
				b.Fatal(err)
			}
		}
		poll("3 units on "+victim, func(w map[string]string) bool {
			n := 0
			for _, h := range w {
				if h == victim {
					n++
				}
			}
			return n == 3
		})
		b.StartTimer()
		vc.Close() // its keep-alives stop; the lease lapses in its TTL
		poll("the units to leave "+victim, func(w map[string]string) bool {
			for _, h := range w {
				if h == victim {
					return false
				}
			}
			return len(w) == 9*(i+1)
		})
		b.StopTimer()
		lctx, lcancel := context.WithTimeout(ctx, time.Second)
		vm.Leave(lctx) // its keep-alive loop, retrying on a closed client
		lcancel()
		i++
		b.StartTimer()
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/op")
}
