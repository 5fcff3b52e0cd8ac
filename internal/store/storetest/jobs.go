package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/store"
)

// JobsBackend is the slice of a store that keeps background jobs and
// workflows.
type JobsBackend interface {
	Jobs(ctx context.Context, deployment string) ([]store.Job, error)
	Job(ctx context.Context, id string) (store.Job, error)
	InsertJob(ctx context.Context, j store.Job, perDeployment, total int) error
	UpdateJob(ctx context.Context, id, status string, record []byte) error
	Workflows(ctx context.Context) ([]store.Workflow, error)
	PutWorkflow(ctx context.Context, w store.Workflow, create bool) error
	DeleteWorkflow(ctx context.Context, id string) error
}

// RunJobs runs the jobs and workflows suite; open returns a fresh, empty
// backend for each subtest.
func RunJobs(t *testing.T, open func(t *testing.T) JobsBackend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, JobsBackend)
	}{
		{"Prune", testJobsPrune},
		{"Order", testJobsOrder},
		{"RunningAlone", testJobsRunningAlone},
		{"Invalid", testJobsInvalid},
		{"ConcurrentSameID", testJobsConcurrentSameID},
		{"ConcurrentPrune", testJobsConcurrentPrune},
		{"Workflows", testWorkflows},
		{"WorkflowsConcurrentCreate", testWorkflowsConcurrentCreate},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func suiteJob(id, dep, status string) store.Job {
	return store.Job{ID: id, Deployment: dep, Namespace: "default", Kind: "host-update", Status: status, StartedAt: 1,
		Record: fmt.Appendf(nil, `{"id":%q}`, id)}
}

func jobIDs(t *testing.T, s JobsBackend, dep string) string {
	t.Helper()
	js, err := s.Jobs(t.Context(), dep)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range js {
		out = append(out, j.ID)
	}
	return strings.Join(out, ",")
}

// testJobsPrune is store's TestJobs: bounds per deployment and in total,
// running jobs counted but kept.
func testJobsPrune(t *testing.T, s JobsBackend) {
	ctx := t.Context()
	put := func(id, dep, status string) {
		t.Helper()
		if err := s.InsertJob(ctx, suiteJob(id, dep, status), 2, 4); err != nil {
			t.Fatalf("InsertJob(%s): %v", id, err)
		}
	}
	put("a1", "a", "running")
	put("a2", "a", "failed")
	if got := jobIDs(t, s, "a"); got != "a2,a1" {
		t.Fatalf("a's jobs %s", got)
	}
	put("a3", "a", "succeeded")
	if got := jobIDs(t, s, "a"); got != "a3,a1" {
		t.Fatalf("a's jobs %s, want the oldest finished one pruned", got)
	}
	put("a4", "a", "succeeded")
	put("b1", "b", "succeeded")
	put("c1", "c", "succeeded")
	if got := jobIDs(t, s, ""); got != "c1,b1,a4,a1" {
		t.Fatalf("all jobs %s", got)
	}
	put("d1", "d", "succeeded")
	if got := jobIDs(t, s, ""); got != "d1,c1,b1,a1" {
		t.Fatalf("all jobs %s, want 4 (a4 pruned by the total)", got)
	}
	if err := s.InsertJob(ctx, store.Job{ID: "b1", Deployment: "b", Record: []byte(`{}`)}, 2, 4); !errors.Is(err, store.ErrConflict) {
		t.Errorf("InsertJob of an existing id: %v", err)
	}
	if err := s.UpdateJob(ctx, "a1", "failed", []byte(`{"id":"a1","status":"failed"}`)); err != nil {
		t.Fatal(err)
	}
	j, err := s.Job(ctx, "a1")
	want := suiteJob("a1", "a", "failed")
	want.Record = []byte(`{"id":"a1","status":"failed"}`)
	if err != nil || j.Status != "failed" || string(j.Record) != string(want.Record) || j.Namespace != "default" ||
		j.Kind != want.Kind || j.Deployment != "a" || j.StartedAt != 1 {
		t.Fatalf("Job(a1) = %+v, %v", j, err)
	}
	if err := s.UpdateJob(ctx, "gone", "failed", []byte(`{}`)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateJob of a missing job: %v", err)
	}
	if _, err := s.Job(ctx, "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Job of a missing job: %v", err)
	}
	if err := s.UpdateJob(ctx, "a1", "failed", []byte(`not json`)); err == nil {
		t.Error("UpdateJob took a record that is not JSON")
	}
	// a1 is finished now: the next insert of a prunes it by the bound.
	put("a5", "a", "succeeded")
	if got := jobIDs(t, s, ""); got != "a5,d1,c1,b1" {
		t.Errorf("all jobs %s, want a1 pruned once finished", got)
	}
}

// testJobsOrder: newest first by creation, not by id or start time, and
// an update keeps a job's place.
func testJobsOrder(t *testing.T, s JobsBackend) {
	ctx := t.Context()
	for i, id := range []string{"m", "z", "a", "q"} {
		j := suiteJob(id, "d", "succeeded")
		j.StartedAt = int64(10 - i)
		if err := s.InsertJob(ctx, j, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.UpdateJob(ctx, "m", "failed", []byte(`{"m":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := jobIDs(t, s, ""); got != "q,a,z,m" {
		t.Errorf("jobs %s, want newest first by creation", got)
	}
	if got := jobIDs(t, s, "d"); got != "q,a,z,m" {
		t.Errorf("d's jobs %s, want newest first by creation", got)
	}
	if got := jobIDs(t, s, "other"); got != "" {
		t.Errorf("another deployment's jobs %s, want none", got)
	}
}

// testJobsRunningAlone: running jobs alone may exceed a bound, and a new
// finished job beyond it is pruned at once.
func testJobsRunningAlone(t *testing.T, s JobsBackend) {
	ctx := t.Context()
	for _, id := range []string{"r1", "r2", "r3"} {
		if err := s.InsertJob(ctx, suiteJob(id, "a", "running"), 2, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := jobIDs(t, s, "a"); got != "r3,r2,r1" {
		t.Fatalf("jobs %s, want every running one kept", got)
	}
	if err := s.InsertJob(ctx, suiteJob("f1", "a", "failed"), 2, 0); err != nil {
		t.Fatal(err)
	}
	if got := jobIDs(t, s, "a"); got != "r3,r2,r1" {
		t.Errorf("jobs %s, want the new finished job pruned at once", got)
	}
	if err := s.InsertJob(ctx, suiteJob("b1", "b", "failed"), 2, 0); err != nil {
		t.Fatal(err)
	}
	if got := jobIDs(t, s, ""); got != "b1,r3,r2,r1" {
		t.Errorf("jobs %s, want b's kept: the bound is per deployment", got)
	}
}

func testJobsInvalid(t *testing.T, s JobsBackend) {
	ctx := t.Context()
	for _, j := range []store.Job{{Record: []byte(`{}`)}, {ID: "x", Record: []byte(`nope`)}, {ID: "x"}} {
		if err := s.InsertJob(ctx, j, 0, 0); err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("InsertJob(%+v) = %v, want an error", j, err)
		}
	}
	if got := jobIDs(t, s, ""); got != "" {
		t.Errorf("jobs %s after invalid inserts", got)
	}
}

func testJobsConcurrentSameID(t *testing.T, s JobsBackend) {
	ctx := t.Context()
	errs := race(8, func(i int) error {
		j := suiteJob("same", fmt.Sprint("d", i), "running")
		return s.InsertJob(ctx, j, 2, 4)
	})
	win := oneWinner(t, errs)
	if j, err := s.Job(ctx, "same"); err != nil || j.Deployment != fmt.Sprint("d", win) {
		t.Errorf("stored %+v, %v; want the winner's (%d)", j, err, win)
	}
}

// testJobsConcurrentPrune: concurrent inserts never leave more finished
// jobs than the bounds, nor lose one within them.
func testJobsConcurrentPrune(t *testing.T, s JobsBackend) {
	ctx := t.Context()
	const writers, each = 6, 4
	errs := race(writers, func(i int) error {
		for k := range each {
			dep := []string{"a", "b"}[i%2]
			if err := s.InsertJob(ctx, suiteJob(fmt.Sprintf("w%d-%d", i, k), dep, "succeeded"), 3, 5); err != nil {
				return err
			}
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	all, err := s.Jobs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, j := range all {
		per[j.Deployment]++
	}
	if len(all) != 5 || per["a"] > 3 || per["b"] > 3 {
		t.Errorf("%d jobs (%v), want exactly 5 in all, at most 3 per deployment", len(all), per)
	}
}

// testWorkflows is store's TestWorkflows, plus listing by id.
func testWorkflows(t *testing.T, s JobsBackend) {
	ctx := t.Context()
	w := store.Workflow{ID: "build", Spec: []byte(`{"id":"build"}`)}
	if err := s.PutWorkflow(ctx, w, false); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("replacing a missing workflow: %v", err)
	}
	if err := s.PutWorkflow(ctx, w, true); err != nil {
		t.Fatal(err)
	}
	if err := s.PutWorkflow(ctx, w, true); !errors.Is(err, store.ErrConflict) {
		t.Errorf("creating an existing workflow: %v", err)
	}
	w.Spec = []byte(`{"id":"build","ref":"dev"}`)
	if err := s.PutWorkflow(ctx, w, false); err != nil {
		t.Fatal(err)
	}
	ws, err := s.Workflows(ctx)
	if err != nil || len(ws) != 1 || string(ws[0].Spec) != `{"id":"build","ref":"dev"}` {
		t.Fatalf("Workflows = %+v, %v", ws, err)
	}
	if err := s.PutWorkflow(ctx, store.Workflow{ID: "a-test", Spec: []byte(`{"id": "a-test"}`)}, true); err != nil {
		t.Fatal(err)
	}
	if ws, err := s.Workflows(ctx); err != nil || len(ws) != 2 || ws[0].ID != "a-test" || string(ws[0].Spec) != `{"id": "a-test"}` || ws[1].ID != "build" {
		t.Errorf("Workflows = %+v, %v; want by id, specs verbatim", ws, err)
	}
	for _, bad := range []store.Workflow{{Spec: []byte(`{}`)}, {ID: "x", Spec: []byte(`{`)}} {
		if err := s.PutWorkflow(ctx, bad, true); err == nil {
			t.Errorf("PutWorkflow(%+v) took it", bad)
		}
	}
	if err := s.DeleteWorkflow(ctx, "build"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWorkflow(ctx, "build"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting a missing workflow: %v", err)
	}
	if ws, err := s.Workflows(ctx); err != nil || len(ws) != 1 || ws[0].ID != "a-test" {
		t.Errorf("after delete: %+v, %v", ws, err)
	}
}

func testWorkflowsConcurrentCreate(t *testing.T, s JobsBackend) {
	ctx := t.Context()
	errs := race(8, func(i int) error {
		return s.PutWorkflow(ctx, store.Workflow{ID: "w", Spec: spec(i)}, true)
	})
	win := oneWinner(t, errs)
	if ws, err := s.Workflows(ctx); err != nil || len(ws) != 1 || string(ws[0].Spec) != string(spec(win)) {
		t.Errorf("Workflows = %+v, %v; want the winner's (%d)", ws, err, win)
	}
}
