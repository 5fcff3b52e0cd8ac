package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Workspace is a vm deployment's durable workspace as last recorded (table
// workspaces; package workspace): Digest the snapshot its pool runs from
// ("" the empty workspace), captured at CapturedAt from replica
// CapturedFrom, with Files regular files of Bytes bytes; Pushed the digest
// PushedStore is known to hold ("" none), since PushedAt.
type Workspace struct {
	Deployment   string
	Digest       string
	CapturedAt   time.Time
	CapturedFrom string
	Files        int
	Bytes        int64
	Pushed       string
	PushedStore  string
	PushedAt     time.Time
}

// Workspace returns deployment's recorded workspace, ok false when it has
// none.
func (s *Store) Workspace(ctx context.Context, deployment string) (Workspace, bool, error) {
	var w Workspace
	var cap, pushed string
	err := s.r.QueryRowContext(ctx, `SELECT deployment, digest, captured_at, captured_from, files, bytes,
		pushed, pushed_store, pushed_at FROM workspaces WHERE deployment = ?`, deployment).
		Scan(&w.Deployment, &w.Digest, &cap, &w.CapturedFrom, &w.Files, &w.Bytes, &w.Pushed, &w.PushedStore, &pushed)
	if errors.Is(err, sql.ErrNoRows) {
		return Workspace{}, false, nil
	}
	if err != nil {
		return Workspace{}, false, fmt.Errorf("store: read the workspace of %q: %w", deployment, err)
	}
	if w.CapturedAt, err = parseOptTime("captured_at", cap); err != nil {
		return Workspace{}, false, err
	}
	if w.PushedAt, err = parseOptTime("pushed_at", pushed); err != nil {
		return Workspace{}, false, err
	}
	return w, true, nil
}

// PutWorkspace records w as its deployment's workspace, replacing what was
// recorded. It returns an error wrapping ErrNotFound if there is no such
// deployment. DeleteDeployment removes the row with its deployment.
func (s *Store) PutWorkspace(ctx context.Context, w Workspace) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM deployments WHERE id = ?`, w.Deployment).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: deployment %q", ErrNotFound, w.Deployment)
		}
		if err != nil {
			return fmt.Errorf("store: read deployment %q: %w", w.Deployment, err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO workspaces (deployment, digest, captured_at, captured_from,
			files, bytes, pushed, pushed_store, pushed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (deployment) DO UPDATE SET digest = excluded.digest, captured_at = excluded.captured_at,
			captured_from = excluded.captured_from, files = excluded.files, bytes = excluded.bytes,
			pushed = excluded.pushed, pushed_store = excluded.pushed_store, pushed_at = excluded.pushed_at`,
			w.Deployment, w.Digest, formatOptTime(w.CapturedAt), w.CapturedFrom, w.Files, w.Bytes, w.Pushed, w.PushedStore, formatOptTime(w.PushedAt))
		if err != nil {
			return fmt.Errorf("store: put the workspace of %q: %w", w.Deployment, err)
		}
		return nil
	})
}
