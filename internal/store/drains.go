package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// UpstreamDrain is a persisted cordon/drain of one static upstream of a
// deployment (app-lb.md §2.3, PUT /deployments/:id/upstreams/:upstream/drain).
// It is persisted so that a restart does not silently put a cordoned
// upstream back into rotation.
type UpstreamDrain struct {
	Deployment string
	Upstream   string
	Reason     string
	StartedAt  time.Time
}

// UpstreamDrains returns every persisted drain, sorted by deployment and
// then upstream.
func (s *Store) UpstreamDrains(ctx context.Context) ([]UpstreamDrain, error) {
	rows, err := s.r.QueryContext(ctx,
		`SELECT deployment, upstream, reason, started_at FROM upstream_drains ORDER BY deployment, upstream`)
	if err != nil {
		return nil, fmt.Errorf("store: list upstream drains: %w", err)
	}
	defer rows.Close()
	var ds []UpstreamDrain
	for rows.Next() {
		var (
			d       UpstreamDrain
			started string
		)
		if err := rows.Scan(&d.Deployment, &d.Upstream, &d.Reason, &started); err != nil {
			return nil, fmt.Errorf("store: read upstream drain: %w", err)
		}
		if d.StartedAt, err = parseTime("started_at", started); err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list upstream drains: %w", err)
	}
	return ds, nil
}

// PutUpstreamDrain records d, replacing any drain of the same deployment
// and upstream. A zero StartedAt is stored as the current time. It returns
// an error wrapping ErrNotFound if the deployment does not exist, because a
// drain must not outlive (or predate) its deployment.
func (s *Store) PutUpstreamDrain(ctx context.Context, d UpstreamDrain) error {
	if d.Deployment == "" || d.Upstream == "" {
		return fmt.Errorf("store: upstream drain needs a deployment and an upstream (got %q, %q)", d.Deployment, d.Upstream)
	}
	if d.StartedAt.IsZero() {
		d.StartedAt = s.now()
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM deployments WHERE id = ?`, d.Deployment).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: deployment %q", ErrNotFound, d.Deployment)
		}
		if err != nil {
			return fmt.Errorf("store: read deployment %q: %w", d.Deployment, err)
		}
		_, err = tx.ExecContext(ctx,
			`INSERT INTO upstream_drains (deployment, upstream, reason, started_at) VALUES (?, ?, ?, ?)
			 ON CONFLICT (deployment, upstream) DO UPDATE SET reason = excluded.reason, started_at = excluded.started_at`,
			d.Deployment, d.Upstream, d.Reason, formatTime(d.StartedAt))
		if err != nil {
			return fmt.Errorf("store: put upstream drain %q/%q: %w", d.Deployment, d.Upstream, err)
		}
		return nil
	})
}

// DeleteUpstreamDrain removes the drain of one upstream (uncordon). It is
// idempotent: deleting a drain that does not exist is not an error, so a
// retried uncordon succeeds.
func (s *Store) DeleteUpstreamDrain(ctx context.Context, deployment, upstream string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx,
			`DELETE FROM upstream_drains WHERE deployment = ? AND upstream = ?`, deployment, upstream)
		if err != nil {
			return fmt.Errorf("store: delete upstream drain %q/%q: %w", deployment, upstream, err)
		}
		return nil
	})
}
