package fleet

import "time"

// Backends is the data plane's set of one pool's serving replicas, declared
// here because the pool is what uses it: the pool adds each replica that
// becomes ready, drains it through the Backend it got back, removes it when
// it is reaped or fails, and takes a slot on one for an exec or shell
// session. The data plane sends requests to the members, least loaded
// first. Package registry connects each pool to the data plane's pool of
// its deployment; fleet does not import the data plane.
type Backends interface {
	// Add publishes a replica that became ready, after the members already
	// there. created, started and ready are its cold-start timeline; pull
	// is how long its image was pulled for before created (Config.Prepare).
	Add(id, addr string, created, started, ready time.Time, pull time.Duration) Backend
	// Remove takes a replica out; requests already on it finish.
	Remove(id string)
	// Acquire takes a slot on the least-loaded member that is healthy and
	// not draining, or reports false when there is none.
	Acquire() (id string, release func(), ok bool)
}

// Backend is one published replica as the data plane counts it.
type Backend interface {
	// InFlight is the number of requests (and sessions) on the replica.
	InFlight() int64
	// LastUsed is when a request last started or finished on it.
	LastUsed() time.Time
	// Healthy reports the data plane's last observation.
	Healthy() bool
	// Drain stops new requests from reaching the replica.
	Drain(reason string, since time.Time)
	// AcquireBackend takes a slot on the replica, refusing (false) when it
	// is draining or unhealthy; Release returns it.
	AcquireBackend() bool
	Release()
}
