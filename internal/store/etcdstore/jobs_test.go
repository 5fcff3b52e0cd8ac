package etcdstore

import (
	"fmt"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// openJobsSuite returns an opener of fresh stores, each under a prefix
// of its own, on one real etcd member, and the member's client.
func openJobsSuite(t *testing.T) (func(t *testing.T) *Store, *clientv3.Client) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	var n atomic.Int64
	t.Cleanup(func() { checkLayout(t, cli, "/test/") }) // after the subtests
	return func(t *testing.T) *Store {
		s, err := Open(t.Context(), cli, fmt.Sprintf("/test/%d/", n.Add(1)), "h1")
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	}, cli
}

// TestJobsSuite runs the jobs and workflows suite shared with the SQLite
// store on a real etcd member.
func TestJobsSuite(t *testing.T) {
	open, _ := openJobsSuite(t)
	storetest.RunJobs(t, func(t *testing.T) storetest.JobsBackend { return open(t) })
}

// TestInsertJobPruneMany: more jobs over the bounds than one etcd
// transaction can delete.
func TestInsertJobPruneMany(t *testing.T) {
	open, _ := openJobsSuite(t)
	s := open(t)
	ctx := t.Context()
	const n = 2*maxTxnOps + 7
	for i := range n {
		j := store.Job{ID: fmt.Sprintf("j%04d", i), Deployment: "a", Status: "succeeded", Record: []byte(`{}`)}
		if err := s.InsertJob(ctx, j, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.InsertJob(ctx, store.Job{ID: "run", Deployment: "a", Status: "running", Record: []byte(`{}`)}, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertJob(ctx, store.Job{ID: "last", Deployment: "a", Status: "failed", Record: []byte(`{}`)}, 3, 0); err != nil {
		t.Fatalf("InsertJob pruning %d jobs: %v", n-1, err)
	}
	js, err := s.Jobs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range js {
		ids = append(ids, j.ID)
	}
	want := fmt.Sprintf("[last run j%04d]", n-1)
	if fmt.Sprint(ids) != want {
		t.Errorf("jobs %v, want %s", ids, want)
	}
}
