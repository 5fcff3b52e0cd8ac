package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// PluginRecord is the operator's fleet-level record of one compiled-in
// plugin (package plugin): its switch and its config, a JSON document.
type PluginRecord struct {
	ID        string
	Enabled   bool
	Config    []byte // JSON
	UpdatedAt int64  // Unix seconds
}

// PluginInstall is one namespace's install of a per-namespace plugin.
type PluginInstall struct {
	Plugin      string
	Namespace   string
	InstalledAt int64  // Unix seconds
	InstalledBy string // `token:<id>`; "" for the operator
	Config      []byte // JSON
}

// PluginRecords returns every stored plugin record, by id.
func (s *Store) PluginRecords(ctx context.Context) ([]PluginRecord, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, enabled, config, updated_at FROM plugins ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: list plugins: %w", err)
	}
	defer rows.Close()
	var out []PluginRecord
	for rows.Next() {
		var p PluginRecord
		var enabled int64
		var config string
		if err := rows.Scan(&p.ID, &enabled, &config, &p.UpdatedAt); err != nil {
			return nil, fmt.Errorf("store: read plugin: %w", err)
		}
		p.Enabled, p.Config = enabled != 0, []byte(config)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list plugins: %w", err)
	}
	return out, nil
}

// PutPluginRecord replaces the record of p.ID and, in the same
// transaction, adds the installs in add that do not exist yet (an
// existing install of the same plugin and namespace is kept as it is).
func (s *Store) PutPluginRecord(ctx context.Context, p PluginRecord, add []PluginInstall) error {
	if p.ID == "" || len(p.Config) == 0 {
		return errors.New("store: a plugin record needs an id and a config")
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		enabled := 0
		if p.Enabled {
			enabled = 1
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO plugins (id, enabled, config, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET enabled = excluded.enabled, config = excluded.config, updated_at = excluded.updated_at`,
			p.ID, enabled, string(p.Config), p.UpdatedAt); err != nil {
			return fmt.Errorf("store: put plugin %q: %w", p.ID, err)
		}
		for _, in := range add {
			if in.Plugin != p.ID {
				return fmt.Errorf("store: install of plugin %q put with plugin %q", in.Plugin, p.ID)
			}
			if err := insertInstall(ctx, tx, in, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// PluginInstalls returns every install, by plugin and namespace.
func (s *Store) PluginInstalls(ctx context.Context) ([]PluginInstall, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT plugin, namespace, installed_at, installed_by, config
		FROM plugin_installs ORDER BY plugin, namespace`)
	if err != nil {
		return nil, fmt.Errorf("store: list plugin installs: %w", err)
	}
	defer rows.Close()
	var out []PluginInstall
	for rows.Next() {
		var in PluginInstall
		var config string
		if err := rows.Scan(&in.Plugin, &in.Namespace, &in.InstalledAt, &in.InstalledBy, &config); err != nil {
			return nil, fmt.Errorf("store: read plugin install: %w", err)
		}
		in.Config = []byte(config)
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list plugin installs: %w", err)
	}
	return out, nil
}

// PutPluginInstall inserts or replaces one namespace's install.
func (s *Store) PutPluginInstall(ctx context.Context, in PluginInstall) error {
	return s.write(ctx, func(tx *sql.Tx) error { return insertInstall(ctx, tx, in, true) })
}

func insertInstall(ctx context.Context, tx *sql.Tx, in PluginInstall, replace bool) error {
	if in.Plugin == "" || in.Namespace == "" || len(in.Config) == 0 {
		return errors.New("store: a plugin install needs a plugin, a namespace and a config")
	}
	conflict := `DO NOTHING`
	if replace {
		conflict = `DO UPDATE SET installed_at = excluded.installed_at, installed_by = excluded.installed_by, config = excluded.config`
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO plugin_installs (plugin, namespace, installed_at, installed_by, config)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (plugin, namespace) `+conflict,
		in.Plugin, in.Namespace, in.InstalledAt, in.InstalledBy, string(in.Config)); err != nil {
		return fmt.Errorf("store: put install of plugin %q in %q: %w", in.Plugin, in.Namespace, err)
	}
	return nil
}

// DeletePluginInstall removes one namespace's install of a plugin; none is
// no error.
func (s *Store) DeletePluginInstall(ctx context.Context, plugin, namespace string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM plugin_installs WHERE plugin = ? AND namespace = ?`, plugin, namespace); err != nil {
			return fmt.Errorf("store: delete install of plugin %q in %q: %w", plugin, namespace, err)
		}
		return nil
	})
}
