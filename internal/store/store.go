package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// ErrNotFound is returned when the requested deployment does not exist.
var ErrNotFound = errors.New("store: not found")

// ErrConflict is returned when a write's precondition fails: a create-only
// put of an existing deployment, or a put whose expected revision differs
// from the stored one. The caller should re-read and decide again.
var ErrConflict = errors.New("store: conflict")

// ErrSchemaTooNew is returned by Open when the database was last migrated
// by a newer berth than this one. The database is left untouched.
var ErrSchemaTooNew = errors.New("store: database schema is newer than this binary supports")

// FileName is the name of the database file inside the data directory.
const FileName = "berth.db"

// busyTimeout bounds how long a statement waits for a lock held by another
// connection (another process, or a WAL checkpoint) before failing.
const busyTimeout = 10 * time.Second

// maxReaders bounds the read pool; reads are short and WAL lets them run
// alongside the writer, so a handful of connections is plenty.
const maxReaders = 8

// Store is berth's embedded database. It is safe for concurrent use by
// multiple goroutines. Create it with Open and release it with Close.
type Store struct {
	path string
	w    *sql.DB // exactly one connection; every transaction BEGIN IMMEDIATE
	r    *sql.DB // query-only connections for reads

	// ws and rs are the hot statements prepared on w and r (stmts.go).
	ws, rs map[string]*sql.Stmt

	// now is the clock for bookkeeping timestamps; tests replace it.
	now func() time.Time

	gc committer // batches concurrent writes into shared commits (commit.go)
}

// Open opens the store in dir, creating dir (mode 0700) and dir/berth.db
// (mode 0600) if needed, and migrates the schema to the newest version this
// binary knows. It fails with ErrSchemaTooNew if the database is newer.
func Open(dir string) (*Store, error) {
	migs, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	return open(dir, migs)
}

// open is Open with an explicit migration list, so tests can exercise
// upgrades and failed migrations.
func open(dir string, migs []migration) (*Store, error) {
	if dir == "" {
		return nil, errors.New("store: data directory must not be empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("store: data directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("store: create data directory: %w", err)
	}
	path := filepath.Join(abs, FileName)
	// Create the file ourselves so it gets 0600 regardless of SQLite's
	// default (0644 minus umask); SQLite then copies this mode to -wal/-shm.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: open database file: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("store: open database file: %w", err)
	}

	s := &Store{path: path, now: time.Now}
	s.w, err = sql.Open("sqlite", dsn(path, url.Values{
		"_txlock":       {"immediate"},
		"_busy_timeout": {strconv.FormatInt(busyTimeout.Milliseconds(), 10)},
		"_foreign_keys": {"1"},
		"_journal_mode": {"WAL"},
		"_synchronous":  {"FULL"},
	}))
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)

	if err := s.init(migs); err != nil {
		s.w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}

	s.r, err = sql.Open("sqlite", dsn(path, url.Values{
		"_busy_timeout": {strconv.FormatInt(busyTimeout.Milliseconds(), 10)},
		"_foreign_keys": {"1"},
		"_query_only":   {"1"},
	}))
	if err != nil {
		s.w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s.r.SetMaxOpenConns(maxReaders)
	s.r.SetMaxIdleConns(maxReaders)
	ctx := context.Background()
	if s.ws, err = prepare(ctx, s.w, writeQueries); err == nil {
		s.rs, err = prepare(ctx, s.r, readQueries)
	}
	if err != nil {
		closeStmts(s.ws)
		s.r.Close()
		s.w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return s, nil
}

// dsn builds a file: URI for path, so characters such as '?' or '#' in the
// directory name cannot be mistaken for the start of the parameters.
func dsn(path string, params url.Values) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: params.Encode()}
	return u.String()
}

// init checks WAL mode and the schema version, then applies pending
// migrations.
func (s *Store) init(migs []migration) error {
	ctx := context.Background()
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("could not enable WAL journal mode (got %q); is the data directory on a local file system?", mode)
	}
	// migrate checks for a too-new schema before anything else, and
	// parseMigrations guarantees at least one migration, so a newer database
	// is refused before it is touched.
	for _, m := range migs {
		if err := s.migrate(ctx, m, len(migs)); err != nil {
			return err
		}
	}
	return nil
}

// migrate applies m if the database is older than m, in one transaction
// that also records the new version. The version is re-read inside the
// (IMMEDIATE, hence exclusive-for-writers) transaction, so two processes
// opening the same database at once cannot both apply m.
func (s *Store) migrate(ctx context.Context, m migration, latest int) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	v, err := userVersion(ctx, tx)
	if err != nil {
		return err
	}
	if err := checkVersion(v, latest); err != nil {
		return err
	}
	if v >= m.version {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return fmt.Errorf("migration %s: %w", m.name, err)
	}
	// PRAGMA takes no bound parameters; the version is our own integer.
	if _, err := tx.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(m.version)); err != nil {
		return fmt.Errorf("migration %s: record version: %w", m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: commit: %w", m.name, err)
	}
	return nil
}

func checkVersion(v, latest int) error {
	if v > latest {
		return fmt.Errorf("%w: database is at schema version %d, this berth knows versions up to %d; run a newer berth or restore a backup", ErrSchemaTooNew, v, latest)
	}
	return nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func userVersion(ctx context.Context, q queryer) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// Close closes the database. Writes that returned before Close are durable;
// calls made after Close fail.
func (s *Store) Close() error {
	return errors.Join(closeStmts(s.rs), closeStmts(s.ws), s.r.Close(), s.w.Close())
}

// Migrations live in migrations/NNNN_name.sql; see the package doc.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

var loadMigrations = sync.OnceValues(func() ([]migration, error) {
	return parseMigrations(migrationFiles, "migrations")
})

// parseMigrations reads dir of fsys and checks that the files are numbered
// 1, 2, 3, … without gaps or duplicates, so a misnumbered file fails every
// Open (and the tests) instead of silently skipping a schema step.
func parseMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("store: read migrations: %w", err)
	}
	var migs []migration
	for _, e := range entries { // ReadDir sorts by name
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || len(num) != 4 {
			return nil, fmt.Errorf("store: migration %q: name must be NNNN_description.sql", name)
		}
		if want := len(migs) + 1; v != want {
			return nil, fmt.Errorf("store: migration %q: expected version %d next", name, want)
		}
		b, err := fs.ReadFile(fsys, dir+"/"+name)
		if err != nil {
			return nil, fmt.Errorf("store: read migration %q: %w", name, err)
		}
		migs = append(migs, migration{version: v, name: name, sql: string(b)})
	}
	if len(migs) == 0 {
		return nil, errors.New("store: no migrations embedded")
	}
	return migs, nil
}

// timeFormat is fixed-width UTC with nanoseconds, so stored timestamps
// round-trip exactly and sort as text.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func parseTime(column, s string) (time.Time, error) {
	t, err := time.Parse(timeFormat, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: corrupt %s %q: %w", column, s, err)
	}
	return t, nil
}
