package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Webhook is one security alert webhook (package notify). Sealed is opaque
// here: the notifier seals the webhook's URL and signing key into it, so
// neither is stored in plaintext.
type Webhook struct {
	ID          string
	Sealed      []byte
	MinSeverity string
	Note        string
	CreatedAt   time.Time
	WebhookCounts
}

// WebhookCounts are a webhook's delivery counts. As a delta
// (AddWebhookCounts) the numbers are added, and LastError and
// LastDeliveryAt replace the stored ones when set.
type WebhookCounts struct {
	Delivered, Failed, DeadLettered int64
	LastError                       string
	// ClearError, in a delta, empties the stored LastError (a delivery
	// succeeded after it) unless LastError sets a new one.
	ClearError     bool
	LastDeliveryAt time.Time // zero: never, or unchanged in a delta
}

// Webhooks returns every webhook, oldest first.
func (s *Store) Webhooks(ctx context.Context) ([]Webhook, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, sealed, min_severity, note, created_at, delivered, failed,
		dead_lettered, last_error, last_delivery_at FROM webhooks ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list webhooks: %w", err)
	}
	defer rows.Close()
	var out []Webhook
	for rows.Next() {
		var w Webhook
		var created, last string
		if err := rows.Scan(&w.ID, &w.Sealed, &w.MinSeverity, &w.Note, &created, &w.Delivered, &w.Failed,
			&w.DeadLettered, &w.LastError, &last); err != nil {
			return nil, fmt.Errorf("store: read webhook: %w", err)
		}
		if w.CreatedAt, err = parseTime("created_at", created); err != nil {
			return nil, err
		}
		if last != "" {
			if w.LastDeliveryAt, err = parseTime("last_delivery_at", last); err != nil {
				return nil, err
			}
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list webhooks: %w", err)
	}
	return out, nil
}

// PutWebhook inserts a webhook; an existing id is ErrConflict. Its counts
// are stored as given.
func (s *Store) PutWebhook(ctx context.Context, w Webhook) error {
	if w.ID == "" || len(w.Sealed) == 0 {
		return errors.New("store: a webhook needs an id and its sealed configuration")
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		var last string
		if !w.LastDeliveryAt.IsZero() {
			last = formatTime(w.LastDeliveryAt)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO webhooks (id, sealed, min_severity, note, created_at,
			delivered, failed, dead_lettered, last_error, last_delivery_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			w.ID, w.Sealed, w.MinSeverity, w.Note, formatTime(w.CreatedAt), w.Delivered, w.Failed,
			w.DeadLettered, w.LastError, last)
		if err != nil {
			return fmt.Errorf("store: put webhook %q: %w", w.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("store: webhook %q: %w", w.ID, ErrConflict)
		}
		return nil
	})
}

// DeleteWebhook removes a webhook, or returns an error wrapping
// ErrNotFound.
func (s *Store) DeleteWebhook(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM webhooks WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("store: delete webhook %q: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("store: webhook %q: %w", id, ErrNotFound)
		}
		return nil
	})
}

// AddWebhookCounts adds deltas to the webhooks' counts in one transaction.
// A delta for a webhook that no longer exists is dropped.
func (s *Store) AddWebhookCounts(ctx context.Context, deltas map[string]WebhookCounts) error {
	if len(deltas) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		for id, d := range deltas {
			var last string
			if !d.LastDeliveryAt.IsZero() {
				last = formatTime(d.LastDeliveryAt)
			}
			_, err := tx.ExecContext(ctx, `UPDATE webhooks SET delivered = delivered + ?, failed = failed + ?,
				dead_lettered = dead_lettered + ?,
				last_error = CASE WHEN ? != '' THEN ? WHEN ? THEN '' ELSE last_error END,
				last_delivery_at = CASE WHEN ? != '' THEN ? ELSE last_delivery_at END
				WHERE id = ?`,
				d.Delivered, d.Failed, d.DeadLettered, d.LastError, d.LastError, d.ClearError, last, last, id)
			if err != nil {
				return fmt.Errorf("store: count webhook %q: %w", id, err)
			}
		}
		return nil
	})
}
