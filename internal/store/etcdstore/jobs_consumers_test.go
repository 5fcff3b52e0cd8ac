package etcdstore

import (
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/jobs/mountpull"
	"github.com/berth-dev/berth/internal/rollout"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// The suites' interfaces and those the consumers of jobs, pulls and
// rollouts declare: *Store satisfies them with *store.Store's signatures.
var (
	_ storetest.JobsBackend       = (*Store)(nil)
	_ storetest.MountPullsBackend = (*Store)(nil)
	_ storetest.PullsBackend      = (*Store)(nil)
	_ storetest.RolloutsBackend   = (*Store)(nil)
	_ storetest.CascadeBackend    = (*Store)(nil)
	_ jobs.Store                  = (*Store)(nil)
	_ mountpull.Records           = (*Store)(nil)
	_ image.PullCatalog           = (*Store)(nil)
	_ rollout.Store               = (*Store)(nil)
	_ fleet.ReplicaRecords        = (*Store)(nil)
)
