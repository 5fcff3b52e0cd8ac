package server

import (
	"context"
	"errors"
	"time"

	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/disks"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/drivers"
)

// openDisks makes the disk census over the drivers' state directories
// and the Computers' (package disks), its records in the store and its
// archives in the embedded artifact store.
func (s *Server) openDisks(ds map[string]vm.Driver) *disks.Manager {
	ttl := func(d, def time.Duration) time.Duration {
		switch {
		case d == 0:
			return def
		case d < 0:
			return 0
		}
		return d
	}
	return disks.New(disks.Options{
		DataDir: s.o.DataDir, StateDirs: drivers.StateDirs(s.o.DataDir), Drivers: ds,
		Owners: diskOwners{s}, Records: s.store, Target: disks.Local{Store: s.artifacts},
		TTL: ttl(s.o.DiskTTL, disks.DefaultTTL), OrphanTTL: ttl(s.o.DiskOrphanTTL, disks.DefaultOrphanTTL),
		SweepEvery: s.o.DiskSweep, ArchiveOnExpire: s.o.DiskArchiveOnExpire, Log: s.log,
	})
}

// diskOwners answers the census's Owners from the registry and the
// Computers.
type diskOwners struct{ s *Server }

func (o diskOwners) Deployment(id string) bool {
	if o.s.registry == nil {
		return true // not loaded yet: claim everything
	}
	_, ok := o.s.registry.Get(id)
	return ok
}

func (o diskOwners) Computer(ctx context.Context, id string) (bool, error) {
	_, err := o.s.computers.Get(ctx, id)
	if errors.Is(err, computer.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
