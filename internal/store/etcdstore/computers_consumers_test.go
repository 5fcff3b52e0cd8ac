package etcdstore

import (
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// The Computers suite's interface and package computer's Store, which
// *store.Store satisfies: *Store satisfies them too.
var (
	_ storetest.ComputersBackend = (*Store)(nil)
	_ storetest.ComputersBackend = (*store.Store)(nil)
	_ computer.Store             = (*Store)(nil)
)
