package store_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestComputersSuite runs the Computers suite shared with package
// etcdstore on a real SQLite store in a temp dir.
func TestComputersSuite(t *testing.T) {
	storetest.RunComputers(t, func(t *testing.T) storetest.ComputersBackend {
		s, err := store.Open(t.TempDir())
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
