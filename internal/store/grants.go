package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Grant is one issued Computer grant (package grant). Payload is the grant
// exactly as it was signed; the token itself is not stored.
type Grant struct {
	ID         string
	ComputerID string
	Payload    []byte    // JSON
	ExpiresAt  int64     // Unix milliseconds
	IssuedAt   time.Time //
	RevokedAt  time.Time // zero while the grant stands
}

// Grants returns every stored grant that expires at or after notBefore
// (Unix milliseconds), sorted by ID. Expired grants fail verification
// anyway, so callers need not load them.
func (s *Store) Grants(ctx context.Context, notBefore int64) ([]Grant, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, computer_id, payload, expires_at, issued_at, revoked_at
		FROM computer_grants WHERE expires_at >= ? ORDER BY id`, notBefore)
	if err != nil {
		return nil, fmt.Errorf("store: list grants: %w", err)
	}
	defer rows.Close()
	var out []Grant
	for rows.Next() {
		var (
			g               Grant
			payload         string
			issued, revoked string
		)
		if err := rows.Scan(&g.ID, &g.ComputerID, &payload, &g.ExpiresAt, &issued, &revoked); err != nil {
			return nil, fmt.Errorf("store: read grant: %w", err)
		}
		g.Payload = []byte(payload)
		if g.IssuedAt, err = parseTime("issued_at", issued); err != nil {
			return nil, err
		}
		if g.RevokedAt, err = parseOptTime("revoked_at", revoked); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list grants: %w", err)
	}
	return out, nil
}

// PutGrant records a newly issued grant. Grant ids are random, so an
// existing id is an error (ErrConflict), never an overwrite.
func (s *Store) PutGrant(ctx context.Context, g Grant) error {
	if g.ID == "" || g.ComputerID == "" || !json.Valid(g.Payload) {
		return errors.New("store: a grant needs an id, a Computer id and a JSON payload")
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO computer_grants (id, computer_id, payload, expires_at, issued_at, revoked_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			g.ID, g.ComputerID, string(g.Payload), g.ExpiresAt, formatTime(g.IssuedAt), formatOptTime(g.RevokedAt))
		if err != nil {
			return fmt.Errorf("store: put grant %q: %w", g.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: grant %q exists", ErrConflict, g.ID)
		}
		return nil
	})
}

// RevokeGrants marks the grants with the given ids revoked at at, keeping
// the earliest revocation time of one already revoked. With no ids it
// revokes every grant of computerID instead (a deleted Computer's). It
// returns the ids it marked, and ErrNotFound when ids were given and none
// of them is a grant of computerID.
func (s *Store) RevokeGrants(ctx context.Context, computerID string, at time.Time, ids ...string) ([]string, error) {
	var marked []string
	err := s.write(ctx, func(tx *sql.Tx) error {
		q := `UPDATE computer_grants SET revoked_at = ? WHERE computer_id = ? AND revoked_at = '' RETURNING id`
		args := []any{formatTime(at), computerID}
		if len(ids) > 0 {
			q = `UPDATE computer_grants SET revoked_at = CASE WHEN revoked_at = '' THEN ? ELSE revoked_at END
				WHERE computer_id = ? AND id IN (SELECT value FROM json_each(?)) RETURNING id`
			raw, _ := json.Marshal(ids)
			args = append(args, string(raw))
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("store: revoke grants of %q: %w", computerID, err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return fmt.Errorf("store: revoke grants of %q: %w", computerID, err)
			}
			marked = append(marked, id)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("store: revoke grants of %q: %w", computerID, err)
		}
		if len(ids) > 0 && len(marked) == 0 {
			return fmt.Errorf("%w: no grant %q of Computer %q", ErrNotFound, ids[0], computerID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return marked, nil
}

// PruneGrants deletes the grants that expired before before (Unix
// milliseconds): they can no longer verify, so their rows only take room.
func (s *Store) PruneGrants(ctx context.Context, before int64) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM computer_grants WHERE expires_at < ?`, before)
		if err != nil {
			return fmt.Errorf("store: prune grants: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}
