package etcdstore

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestComputersSuite runs the Computers suite shared with the SQLite store
// on a real etcd member, each subtest under a prefix of its own.
func TestComputersSuite(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	var n atomic.Int64
	storetest.RunComputers(t, func(t *testing.T) storetest.ComputersBackend {
		s, err := Open(t.Context(), cli, fmt.Sprintf("/computers/%d/", n.Add(1)))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}
