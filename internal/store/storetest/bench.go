package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/store"
)

// Each Bench function is the body of one benchmark both backends run
// (package store's on SQLite, package etcdstore's on one embedded etcd
// member that fsyncs), under the same name in each, so their figures
// stand side by side: the backend's Benchmark function opens a fresh
// store and hands it over.

// benchSpec is the deployment spec the deployment benchmarks write.
var benchSpec = []byte(`{"kind":"static","image":"example/web:1","replicas":2,"env":{"A":"1"}}`)

// BenchPutDeployment measures a deployment write: each op replaces one
// deployment at the revision it is at, one writer at a time.
func BenchPutDeployment(b *testing.B, s Backend) {
	ctx := context.Background()
	d, err := s.PutDeployment(ctx, store.Deployment{ID: "web", Namespace: "default", Spec: benchSpec}, true, 0)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if d, err = s.PutDeployment(ctx, store.Deployment{ID: "web", Namespace: "default", Spec: benchSpec}, false, d.Revision); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchPutDeploymentParallel measures deployment writes under concurrent
// writers (GOMAXPROCS goroutines), each creating deployments of its own.
func BenchPutDeploymentParallel(b *testing.B, s Backend) {
	ctx := context.Background()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("d%08d", n.Add(1))
			if _, err := s.PutDeployment(ctx, store.Deployment{ID: id, Namespace: "default", Spec: benchSpec}, true, 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchComputerSlot measures a Computer slot's writes: each op reserves
// Computer c's slot and releases it, two transactions that commit, with
// 5 of 10 slots held by others.
func BenchComputerSlot(b *testing.B, s ComputersBackend) {
	ctx := context.Background()
	limit := store.SlotLimit{Fixed: 10}
	nop := func(*store.Computer, store.ActiveOn) error { return nil }
	for _, id := range []string{"h1", "h2", "h3", "h4", "h5", "c"} {
		if _, err := s.CreateComputer(ctx, store.Computer{ID: id, Backings: "[]", State: "sleeping"}); err != nil {
			b.Fatal(err)
		}
		if id != "c" {
			if _, _, err := s.ReserveComputerSlot(ctx, id, limit, nop); err != nil {
				b.Fatal(err)
			}
		}
	}
	for b.Loop() {
		if res, _, err := s.ReserveComputerSlot(ctx, "c", limit, nop); err != nil || !res.Reserved {
			b.Fatal(res, err)
		}
		if _, err := s.ReleaseComputerSlot(ctx, "c", func(*store.Computer) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchAddWebhookCounts measures one webhook's delivery count bump.
func BenchAddWebhookCounts(b *testing.B, s MiscBackend) {
	ctx := context.Background()
	if err := s.PutWebhook(ctx, store.Webhook{ID: "w", Sealed: []byte{1}, CreatedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := s.AddWebhookCounts(ctx, map[string]store.WebhookCounts{"w": {Delivered: 1}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchPutSecurityAlerts measures one new alert stored with the trim to
// the newest 1000, on a store already holding 1000.
func BenchPutSecurityAlerts(b *testing.B, s MiscBackend) {
	ctx := context.Background()
	const keep = 1000
	var id int64
	next := func() store.SecurityAlert {
		id++
		return store.SecurityAlert{ID: id, Rule: "web.sqli", Severity: "high", LastTs: id, JSON: fmt.Appendf(nil, `{"id":%d}`, id)}
	}
	for range keep / 100 {
		batch := make([]store.SecurityAlert, 100)
		for i := range batch {
			batch[i] = next()
		}
		if err := s.PutSecurityAlerts(ctx, batch, keep); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if err := s.PutSecurityAlerts(ctx, []store.SecurityAlert{next()}, keep); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchTouchSessions measures one touch of 100 sessions' last-seen times.
func BenchTouchSessions(b *testing.B, s MiscBackend) {
	ctx := context.Background()
	t0 := time.Now()
	seen := map[string]time.Time{}
	for i := range 100 {
		id := fmt.Sprintf("s%03d", i)
		if err := s.PutSession(ctx, store.Session{ID: id, SecretSHA256: "h" + id, CreatedAt: t0, ExpiresAt: t0, LastSeenAt: t0}); err != nil {
			b.Fatal(err)
		}
		seen[id] = t0
	}
	for b.Loop() {
		if err := s.TouchSessions(ctx, seen); err != nil {
			b.Fatal(err)
		}
	}
}

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
