package store_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestMountPullsSuite runs the mount pulls suite on a real SQLite store.
func TestMountPullsSuite(t *testing.T) {
	storetest.RunMountPulls(t, func(t *testing.T) storetest.MountPullsBackend { return openSQLite(t) })
}
