package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestJobs(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	put := func(id, dep, status string) {
		t.Helper()
		rec := fmt.Sprintf(`{"id":%q}`, id)
		if err := s.InsertJob(ctx, Job{ID: id, Deployment: dep, Namespace: "default", Kind: "host-update", Status: status, StartedAt: 1, Record: []byte(rec)}, 2, 4); err != nil {
			t.Fatalf("InsertJob(%s): %v", id, err)
		}
	}
	ids := func(dep string) string {
		t.Helper()
		js, err := s.Jobs(ctx, dep)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return strings.Join(out, ",")
	}
	put("a1", "a", "running") // counted, but never pruned while running
	put("a2", "a", "failed")
	if got := ids("a"); got != "a2,a1" {
		t.Fatalf("a's jobs %s", got)
	}
	put("a3", "a", "succeeded")
	if got := ids("a"); got != "a3,a1" {
		t.Fatalf("a's jobs %s, want the oldest finished one pruned", got)
	}
	put("a4", "a", "succeeded")
	put("b1", "b", "succeeded")
	put("c1", "c", "succeeded")
	if got := ids(""); got != "c1,b1,a4,a1" {
		t.Fatalf("all jobs %s", got)
	}
	put("d1", "d", "succeeded")
	if got := ids(""); got != "d1,c1,b1,a1" {
		t.Fatalf("all jobs %s, want 4 (a4 pruned by the total)", got)
	}
	if err := s.InsertJob(ctx, Job{ID: "b1", Deployment: "b", Record: []byte(`{}`)}, 2, 4); !errors.Is(err, ErrConflict) {
		t.Errorf("InsertJob of an existing id: %v", err)
	}
	if err := s.UpdateJob(ctx, "a1", "failed", []byte(`{"id":"a1","status":"failed"}`)); err != nil {
		t.Fatal(err)
	}
	j, err := s.Job(ctx, "a1")
	if err != nil || j.Status != "failed" || string(j.Record) != `{"id":"a1","status":"failed"}` || j.Namespace != "default" {
		t.Fatalf("Job(a1) = %+v, %v", j, err)
	}
	if err := s.UpdateJob(ctx, "gone", "failed", []byte(`{}`)); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateJob of a missing job: %v", err)
	}
	if _, err := s.Job(ctx, "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Job of a missing job: %v", err)
	}
	if err := s.UpdateJob(ctx, "a1", "failed", []byte(`not json`)); err == nil {
		t.Error("UpdateJob took a record that is not JSON")
	}
}

func TestWorkflows(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	w := Workflow{ID: "build", Spec: []byte(`{"id":"build"}`)}
	if err := s.PutWorkflow(ctx, w, false); !errors.Is(err, ErrNotFound) {
		t.Errorf("replacing a missing workflow: %v", err)
	}
	if err := s.PutWorkflow(ctx, w, true); err != nil {
		t.Fatal(err)
	}
	if err := s.PutWorkflow(ctx, w, true); !errors.Is(err, ErrConflict) {
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
	if err := s.DeleteWorkflow(ctx, "build"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWorkflow(ctx, "build"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleting a missing workflow: %v", err)
	}
}
