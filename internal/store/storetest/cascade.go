package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-dev/berth/internal/store"
)

// CascadeBackend is the slice of a store whose deployment delete takes
// the deployment's mount and artifact pulls and its rollouts with it.
type CascadeBackend interface {
	MountPullsBackend
	DeleteDeployment(ctx context.Context, id string) error
	PutRollout(ctx context.Context, r store.Rollout, keep int) (store.Rollout, error)
	Rollout(ctx context.Context, deployment, operation string) (store.Rollout, error)
	Rollouts(ctx context.Context, deployment string, limit int) ([]store.Rollout, error)
}

// RunDeploymentCascade checks that deleting a deployment deletes its
// pulls and rollouts (the SQLite store's DeleteDeployment and foreign
// keys), and only its own: not those of a deployment whose id it
// prefixes. open returns a fresh, empty backend.
func RunDeploymentCascade(t *testing.T, open func(t *testing.T) CascadeBackend) {
	s := open(t)
	ctx := t.Context()
	for _, id := range []string{"web", "web2", "web/x"} {
		ensureDeployment(t, s, id)
		if err := s.PutMountPulls(ctx, id, []store.MountPull{{Deployment: id, Path: "/data", Ref: id}}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutArtifactPull(ctx, store.MountPull{Deployment: id, Ref: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutRollout(ctx, store.Rollout{Deployment: id, OperationID: "op", Status: "succeeded",
			SourceSpec: []byte("{}"), FallbackSpec: []byte("{}")}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteDeployment(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.MountPulls(ctx, "web"); len(got) != 0 {
		t.Errorf("mount pulls outlived their deployment: %+v", got)
	}
	if _, ok, _ := s.ArtifactPull(ctx, "web"); ok {
		t.Error("the artifact pull outlived its deployment")
	}
	if _, err := s.Rollout(ctx, "web", "op"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("rollout after its deployment was deleted: %v", err)
	}
	for _, id := range []string{"web2", "web/x"} {
		if got, _ := s.MountPulls(ctx, id); len(got) != 1 || got[0].Ref != id {
			t.Errorf("%s's mount pulls: %+v", id, got)
		}
		if a, ok, _ := s.ArtifactPull(ctx, id); !ok || a.Ref != id {
			t.Errorf("%s's artifact pull: %+v %v", id, a, ok)
		}
		if rs, _ := s.Rollouts(ctx, id, -1); len(rs) != 1 {
			t.Errorf("%s's rollouts: %+v", id, rs)
		}
	}
	// A new deployment of the id starts with none.
	ensureDeployment(t, s, "web")
	if rs, _ := s.Rollouts(ctx, "web", -1); len(rs) != 0 {
		t.Errorf("a recreated deployment has rollouts: %+v", rs)
	}
	if _, ok, _ := s.ArtifactPull(ctx, "web"); ok {
		t.Error("a recreated deployment has an artifact pull")
	}
}
