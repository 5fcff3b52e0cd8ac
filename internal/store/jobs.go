package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// Job is one stored background job (package jobs). Record is its JobRecord
// wire JSON, opaque here beyond being valid JSON; the other fields are
// copies of it kept as columns.
type Job struct {
	ID, Deployment, Namespace, Kind, Status string
	StartedAt                               int64 // Unix seconds
	Record                                  []byte
}

const jobColumns = `id, deployment, namespace, kind, status, started_at, record`

func scanJobs(rows *sql.Rows) ([]Job, error) {
	defer rows.Close()
	var out []Job
	for rows.Next() {
		var j Job
		var rec string
		if err := rows.Scan(&j.ID, &j.Deployment, &j.Namespace, &j.Kind, &j.Status, &j.StartedAt, &rec); err != nil {
			return nil, fmt.Errorf("store: read job: %w", err)
		}
		j.Record = []byte(rec)
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list jobs: %w", err)
	}
	return out, nil
}

// Jobs returns the stored jobs of deployment (every deployment's when
// empty), newest first.
func (s *Store) Jobs(ctx context.Context, deployment string) ([]Job, error) {
	q := `SELECT ` + jobColumns + ` FROM jobs ORDER BY seq DESC`
	args := []any{}
	if deployment != "" {
		q = `SELECT ` + jobColumns + ` FROM jobs WHERE deployment = ? ORDER BY seq DESC`
		args = append(args, deployment)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list jobs: %w", err)
	}
	return scanJobs(rows)
}

// Job returns one stored job, or an error wrapping ErrNotFound.
func (s *Store) Job(ctx context.Context, id string) (Job, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id)
	if err != nil {
		return Job{}, fmt.Errorf("store: read job %q: %w", id, err)
	}
	js, err := scanJobs(rows)
	if err != nil {
		return Job{}, err
	}
	if len(js) == 0 {
		return Job{}, fmt.Errorf("store: job %q: %w", id, ErrNotFound)
	}
	return js[0], nil
}

// InsertJob stores a new job (an existing id is ErrConflict) and prunes
// the history in the same transaction to at most perDeployment jobs of
// j's deployment and total in all, oldest first. A running job counts
// but is never pruned, so a record its manager still writes to cannot
// vanish under it (running jobs alone may exceed a bound).
func (s *Store) InsertJob(ctx context.Context, j Job, perDeployment, total int) error {
	if j.ID == "" || !json.Valid(j.Record) {
		return errors.New("store: a job needs an id and a JSON record")
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO jobs (`+jobColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			j.ID, j.Deployment, j.Namespace, j.Kind, j.Status, j.StartedAt, string(j.Record))
		if err != nil {
			return fmt.Errorf("store: put job %q: %w", j.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("store: job %q: %w", j.ID, ErrConflict)
		}
		if perDeployment > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE deployment = ?1 AND status != 'running' AND seq NOT IN
				(SELECT seq FROM jobs WHERE deployment = ?1 AND status != 'running' ORDER BY seq DESC
				 LIMIT max(0, ?2 - (SELECT count(*) FROM jobs WHERE deployment = ?1 AND status = 'running')))`, j.Deployment, perDeployment); err != nil {
				return fmt.Errorf("store: prune jobs: %w", err)
			}
		}
		if total > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE status != 'running' AND seq NOT IN
				(SELECT seq FROM jobs WHERE status != 'running' ORDER BY seq DESC
				 LIMIT max(0, ?1 - (SELECT count(*) FROM jobs WHERE status = 'running')))`, total); err != nil {
				return fmt.Errorf("store: prune jobs: %w", err)
			}
		}
		return nil
	})
}

// UpdateJob replaces a job's status and record; a job no longer stored is
// an error wrapping ErrNotFound.
func (s *Store) UpdateJob(ctx context.Context, id, status string, record []byte) error {
	if !json.Valid(record) {
		return fmt.Errorf("store: job %q: the record is not JSON", id)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET status = ?, record = ? WHERE id = ?`, status, string(record), id)
		if err != nil {
			return fmt.Errorf("store: update job %q: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("store: job %q: %w", id, ErrNotFound)
		}
		return nil
	})
}

// Workflow is one registered workflow: Spec is its WorkflowSpec wire
// JSON, opaque here.
type Workflow struct {
	ID   string
	Spec []byte
}

// Workflows returns every workflow, by id.
func (s *Store) Workflows(ctx context.Context) ([]Workflow, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, spec FROM workflows ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: list workflows: %w", err)
	}
	defer rows.Close()
	var out []Workflow
	for rows.Next() {
		var w Workflow
		var spec string
		if err := rows.Scan(&w.ID, &spec); err != nil {
			return nil, fmt.Errorf("store: read workflow: %w", err)
		}
		w.Spec = []byte(spec)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list workflows: %w", err)
	}
	return out, nil
}

// PutWorkflow stores a workflow. With create, an existing id is
// ErrConflict; without, the workflow must exist (ErrNotFound otherwise).
func (s *Store) PutWorkflow(ctx context.Context, w Workflow, create bool) error {
	if w.ID == "" || !json.Valid(w.Spec) {
		return errors.New("store: a workflow needs an id and a JSON spec")
	}
	now := formatTime(s.now())
	return s.write(ctx, func(tx *sql.Tx) error {
		q := `UPDATE workflows SET spec = ?2, updated_at = ?3 WHERE id = ?1`
		if create {
			q = `INSERT INTO workflows (id, spec, created_at, updated_at) VALUES (?1, ?2, ?3, ?3) ON CONFLICT (id) DO NOTHING`
		}
		res, err := tx.ExecContext(ctx, q, w.ID, string(w.Spec), now)
		if err != nil {
			return fmt.Errorf("store: put workflow %q: %w", w.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if create {
				return fmt.Errorf("store: workflow %q: %w", w.ID, ErrConflict)
			}
			return fmt.Errorf("store: workflow %q: %w", w.ID, ErrNotFound)
		}
		return nil
	})
}

// DeleteWorkflow removes a workflow, or returns an error wrapping
// ErrNotFound.
func (s *Store) DeleteWorkflow(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM workflows WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("store: delete workflow %q: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("store: workflow %q: %w", id, ErrNotFound)
		}
		return nil
	})
}
