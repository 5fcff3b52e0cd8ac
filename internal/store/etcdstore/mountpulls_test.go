package etcdstore

import (
	"testing"

	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestMountPullsSuite runs the mount pulls suite on a real etcd member.
func TestMountPullsSuite(t *testing.T) {
	open, _ := openJobsSuite(t)
	storetest.RunMountPulls(t, func(t *testing.T) storetest.MountPullsBackend { return open(t) })
}
