package registry

import (
	"time"

	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/proxy"
)

// replicaSet is the seam between a vm deployment's replica pool (package
// fleet, the control plane) and its data plane pool: the fleet pool adds
// its ready replicas to it and removes them, the data plane routes to them.
type replicaSet struct{ pool *proxy.Pool }

var (
	_ fleet.Backends = replicaSet{}
	_ fleet.Backend  = (*proxy.Backend)(nil)
	_ proxy.Refusal  = (*fleet.StartError)(nil)
)

func (s replicaSet) Add(id, addr string, created, started, ready time.Time, pull time.Duration) fleet.Backend {
	b := proxy.NewBackend(id, addr, false)
	b.Timeline = proxy.Timeline{Created: created, Started: started, Ready: ready, Pull: pull}
	s.pool.Add(b)
	return b
}

func (s replicaSet) Remove(id string) { s.pool.Remove(id) }

func (s replicaSet) Acquire() (string, func(), bool) {
	b := s.pool.Acquire()
	if b == nil {
		return "", nil, false
	}
	return b.ID, b.Release, true
}
