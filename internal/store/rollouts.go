package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Rollout is one stored rollout operation (migration 0018).
type Rollout struct {
	Deployment        string
	OperationID       string
	RequestSHA256     string
	SourceRevision    string
	TargetRevision    string
	Status            string
	Phase             string
	ReadinessVerified bool
	PreviousStopped   bool
	Error             string // "" for none
	FailureSettlement []byte // JSON; nil for none
	SourceSpec        []byte
	FallbackRevision  string
	FallbackSpec      []byte
	CreatedAt         time.Time // set by the store
	UpdatedAt         time.Time // set by the store
}

const rolloutCols = `deployment, operation_id, request_sha256, source_revision, target_revision, status, phase,
	readiness_verified, previous_stopped, error, failure_settlement, source_spec, fallback_revision, fallback_spec, created_at, updated_at`

func scanRollout(sc scanner) (Rollout, error) {
	var (
		r                Rollout
		errText, settle  sql.NullString
		created, updated string
	)
	if err := sc.Scan(&r.Deployment, &r.OperationID, &r.RequestSHA256, &r.SourceRevision, &r.TargetRevision, &r.Status, &r.Phase,
		&r.ReadinessVerified, &r.PreviousStopped, &errText, &settle, &r.SourceSpec, &r.FallbackRevision, &r.FallbackSpec, &created, &updated); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Rollout{}, err
		}
		return Rollout{}, fmt.Errorf("store: read rollout: %w", err)
	}
	r.Error = errText.String
	if settle.Valid {
		r.FailureSettlement = []byte(settle.String)
	}
	var err error
	if r.CreatedAt, err = parseTime("created_at", created); err != nil {
		return Rollout{}, err
	}
	if r.UpdatedAt, err = parseTime("updated_at", updated); err != nil {
		return Rollout{}, err
	}
	return r, nil
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullJSON(b []byte) sql.NullString { return sql.NullString{String: string(b), Valid: len(b) > 0} }

// PutRollout records a new operation and trims the deployment's history to
// its newest keep operations (running ones are never trimmed). It returns
// an error wrapping ErrConflict when the deployment already has an
// operation of that id, and one wrapping ErrNotFound when the deployment
// does not exist.
func (s *Store) PutRollout(ctx context.Context, r Rollout, keep int) (Rollout, error) {
	now := s.now()
	r.CreatedAt, r.UpdatedAt = now, now
	err := s.write(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM rollouts WHERE deployment = ? AND operation_id = ?`, r.Deployment, r.OperationID).Scan(&one)
		if err == nil {
			return fmt.Errorf("%w: rollout %q of %q exists", ErrConflict, r.OperationID, r.Deployment)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: read rollout: %w", err)
		}
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM deployments WHERE id = ?`, r.Deployment).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: deployment %q", ErrNotFound, r.Deployment)
		}
		if err != nil {
			return fmt.Errorf("store: read deployment %q: %w", r.Deployment, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO rollouts (`+rolloutCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.Deployment, r.OperationID, r.RequestSHA256, r.SourceRevision, r.TargetRevision, r.Status, r.Phase,
			r.ReadinessVerified, r.PreviousStopped, nullString(r.Error), nullJSON(r.FailureSettlement), r.SourceSpec,
			r.FallbackRevision, r.FallbackSpec, formatTime(now), formatTime(now)); err != nil {
			return fmt.Errorf("store: put rollout %q: %w", r.OperationID, err)
		}
		if keep > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM rollouts WHERE deployment = ? AND status != 'running' AND seq NOT IN
				(SELECT seq FROM rollouts WHERE deployment = ? ORDER BY seq DESC LIMIT ?)`, r.Deployment, r.Deployment, keep); err != nil {
				return fmt.Errorf("store: trim rollouts of %q: %w", r.Deployment, err)
			}
		}
		return nil
	})
	return r, err
}

// UpdateRollout stores the state of an existing operation (status, phase,
// readiness, error, settlement). It returns an error wrapping ErrNotFound
// when there is none.
func (s *Store) UpdateRollout(ctx context.Context, r Rollout) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE rollouts SET status = ?, phase = ?, readiness_verified = ?, previous_stopped = ?,
			error = ?, failure_settlement = ?, updated_at = ? WHERE deployment = ? AND operation_id = ?`,
			r.Status, r.Phase, r.ReadinessVerified, r.PreviousStopped, nullString(r.Error), nullJSON(r.FailureSettlement),
			formatTime(s.now()), r.Deployment, r.OperationID)
		if err != nil {
			return fmt.Errorf("store: update rollout %q: %w", r.OperationID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: rollout %q of %q", ErrNotFound, r.OperationID, r.Deployment)
		}
		return nil
	})
}

// Rollout returns one operation, or an error wrapping ErrNotFound.
func (s *Store) Rollout(ctx context.Context, deployment, operation string) (Rollout, error) {
	r, err := scanRollout(s.r.QueryRowContext(ctx, `SELECT `+rolloutCols+` FROM rollouts WHERE deployment = ? AND operation_id = ?`, deployment, operation))
	if errors.Is(err, sql.ErrNoRows) {
		return Rollout{}, fmt.Errorf("%w: rollout %q of %q", ErrNotFound, operation, deployment)
	}
	return r, err
}

// Rollouts returns a deployment's operations, newest first, at most limit.
func (s *Store) Rollouts(ctx context.Context, deployment string, limit int) ([]Rollout, error) {
	return s.rollouts(ctx, `SELECT `+rolloutCols+` FROM rollouts WHERE deployment = ? ORDER BY seq DESC LIMIT ?`, deployment, limit)
}

// RunningRollouts returns every operation still running, oldest first.
func (s *Store) RunningRollouts(ctx context.Context) ([]Rollout, error) {
	return s.rollouts(ctx, `SELECT `+rolloutCols+` FROM rollouts WHERE status = 'running' ORDER BY seq`)
}

func (s *Store) rollouts(ctx context.Context, q string, args ...any) ([]Rollout, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list rollouts: %w", err)
	}
	defer rows.Close()
	var out []Rollout
	for rows.Next() {
		r, err := scanRollout(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list rollouts: %w", err)
	}
	return out, nil
}

// RecordReplica records the template digest of a deployment replica
// (fleet.ReplicaRecords).
func (s *Store) RecordReplica(ctx context.Context, deployment, id, keyDigest string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO replica_templates (replica, deployment, key_digest, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (replica) DO UPDATE SET deployment = excluded.deployment, key_digest = excluded.key_digest`,
			id, deployment, keyDigest, formatTime(s.now()))
		if err != nil {
			return fmt.Errorf("store: record replica %q: %w", id, err)
		}
		return nil
	})
}

// ReplicaDigests returns the recorded template digests of a deployment's
// replicas, by replica id.
func (s *Store) ReplicaDigests(ctx context.Context, deployment string) (map[string]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT replica, key_digest FROM replica_templates WHERE deployment = ?`, deployment)
	if err != nil {
		return nil, fmt.Errorf("store: list replica templates: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, d string
		if err := rows.Scan(&id, &d); err != nil {
			return nil, fmt.Errorf("store: read replica template: %w", err)
		}
		out[id] = d
	}
	return out, rows.Err()
}

// ForgetReplica drops a stopped replica's record; forgetting an unknown
// one is not an error.
func (s *Store) ForgetReplica(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM replica_templates WHERE replica = ?`, id); err != nil {
			return fmt.Errorf("store: forget replica %q: %w", id, err)
		}
		return nil
	})
}
