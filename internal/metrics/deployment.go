package metrics

import (
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Deployment is the live metric set of one deployment. Create it with
// NewDeployment or Registry.Get; every method is safe for concurrent use.
type Deployment struct {
	// Requests counts proxied requests by status class.
	Requests StatusCounts
	// LatencyMs is the time from receiving a request to the upstream's
	// response headers, in milliseconds, bucketed by LatencyMsBounds.
	LatencyMs *Histogram
	// ColdStartS is how long a VM took from create to passing its first
	// health probe, in seconds, bucketed by ColdStartSecBounds.
	ColdStartS *Histogram
	// Autoscale counts the autoscaler's actions for this deployment.
	Autoscale AutoscaleCounters
	// Phases breaks down the time requests held for a cold start waited.
	Phases *ColdPhases
}

// NewDeployment returns an empty metric set with the standard bounds.
func NewDeployment() *Deployment {
	return &Deployment{
		LatencyMs:  mustHistogram(LatencyMsBounds),
		ColdStartS: mustHistogram(ColdStartSecBounds),
		Phases:     newColdPhases(),
	}
}

// ObserveRequest records one request that got an upstream response: its
// status class and its latency. It is the proxy's per-request call: a few
// atomic operations, no locks, no allocation.
func (d *Deployment) ObserveRequest(status int, latency time.Duration) {
	d.Requests.Record(status)
	d.LatencyMs.Observe(float64(latency) / float64(time.Millisecond))
}

// ObserveError records one request that got no upstream response (connect
// failure, reset before headers, client abort). It is not put in the
// latency histogram, which describes how fast upstreams answer; the time a
// failed dial took would only blur that.
func (d *Deployment) ObserveError() { d.Requests.RecordError() }

// ObserveColdStart records how long one VM took to become ready.
func (d *Deployment) ObserveColdStart(took time.Duration) {
	d.ColdStartS.Observe(took.Seconds())
}

// DeploymentSnapshot is a point-in-time copy of a Deployment, shaped like
// the wire type DeploymentMetrics.
type DeploymentSnapshot struct {
	Requests   StatusCountsSnapshot
	LatencyMs  HistogramSnapshot
	ColdStartS HistogramSnapshot
	Autoscale  AutoscaleSnapshot
}

// Snapshot copies the deployment's current figures.
func (d *Deployment) Snapshot() DeploymentSnapshot {
	return DeploymentSnapshot{
		Requests:   d.Requests.Snapshot(),
		LatencyMs:  d.LatencyMs.Snapshot(),
		ColdStartS: d.ColdStartS.Snapshot(),
		Autoscale:  d.Autoscale.Snapshot(),
	}
}

// Merge returns the sum of s and o: counters added, histograms merged,
// and the more recent of the two last create errors. The zero
// DeploymentSnapshot is the identity. It fails only when the histograms'
// bounds differ (ErrBoundsMismatch), which cannot happen between snapshots
// of Deployments made by NewDeployment.
func (s DeploymentSnapshot) Merge(o DeploymentSnapshot) (DeploymentSnapshot, error) {
	lat, err := s.LatencyMs.Merge(o.LatencyMs)
	if err != nil {
		return DeploymentSnapshot{}, err
	}
	cold, err := s.ColdStartS.Merge(o.ColdStartS)
	if err != nil {
		return DeploymentSnapshot{}, err
	}
	return DeploymentSnapshot{
		Requests:   s.Requests.Add(o.Requests),
		LatencyMs:  lat,
		ColdStartS: cold,
		Autoscale:  s.Autoscale.Add(o.Autoscale),
	}, nil
}

// AutoscaleCounters counts autoscaler actions. The counters are exported
// atomics so the autoscaler bumps them directly (d.Autoscale.VMsCreated.Add(1));
// use RecordCreateFailure for failed creates so the message is kept too.
type AutoscaleCounters struct {
	VMsCreated        atomic.Uint64 // VMs the autoscaler asked the daemon for and got
	VMsDrained        atomic.Uint64 // VMs taken out of rotation to scale down or replace
	VMsReaped         atomic.Uint64 // VMs destroyed (drained, dead, or stuck booting)
	ScaleUpEvents     atomic.Uint64 // ticks that raised the desired replica count
	ScaleDownEvents   atomic.Uint64 // ticks that lowered it
	ColdStartWaits    atomic.Uint64 // requests that found no backend and waited
	ColdStartHits     atomic.Uint64 // of those, the ones a backend arrived in time for
	ColdStartTimeouts atomic.Uint64 // of those, the ones that gave up after cold_start_timeout_secs
	BootTimeouts      atomic.Uint64 // VMs that never became healthy within boot_timeout_secs
	CreateFailures    atomic.Uint64 // creates the daemon refused or that failed client-side

	lastCreateError atomic.Pointer[createError]
}

type createError struct {
	msg string
	at  time.Time
}

// RecordCreateFailure counts a failed VM create and remembers its message
// (and when it happened, so a roll-up can pick the latest).
func (a *AutoscaleCounters) RecordCreateFailure(msg string, at time.Time) {
	a.CreateFailures.Add(1)
	a.lastCreateError.Store(&createError{msg: msg, at: at})
}

// AutoscaleSnapshot is a point-in-time copy of AutoscaleCounters, shaped
// like the wire type AutoscaleCounts.
type AutoscaleSnapshot struct {
	VMsCreated, VMsDrained, VMsReaped uint64
	ScaleUpEvents, ScaleDownEvents    uint64
	ColdStartWaits, ColdStartHits     uint64
	ColdStartTimeouts, BootTimeouts   uint64
	CreateFailures                    uint64
	LastCreateError                   string    // "" until a create has failed (the wire field is then absent)
	LastCreateErrorAt                 time.Time // zero until a create has failed
}

// Snapshot copies the counters.
func (a *AutoscaleCounters) Snapshot() AutoscaleSnapshot {
	s := AutoscaleSnapshot{
		VMsCreated:        a.VMsCreated.Load(),
		VMsDrained:        a.VMsDrained.Load(),
		VMsReaped:         a.VMsReaped.Load(),
		ScaleUpEvents:     a.ScaleUpEvents.Load(),
		ScaleDownEvents:   a.ScaleDownEvents.Load(),
		ColdStartWaits:    a.ColdStartWaits.Load(),
		ColdStartHits:     a.ColdStartHits.Load(),
		ColdStartTimeouts: a.ColdStartTimeouts.Load(),
		BootTimeouts:      a.BootTimeouts.Load(),
		CreateFailures:    a.CreateFailures.Load(),
	}
	if e := a.lastCreateError.Load(); e != nil {
		s.LastCreateError, s.LastCreateErrorAt = e.msg, e.at
	}
	return s
}

// Add returns the field-wise sum of s and o, keeping whichever last create
// error is more recent.
func (s AutoscaleSnapshot) Add(o AutoscaleSnapshot) AutoscaleSnapshot {
	out := AutoscaleSnapshot{
		VMsCreated:        s.VMsCreated + o.VMsCreated,
		VMsDrained:        s.VMsDrained + o.VMsDrained,
		VMsReaped:         s.VMsReaped + o.VMsReaped,
		ScaleUpEvents:     s.ScaleUpEvents + o.ScaleUpEvents,
		ScaleDownEvents:   s.ScaleDownEvents + o.ScaleDownEvents,
		ColdStartWaits:    s.ColdStartWaits + o.ColdStartWaits,
		ColdStartHits:     s.ColdStartHits + o.ColdStartHits,
		ColdStartTimeouts: s.ColdStartTimeouts + o.ColdStartTimeouts,
		BootTimeouts:      s.BootTimeouts + o.BootTimeouts,
		CreateFailures:    s.CreateFailures + o.CreateFailures,
		LastCreateError:   s.LastCreateError,
		LastCreateErrorAt: s.LastCreateErrorAt,
	}
	if o.LastCreateError != "" && (out.LastCreateError == "" || o.LastCreateErrorAt.After(out.LastCreateErrorAt)) {
		out.LastCreateError, out.LastCreateErrorAt = o.LastCreateError, o.LastCreateErrorAt
	}
	return out
}

// Registry holds the metric set of every deployment by id. The zero value
// is ready to use; all methods are safe for concurrent use.
//
// Reads are lock-free and allocation-free: the id→*Deployment map is
// copy-on-write behind an atomic pointer, and only creating or deleting an
// entry (rare, admin-driven) takes the mutex and copies the map.
//
// Global is "since start", like app-lb's global: when a deployment is
// deleted its final figures are folded into a retired total that Global
// keeps adding. The roll-up is computed on read rather than kept as a
// second set of counters that every request also bumps, because that would
// double the proxy's per-request atomics and make every request in the
// process contend on one set of cache lines. The price: a request that
// looked up its *Deployment before Delete and records after it is lost
// from Global (it was already counted for nothing else either).
type Registry struct {
	// m holds the sets by id, split into shards by a hash of the id so
	// that adding or deleting one copies a shard, not the whole map (a
	// write costs 1/regShards of the fleet). A shard's map is never
	// mutated once published.
	m [regShards]atomic.Pointer[map[string]*Deployment]

	mu      sync.Mutex         // serialises writers of m, and retired
	retired DeploymentSnapshot // merged final figures of deleted deployments
}

const regShards = 64

var regSeed = maphash.MakeSeed()

func regShard(id string) int { return int(maphash.String(regSeed, id) % regShards) }

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

func (r *Registry) shard(i int) map[string]*Deployment {
	if p := r.m[i].Load(); p != nil {
		return *p
	}
	return nil
}

// snapshot returns every shard's current map, as one consistent set.
func (r *Registry) snapshot() [regShards]map[string]*Deployment {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snapshotLocked()
}

func (r *Registry) snapshotLocked() [regShards]map[string]*Deployment {
	var out [regShards]map[string]*Deployment
	for i := range out {
		out[i] = r.shard(i)
	}
	return out
}

// Get returns id's metric set, creating it on first use. Callers on the
// request path should keep the pointer with their route instead of calling
// Get per request, though Get itself is a lock-free map read once the
// deployment exists.
func (r *Registry) Get(id string) *Deployment {
	i := regShard(id)
	if d, ok := r.shard(i)[id]; ok {
		return d
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.shard(i)
	if d, ok := old[id]; ok { // created while we waited for the lock
		return d
	}
	next := make(map[string]*Deployment, len(old)+1)
	maps.Copy(next, old)
	d := NewDeployment()
	next[id] = d
	r.m[i].Store(&next)
	return d
}

// Lookup returns id's metric set if it exists, without creating one, so
// read-only callers (the admin API filtering by id) cannot grow the map.
func (r *Registry) Lookup(id string) (*Deployment, bool) {
	d, ok := r.shard(regShard(id))[id]
	return d, ok
}

// Delete drops id's metric set, folding its figures into the retired total
// that Global includes. A later Get(id) starts from zero. Deleting an
// unknown id does nothing.
func (r *Registry) Delete(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := regShard(id)
	old := r.shard(i)
	d, ok := old[id]
	if !ok {
		return
	}
	next := make(map[string]*Deployment, len(old))
	maps.Copy(next, old)
	delete(next, id)
	r.m[i].Store(&next)
	if merged, err := r.retired.Merge(d.Snapshot()); err == nil {
		r.retired = merged
	} else {
		// Non-standard bounds (a caller swapped a histogram): keep the
		// counters at least.
		r.retired.Requests = r.retired.Requests.Add(d.Requests.Snapshot())
		r.retired.Autoscale = r.retired.Autoscale.Add(d.Autoscale.Snapshot())
	}
}

// Len returns the number of live deployments.
func (r *Registry) Len() int {
	n := 0
	for _, m := range r.snapshot() {
		n += len(m)
	}
	return n
}

// Each calls fn for every live deployment in ascending id order, over the
// set as it was when Each started. fn may call Get or Delete.
func (r *Registry) Each(fn func(id string, d *Deployment)) {
	all := map[string]*Deployment{}
	for _, m := range r.snapshot() {
		maps.Copy(all, m)
	}
	for _, id := range slices.Sorted(maps.Keys(all)) {
		fn(id, all[id])
	}
}

// Global returns the fleet-wide roll-up since the registry was created:
// every live deployment plus every deleted one. Histograms whose bounds are
// not the standard ones (only possible if a caller replaced a Deployment's
// histogram) are left out of the histogram roll-up; their counters still
// count.
func (r *Registry) Global() DeploymentSnapshot {
	r.mu.Lock() // so a concurrent Delete is counted exactly once
	defer r.mu.Unlock()
	g := r.retired
	g.LatencyMs = g.LatencyMs.clone()
	g.ColdStartS = g.ColdStartS.clone()
	if len(g.LatencyMs.Buckets) == 0 {
		g.LatencyMs = mustHistogram(LatencyMsBounds).Snapshot()
	}
	if len(g.ColdStartS.Buckets) == 0 {
		g.ColdStartS = mustHistogram(ColdStartSecBounds).Snapshot()
	}
	for _, m := range r.snapshotLocked() {
		for _, d := range m {
			g = addSnapshot(g, d.Snapshot())
		}
	}
	return g
}

func addSnapshot(g, s DeploymentSnapshot) DeploymentSnapshot {
	g.Requests = g.Requests.Add(s.Requests)
	g.Autoscale = g.Autoscale.Add(s.Autoscale)
	if h, err := g.LatencyMs.Merge(s.LatencyMs); err == nil {
		g.LatencyMs = h
	}
	if h, err := g.ColdStartS.Merge(s.ColdStartS); err == nil {
		g.ColdStartS = h
	}
	return g
}
