package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// PulledImage is what package image keeps of an image pulled from a
// registry, beside its images row of the same name.
type PulledImage struct {
	Name           string   // the reference, e.g. ghcr.io/o/app:v1
	ManifestDigest string   // what the reference resolved to
	Layers         []string // diff ids, bottom first
	Config         string   // JSON of the run defaults (package image)
	Namespaces     []string // that resolved it with their own credentials
}

// PulledImages returns every pulled image.
func (s *Store) PulledImages(ctx context.Context) ([]PulledImage, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name, manifest_digest, layers, config FROM pulled_images ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: list pulled images: %w", err)
	}
	var out []PulledImage
	for rows.Next() {
		var p PulledImage
		var layers string
		if err := rows.Scan(&p.Name, &p.ManifestDigest, &layers, &p.Config); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: read pulled image: %w", err)
		}
		if err := json.Unmarshal([]byte(layers), &p.Layers); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: pulled image %q: layers: %w", p.Name, err)
		}
		out = append(out, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list pulled images: %w", err)
	}
	for i := range out {
		ns, err := s.r.QueryContext(ctx, `SELECT namespace FROM pulled_image_namespaces WHERE name = ? ORDER BY namespace`, out[i].Name)
		if err != nil {
			return nil, fmt.Errorf("store: pulled image %q: %w", out[i].Name, err)
		}
		for ns.Next() {
			var n string
			if err := ns.Scan(&n); err != nil {
				ns.Close()
				return nil, fmt.Errorf("store: pulled image %q: %w", out[i].Name, err)
			}
			out[i].Namespaces = append(out[i].Namespaces, n)
		}
		ns.Close()
	}
	return out, nil
}

// PutPulledImage records p, replacing the record of the same name (and
// its namespaces: a reference that moved is re-proven by each namespace).
// The images row of the name must exist.
func (s *Store) PutPulledImage(ctx context.Context, p PulledImage) error {
	layers, err := json.Marshal(p.Layers)
	if err != nil {
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM pulled_images WHERE name = ?`, p.Name); err != nil {
			return fmt.Errorf("store: put pulled image %q: %w", p.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO pulled_images (name, manifest_digest, layers, config) VALUES (?, ?, ?, ?)`,
			p.Name, p.ManifestDigest, string(layers), p.Config); err != nil {
			return fmt.Errorf("store: put pulled image %q: %w", p.Name, err)
		}
		for _, n := range p.Namespaces {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO pulled_image_namespaces (name, namespace) VALUES (?, ?)`, p.Name, n); err != nil {
				return fmt.Errorf("store: put pulled image %q: %w", p.Name, err)
			}
		}
		return nil
	})
}

// AddPulledNamespace records that namespace resolved the pulled image name.
func (s *Store) AddPulledNamespace(ctx context.Context, name, namespace string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO pulled_image_namespaces (name, namespace) VALUES (?, ?)`, name, namespace); err != nil {
			return fmt.Errorf("store: pulled image %q: %w", name, err)
		}
		return nil
	})
}

// DeletePulledImage forgets a pulled image's record (no error when none).
func (s *Store) DeletePulledImage(ctx context.Context, name string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM pulled_images WHERE name = ?`, name); err != nil {
			return fmt.Errorf("store: delete pulled image %q: %w", name, err)
		}
		return nil
	})
}

// RegistryCredential names the secret of a namespace that holds its
// credentials for a registry host.
type RegistryCredential struct {
	Namespace string
	Host      string
	Secret    string
}

// RegistryCredentials lists a namespace's mappings, by host.
func (s *Store) RegistryCredentials(ctx context.Context, namespace string) ([]RegistryCredential, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT namespace, host, secret FROM registry_credentials WHERE namespace = ? ORDER BY host`, namespace)
	if err != nil {
		return nil, fmt.Errorf("store: registry credentials: %w", err)
	}
	defer rows.Close()
	out := []RegistryCredential{}
	for rows.Next() {
		var c RegistryCredential
		if err := rows.Scan(&c.Namespace, &c.Host, &c.Secret); err != nil {
			return nil, fmt.Errorf("store: registry credentials: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// RegistryCredential returns one mapping, or an error wrapping ErrNotFound.
func (s *Store) RegistryCredential(ctx context.Context, namespace, host string) (RegistryCredential, error) {
	c := RegistryCredential{Namespace: namespace, Host: host}
	err := s.r.QueryRowContext(ctx, `SELECT secret FROM registry_credentials WHERE namespace = ? AND host = ?`, namespace, host).Scan(&c.Secret)
	if errors.Is(err, sql.ErrNoRows) {
		return c, fmt.Errorf("store: registry credential %s/%s: %w", namespace, host, ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("store: registry credential: %w", err)
	}
	return c, nil
}

// PutRegistryCredential creates or replaces a mapping.
func (s *Store) PutRegistryCredential(ctx context.Context, c RegistryCredential) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO registry_credentials (namespace, host, secret) VALUES (?, ?, ?)
			ON CONFLICT (namespace, host) DO UPDATE SET secret = excluded.secret`, c.Namespace, c.Host, c.Secret)
		if err != nil {
			return fmt.Errorf("store: put registry credential: %w", err)
		}
		return nil
	})
}

// DeleteRegistryCredential removes a mapping, or fails with ErrNotFound.
func (s *Store) DeleteRegistryCredential(ctx context.Context, namespace, host string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM registry_credentials WHERE namespace = ? AND host = ?`, namespace, host)
		if err != nil {
			return fmt.Errorf("store: delete registry credential: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("store: registry credential %s/%s: %w", namespace, host, ErrNotFound)
		}
		return nil
	})
}

// ImageConfigs returns the recorded run defaults of built images: name →
// JSON (package image's Config).
func (s *Store) ImageConfigs(ctx context.Context) (map[string]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name, config FROM image_configs ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: list image configs: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, c string
		if err := rows.Scan(&n, &c); err != nil {
			return nil, fmt.Errorf("store: read image config: %w", err)
		}
		out[n] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list image configs: %w", err)
	}
	return out, nil
}

// PutImageConfig records the run defaults of the image name (its images
// row must exist); config "" forgets them.
func (s *Store) PutImageConfig(ctx context.Context, name, config string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM image_configs WHERE name = ?`, name); err != nil {
			return fmt.Errorf("store: put image config %q: %w", name, err)
		}
		if config == "" {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO image_configs (name, config) VALUES (?, ?)`, name, config); err != nil {
			return fmt.Errorf("store: put image config %q: %w", name, err)
		}
		return nil
	})
}
