package store_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestRolloutsSuite runs the rollouts suite on a real SQLite store.
func TestRolloutsSuite(t *testing.T) {
	storetest.RunRollouts(t, func(t *testing.T) storetest.RolloutsBackend { return openSQLite(t) })
}
