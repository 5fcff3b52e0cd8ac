package etcdstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// Deployments returns every stored deployment, sorted by ID.
func (s *Store) Deployments(ctx context.Context) ([]store.Deployment, error) {
	ds, err := list[store.Deployment](ctx, s, "deployments", "deployments")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ds, func(a, b store.Deployment) int { return cmp.Compare(a.ID, b.ID) })
	return ds, nil
}

// Deployment returns the deployment with the given id, or an error wrapping
// store.ErrNotFound.
func (s *Store) Deployment(ctx context.Context, id string) (store.Deployment, error) {
	var d store.Deployment
	found, err := s.get(ctx, s.key("deployments", id), fmt.Sprintf("deployment %q", id), &d)
	if err != nil {
		return store.Deployment{}, err
	}
	if !found {
		return store.Deployment{}, fmt.Errorf("%w: deployment %q", store.ErrNotFound, id)
	}
	return d, nil
}

// PutDeployment inserts d or replaces the stored deployment with the same
// ID, in one transaction, and returns the record as stored (with its new
// Revision and timestamps), exactly as store.Store.PutDeployment: createOnly
// on an existing ID, or ifRevision > 0 on a missing deployment or one at
// another revision, returns an error wrapping store.ErrConflict. A replace
// keeps CreatedAt and bumps Revision; an insert starts at 1.
func (s *Store) PutDeployment(ctx context.Context, d store.Deployment, createOnly bool, ifRevision int64) (store.Deployment, error) {
	if d.ID == "" {
		return store.Deployment{}, errors.New("etcdstore: deployment id must not be empty")
	}
	if ifRevision < 0 {
		return store.Deployment{}, fmt.Errorf("etcdstore: deployment %q: negative expected revision %d", d.ID, ifRevision)
	}
	if !json.Valid(d.Spec) {
		return store.Deployment{}, fmt.Errorf("etcdstore: deployment %q: spec is not valid JSON", d.ID)
	}
	now := norm(s.now())
	var out store.Deployment
	err := s.update(ctx, s.key("deployments", d.ID), fmt.Sprintf("deployment %q", d.ID), func(cur []byte) ([]byte, error) {
		out = store.Deployment{ID: d.ID, Namespace: d.Namespace, Spec: bytes.Clone(d.Spec), Revision: 1, CreatedAt: now, UpdatedAt: now}
		var old store.Deployment
		exists := cur != nil
		if exists {
			if err := json.Unmarshal(cur, &old); err != nil {
				return nil, fmt.Errorf("etcdstore: corrupt deployment %q: %w", d.ID, err)
			}
		}
		switch {
		case createOnly && exists:
			return nil, fmt.Errorf("%w: deployment %q already exists", store.ErrConflict, d.ID)
		case ifRevision > 0 && !exists:
			return nil, fmt.Errorf("%w: deployment %q does not exist (expected revision %d)", store.ErrConflict, d.ID, ifRevision)
		case ifRevision > 0 && old.Revision != ifRevision:
			return nil, fmt.Errorf("%w: deployment %q is at revision %d, not %d", store.ErrConflict, d.ID, old.Revision, ifRevision)
		}
		if exists {
			out.CreatedAt = old.CreatedAt
			out.Revision = old.Revision + 1
		}
		return json.Marshal(out)
	})
	if err != nil {
		return store.Deployment{}, err
	}
	return out, nil
}

// DeleteDeployment deletes the deployment with the given id, and with it
// its upstream drains and rate limit, in one transaction, or returns an
// error wrapping store.ErrNotFound.
func (s *Store) DeleteDeployment(ctx context.Context, id string) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	key := s.key("deployments", id)
	t, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpDelete(key),
			clientv3.OpDelete(s.key("upstreamdrains", id)+"/", clientv3.WithPrefix()),
			clientv3.OpDelete(s.key("ratelimits", id)),
			clientv3.OpDelete(s.key("pulls", id)+"/", clientv3.WithPrefix()),
			clientv3.OpDelete(s.key("rollouts", id)+"/", clientv3.WithPrefix())).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: delete deployment %q: %w", id, err)
	}
	if !t.Succeeded {
		return fmt.Errorf("%w: deployment %q", store.ErrNotFound, id)
	}
	return nil
}
