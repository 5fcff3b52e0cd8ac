package store_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

func openSQLite(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestJobsSuite runs the jobs and workflows suite shared with package
// etcdstore on a real SQLite store.
func TestJobsSuite(t *testing.T) {
	storetest.RunJobs(t, func(t *testing.T) storetest.JobsBackend { return openSQLite(t) })
}
