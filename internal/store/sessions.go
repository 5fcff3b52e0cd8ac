package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Session is one sign-in session of a deployment's auth gate, without its
// secret: SecretSHA256 is the hex SHA-256 of the cookie's value.
type Session struct {
	ID           string
	SecretSHA256 string
	Deployment   string
	Namespace    string
	Fingerprint  string
	Issuer       string
	Subject      string
	Email        string
	Name         string
	TokenID      string
	CreatedAt    time.Time
	ExpiresAt    time.Time
	LastSeenAt   time.Time
}

// Sessions returns every stored session.
func (s *Store) Sessions(ctx context.Context) ([]Session, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, secret_sha256, deployment, namespace, fingerprint, issuer,
		subject, email, name, token_id, created_at, expires_at, last_seen_at FROM sessions ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: list sessions: %w", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		var x Session
		var created, expires, seen string
		if err := rows.Scan(&x.ID, &x.SecretSHA256, &x.Deployment, &x.Namespace, &x.Fingerprint, &x.Issuer,
			&x.Subject, &x.Email, &x.Name, &x.TokenID, &created, &expires, &seen); err != nil {
			return nil, fmt.Errorf("store: read session: %w", err)
		}
		if x.CreatedAt, err = parseTime("created_at", created); err != nil {
			return nil, err
		}
		if x.ExpiresAt, err = parseTime("expires_at", expires); err != nil {
			return nil, err
		}
		if x.LastSeenAt, err = parseTime("last_seen_at", seen); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// PutSession inserts or replaces a session.
func (s *Store) PutSession(ctx context.Context, x Session) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, secret_sha256, deployment, namespace, fingerprint,
			issuer, subject, email, name, token_id, created_at, expires_at, last_seen_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET token_id = excluded.token_id, last_seen_at = excluded.last_seen_at,
			expires_at = excluded.expires_at`,
			x.ID, x.SecretSHA256, x.Deployment, x.Namespace, x.Fingerprint, x.Issuer, x.Subject, x.Email, x.Name,
			x.TokenID, formatTime(x.CreatedAt), formatTime(x.ExpiresAt), formatTime(x.LastSeenAt))
		if err != nil {
			return fmt.Errorf("store: put session %q: %w", x.ID, err)
		}
		return nil
	})
}

// TouchSessions records when sessions were last seen, in one transaction.
func (s *Store) TouchSessions(ctx context.Context, seen map[string]time.Time) error {
	if len(seen) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		for id, at := range seen {
			if _, err := tx.ExecContext(ctx, `UPDATE sessions SET last_seen_at = ? WHERE id = ?`, formatTime(at), id); err != nil {
				return fmt.Errorf("store: touch session %q: %w", id, err)
			}
		}
		return nil
	})
}

// DeleteSessions removes sessions by id, in one transaction.
func (s *Store) DeleteSessions(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id); err != nil {
				return fmt.Errorf("store: delete session %q: %w", id, err)
			}
		}
		return nil
	})
}
