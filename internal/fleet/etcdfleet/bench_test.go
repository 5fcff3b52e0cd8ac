package etcdfleet_test

import (
	"context"
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
