package etcdstore

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestMiscSuite runs the suite of security alerts, disks, drains, feeds,
// images, obs alerts, plugins, rate limits, sessions and webhooks, shared
// with the SQLite store, on a real etcd member, each subtest under a
// prefix of its own.
func TestMiscSuite(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	var n atomic.Int64
	storetest.RunMisc(t, func(t *testing.T) storetest.MiscBackend {
		s, err := Open(t.Context(), cli, fmt.Sprintf("/misc/%d/", n.Add(1)), "h1")
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
	checkLayout(t, cli, "/misc/", "securityalerts", "securityalertseq", "sessions", "sessionhashes", "webhooks", "obsalerts", "feedevents", "diskrecords", "ratelimits")
}
