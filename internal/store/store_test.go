package store

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// openTest opens a store in a fresh temp dir with a deterministic clock
// that advances one second per call.
func openTest(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	var mu sync.Mutex
	clock := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
	s.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Second)
		return clock
	}
	return s, dir
}

// rawDB opens the database file directly, bypassing the store, to inspect
// or tamper with it.
func rawDB(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(filepath.Join(dir, FileName), nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func spec(n int) []byte { return fmt.Appendf(nil, `{"kind":"static","n":%d}`, n) }

func TestOpenFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "nested")
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if _, err := s.PutDeployment(t.Context(), Deployment{ID: "a", Spec: spec(1)}, false, 0); err != nil {
		t.Fatal(err)
	}
	check := func(path string, want os.FileMode) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %v, want %v", path, got, want)
		}
	}
	check(dir, 0o700)
	db := filepath.Join(dir, FileName)
	check(db, 0o600)
	// The WAL and shared-memory files exist while the store is open and
	// inherit the database file's mode.
	check(db+"-wal", 0o600)
	check(db+"-shm", 0o600)
}

func TestOpenSettings(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	for _, tc := range []struct {
		db     *sql.DB
		pragma string
		want   string
	}{
		{s.w, "journal_mode", "wal"},
		{s.w, "synchronous", "2"}, // FULL
		{s.w, "foreign_keys", "1"},
		{s.w, "busy_timeout", "10000"},
		{s.r, "journal_mode", "wal"},
		{s.r, "foreign_keys", "1"},
		{s.r, "query_only", "1"},
		{s.r, "busy_timeout", "10000"},
	} {
		var got string
		if err := tc.db.QueryRowContext(ctx, "PRAGMA "+tc.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", tc.pragma, err)
		}
		if got != tc.want {
			t.Errorf("PRAGMA %s = %q, want %q", tc.pragma, got, tc.want)
		}
	}
}

func TestOpenBadInput(t *testing.T) {
	t.Run("empty dir", func(t *testing.T) {
		if _, err := Open(""); err == nil {
			t.Fatal("Open(\"\") succeeded, want error")
		}
	})
	t.Run("dir is a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(f); err == nil {
			t.Fatal("Open of a regular file succeeded, want error")
		}
	})
	t.Run("not a database", func(t *testing.T) {
		dir := t.TempDir()
		garbage := strings.Repeat("this is not an SQLite database\n", 200)
		if err := os.WriteFile(filepath.Join(dir, FileName), []byte(garbage), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir)
		if err == nil {
			t.Fatal("Open of a garbage file succeeded, want error")
		}
		if !strings.Contains(err.Error(), FileName) {
			t.Errorf("error %q does not name the file", err)
		}
	})
	t.Run("odd characters in path", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a?b#c%20 d")
		s, err := Open(dir)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer s.Close()
		if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
			t.Errorf("database not created at the literal path: %v", err)
		}
	})
}

func TestReopenPersists(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.PutDeployment(ctx, Deployment{ID: "keep", Namespace: "ns", Spec: spec(7)}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	drain := UpstreamDrain{Deployment: "keep", Upstream: "u", Reason: "r", StartedAt: time.Unix(1700000000, 5).UTC()}
	if err := s.PutUpstreamDrain(ctx, drain); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Deployments(ctx); err == nil {
		t.Error("Deployments after Close succeeded, want error")
	}

	s, err = Open(dir)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	got, err := s.Deployment(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("deployment after reopen (-want +got):\n%s", diff)
	}
	drains, err := s.UpstreamDrains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]UpstreamDrain{drain}, drains); diff != "" {
		t.Errorf("drains after reopen (-want +got):\n%s", diff)
	}
}

// TestReadsDoNotWaitForWriter holds a write transaction open and checks
// that reads still complete and see only committed data.
func TestReadsDoNotWaitForWriter(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	if _, err := s.PutDeployment(ctx, Deployment{ID: "committed", Spec: spec(1)}, false, 0); err != nil {
		t.Fatal(err)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO deployments VALUES ('pending', '', '{}', 1, ?, ?)`,
		formatTime(time.Now()), formatTime(time.Now())); err != nil {
		t.Fatal(err)
	}
	// The write transaction holds the only writer connection; if reads
	// shared it, or waited for SQLite's write lock, this would block until
	// the test binary's deadline.
	list, err := s.Deployments(ctx)
	if err != nil {
		t.Fatalf("Deployments during open write transaction: %v", err)
	}
	if len(list) != 1 || list[0].ID != "committed" {
		t.Errorf("Deployments during write = %+v, want only the committed one", list)
	}
}

func TestSchemaTooNew(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := rawDB(t, dir)
	if _, err := db.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}

	_, err = Open(dir)
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open of newer database: err = %v, want ErrSchemaTooNew", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "999") || !strings.Contains(msg, FileName) {
		t.Errorf("error %q should name the database and its version", msg)
	}
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != 999 {
		t.Errorf("user_version after refused Open = %d, %v; want 999 (untouched)", v, err)
	}
}

func TestMigrations(t *testing.T) {
	migs, err := loadMigrations()
	if err != nil {
		t.Fatalf("embedded migrations: %v", err)
	}
	ctx := t.Context()
	dir := t.TempDir()
	s, err := open(dir, migs)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := rawDB(t, dir)
	version := func() int {
		t.Helper()
		v, err := userVersion(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := version(); got != len(migs) {
		t.Fatalf("fresh database at version %d, want %d", got, len(migs))
	}

	// A failing migration rolls back completely: neither its earlier
	// statements nor the version bump survive.
	bad := append(migs[:len(migs):len(migs)], migration{
		version: len(migs) + 1, name: "bad",
		sql: "CREATE TABLE half_done (x INTEGER); SELECT * FROM no_such_table;",
	})
	if _, err := open(dir, bad); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("open with failing migration: err = %v, want one naming the migration", err)
	}
	if got := version(); got != len(migs) {
		t.Errorf("version after failed migration = %d, want %d", got, len(migs))
	}
	var n int
	db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = 'half_done'`).Scan(&n)
	if n != 0 {
		t.Error("table from failed migration survived")
	}

	// A new migration is applied once, on the next open, and existing data
	// is kept.
	s, err = open(dir, migs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutDeployment(ctx, Deployment{ID: "old", Spec: spec(1)}, false, 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	good := append(migs[:len(migs):len(migs)], migration{
		version: len(migs) + 1, name: "good",
		sql: "CREATE TABLE extra (x INTEGER); INSERT INTO extra VALUES (1);",
	})
	for range 2 {
		s, err := open(dir, good)
		if err != nil {
			t.Fatalf("open with new migration: %v", err)
		}
		if _, err := s.Deployment(ctx, "old"); err != nil {
			t.Errorf("data lost across migration: %v", err)
		}
		s.Close()
	}
	if got := version(); got != len(good) {
		t.Errorf("version after new migration = %d, want %d", got, len(good))
	}
	db.QueryRow(`SELECT count(*) FROM extra`).Scan(&n)
	if n != 1 {
		t.Errorf("extra has %d rows, want 1 (migration applied exactly once)", n)
	}
}

func TestParseMigrations(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name     string
		files    fstest.MapFS
		wantErr  string
		wantVers []int
	}{
		{"ok", fstest.MapFS{
			"m/0002_b.sql": file("B"), "m/0001_a.sql": file("A"), "m/README": file("x"),
		}, "", []int{1, 2}},
		{"gap", fstest.MapFS{"m/0001_a.sql": file("A"), "m/0003_c.sql": file("C")}, "expected version 2", nil},
		{"duplicate", fstest.MapFS{"m/0001_a.sql": file("A"), "m/0001_b.sql": file("B")}, "expected version 2", nil},
		{"starts at 0", fstest.MapFS{"m/0000_a.sql": file("A")}, "expected version 1", nil},
		{"bad name", fstest.MapFS{"m/1_a.sql": file("A")}, "NNNN_description.sql", nil},
		{"no number", fstest.MapFS{"m/init.sql": file("A")}, "NNNN_description.sql", nil},
		{"empty", fstest.MapFS{"m/README": file("x")}, "no migrations", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			migs, err := parseMigrations(tc.files, "m")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var vers []int
			for _, m := range migs {
				vers = append(vers, m.version)
			}
			if diff := cmp.Diff(tc.wantVers, vers); diff != "" {
				t.Errorf("versions (-want +got):\n%s", diff)
			}
		})
	}
}
