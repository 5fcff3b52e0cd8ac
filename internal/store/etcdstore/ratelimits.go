package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/berth-dev/berth/internal/store"
)

// RateLimits returns every stored rate limit, sorted by deployment.
func (s *Store) RateLimits(ctx context.Context) ([]store.RateLimit, error) {
	xs, err := list[store.RateLimit](ctx, s, "ratelimits", "rate limits")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(xs, func(a, b store.RateLimit) int { return cmp.Compare(a.Deployment, b.Deployment) })
	return xs, nil
}

// PutRateLimit inserts or replaces the rate limit of x.Deployment, in one
// transaction that also checks the deployment exists (an error wrapping
// store.ErrNotFound when it does not), and returns it as stored, with
// UpdatedAt set to now. The SQLite table's checks hold: requests per
// second, burst and concurrency >= 0, max clients >= 1. DeleteDeployment removes the limit with its
// deployment.
func (s *Store) PutRateLimit(ctx context.Context, x store.RateLimit) (store.RateLimit, error) {
	switch {
	case x.RequestsPerSec < 0 || math.IsNaN(x.RequestsPerSec) || math.IsInf(x.RequestsPerSec, 0):
		return store.RateLimit{}, fmt.Errorf("etcdstore: rate limit of %q: requests_per_sec %v must be a finite number >= 0", x.Deployment, x.RequestsPerSec)
	case x.Burst < 0:
		return store.RateLimit{}, fmt.Errorf("etcdstore: rate limit of %q: burst %d must be >= 0", x.Deployment, x.Burst)
	case x.ConcurrentPerClient < 0:
		return store.RateLimit{}, fmt.Errorf("etcdstore: rate limit of %q: concurrent_per_client %d must be >= 0", x.Deployment, x.ConcurrentPerClient)
	case x.MaxClients < 1:
		return store.RateLimit{}, fmt.Errorf("etcdstore: rate limit of %q: max_clients %d must be >= 1", x.Deployment, x.MaxClients)
	}
	x.UpdatedAt = norm(s.now())
	what := fmt.Sprintf("rate limit of %q", x.Deployment)
	body, err := json.Marshal(x)
	if err != nil {
		return store.RateLimit{}, fmt.Errorf("etcdstore: %s: %w", what, err)
	}
	found, err := s.putIfDeployment(ctx, x.Deployment, s.key("ratelimits", x.Deployment), what, body)
	if err != nil {
		return store.RateLimit{}, err
	}
	if !found {
		return store.RateLimit{}, fmt.Errorf("%w: deployment %q", store.ErrNotFound, x.Deployment)
	}
	return x, nil
}

// DeleteRateLimit removes the rate limit of a deployment, in one
// transaction, or returns an error wrapping store.ErrNotFound if the
// deployment has none.
func (s *Store) DeleteRateLimit(ctx context.Context, deployment string) error {
	return s.remove(ctx, s.key("ratelimits", deployment), fmt.Sprintf("rate limit of deployment %q", deployment), store.ErrNotFound)
}
