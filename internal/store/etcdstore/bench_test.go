package etcdstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store"
)

// BenchmarkPutDeployment is a deployment write's latency on one embedded
// etcd member that fsyncs, beside package store's BenchmarkPutDeployment
// (SQLite): each op replaces one deployment at the revision it is at (a
// read and the conditional transaction), one writer at a time.
func BenchmarkPutDeployment(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	spec := []byte(`{"kind":"static","image":"example/web:1","replicas":2,"env":{"A":"1"}}`)
	d, err := s.PutDeployment(ctx, store.Deployment{ID: "web", Namespace: "default", Spec: spec}, true, 0)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if d, err = s.PutDeployment(ctx, store.Deployment{ID: "web", Namespace: "default", Spec: spec}, false, d.Revision); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutDeploymentParallel is the same member under concurrent
// writers (GOMAXPROCS goroutines), each creating deployments of its own.
func BenchmarkPutDeploymentParallel(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	spec := []byte(`{"kind":"static","image":"example/web:1","replicas":2,"env":{"A":"1"}}`)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("d%08d", n.Add(1))
			if _, err := s.PutDeployment(ctx, store.Deployment{ID: id, Namespace: "default", Spec: spec}, true, 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchStore(b *testing.B) *Store {
	c := etcdtest.Start(b, 1, etcdtest.Options{Fsync: true})
	s, err := Open(context.Background(), c.Client(b), "", "h1")
	if err != nil {
		b.Fatal(err)
	}
	return s
}
