package etcdstore

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// workspaceRec is a deployment's workspace (workspaces/<deployment>) with
// the CreateRevision of the deployment's key when it was put: a record
// whose deployment was deleted (or deleted and created again) since is
// not that deployment's, so DeleteDeployment need not know of workspaces.
type workspaceRec struct {
	store.Workspace
	DeploymentRev int64
}

// Workspace returns deployment's recorded workspace, ok false when it has
// none (or the deployment is gone, or was created again since).
func (s *Store) Workspace(ctx context.Context, deployment string) (store.Workspace, bool, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.key("workspaces", deployment)),
		clientv3.OpGet(s.key("deployments", deployment)),
	).Commit()
	if err != nil {
		return store.Workspace{}, false, fmt.Errorf("etcdstore: read the workspace of %q: %w", deployment, err)
	}
	wkv, dkv := kvAt(r, 0), kvAt(r, 1)
	if wkv == nil || dkv == nil {
		return store.Workspace{}, false, nil
	}
	w, err := decodeKV[workspaceRec](wkv, "workspace")
	if err != nil {
		return store.Workspace{}, false, err
	}
	if w.DeploymentRev != dkv.CreateRevision {
		return store.Workspace{}, false, nil
	}
	return w.Workspace, true, nil
}

// PutWorkspace records w as its deployment's workspace, replacing what was
// recorded, in one transaction that commits only if the deployment
// exists. It returns an error wrapping store.ErrNotFound if there is no
// such deployment.
func (s *Store) PutWorkspace(ctx context.Context, w store.Workspace) error {
	if w.Deployment == "" {
		return errors.New("etcdstore: workspace: deployment must not be empty")
	}
	if w.Files < 0 || w.Bytes < 0 {
		return fmt.Errorf("etcdstore: workspace of %q: negative files or bytes", w.Deployment)
	}
	w.CapturedAt, w.PushedAt = norm(w.CapturedAt), norm(w.PushedAt)
	dk, wk := s.key("deployments", w.Deployment), s.key("workspaces", w.Deployment)
	reads := []clientv3.Op{clientv3.OpGet(dk, clientv3.WithKeysOnly())}
	return s.rmw(ctx, fmt.Sprintf("the workspace of %q", w.Deployment), reads, func(_ context.Context, r *clientv3.TxnResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		dkv := kvAt(r, 0)
		if dkv == nil {
			return nil, nil, fmt.Errorf("%w: deployment %q", store.ErrNotFound, w.Deployment)
		}
		put, err := putJSON(wk, workspaceRec{Workspace: w, DeploymentRev: dkv.CreateRevision})
		if err != nil {
			return nil, nil, err
		}
		return []clientv3.Cmp{sameKey(dk, dkv)}, []clientv3.Op{put}, nil
	})
}
