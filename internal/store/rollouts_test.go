package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestRollouts: an operation is stored once per id, updated in place,
// listed newest first with the history bounded (a running one is kept),
// and gone with its deployment.
func TestRollouts(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	if _, err := s.PutRollout(ctx, Rollout{Deployment: "web", OperationID: "op"}, 3); !errors.Is(err, ErrNotFound) {
		t.Fatalf("rollout of a missing deployment: %v", err)
	}
	if _, err := s.PutDeployment(ctx, Deployment{ID: "web", Spec: []byte(`{"id":"web"}`)}, false, 0); err != nil {
		t.Fatal(err)
	}
	op := Rollout{Deployment: "web", OperationID: "op-0", Status: "running", Phase: "candidates", SourceSpec: []byte("{}"), FallbackSpec: []byte("{}")}
	if _, err := s.PutRollout(ctx, op, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutRollout(ctx, op, 3); !errors.Is(err, ErrConflict) {
		t.Errorf("same id again: %v, want a conflict", err)
	}
	for i := 1; i <= 4; i++ {
		o := op
		o.OperationID, o.Status = fmt.Sprintf("op-%d", i), "succeeded"
		if _, err := s.PutRollout(ctx, o, 3); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.Rollouts(ctx, "web", 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range list {
		ids = append(ids, r.OperationID)
	}
	if fmt.Sprint(ids) != "[op-4 op-3 op-2 op-0]" {
		t.Errorf("history %v, want the newest 3 and the running one", ids)
	}
	op.Status, op.Error, op.FailureSettlement = "failed", "boom", []byte(`{"stopped":["c"]}`)
	if err := s.UpdateRollout(ctx, op); err != nil {
		t.Fatal(err)
	}
	got, err := s.Rollout(ctx, "web", "op-0")
	if err != nil || got.Status != "failed" || got.Error != "boom" || string(got.FailureSettlement) != `{"stopped":["c"]}` {
		t.Errorf("after update: %+v %v", got, err)
	}
	if run, err := s.RunningRollouts(ctx); err != nil || len(run) != 0 {
		t.Errorf("running %v %v", run, err)
	}
	if err := s.DeleteDeployment(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rollout(ctx, "web", "op-0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("rollout after its deployment was deleted: %v", err)
	}
}

// TestReplicaTemplates: records by replica, listed by deployment, forgotten.
func TestReplicaTemplates(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	for _, r := range [][3]string{{"a", "r1", "k1"}, {"a", "r2", "k2"}, {"b", "r3", "k1"}} {
		if err := s.RecordReplica(ctx, r[0], r[1], r[2]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ForgetReplica(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReplicaDigests(ctx, "a")
	if err != nil || len(got) != 1 || got["r2"] != "k2" {
		t.Errorf("digests of a: %v %v", got, err)
	}
}
