package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// MountPull is what one guest mount of a vm deployment resolved to on its
// last mount pull (table pulls; Path "" is the artifact section, see ArtifactPull): Store, Ref and StripComponents as
// the spec named them then, Digest the blob Ref named (hex), Tree the
// host directory it was unpacked into.
type MountPull struct {
	Deployment      string
	Path            string
	Store           string
	Ref             string
	StripComponents int
	Digest          string
	Tree            string
	// PulledAt is set by the store (UTC) on PutMountPulls.
	PulledAt time.Time
}

// MountPulls returns the recorded pulls of deployment's mounts, by path.
func (s *Store) MountPulls(ctx context.Context, deployment string) ([]MountPull, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT deployment, path, store, ref, strip_components, digest, tree,
		pulled_at FROM pulls WHERE deployment = ? AND path <> '' ORDER BY path`, deployment)
	if err != nil {
		return nil, fmt.Errorf("store: list mount pulls of %q: %w", deployment, err)
	}
	defer rows.Close()
	var out []MountPull
	for rows.Next() {
		var x MountPull
		var at string
		if err := rows.Scan(&x.Deployment, &x.Path, &x.Store, &x.Ref, &x.StripComponents, &x.Digest, &x.Tree, &at); err != nil {
			return nil, fmt.Errorf("store: read mount pull: %w", err)
		}
		if x.PulledAt, err = parseTime("pulled_at", at); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list mount pulls of %q: %w", deployment, err)
	}
	return out, nil
}

// PutMountPulls replaces the recorded pulls of deployment with ps (each
// naming that deployment), in one transaction: a path not in ps is
// forgotten. It returns an error wrapping ErrNotFound if there is no such
// deployment. DeleteDeployment removes the rows with their deployment.
func (s *Store) PutMountPulls(ctx context.Context, deployment string, ps []MountPull) error {
	at := formatTime(s.now().UTC().Round(0))
	return s.write(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM deployments WHERE id = ?`, deployment).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: deployment %q", ErrNotFound, deployment)
		}
		if err != nil {
			return fmt.Errorf("store: read deployment %q: %w", deployment, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM pulls WHERE deployment = ? AND path <> ''`, deployment); err != nil {
			return fmt.Errorf("store: put mount pulls of %q: %w", deployment, err)
		}
		for _, p := range ps {
			if p.Deployment != deployment {
				return fmt.Errorf("store: mount pull of %q given for %q", p.Deployment, deployment)
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO pulls (deployment, path, store, ref, strip_components,
				digest, tree, pulled_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
				deployment, p.Path, p.Store, p.Ref, p.StripComponents, p.Digest, p.Tree, at)
			if err != nil {
				return fmt.Errorf("store: put mount pull %s of %q: %w", p.Path, deployment, err)
			}
		}
		return nil
	})
}

// ArtifactPull returns the recorded pull of deployment's artifact section
// (Path ""; Tree is a site bundle's tree, or the image a vm artifact was
// imported as), and whether there is one.
func (s *Store) ArtifactPull(ctx context.Context, deployment string) (MountPull, bool, error) {
	var x MountPull
	var at string
	err := s.r.QueryRowContext(ctx, `SELECT deployment, path, store, ref, strip_components, digest, tree,
		pulled_at FROM pulls WHERE deployment = ? AND path = ''`, deployment).Scan(&x.Deployment, &x.Path, &x.Store, &x.Ref, &x.StripComponents, &x.Digest, &x.Tree, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return MountPull{}, false, nil
	}
	if err != nil {
		return MountPull{}, false, fmt.Errorf("store: read the artifact pull of %q: %w", deployment, err)
	}
	if x.PulledAt, err = parseTime("pulled_at", at); err != nil {
		return MountPull{}, false, err
	}
	return x, true, nil
}

// PutArtifactPull records p (Path "") as the pull of p.Deployment's
// artifact section, replacing the last. It returns an error wrapping
// ErrNotFound if there is no such deployment.
func (s *Store) PutArtifactPull(ctx context.Context, p MountPull) error {
	if p.Path != "" {
		return fmt.Errorf("store: an artifact pull has no path (got %q)", p.Path)
	}
	at := formatTime(s.now().UTC().Round(0))
	return s.write(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM deployments WHERE id = ?`, p.Deployment).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: deployment %q", ErrNotFound, p.Deployment)
		}
		if err != nil {
			return fmt.Errorf("store: read deployment %q: %w", p.Deployment, err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO pulls (deployment, path, store, ref, strip_components, digest, tree, pulled_at)
			VALUES (?, '', ?, ?, ?, ?, ?, ?) ON CONFLICT (deployment, path) DO UPDATE SET store = excluded.store,
			ref = excluded.ref, strip_components = excluded.strip_components, digest = excluded.digest,
			tree = excluded.tree, pulled_at = excluded.pulled_at`,
			p.Deployment, p.Store, p.Ref, p.StripComponents, p.Digest, p.Tree, at)
		if err != nil {
			return fmt.Errorf("store: put the artifact pull of %q: %w", p.Deployment, err)
		}
		return nil
	})
}
