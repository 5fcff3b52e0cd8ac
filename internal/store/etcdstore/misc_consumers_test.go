package etcdstore

import "github.com/berth-dev/berth/internal/store/storetest"

// *Store has every method of the misc suite, with the SQLite store's
// signatures.
var _ storetest.MiscBackend = (*Store)(nil)
