package fleet

import (
	"time"

	"github.com/berth-dev/berth/internal/proxy"
)

// dataPlane connects a pool to the data plane's pool of backends, as
// package registry does in berth (registry's replicaSet, which this
// package's tests cannot import).
type dataPlane struct{ pool *proxy.Pool }

func newDataPlane() dataPlane { return dataPlane{proxy.NewPool()} }

func (s dataPlane) Add(id, addr string, created, started, ready time.Time, pull time.Duration) Backend {
	b := proxy.NewBackend(id, addr, false)
	b.Timeline = proxy.Timeline{Created: created, Started: started, Ready: ready, Pull: pull}
	s.pool.Add(b)
	return b
}

func (s dataPlane) Remove(id string) { s.pool.Remove(id) }

func (s dataPlane) Acquire() (string, func(), bool) {
	if b := s.pool.Acquire(); b != nil {
		return b.ID, b.Release, true
	}
	return "", nil, false
}
