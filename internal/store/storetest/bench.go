package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/berth-dev/berth/internal/store"
)

// Bounds of the job and rollout benchmarks: the history they keep full.
const (
	benchJobsPerDeployment = 50
	benchJobsTotal         = 500
	benchRolloutsKeep      = 20
)

// BenchInsertJob measures InsertJob at a full history: 500 jobs over 10
// deployments (50 each), so each insert also prunes its deployment's
// oldest, one writer at a time.
func BenchInsertJob(b *testing.B, s JobsBackend) {
	ctx := context.Background()
	n := 0
	insert := func() {
		dep := fmt.Sprint("d", n%10)
		j := store.Job{ID: fmt.Sprintf("j%08d", n), Deployment: dep, Namespace: "default", Kind: "host-update", Status: "succeeded",
			StartedAt: int64(n), Record: fmt.Appendf(nil, `{"id":"j%08d","log":"ok"}`, n)}
		n++
		if err := s.InsertJob(ctx, j, benchJobsPerDeployment, benchJobsTotal); err != nil {
			b.Fatal(err)
		}
	}
	for range benchJobsTotal {
		insert()
	}
	for b.Loop() {
		insert()
	}
}

// BenchPutRollout measures PutRollout at a full history of 20 (each put
// trims the oldest), one writer at a time.
func BenchPutRollout(b *testing.B, s RolloutsBackend) {
	ctx := context.Background()
	if _, err := s.PutDeployment(ctx, store.Deployment{ID: "web", Spec: []byte(`{"id":"web"}`)}, false, 0); err != nil {
		b.Fatal(err)
	}
	n := 0
	put := func() {
		r := store.Rollout{Deployment: "web", OperationID: fmt.Sprintf("op%08d", n), Status: "succeeded", Phase: "done",
			SourceSpec: []byte(`{"kind":"static","image":"example/web:1"}`), FallbackSpec: []byte(`{"kind":"static","image":"example/web:0"}`)}
		n++
		if _, err := s.PutRollout(ctx, r, benchRolloutsKeep); err != nil {
			b.Fatal(err)
		}
	}
	for range benchRolloutsKeep {
		put()
	}
	for b.Loop() {
		put()
	}
}
