package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Image is the metadata of one named root filesystem (package image keeps
// the tree on disk; the store keeps what names it).
type Image struct {
	Name      string
	Digest    string // "sha256:<64 hex>"
	Size      int64  // bytes of regular file contents
	Pinned    bool
	Source    string // what it was imported from
	CreatedAt time.Time
}

// Images returns every image, sorted by name.
func (s *Store) Images(ctx context.Context) ([]Image, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name, digest, size, pinned, source, created_at FROM images ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: list images: %w", err)
	}
	defer rows.Close()
	var out []Image
	for rows.Next() {
		im, err := scanImage(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, im)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list images: %w", err)
	}
	return out, nil
}

// Image returns one image, or an error wrapping ErrNotFound.
func (s *Store) Image(ctx context.Context, name string) (Image, error) {
	row := s.r.QueryRowContext(ctx, `SELECT name, digest, size, pinned, source, created_at FROM images WHERE name = ?`, name)
	im, err := scanImage(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Image{}, fmt.Errorf("store: image %q: %w", name, ErrNotFound)
	}
	return im, err
}

func scanImage(sc scanner) (Image, error) {
	var (
		im      Image
		pinned  int64
		created string
	)
	if err := sc.Scan(&im.Name, &im.Digest, &im.Size, &pinned, &im.Source, &created); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Image{}, err
		}
		return Image{}, fmt.Errorf("store: read image: %w", err)
	}
	im.Pinned = pinned != 0
	t, err := parseTime("created_at", created)
	if err != nil {
		return Image{}, err
	}
	im.CreatedAt = t
	return im, nil
}

// PutImage inserts im or replaces the image of the same name. A zero
// CreatedAt is set to now; Pinned is kept from the replaced row when
// keepPinned is true, so a re-import does not unpin.
func (s *Store) PutImage(ctx context.Context, im Image, keepPinned bool) (Image, error) {
	if im.Name == "" || im.Digest == "" {
		return Image{}, errors.New("store: an image needs a name and a digest")
	}
	if im.CreatedAt.IsZero() {
		im.CreatedAt = s.now().UTC().Round(0)
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if keepPinned {
			var pinned int64
			err := tx.QueryRowContext(ctx, `SELECT pinned FROM images WHERE name = ?`, im.Name).Scan(&pinned)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("store: image %q: %w", im.Name, err)
			}
			im.Pinned = im.Pinned || pinned != 0
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO images (name, digest, size, pinned, source, created_at)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, size = excluded.size,
				pinned = excluded.pinned, source = excluded.source, created_at = excluded.created_at`,
			im.Name, im.Digest, im.Size, pinnedInt(im.Pinned), im.Source, formatTime(im.CreatedAt))
		if err != nil {
			return fmt.Errorf("store: put image %q: %w", im.Name, err)
		}
		return nil
	})
	return im, err
}

// PinImage sets an image's pinned flag, or fails with ErrNotFound.
func (s *Store) PinImage(ctx context.Context, name string, pinned bool) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE images SET pinned = ? WHERE name = ?`, pinnedInt(pinned), name)
		if err != nil {
			return fmt.Errorf("store: pin image %q: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("store: image %q: %w", name, ErrNotFound)
		}
		return nil
	})
}

// DeleteImage removes an image's name and reports whether another name
// still refers to its digest (so the caller knows whether the tree may go).
// It fails with ErrNotFound for unknown names.
func (s *Store) DeleteImage(ctx context.Context, name string) (digest string, shared bool, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT digest FROM images WHERE name = ?`, name).Scan(&digest); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("store: image %q: %w", name, ErrNotFound)
			}
			return fmt.Errorf("store: delete image %q: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM images WHERE name = ?`, name); err != nil {
			return fmt.Errorf("store: delete image %q: %w", name, err)
		}
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM images WHERE digest = ?`, digest).Scan(&n); err != nil {
			return fmt.Errorf("store: delete image %q: %w", name, err)
		}
		shared = n > 0
		return nil
	})
	return digest, shared, err
}

// pinnedInt is the pinned column of a flag.
func pinnedInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
