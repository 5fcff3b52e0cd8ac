package store_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestPullsSuite runs the pulls suite on a real SQLite store.
func TestPullsSuite(t *testing.T) {
	storetest.RunPulls(t, func(t *testing.T) storetest.PullsBackend { return openSQLite(t) },
		func(t *testing.T, b storetest.PullsBackend, name string) {
			if _, err := b.(*store.Store).PutImage(t.Context(), store.Image{Name: name, Digest: "sha256:" + name}, false); err != nil {
				t.Fatal(err)
			}
		})
}
