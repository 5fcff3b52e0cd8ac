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

func TestDeploymentCRUD(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()

	if got, err := s.Deployments(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Deployments on empty store = %v, %v; want none", got, err)
	}

	b, err := s.PutDeployment(ctx, Deployment{ID: "b", Namespace: "ns1", Spec: spec(1), Revision: 42}, true, 0)
	if err != nil {
		t.Fatalf("create b: %v", err)
	}
	if b.Revision != 1 || !b.CreatedAt.Equal(b.UpdatedAt) || b.CreatedAt.IsZero() {
		t.Errorf("created b = %+v, want revision 1 and equal non-zero timestamps", b)
	}
	a, err := s.PutDeployment(ctx, Deployment{ID: "a", Namespace: "ns2", Spec: spec(2)}, false, 0)
	if err != nil {
		t.Fatalf("create a: %v", err)
	}

	got, err := s.Deployment(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, got); diff != "" {
		t.Errorf("Deployment(b) differs from PutDeployment's result (-put +get):\n%s", diff)
	}

	b2, err := s.PutDeployment(ctx, Deployment{ID: "b", Namespace: "ns3", Spec: spec(3)}, false, 0)
	if err != nil {
		t.Fatalf("replace b: %v", err)
	}
	if b2.Revision != 2 {
		t.Errorf("revision after replace = %d, want 2", b2.Revision)
	}
	if !b2.CreatedAt.Equal(b.CreatedAt) {
		t.Errorf("CreatedAt changed on replace: %v → %v", b.CreatedAt, b2.CreatedAt)
	}
	if !b2.UpdatedAt.After(b.UpdatedAt) {
		t.Errorf("UpdatedAt did not advance on replace: %v → %v", b.UpdatedAt, b2.UpdatedAt)
	}

	list, err := s.Deployments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Deployment{a, b2}, list); diff != "" {
		t.Errorf("Deployments (-want +got):\n%s", diff)
	}

	if err := s.DeleteDeployment(ctx, "b"); err != nil {
		t.Fatalf("delete b: %v", err)
	}
	if _, err := s.Deployment(ctx, "b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Deployment(b) after delete: err = %v, want ErrNotFound", err)
	}
	if err := s.DeleteDeployment(ctx, "b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete of b: err = %v, want ErrNotFound", err)
	}
	if _, err := s.Deployment(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Deployment(missing): err = %v, want ErrNotFound", err)
	}

	// Recreating a deleted deployment starts its history afresh.
	b3, err := s.PutDeployment(ctx, Deployment{ID: "b", Spec: spec(4)}, true, 0)
	if err != nil {
		t.Fatalf("recreate b: %v", err)
	}
	if b3.Revision != 1 {
		t.Errorf("revision of recreated b = %d, want 1", b3.Revision)
	}
}

func TestPutDeploymentSpecVerbatim(t *testing.T) {
	s, _ := openTest(t)
	// Whitespace and key order must survive: the API layer normalizes and
	// the store must not re-encode.
	raw := []byte("{\"z\":1,  \"a\":[true,null],\"s\":\"\u00e9\\u0000\"}")
	if _, err := s.PutDeployment(t.Context(), Deployment{ID: "x", Spec: raw}, false, 0); err != nil {
		t.Fatal(err)
	}
	raw[0] = '[' // the store must not alias the caller's slice
	got, err := s.Deployment(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"z\":1,  \"a\":[true,null],\"s\":\"\u00e9\\u0000\"}"; string(got.Spec) != want {
		t.Errorf("Spec = %q, want %q", got.Spec, want)
	}
}

func TestPutDeploymentConflicts(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	if _, err := s.PutDeployment(ctx, Deployment{ID: "d", Spec: spec(1)}, false, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutDeployment(ctx, Deployment{ID: "d", Spec: spec(2)}, false, 0); err != nil {
		t.Fatal(err)
	} // d is now at revision 2

	for _, tc := range []struct {
		name       string
		id         string
		createOnly bool
		ifRevision int64
		wantErr    error
		wantRev    int64
	}{
		{"create-only on existing", "d", true, 0, ErrConflict, 0},
		{"stale revision", "d", false, 1, ErrConflict, 0},
		{"future revision", "d", false, 3, ErrConflict, 0},
		{"revision on missing", "nope", false, 1, ErrConflict, 0},
		{"create-only wins over revision", "d", true, 2, ErrConflict, 0},
		{"matching revision", "d", false, 2, nil, 3},
		{"create-only on new", "new", true, 0, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := s.Deployment(ctx, tc.id)
			got, err := s.PutDeployment(ctx, Deployment{ID: tc.id, Spec: spec(99)}, tc.createOnly, tc.ifRevision)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				after, _ := s.Deployment(ctx, tc.id)
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("failed put changed the stored record (-before +after):\n%s", diff)
				}
				return
			}
			if got.Revision != tc.wantRev {
				t.Errorf("revision = %d, want %d", got.Revision, tc.wantRev)
			}
		})
	}
}

func TestPutDeploymentInvalid(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name       string
		d          Deployment
		ifRevision int64
	}{
		{"empty id", Deployment{Spec: spec(1)}, 0},
		{"nil spec", Deployment{ID: "x"}, 0},
		{"bad json", Deployment{ID: "x", Spec: []byte(`{"a":`)}, 0},
		{"negative revision", Deployment{ID: "x", Spec: spec(1)}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.PutDeployment(ctx, tc.d, false, tc.ifRevision)
			if err == nil || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
				t.Fatalf("err = %v, want a validation error", err)
			}
		})
	}
	if list, err := s.Deployments(ctx); err != nil || len(list) != 0 {
		t.Errorf("after invalid puts, Deployments = %v, %v; want none", list, err)
	}
}

func TestUpstreamDrains(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	for _, id := range []string{"d1", "d2"} {
		if _, err := s.PutDeployment(ctx, Deployment{ID: id, Spec: spec(1)}, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 987654321, time.FixedZone("x", 3600))
	put := func(d UpstreamDrain) {
		t.Helper()
		if err := s.PutUpstreamDrain(ctx, d); err != nil {
			t.Fatalf("PutUpstreamDrain(%+v): %v", d, err)
		}
	}
	put(UpstreamDrain{Deployment: "d2", Upstream: "u1", Reason: "maint", StartedAt: t0})
	put(UpstreamDrain{Deployment: "d1", Upstream: "u2", StartedAt: t0})
	put(UpstreamDrain{Deployment: "d1", Upstream: "u1", Reason: "first", StartedAt: t0})
	put(UpstreamDrain{Deployment: "d1", Upstream: "u1", Reason: "second", StartedAt: t0.Add(time.Minute)}) // upsert

	got, err := s.UpstreamDrains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []UpstreamDrain{
		{"d1", "u1", "second", t0.Add(time.Minute).UTC()},
		{"d1", "u2", "", t0.UTC()},
		{"d2", "u1", "maint", t0.UTC()},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UpstreamDrains (-want +got):\n%s", diff)
	}

	if err := s.PutUpstreamDrain(ctx, UpstreamDrain{Deployment: "ghost", Upstream: "u"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("drain of unknown deployment: err = %v, want ErrNotFound", err)
	}
	if err := s.PutUpstreamDrain(ctx, UpstreamDrain{Deployment: "d1"}); err == nil {
		t.Error("drain without upstream succeeded, want error")
	}

	// A zero StartedAt is filled in from the clock.
	put(UpstreamDrain{Deployment: "d2", Upstream: "u9"})
	got, _ = s.UpstreamDrains(ctx)
	if last := got[len(got)-1]; last.Upstream != "u9" || last.StartedAt.IsZero() {
		t.Errorf("drain with zero StartedAt stored as %+v, want a non-zero time", last)
	}

	// Uncordon is idempotent.
	for range 2 {
		if err := s.DeleteUpstreamDrain(ctx, "d2", "u9"); err != nil {
			t.Fatalf("DeleteUpstreamDrain: %v", err)
		}
	}
	if err := s.DeleteUpstreamDrain(ctx, "ghost", "u"); err != nil {
		t.Errorf("DeleteUpstreamDrain of unknown deployment: %v", err)
	}

	// Deleting a deployment deletes its drains and only its drains.
	if err := s.DeleteDeployment(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	got, err = s.UpstreamDrains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[2:], got); diff != "" {
		t.Errorf("UpstreamDrains after deleting d1 (-want +got):\n%s", diff)
	}
	// A recreated deployment does not inherit the old drains.
	if _, err := s.PutDeployment(ctx, Deployment{ID: "d1", Spec: spec(1)}, true, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.UpstreamDrains(ctx); len(got) != 1 {
		t.Errorf("after recreating d1, drains = %+v, want only d2's", got)
	}
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

func TestConcurrentWriters(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	const writers, perWriter = 8, 50

	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter+writers)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				id := fmt.Sprintf("w%d-%03d", w, i)
				if _, err := s.PutDeployment(ctx, Deployment{ID: id, Spec: spec(i)}, true, 0); err != nil {
					errs <- fmt.Errorf("put %s: %w", id, err)
				}
			}
		})
		// Readers run alongside and must never fail.
		wg.Go(func() {
			for range perWriter {
				if _, err := s.Deployments(ctx); err != nil {
					errs <- fmt.Errorf("list: %w", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	list, err := s.Deployments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != writers*perWriter {
		t.Errorf("stored %d deployments, want %d", len(list), writers*perWriter)
	}
	for w := range writers {
		for i := range perWriter {
			if _, err := s.Deployment(ctx, fmt.Sprintf("w%d-%03d", w, i)); err != nil {
				t.Errorf("w%d-%03d: %v", w, i, err)
			}
		}
	}
}

// TestConcurrentReadModifyWrite checks that ifRevision serialises
// read-modify-write cycles: no update is lost even though the writers
// never hold a lock across the read and the write.
func TestConcurrentReadModifyWrite(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	if _, err := s.PutDeployment(ctx, Deployment{ID: "c", Spec: []byte("0")}, true, 0); err != nil {
		t.Fatal(err)
	}
	const writers, increments = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for range increments {
				for {
					cur, err := s.Deployment(ctx, "c")
					if err != nil {
						errs <- err
						return
					}
					var n int
					fmt.Sscan(string(cur.Spec), &n)
					_, err = s.PutDeployment(ctx, Deployment{ID: "c", Spec: fmt.Append(nil, n+1)}, false, cur.Revision)
					if errors.Is(err, ErrConflict) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := s.Deployment(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(writers * increments); string(got.Spec) != want {
		t.Errorf("counter = %s, want %s (lost updates)", got.Spec, want)
	}
	if want := int64(writers*increments + 1); got.Revision != want {
		t.Errorf("revision = %d, want %d", got.Revision, want)
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
