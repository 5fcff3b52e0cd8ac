package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// RateLimit is one deployment's per-client rate limit (package ratelimit),
// as stored: the values already validated and defaulted by its owner.
type RateLimit struct {
	Deployment          string
	RequestsPerSec      float64 // 0: no rate limit
	Burst               int     // 0 exactly when RequestsPerSec is
	ConcurrentPerClient int     // 0: unlimited
	MaxClients          int
	// UpdatedAt is set by the store (UTC); PutRateLimit ignores the value
	// passed in.
	UpdatedAt time.Time
}

// RateLimits returns every stored rate limit, sorted by deployment.
func (s *Store) RateLimits(ctx context.Context) ([]RateLimit, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT deployment, requests_per_sec, burst, concurrent_per_client,
		max_clients, updated_at FROM rate_limits ORDER BY deployment`)
	if err != nil {
		return nil, fmt.Errorf("store: list rate limits: %w", err)
	}
	defer rows.Close()
	var out []RateLimit
	for rows.Next() {
		var x RateLimit
		var updated string
		if err := rows.Scan(&x.Deployment, &x.RequestsPerSec, &x.Burst, &x.ConcurrentPerClient, &x.MaxClients, &updated); err != nil {
			return nil, fmt.Errorf("store: read rate limit: %w", err)
		}
		if x.UpdatedAt, err = parseTime("updated_at", updated); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list rate limits: %w", err)
	}
	return out, nil
}

// PutRateLimit inserts or replaces the rate limit of x.Deployment, in one
// transaction, and returns it as stored. It returns an error wrapping
// ErrNotFound if there is no such deployment. DeleteDeployment removes the
// limit with its deployment.
func (s *Store) PutRateLimit(ctx context.Context, x RateLimit) (RateLimit, error) {
	x.UpdatedAt = s.now().UTC().Round(0)
	err := s.write(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM deployments WHERE id = ?`, x.Deployment).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: deployment %q", ErrNotFound, x.Deployment)
		}
		if err != nil {
			return fmt.Errorf("store: read deployment %q: %w", x.Deployment, err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO rate_limits (deployment, requests_per_sec, burst,
			concurrent_per_client, max_clients, updated_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (deployment) DO UPDATE SET requests_per_sec = excluded.requests_per_sec,
			burst = excluded.burst, concurrent_per_client = excluded.concurrent_per_client,
			max_clients = excluded.max_clients, updated_at = excluded.updated_at`,
			x.Deployment, x.RequestsPerSec, x.Burst, x.ConcurrentPerClient, x.MaxClients, formatTime(x.UpdatedAt))
		if err != nil {
			return fmt.Errorf("store: put rate limit of %q: %w", x.Deployment, err)
		}
		return nil
	})
	if err != nil {
		return RateLimit{}, err
	}
	return x, nil
}

// DeleteRateLimit removes the rate limit of a deployment. It returns an
// error wrapping ErrNotFound if the deployment has none.
func (s *Store) DeleteRateLimit(ctx context.Context, deployment string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM rate_limits WHERE deployment = ?`, deployment)
		if err != nil {
			return fmt.Errorf("store: delete rate limit of %q: %w", deployment, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("store: delete rate limit of %q: %w", deployment, err)
		} else if n == 0 {
			return fmt.Errorf("%w: rate limit of deployment %q", ErrNotFound, deployment)
		}
		return nil
	})
}
