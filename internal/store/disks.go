package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// DiskRecord is the operator's decision about one VM disk (package
// disks): kept from the sweeper, a note, and its last archive. A disk
// without a decision has no row.
type DiskRecord struct {
	SandboxID    string
	Retain       bool
	Note         string
	ArchiveURI   string // "" until archived
	ArchivedAt   int64  // Unix seconds
	ArchiveBytes int64
	UpdatedAt    int64 // Unix seconds
}

// DiskArchive is one archive of a disk: View is its ArchiveView wire
// JSON, opaque here beyond being valid JSON.
type DiskArchive struct {
	ID, SandboxID string
	StartedAt     int64 // Unix seconds
	View          []byte
}

// DiskRecords returns every disk decision, by sandbox id.
func (s *Store) DiskRecords(ctx context.Context) ([]DiskRecord, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT sandbox_id, retain, note, archive_uri, archived_at, archive_bytes, updated_at
		FROM disk_records ORDER BY sandbox_id`)
	if err != nil {
		return nil, fmt.Errorf("store: list disk records: %w", err)
	}
	defer rows.Close()
	var out []DiskRecord
	for rows.Next() {
		var d DiskRecord
		var retain int64
		if err := rows.Scan(&d.SandboxID, &retain, &d.Note, &d.ArchiveURI, &d.ArchivedAt, &d.ArchiveBytes, &d.UpdatedAt); err != nil {
			return nil, fmt.Errorf("store: read disk record: %w", err)
		}
		d.Retain = retain != 0
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list disk records: %w", err)
	}
	return out, nil
}

// PutDiskRecord replaces the decision about disk d.SandboxID; a record
// with nothing decided (not retained, no note, never archived) deletes
// the row instead, so only non-default rows exist.
func (s *Store) PutDiskRecord(ctx context.Context, d DiskRecord) error {
	if d.SandboxID == "" {
		return errors.New("store: a disk record needs a sandbox id")
	}
	if !d.Retain && d.Note == "" && d.ArchiveURI == "" {
		return s.DeleteDiskRecord(ctx, d.SandboxID)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		retain := 0
		if d.Retain {
			retain = 1
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO disk_records (sandbox_id, retain, note, archive_uri, archived_at, archive_bytes, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (sandbox_id) DO UPDATE SET retain = excluded.retain, note = excluded.note,
			archive_uri = excluded.archive_uri, archived_at = excluded.archived_at, archive_bytes = excluded.archive_bytes,
			updated_at = excluded.updated_at`,
			d.SandboxID, retain, d.Note, d.ArchiveURI, d.ArchivedAt, d.ArchiveBytes, d.UpdatedAt)
		if err != nil {
			return fmt.Errorf("store: put disk record %q: %w", d.SandboxID, err)
		}
		return nil
	})
}

// DeleteDiskRecord forgets the decision about a disk (none is no error).
func (s *Store) DeleteDiskRecord(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM disk_records WHERE sandbox_id = ?`, id); err != nil {
			return fmt.Errorf("store: delete disk record %q: %w", id, err)
		}
		return nil
	})
}

// PutDiskArchive inserts or replaces an archive record, and keeps the
// newest keep records (by start) in the same transaction (keep <= 0: all).
func (s *Store) PutDiskArchive(ctx context.Context, a DiskArchive, keep int) error {
	if a.ID == "" || !json.Valid(a.View) {
		return errors.New("store: a disk archive needs an id and a JSON view")
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO disk_archives (id, sandbox_id, started_at, view) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET view = excluded.view`, a.ID, a.SandboxID, a.StartedAt, string(a.View)); err != nil {
			return fmt.Errorf("store: put disk archive %q: %w", a.ID, err)
		}
		if keep > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM disk_archives WHERE id NOT IN
				(SELECT id FROM disk_archives ORDER BY started_at DESC, id DESC LIMIT ?)`, keep); err != nil {
				return fmt.Errorf("store: prune disk archives: %w", err)
			}
		}
		return nil
	})
}

// DiskArchives returns the archive records, newest first.
func (s *Store) DiskArchives(ctx context.Context) ([]DiskArchive, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, sandbox_id, started_at, view FROM disk_archives ORDER BY started_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("store: list disk archives: %w", err)
	}
	defer rows.Close()
	var out []DiskArchive
	for rows.Next() {
		var a DiskArchive
		var view string
		if err := rows.Scan(&a.ID, &a.SandboxID, &a.StartedAt, &view); err != nil {
			return nil, fmt.Errorf("store: read disk archive: %w", err)
		}
		a.View = []byte(view)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list disk archives: %w", err)
	}
	return out, nil
}
