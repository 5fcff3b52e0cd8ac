package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/berth-dev/berth/internal/store"
)

// RolloutsBackend is the slice of a store that keeps rollout operations
// and replica template digests, with the deployments rollouts belong to.
type RolloutsBackend interface {
	PutDeployment(ctx context.Context, d store.Deployment, createOnly bool, ifRevision int64) (store.Deployment, error)
	PutRollout(ctx context.Context, r store.Rollout, keep int) (store.Rollout, error)
	UpdateRollout(ctx context.Context, r store.Rollout) error
	Rollout(ctx context.Context, deployment, operation string) (store.Rollout, error)
	Rollouts(ctx context.Context, deployment string, limit int) ([]store.Rollout, error)
	RunningRollouts(ctx context.Context) ([]store.Rollout, error)
	RecordReplica(ctx context.Context, deployment, id, keyDigest string) error
	ReplicaDigests(ctx context.Context, deployment string) (map[string]string, error)
	ForgetReplica(ctx context.Context, id string) error
}

// RunRollouts runs the rollouts suite; open returns a fresh, empty
// backend for each subtest.
func RunRollouts(t *testing.T, open func(t *testing.T) RolloutsBackend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, RolloutsBackend)
	}{
		{"Rollouts", testRollouts},
		{"Fields", testRolloutFields},
		{"Order", testRolloutsOrder},
		{"Invalid", testRolloutsInvalid},
		{"ConcurrentSameID", testRolloutsConcurrentSameID},
		{"ConcurrentTrim", testRolloutsConcurrentTrim},
		{"ReplicaTemplates", testReplicaTemplates},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func rolloutIDs(rs []store.Rollout) string {
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.OperationID)
	}
	return fmt.Sprint(ids)
}

// testRollouts is store's TestRollouts but for the deployment's delete
// (RunDeploymentCascade).
func testRollouts(t *testing.T, s RolloutsBackend) {
	ctx := t.Context()
	if _, err := s.PutRollout(ctx, store.Rollout{Deployment: "web", OperationID: "op", Status: "running"}, 3); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rollout of a missing deployment: %v", err)
	}
	ensureDeployment(t, s, "web")
	op := store.Rollout{Deployment: "web", OperationID: "op-0", Status: "running", Phase: "candidates", SourceSpec: []byte("{}"), FallbackSpec: []byte("{}")}
	if _, err := s.PutRollout(ctx, op, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutRollout(ctx, op, 3); !errors.Is(err, store.ErrConflict) {
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
	if got := rolloutIDs(list); got != "[op-4 op-3 op-2 op-0]" {
		t.Errorf("history %v, want the newest 3 and the running one", got)
	}
	if run, err := s.RunningRollouts(ctx); err != nil || rolloutIDs(run) != "[op-0]" {
		t.Errorf("running %v %v", rolloutIDs(run), err)
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
	if err := s.UpdateRollout(ctx, store.Rollout{Deployment: "web", OperationID: "gone", Status: "failed"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("update of a missing rollout: %v", err)
	}
	if _, err := s.Rollout(ctx, "web", "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing rollout: %v", err)
	}
	// op-0 is finished now: the next put trims it.
	o := op
	o.OperationID, o.Status = "op-5", "succeeded"
	if _, err := s.PutRollout(ctx, o, 3); err != nil {
		t.Fatal(err)
	}
	if list, err := s.Rollouts(ctx, "web", -1); err != nil || rolloutIDs(list) != "[op-5 op-4 op-3]" {
		t.Errorf("history %v %v, want op-0 trimmed once finished", rolloutIDs(list), err)
	}
}

// testRolloutFields: every field comes back as put; an update changes only
// the state and the update time.
func testRolloutFields(t *testing.T, s RolloutsBackend) {
	ctx := t.Context()
	ensureDeployment(t, s, "web")
	in := store.Rollout{Deployment: "web", OperationID: "op", RequestSHA256: "abc", SourceRevision: "3", TargetRevision: "4",
		Status: "running", Phase: "candidates", ReadinessVerified: true, PreviousStopped: true, Error: "e",
		FailureSettlement: []byte(`{"a":1}`), SourceSpec: []byte(`{"s":1}`), FallbackRevision: "2", FallbackSpec: []byte(`{"f":2}`),
		CreatedAt: time.Unix(1, 0), UpdatedAt: time.Unix(2, 0)}
	lo := time.Now()
	put, err := s.PutRollout(ctx, in, 0)
	if err != nil {
		t.Fatal(err)
	}
	hi := time.Now()
	within(t, "CreatedAt", put.CreatedAt.UTC(), lo.Add(-time.Hour), hi.Add(time.Hour))
	if !put.CreatedAt.Equal(put.UpdatedAt) {
		t.Errorf("created %v, updated %v: want both now", put.CreatedAt, put.UpdatedAt)
	}
	got, err := s.Rollout(ctx, "web", "op")
	if err != nil {
		t.Fatal(err)
	}
	within(t, "stored CreatedAt", got.CreatedAt, lo.Add(-time.Hour), hi.Add(time.Hour))
	want := in
	want.CreatedAt, want.UpdatedAt = put.CreatedAt, put.UpdatedAt
	if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("stored rollout (-want +got):\n%s", d)
	}
	up := store.Rollout{Deployment: "web", OperationID: "op", Status: "reconciliation_required", Phase: "settle",
		RequestSHA256: "changed", SourceSpec: []byte(`{"changed":1}`)}
	if err := s.UpdateRollout(ctx, up); err != nil {
		t.Fatal(err)
	}
	got2, err := s.Rollout(ctx, "web", "op")
	if err != nil {
		t.Fatal(err)
	}
	want.Status, want.Phase, want.ReadinessVerified, want.PreviousStopped, want.Error, want.FailureSettlement = up.Status, up.Phase, false, false, "", nil
	want.UpdatedAt = got2.UpdatedAt
	if d := cmp.Diff(want, got2, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("updated rollout (-want +got):\n%s", d)
	}
	if got2.FailureSettlement != nil || got2.UpdatedAt.Before(got.UpdatedAt) || !got2.CreatedAt.Equal(got.CreatedAt) {
		t.Errorf("updated: settlement %q, times %v..%v (was %v..%v)", got2.FailureSettlement, got2.CreatedAt, got2.UpdatedAt, got.CreatedAt, got.UpdatedAt)
	}
}

// testRolloutsOrder: newest first by creation (not id), limited; running
// ones across deployments oldest first.
func testRolloutsOrder(t *testing.T, s RolloutsBackend) {
	ctx := t.Context()
	ensureDeployment(t, s, "a")
	ensureDeployment(t, s, "b")
	for _, x := range [][3]string{{"a", "z", "running"}, {"b", "m", "running"}, {"a", "c", "succeeded"}, {"a", "q", "running"}, {"b", "a", "failed"}} {
		if _, err := s.PutRollout(ctx, store.Rollout{Deployment: x[0], OperationID: x[1], Status: x[2], SourceSpec: []byte("{}"), FallbackSpec: []byte("{}")}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.UpdateRollout(ctx, store.Rollout{Deployment: "a", OperationID: "z", Status: "running", Phase: "p"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dep   string
		limit int
		want  string
	}{{"a", 10, "[q c z]"}, {"a", 2, "[q c]"}, {"a", 0, "[]"}, {"a", -1, "[q c z]"}, {"b", 10, "[a m]"}, {"none", 10, "[]"}} {
		if got, err := s.Rollouts(ctx, c.dep, c.limit); err != nil || rolloutIDs(got) != c.want {
			t.Errorf("Rollouts(%s, %d) = %v, %v; want %s", c.dep, c.limit, rolloutIDs(got), err, c.want)
		}
	}
	run, err := s.RunningRollouts(ctx)
	if err != nil || rolloutIDs(run) != "[z m q]" {
		t.Errorf("RunningRollouts = %v, %v; want oldest first", rolloutIDs(run), err)
	}
}

// testRolloutsInvalid: what the SQLite store's constraints refuse, after
// its checks of the id and the deployment.
func testRolloutsInvalid(t *testing.T, s RolloutsBackend) {
	ctx := t.Context()
	if _, err := s.PutRollout(ctx, store.Rollout{Deployment: "web", OperationID: "op", Status: "bogus"}, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("invalid rollout of a missing deployment: %v, want ErrNotFound", err)
	}
	if err := s.UpdateRollout(ctx, store.Rollout{Deployment: "web", OperationID: "op", Status: "bogus"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("invalid update of a missing rollout: %v, want ErrNotFound", err)
	}
	ensureDeployment(t, s, "web")
	for _, r := range []store.Rollout{
		{Deployment: "web", OperationID: "op", Status: "running", FallbackSpec: []byte("{}")},
		{Deployment: "web", OperationID: "op", Status: "running", SourceSpec: []byte("{}")},
	} {
		if _, err := s.PutRollout(ctx, r, 0); err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			t.Errorf("PutRollout with a nil spec (%+v): %v, want it refused", r, err)
		}
	}
	if _, err := s.PutRollout(ctx, store.Rollout{Deployment: "web", OperationID: "empty", Status: "running", SourceSpec: []byte{}, FallbackSpec: []byte{}}, 0); err != nil {
		t.Errorf("PutRollout with empty specs: %v", err)
	}
	if r, err := s.Rollout(ctx, "web", "empty"); err != nil || len(r.SourceSpec) != 0 || len(r.FallbackSpec) != 0 {
		t.Errorf("rollout with empty specs: %+v, %v", r, err)
	}
	if _, err := s.PutRollout(ctx, store.Rollout{Deployment: "web", OperationID: "op", Status: "bogus", SourceSpec: []byte("{}"), FallbackSpec: []byte("{}")}, 0); err == nil {
		t.Error("PutRollout took status bogus")
	}
	if _, err := s.Rollout(ctx, "web", "op"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused rollout is stored: %v", err)
	}
	if _, err := s.PutRollout(ctx, store.Rollout{Deployment: "web", OperationID: "op", Status: "running", SourceSpec: []byte("{}"), FallbackSpec: []byte("{}")}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateRollout(ctx, store.Rollout{Deployment: "web", OperationID: "op", Status: "bogus"}); err == nil {
		t.Error("UpdateRollout took status bogus")
	}
	if r, err := s.Rollout(ctx, "web", "op"); err != nil || r.Status != "running" {
		t.Errorf("after a refused update: %+v, %v", r, err)
	}
}

func testRolloutsConcurrentSameID(t *testing.T, s RolloutsBackend) {
	ctx := t.Context()
	ensureDeployment(t, s, "web")
	errs := race(8, func(i int) error {
		_, err := s.PutRollout(ctx, store.Rollout{Deployment: "web", OperationID: "op", Status: "running", Phase: fmt.Sprint(i),
			SourceSpec: []byte("{}"), FallbackSpec: []byte("{}")}, 3)
		return err
	})
	win := oneWinner(t, errs)
	if r, err := s.Rollout(ctx, "web", "op"); err != nil || r.Phase != fmt.Sprint(win) {
		t.Errorf("stored %+v, %v; want the winner's (%d)", r, err, win)
	}
}

// testRolloutsConcurrentTrim: concurrent puts keep exactly the newest
// keep, none lost within it.
func testRolloutsConcurrentTrim(t *testing.T, s RolloutsBackend) {
	ctx := t.Context()
	ensureDeployment(t, s, "web")
	const writers, each, keep = 6, 3, 4
	errs := race(writers, func(i int) error {
		for k := range each {
			if _, err := s.PutRollout(ctx, store.Rollout{Deployment: "web", OperationID: fmt.Sprintf("w%d-%d", i, k), Status: "succeeded",
				SourceSpec: []byte("{}"), FallbackSpec: []byte("{}")}, keep); err != nil {
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
	rs, err := s.Rollouts(ctx, "web", -1)
	if err != nil || len(rs) != keep {
		t.Errorf("%d rollouts (%v), %v; want exactly %d", len(rs), rolloutIDs(rs), err, keep)
	}
	// Each writer's own are in order: its later one never trimmed before
	// its earlier one.
	for i := range writers {
		var mine []int
		for _, r := range rs {
			var w, k int
			fmt.Sscanf(r.OperationID, "w%d-%d", &w, &k)
			if w == i {
				mine = append(mine, k)
			}
		}
		if !slices.IsSortedFunc(mine, func(a, b int) int { return b - a }) || (len(mine) > 0 && mine[0] != each-1) {
			t.Errorf("writer %d's kept rollouts %v, want its newest ones, newest first", i, mine)
		}
	}
}

// testReplicaTemplates is store's TestReplicaTemplates, plus a replica
// moving to another deployment.
func testReplicaTemplates(t *testing.T, s RolloutsBackend) {
	ctx := t.Context()
	if got, err := s.ReplicaDigests(ctx, "a"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("digests on an empty store: %#v %v", got, err)
	}
	for _, r := range [][3]string{{"a", "r1", "k1"}, {"a", "r2", "k2"}, {"b", "r3", "k1"}} {
		if err := s.RecordReplica(ctx, r[0], r[1], r[2]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ForgetReplica(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetReplica(ctx, "never"); err != nil {
		t.Errorf("forgetting an unknown replica: %v", err)
	}
	got, err := s.ReplicaDigests(ctx, "a")
	if err != nil || !cmp.Equal(got, map[string]string{"r2": "k2"}) {
		t.Errorf("digests of a: %v %v", got, err)
	}
	if err := s.RecordReplica(ctx, "b", "r2", "k9"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReplicaDigests(ctx, "a"); err != nil || len(got) != 0 {
		t.Errorf("digests of a after r2 moved: %v %v", got, err)
	}
	if got, err := s.ReplicaDigests(ctx, "b"); err != nil || !cmp.Equal(got, map[string]string{"r2": "k9", "r3": "k1"}) {
		t.Errorf("digests of b: %v %v", got, err)
	}
}
