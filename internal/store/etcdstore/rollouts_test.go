package etcdstore

import (
	"fmt"
	"testing"

	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestRolloutsSuite runs the rollouts suite on a real etcd member.
func TestRolloutsSuite(t *testing.T) {
	open, _ := openJobsSuite(t)
	storetest.RunRollouts(t, func(t *testing.T) storetest.RolloutsBackend { return open(t) })
}

// TestDeploymentCascadeSuite: DeleteDeployment deletes the deployment's
// pulls and rollouts with it, as SQLite's cascade does.
func TestDeploymentCascadeSuite(t *testing.T) {
	open, _ := openJobsSuite(t)
	storetest.RunDeploymentCascade(t, func(t *testing.T) storetest.CascadeBackend { return open(t) })
}

// TestPutRolloutTrimMany: more rollouts past keep than one etcd
// transaction can delete.
func TestPutRolloutTrimMany(t *testing.T) {
	open, _ := openJobsSuite(t)
	s := open(t)
	ctx := t.Context()
	if _, err := s.PutDeployment(ctx, store.Deployment{ID: "web", Spec: []byte(`{}`)}, true, 0); err != nil {
		t.Fatal(err)
	}
	put := func(id, status string, keep int) {
		t.Helper()
		if _, err := s.PutRollout(ctx, store.Rollout{Deployment: "web", OperationID: id, Status: status, SourceSpec: []byte("{}"), FallbackSpec: []byte("{}")}, keep); err != nil {
			t.Fatalf("PutRollout(%s): %v", id, err)
		}
	}
	const n = 2*maxTxnOps + 7
	put("run", "running", 0)
	for i := range n {
		put(fmt.Sprintf("op%04d", i), "succeeded", 0)
	}
	put("last", "failed", 2)
	rs, err := s.Rollouts(ctx, "web", -1)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.OperationID)
	}
	want := fmt.Sprintf("[last op%04d run]", n-1)
	if fmt.Sprint(ids) != want {
		t.Errorf("rollouts %v, want %s", ids, want)
	}
}
