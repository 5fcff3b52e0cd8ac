package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/berth-dev/berth/internal/store"
)

// UpstreamDrains returns every persisted drain, sorted by deployment and
// then upstream.
func (s *Store) UpstreamDrains(ctx context.Context) ([]store.UpstreamDrain, error) {
	ds, err := list[store.UpstreamDrain](ctx, s, "upstreamdrains", "upstream drains")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ds, func(a, b store.UpstreamDrain) int {
		return cmp.Or(cmp.Compare(a.Deployment, b.Deployment), cmp.Compare(a.Upstream, b.Upstream))
	})
	return ds, nil
}

// PutUpstreamDrain records d, replacing any drain of the same deployment
// and upstream, in one transaction that also checks the deployment
// exists (an error wrapping store.ErrNotFound when it does not). A zero
// StartedAt is stored as the current time. DeleteDeployment deletes the
// deployment's drains with it.
func (s *Store) PutUpstreamDrain(ctx context.Context, d store.UpstreamDrain) error {
	if d.Deployment == "" || d.Upstream == "" {
		return fmt.Errorf("etcdstore: upstream drain needs a deployment and an upstream (got %q, %q)", d.Deployment, d.Upstream)
	}
	if d.StartedAt.IsZero() {
		d.StartedAt = s.now()
	}
	d.StartedAt = norm(d.StartedAt)
	what := fmt.Sprintf("upstream drain %q/%q", d.Deployment, d.Upstream)
	body, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("etcdstore: %s: %w", what, err)
	}
	found, err := s.putIfDeployment(ctx, d.Deployment, s.key("upstreamdrains", d.Deployment, d.Upstream), what, body)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%w: deployment %q", store.ErrNotFound, d.Deployment)
	}
	return nil
}

// DeleteUpstreamDrain removes the drain of one upstream (uncordon), in one
// transaction. Deleting a drain that does not exist is not an error.
func (s *Store) DeleteUpstreamDrain(ctx context.Context, deployment, upstream string) error {
	return s.deleteKeys(ctx, []string{s.key("upstreamdrains", deployment, upstream)},
		fmt.Sprintf("upstream drain %q/%q", deployment, upstream))
}
