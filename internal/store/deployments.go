package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Deployment is one stored deployment: the normalized spec JSON plus the
// bookkeeping the store maintains.
type Deployment struct {
	ID        string
	Namespace string
	// Spec is the normalized DeploymentSpec JSON, stored and returned
	// verbatim.
	Spec []byte
	// Revision starts at 1 and is incremented on every write of this
	// deployment. PutDeployment ignores the value passed in.
	Revision int64
	// CreatedAt and UpdatedAt are set by the store (UTC); PutDeployment
	// ignores the values passed in.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Deployments returns every stored deployment, sorted by ID.
func (s *Store) Deployments(ctx context.Context) ([]Deployment, error) {
	rows, err := s.r.QueryContext(ctx,
		`SELECT id, namespace, spec, revision, created_at, updated_at FROM deployments ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: list deployments: %w", err)
	}
	defer rows.Close()
	var ds []Deployment
	for rows.Next() {
		d, err := scanDeployment(rows)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list deployments: %w", err)
	}
	return ds, nil
}

// Deployment returns the deployment with the given id, or an error wrapping
// ErrNotFound.
func (s *Store) Deployment(ctx context.Context, id string) (Deployment, error) {
	row := s.r.QueryRowContext(ctx,
		`SELECT id, namespace, spec, revision, created_at, updated_at FROM deployments WHERE id = ?`, id)
	d, err := scanDeployment(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Deployment{}, fmt.Errorf("%w: deployment %q", ErrNotFound, id)
	}
	return d, err
}

type scanner interface{ Scan(dest ...any) error }

func scanDeployment(sc scanner) (Deployment, error) {
	var (
		d                Deployment
		created, updated string
	)
	if err := sc.Scan(&d.ID, &d.Namespace, &d.Spec, &d.Revision, &created, &updated); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Deployment{}, err
		}
		return Deployment{}, fmt.Errorf("store: read deployment: %w", err)
	}
	var err error
	if d.CreatedAt, err = parseTime("created_at", created); err != nil {
		return Deployment{}, err
	}
	if d.UpdatedAt, err = parseTime("updated_at", updated); err != nil {
		return Deployment{}, err
	}
	return d, nil
}

// PutDeployment inserts d or replaces the stored deployment with the same
// ID, in one transaction, and returns the record as stored (with its new
// Revision and timestamps).
//
// If createOnly is set and the ID exists, it returns an error wrapping
// ErrConflict. If ifRevision > 0 and the deployment does not exist or is
// at a different revision, it returns an error wrapping ErrConflict; this is
// how the API serialises read-modify-write cycles without holding a lock.
// A replace keeps CreatedAt and bumps Revision; an insert starts at 1.
func (s *Store) PutDeployment(ctx context.Context, d Deployment, createOnly bool, ifRevision int64) (Deployment, error) {
	if d.ID == "" {
		return Deployment{}, errors.New("store: deployment id must not be empty")
	}
	if ifRevision < 0 {
		return Deployment{}, fmt.Errorf("store: deployment %q: negative expected revision %d", d.ID, ifRevision)
	}
	if !json.Valid(d.Spec) {
		return Deployment{}, fmt.Errorf("store: deployment %q: spec is not valid JSON", d.ID)
	}
	now := s.now().UTC().Round(0)
	out := Deployment{
		ID:        d.ID,
		Namespace: d.Namespace,
		Spec:      bytes.Clone(d.Spec),
		Revision:  1,
		CreatedAt: now,
		UpdatedAt: now,
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var (
			rev     int64
			created string
		)
		err := tx.QueryRowContext(ctx,
			`SELECT revision, created_at FROM deployments WHERE id = ?`, d.ID).Scan(&rev, &created)
		exists := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: read deployment %q: %w", d.ID, err)
		}
		switch {
		case createOnly && exists:
			return fmt.Errorf("%w: deployment %q already exists", ErrConflict, d.ID)
		case ifRevision > 0 && !exists:
			return fmt.Errorf("%w: deployment %q does not exist (expected revision %d)", ErrConflict, d.ID, ifRevision)
		case ifRevision > 0 && rev != ifRevision:
			return fmt.Errorf("%w: deployment %q is at revision %d, not %d", ErrConflict, d.ID, rev, ifRevision)
		}
		if !exists {
			_, err := tx.ExecContext(ctx,
				`INSERT INTO deployments (id, namespace, spec, revision, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`,
				out.ID, out.Namespace, string(out.Spec), out.Revision, formatTime(now), formatTime(now))
			if err != nil {
				return fmt.Errorf("store: insert deployment %q: %w", d.ID, err)
			}
			return nil
		}
		if out.CreatedAt, err = parseTime("created_at", created); err != nil {
			return err
		}
		out.Revision = rev + 1
		_, err = tx.ExecContext(ctx,
			`UPDATE deployments SET namespace = ?, spec = ?, revision = ?, updated_at = ? WHERE id = ?`,
			out.Namespace, string(out.Spec), out.Revision, formatTime(now), out.ID)
		if err != nil {
			return fmt.Errorf("store: update deployment %q: %w", d.ID, err)
		}
		return nil
	})
	if err != nil {
		return Deployment{}, err
	}
	return out, nil
}

// DeleteDeployment deletes the deployment with the given id together with
// its upstream drains and its rate limit, in one transaction. It returns an
// error wrapping ErrNotFound if there is no such deployment.
func (s *Store) DeleteDeployment(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		// The foreign keys cascade too; deleting explicitly keeps the
		// behaviour independent of the foreign_keys setting.
		if _, err := tx.ExecContext(ctx, `DELETE FROM upstream_drains WHERE deployment = ?`, id); err != nil {
			return fmt.Errorf("store: delete drains of %q: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM rate_limits WHERE deployment = ?`, id); err != nil {
			return fmt.Errorf("store: delete rate limit of %q: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM pulls WHERE deployment = ?`, id); err != nil {
			return fmt.Errorf("store: delete pulls of %q: %w", id, err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM deployments WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("store: delete deployment %q: %w", id, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: delete deployment %q: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("%w: deployment %q", ErrNotFound, id)
		}
		return nil
	})
}
