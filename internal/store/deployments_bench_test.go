package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/internal/store"
)

// BenchmarkPutDeployment is a deployment write's latency in SQLite with
// the store's real settings (WAL, synchronous=FULL), beside etcdstore's
// BenchmarkPutDeployment: each op replaces one deployment at the revision
// it is at, one writer at a time.
func BenchmarkPutDeployment(b *testing.B) {
	s, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchPut(b, s)
}

// BenchmarkPutDeploymentParallel is the same store under concurrent
// writers (GOMAXPROCS goroutines), each creating deployments of its own.
func BenchmarkPutDeploymentParallel(b *testing.B) {
	s, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchPutParallel(b, s)
}

type putter interface {
	PutDeployment(ctx context.Context, d store.Deployment, createOnly bool, ifRevision int64) (store.Deployment, error)
}

func benchPut(b *testing.B, s putter) {
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

func benchPutParallel(b *testing.B, s putter) {
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
