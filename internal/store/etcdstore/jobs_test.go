package etcdstore

import (
	"fmt"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// openJobsSuite returns an opener of fresh stores, each under a prefix
// of its own, on one real etcd member, and the member's client.
func openJobsSuite(t *testing.T) (func(t *testing.T) *Store, *clientv3.Client) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	var n atomic.Int64
	return func(t *testing.T) *Store {
		s, err := Open(t.Context(), cli, fmt.Sprintf("/test/%d/", n.Add(1)))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	}, cli
}

// TestJobsSuite runs the jobs and workflows suite shared with the SQLite
// store on a real etcd member.
func TestJobsSuite(t *testing.T) {
	open, _ := openJobsSuite(t)
	storetest.RunJobs(t, func(t *testing.T) storetest.JobsBackend { return open(t) })
}
