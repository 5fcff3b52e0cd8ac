package store

import (
	"context"
	"database/sql"
	"fmt"
)

// FeedEvent is one entry of a namespace's event feed (package feed keeps
// the rings; this is their persistence). Ts and LastTs are Unix seconds;
// Fold is the key a repeat of the same issue folds into it by, "" for
// none; Seq orders entries by their last activity.
type FeedEvent struct {
	ID                    int64
	Namespace, Deployment string
	Kind, Title, Detail   string
	Ts, LastTs            int64
	Count                 int
	Fold                  string
	Seq                   int64
}

// FeedEvents returns every stored feed event, by Seq.
func (s *Store) FeedEvents(ctx context.Context) ([]FeedEvent, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, namespace, deployment, kind, title, detail, ts, last_ts, count, fold, seq
		FROM feed_events ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("store: list feed events: %w", err)
	}
	defer rows.Close()
	var out []FeedEvent
	for rows.Next() {
		var e FeedEvent
		if err := rows.Scan(&e.ID, &e.Namespace, &e.Deployment, &e.Kind, &e.Title, &e.Detail, &e.Ts, &e.LastTs, &e.Count, &e.Fold, &e.Seq); err != nil {
			return nil, fmt.Errorf("store: read feed event: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list feed events: %w", err)
	}
	return out, nil
}

// SaveFeedEvents writes, in one transaction, the feed events put (inserted,
// or replacing the row of the same id) and deletes the ids in drop.
func (s *Store) SaveFeedEvents(ctx context.Context, put []FeedEvent, drop []int64) error {
	if len(put) == 0 && len(drop) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		for _, e := range put {
			if _, err := tx.ExecContext(ctx, `INSERT INTO feed_events (id, namespace, deployment, kind, title, detail, ts, last_ts, count, fold, seq)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET namespace = excluded.namespace, deployment = excluded.deployment,
				kind = excluded.kind, title = excluded.title, detail = excluded.detail, ts = excluded.ts,
				last_ts = excluded.last_ts, count = excluded.count, fold = excluded.fold, seq = excluded.seq`,
				e.ID, e.Namespace, e.Deployment, e.Kind, e.Title, e.Detail, e.Ts, e.LastTs, e.Count, e.Fold, e.Seq); err != nil {
				return fmt.Errorf("store: save feed event %d: %w", e.ID, err)
			}
		}
		for _, id := range drop {
			if _, err := tx.ExecContext(ctx, `DELETE FROM feed_events WHERE id = ?`, id); err != nil {
				return fmt.Errorf("store: drop feed event %d: %w", id, err)
			}
		}
		return nil
	})
}
