package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// GuardRule is one guard rule (package guard), its match normalized by the
// caller. An empty match field is an absent condition; a zero ExpiresAt is
// a permanent rule and a zero LastHit a rule that never fired.
type GuardRule struct {
	ID                string
	Action            string
	Client            string
	Host              string
	Deployment        string
	PathPrefix        string
	PathContains      string
	Method            string
	UserAgentContains string
	Note              string
	CreatedAt         time.Time
	ExpiresAt         time.Time
	Hits              int64
	LastHit           time.Time
}

// GuardHits is a batch of one rule's hits: Delta more since the last
// batch, the latest at LastHit.
type GuardHits struct {
	Delta   int64
	LastHit time.Time
}

// GuardRules returns every stored guard rule, oldest first (ties by id),
// expired ones included: dropping those is the caller's policy.
func (s *Store) GuardRules(ctx context.Context) ([]GuardRule, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, action, client, host, deployment, path_prefix, path_contains,
		method, user_agent_contains, note, created_at, expires_at, hits, last_hit
		FROM guard_rules ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list guard rules: %w", err)
	}
	defer rows.Close()
	var out []GuardRule
	for rows.Next() {
		var (
			x                GuardRule
			created          string
			expires, lastHit sql.NullString
		)
		if err := rows.Scan(&x.ID, &x.Action, &x.Client, &x.Host, &x.Deployment, &x.PathPrefix, &x.PathContains,
			&x.Method, &x.UserAgentContains, &x.Note, &created, &expires, &x.Hits, &lastHit); err != nil {
			return nil, fmt.Errorf("store: read guard rule: %w", err)
		}
		if x.CreatedAt, err = parseTime("created_at", created); err != nil {
			return nil, err
		}
		if expires.Valid {
			if x.ExpiresAt, err = parseTime("expires_at", expires.String); err != nil {
				return nil, err
			}
		}
		if lastHit.Valid {
			if x.LastHit, err = parseTime("last_hit", lastHit.String); err != nil {
				return nil, err
			}
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list guard rules: %w", err)
	}
	return out, nil
}

func nullTime(t time.Time) sql.NullString {
	if t.IsZero() {
		return sql.NullString{}
	}
	return sql.NullString{String: formatTime(t), Valid: true}
}

// PutGuardRule inserts a rule or replaces the one with its id, every
// column (hits and last_hit included: the caller owns the counters and
// writes the increments after this with AddGuardHits).
func (s *Store) PutGuardRule(ctx context.Context, x GuardRule) error {
	if x.ID == "" || x.CreatedAt.IsZero() {
		return fmt.Errorf("store: a guard rule needs an id and a creation time")
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO guard_rules (id, action, client, host, deployment, path_prefix,
			path_contains, method, user_agent_contains, note, created_at, expires_at, hits, last_hit)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET action = excluded.action, client = excluded.client, host = excluded.host,
			deployment = excluded.deployment, path_prefix = excluded.path_prefix,
			path_contains = excluded.path_contains, method = excluded.method,
			user_agent_contains = excluded.user_agent_contains, note = excluded.note,
			created_at = excluded.created_at, expires_at = excluded.expires_at, hits = excluded.hits,
			last_hit = excluded.last_hit`,
			x.ID, x.Action, x.Client, x.Host, x.Deployment, x.PathPrefix, x.PathContains, x.Method,
			x.UserAgentContains, x.Note, formatTime(x.CreatedAt), nullTime(x.ExpiresAt), x.Hits, nullTime(x.LastHit))
		if err != nil {
			return fmt.Errorf("store: put guard rule %q: %w", x.ID, err)
		}
		return nil
	})
}

// DeleteGuardRules removes rules by id, in one transaction. An id not
// stored is no error.
func (s *Store) DeleteGuardRules(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `DELETE FROM guard_rules WHERE id = ?`, id); err != nil {
				return fmt.Errorf("store: delete guard rule %q: %w", id, err)
			}
		}
		return nil
	})
}

// AddGuardHits adds each rule's Delta to its hits and moves its last_hit
// forward to LastHit (never back), in one transaction. An id not stored
// is skipped: its rule was deleted meanwhile.
func (s *Store) AddGuardHits(ctx context.Context, hits map[string]GuardHits) error {
	if len(hits) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		for id, h := range hits {
			// Fixed-width UTC text sorts as time, so < compares instants.
			if _, err := tx.ExecContext(ctx, `UPDATE guard_rules SET hits = hits + ?,
				last_hit = CASE WHEN ? IS NULL THEN last_hit WHEN last_hit IS NULL OR last_hit < ? THEN ? ELSE last_hit END
				WHERE id = ?`, h.Delta, nullTime(h.LastHit), nullTime(h.LastHit), nullTime(h.LastHit), id); err != nil {
				return fmt.Errorf("store: add guard hits %q: %w", id, err)
			}
		}
		return nil
	})
}
