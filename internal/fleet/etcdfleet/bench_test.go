package etcdfleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
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
