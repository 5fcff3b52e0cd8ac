package etcdstore

import (
	"github.com/berth-dev/berth/internal/disks"
	"github.com/berth-dev/berth/internal/feed"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/notify"
	"github.com/berth-dev/berth/internal/obs"
	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/ratelimit"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/sessions"
	"github.com/berth-dev/berth/internal/siem"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// *Store has every method of the misc suite, with the SQLite store's
// signatures, and so satisfies the interfaces the consumers of those
// entities declare.
var (
	_ storetest.MiscBackend = (*Store)(nil)
	_ siem.Store            = (*Store)(nil)
	_ disks.Records         = (*Store)(nil)
	_ registry.Store        = (*Store)(nil)
	_ feed.Store            = (*Store)(nil)
	_ image.Catalog         = (*Store)(nil)
	_ obs.DB                = (*Store)(nil)
	_ plugin.Records        = (*Store)(nil)
	_ ratelimit.Store       = (*Store)(nil)
	_ sessions.Store        = (*Store)(nil)
	_ notify.DB             = (*Store)(nil)
)
