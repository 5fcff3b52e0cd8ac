package store_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestMiscSuite runs the suite of security alerts, disks, drains, feeds,
// images, obs alerts, plugins, rate limits, sessions and webhooks, shared
// with package etcdstore, on a real SQLite store in a temp dir.
func TestMiscSuite(t *testing.T) {
	storetest.RunMisc(t, func(t *testing.T) storetest.MiscBackend {
		s, err := store.Open(t.TempDir())
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
