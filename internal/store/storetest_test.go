package store_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestSuite runs the backend suite shared with package etcdstore on a real
// SQLite store in a temp dir.
func TestSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Backend { return openSQLite(t) })
}
