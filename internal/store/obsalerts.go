package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ObsAlert is one obs alert rule (package obs). Sealed is opaque here:
// the rule's webhook URL, sealed by package obs.
type ObsAlert struct {
	ID         string
	Namespace  string
	Deployment string
	Metric     string
	Threshold  float64
	Sealed     []byte
	CreatedAt  time.Time
}

// ObsAlerts returns every obs alert rule, oldest first.
func (s *Store) ObsAlerts(ctx context.Context) ([]ObsAlert, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, namespace, deployment, metric, threshold, sealed, created_at
		FROM obs_alerts ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list obs alerts: %w", err)
	}
	defer rows.Close()
	var out []ObsAlert
	for rows.Next() {
		var a ObsAlert
		var created string
		if err := rows.Scan(&a.ID, &a.Namespace, &a.Deployment, &a.Metric, &a.Threshold, &a.Sealed, &created); err != nil {
			return nil, fmt.Errorf("store: read obs alert: %w", err)
		}
		if a.CreatedAt, err = parseTime("created_at", created); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list obs alerts: %w", err)
	}
	return out, nil
}

// PutObsAlert inserts a rule; an existing id is ErrConflict.
func (s *Store) PutObsAlert(ctx context.Context, a ObsAlert) error {
	if a.ID == "" || a.Namespace == "" || len(a.Sealed) == 0 {
		return errors.New("store: an obs alert needs an id, a namespace and its sealed webhook")
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO obs_alerts (id, namespace, deployment, metric, threshold, sealed, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			a.ID, a.Namespace, a.Deployment, a.Metric, a.Threshold, a.Sealed, formatTime(a.CreatedAt))
		if err != nil {
			return fmt.Errorf("store: put obs alert %q: %w", a.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("store: obs alert %q: %w", a.ID, ErrConflict)
		}
		return nil
	})
}

// DeleteObsAlert removes namespace ns's rule id, or returns an error
// wrapping ErrNotFound (also when the rule is another namespace's).
func (s *Store) DeleteObsAlert(ctx context.Context, ns, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM obs_alerts WHERE namespace = ? AND id = ?`, ns, id)
		if err != nil {
			return fmt.Errorf("store: delete obs alert %q: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("store: obs alert %q: %w", id, ErrNotFound)
		}
		return nil
	})
}
