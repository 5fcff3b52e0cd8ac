package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// SecurityAlert is one stored alert of the SIEM (package siem). JSON is the
// alert's wire form, opaque here beyond being valid JSON; the other fields
// are copies of it kept as columns for filtering and trimming. LastTs is
// Unix milliseconds.
type SecurityAlert struct {
	ID         int64
	Rule       string
	Severity   string
	Deployment string
	Namespace  string
	LastTs     int64
	JSON       []byte
}

// SecurityAlerts returns every stored alert in id order (oldest first) and
// the last id ever stored, which is at least the largest id returned.
func (s *Store) SecurityAlerts(ctx context.Context) ([]SecurityAlert, int64, error) {
	var last int64
	err := s.r.QueryRowContext(ctx, `SELECT last_id FROM security_alert_seq WHERE one = 1`).Scan(&last)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, 0, fmt.Errorf("store: read alert sequence: %w", err)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, rule, severity, deployment, namespace, last_ts, alert
		FROM security_alerts ORDER BY id`)
	if err != nil {
		return nil, 0, fmt.Errorf("store: list security alerts: %w", err)
	}
	defer rows.Close()
	var out []SecurityAlert
	for rows.Next() {
		var a SecurityAlert
		var body string
		if err := rows.Scan(&a.ID, &a.Rule, &a.Severity, &a.Deployment, &a.Namespace, &a.LastTs, &body); err != nil {
			return nil, 0, fmt.Errorf("store: read security alert: %w", err)
		}
		a.JSON = []byte(body)
		last = max(last, a.ID)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("store: list security alerts: %w", err)
	}
	return out, last, nil
}

// PutSecurityAlerts inserts or replaces alerts by id, advances the id
// sequence past them, and then, if keep > 0, deletes all but the keep
// alerts with the largest ids: one transaction.
func (s *Store) PutSecurityAlerts(ctx context.Context, alerts []SecurityAlert, keep int) error {
	for _, a := range alerts {
		if a.ID <= 0 {
			return fmt.Errorf("store: security alert id %d: must be positive", a.ID)
		}
		if !json.Valid(a.JSON) {
			return fmt.Errorf("store: security alert %d: body is not valid JSON", a.ID)
		}
	}
	if len(alerts) == 0 && keep <= 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		var top int64
		for _, a := range alerts {
			_, err := tx.ExecContext(ctx, `INSERT INTO security_alerts (id, rule, severity, deployment, namespace, last_ts, alert)
				VALUES (?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET rule = excluded.rule, severity = excluded.severity,
				deployment = excluded.deployment, namespace = excluded.namespace, last_ts = excluded.last_ts,
				alert = excluded.alert`,
				a.ID, a.Rule, a.Severity, a.Deployment, a.Namespace, a.LastTs, string(a.JSON))
			if err != nil {
				return fmt.Errorf("store: put security alert %d: %w", a.ID, err)
			}
			top = max(top, a.ID)
		}
		if top > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO security_alert_seq (one, last_id) VALUES (1, ?)
				ON CONFLICT (one) DO UPDATE SET last_id = max(last_id, excluded.last_id)`, top); err != nil {
				return fmt.Errorf("store: advance alert sequence: %w", err)
			}
		}
		if keep > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM security_alerts WHERE id <
				(SELECT id FROM security_alerts ORDER BY id DESC LIMIT 1 OFFSET ?)`, keep-1); err != nil {
				return fmt.Errorf("store: trim security alerts: %w", err)
			}
		}
		return nil
	})
}
