// Package metrics keeps berth's in-memory request accounting (status
// classes, latency and cold-start histograms, autoscaler event counters),
// samples host and process usage from /proc, and exposes the same figures
// in Prometheus text format.
//
// The recording side (Histogram.Observe, Deployment.ObserveRequest) sits on
// the proxy's per-request path, so it is lock-free and allocation-free: it
// is a handful of atomic adds. Everything that allocates or locks happens on
// the read side (Snapshot, Registry.Global, the Prometheus collector), which
// only admin requests and scrapes pay for.
//
// The snapshot types here are plain structs; the admin API converts them to
// its wire types (package apitype) at the edge so this package stays free of
// JSON concerns.
package metrics

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
)

// LatencyMsBounds are the finite upper bounds, in milliseconds, of the
// request latency histogram. The +Inf bucket is implicit. They match
// app-lb's latency_ms buckets so dashboards written for it read the same.
var LatencyMsBounds = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// ColdStartSecBounds are the finite upper bounds, in seconds, of the cold
// start histogram (VM create to first healthy probe). The +Inf bucket is
// implicit. The range reaches 120 s because that is the default
// cold_start_timeout_secs.
var ColdStartSecBounds = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120}

// ErrBounds is returned (wrapped) by NewHistogram for unusable bucket
// bounds.
var ErrBounds = errors.New("metrics: invalid histogram bounds")

// ErrBoundsMismatch is returned (wrapped) by HistogramSnapshot.Merge when
// the two snapshots were taken from histograms with different bounds, which
// cannot be added bucket by bucket.
var ErrBoundsMismatch = errors.New("metrics: histogram bounds differ")

// Histogram counts observations into fixed buckets. Observe is safe for
// concurrent use, lock-free and allocation-free; Snapshot may run
// concurrently with it and sees each observation either wholly in its
// bucket or not at all, though the sum may lag or lead the counts by the
// observations in flight at that instant.
//
// The zero value is not usable; create one with NewHistogram.
type Histogram struct {
	bounds []float64 // finite upper bounds, strictly ascending; never mutated
	// counts[i] is the NON-cumulative number of observations in bucket i;
	// counts[len(bounds)] is the +Inf bucket. Non-cumulative storage makes
	// Observe one atomic add instead of one per higher bucket; Snapshot
	// turns them into cumulative counts.
	counts  []atomic.Uint64
	sumBits atomic.Uint64 // math.Float64bits of the running sum
}

// NewHistogram returns a histogram with the given finite upper bounds,
// which must be strictly ascending and not NaN. A trailing +Inf is accepted
// and dropped, because the +Inf bucket always exists. The slice is copied.
func NewHistogram(bounds []float64) (*Histogram, error) {
	b := slices.Clone(bounds)
	if n := len(b); n > 0 && math.IsInf(b[n-1], 1) {
		b = b[:n-1]
	}
	for i, v := range b {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: bound %d is %v; only the implicit last bucket may be infinite", ErrBounds, i, v)
		}
		if i > 0 && v <= b[i-1] {
			return nil, fmt.Errorf("%w: bound %d (%v) is not greater than bound %d (%v)", ErrBounds, i, v, i-1, b[i-1])
		}
	}
	return &Histogram{bounds: b, counts: make([]atomic.Uint64, len(b)+1)}, nil
}

// mustHistogram is for the package's own bound sets, which are known good.
func mustHistogram(bounds []float64) *Histogram {
	h, err := NewHistogram(bounds)
	if err != nil {
		panic(err) // only reachable if a package var was edited badly
	}
	return h
}

// Observe records one value. NaN is ignored, since it would poison the sum
// and belongs in no bucket. Values at or below the first bound (including
// negatives) land in the first bucket; values equal to a bound land in that
// bound's bucket (Prometheus "le" semantics).
// Observing into a nil *Histogram does nothing, so a half-built Deployment
// loses figures instead of crashing the proxy.
func (h *Histogram) Observe(v float64) {
	if h == nil || v != v { // v != v: NaN
		return
	}
	// Linear scan: with ~12 bounds it beats a binary search, and it neither
	// allocates nor calls through an interface.
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	for {
		old := h.sumBits.Load()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Bounds returns a copy of the histogram's finite upper bounds.
func (h *Histogram) Bounds() []float64 {
	if h == nil {
		return nil
	}
	return slices.Clone(h.bounds)
}

// BucketCount is one bucket of a HistogramSnapshot.
type BucketCount struct {
	// Le is the bucket's inclusive upper bound; nil means +Inf (the wire
	// format's null).
	Le *float64
	// Count is CUMULATIVE: the number of observations <= Le, as in
	// Prometheus's le buckets. The +Inf bucket's Count therefore equals the
	// snapshot's Count.
	Count uint64
}

// HistogramSnapshot is a point-in-time copy of a Histogram with the summary
// statistics the admin API reports. An empty histogram has all-zero
// statistics (not NaN) but still lists its buckets.
type HistogramSnapshot struct {
	// Count is the number of observations (NaN ones are dropped).
	Count uint64
	// Sum is the total of all observations, in the histogram's unit.
	Sum float64
	// Mean is Sum/Count, or 0 when empty.
	Mean float64
	// P50, P90 and P99 are estimated by linear interpolation within the
	// bucket holding the rank, like PromQL's histogram_quantile; a rank in
	// the +Inf bucket reports the largest finite bound.
	P50, P90, P99 float64
	// Buckets are in ascending bound order, ending with the +Inf bucket,
	// with cumulative counts.
	Buckets []BucketCount
}

// Snapshot copies the histogram's current state and computes its summary
// statistics. Count is derived from the buckets so that it always equals
// the +Inf bucket's count. A nil *Histogram gives the zero snapshot.
func (h *Histogram) Snapshot() HistogramSnapshot {
	if h == nil {
		return HistogramSnapshot{}
	}
	les := slices.Clone(h.bounds) // fresh storage so callers cannot alias our bounds
	s := HistogramSnapshot{Buckets: make([]BucketCount, len(h.counts))}
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		s.Buckets[i].Count = cum
		if i < len(les) {
			s.Buckets[i].Le = &les[i]
		}
	}
	s.Count = cum
	s.Sum = math.Float64frombits(h.sumBits.Load())
	s.fillStats()
	return s
}

// fillStats computes Mean and the percentiles from Count, Sum and Buckets.
func (s *HistogramSnapshot) fillStats() {
	if s.Count == 0 {
		s.Sum, s.Mean, s.P50, s.P90, s.P99 = 0, 0, 0, 0, 0
		return
	}
	s.Mean = s.Sum / float64(s.Count)
	s.P50 = s.Quantile(0.50)
	s.P90 = s.Quantile(0.90)
	s.P99 = s.Quantile(0.99)
}

// Quantile estimates the q-quantile (0 <= q <= 1) from the cumulative
// buckets the way PromQL's histogram_quantile does: find the bucket holding
// rank q*Count and interpolate linearly between its lower and upper bound,
// assuming observations are spread evenly inside it. The first bucket's
// lower bound is 0 (or its upper bound if that is <= 0); a rank in the +Inf
// bucket returns the largest finite bound. It returns 0 for an empty
// snapshot and NaN for q outside [0, 1].
func (s HistogramSnapshot) Quantile(q float64) float64 {
	if q < 0 || q > 1 || q != q {
		return math.NaN()
	}
	if s.Count == 0 || len(s.Buckets) == 0 {
		return 0
	}
	rank := q * float64(s.Count)
	var prevCount uint64
	prevLe := 0.0
	for i, b := range s.Buckets {
		if float64(b.Count) < rank || b.Count == 0 {
			prevCount, prevLe = b.Count, leOf(b)
			continue
		}
		if b.Le == nil {
			if i == 0 {
				return 0 // only the +Inf bucket exists: no finite bound to report
			}
			return prevLe
		}
		upper := *b.Le
		lower := prevLe
		if i == 0 {
			if upper <= 0 {
				return upper
			}
			lower = 0
		}
		inBucket := float64(b.Count - prevCount)
		return lower + (upper-lower)*(rank-float64(prevCount))/inBucket
	}
	// Unreachable for a well-formed snapshot (the last bucket holds Count),
	// but a hand-built one might not; report the top finite bound.
	return prevLe
}

func leOf(b BucketCount) float64 {
	if b.Le == nil {
		return math.Inf(1)
	}
	return *b.Le
}

// Merge returns the sum of s and o, with statistics recomputed from the
// merged buckets. A snapshot with no buckets (the zero value) is the
// identity, so a roll-up can start from HistogramSnapshot{}. Snapshots with
// different bounds return an error wrapping ErrBoundsMismatch.
func (s HistogramSnapshot) Merge(o HistogramSnapshot) (HistogramSnapshot, error) {
	if len(s.Buckets) == 0 {
		return o.clone(), nil
	}
	if len(o.Buckets) == 0 {
		return s.clone(), nil
	}
	if len(s.Buckets) != len(o.Buckets) {
		return HistogramSnapshot{}, fmt.Errorf("%w: %d buckets vs %d", ErrBoundsMismatch, len(s.Buckets), len(o.Buckets))
	}
	out := s.clone()
	for i, b := range o.Buckets {
		if (b.Le == nil) != (out.Buckets[i].Le == nil) || (b.Le != nil && *b.Le != *out.Buckets[i].Le) {
			return HistogramSnapshot{}, fmt.Errorf("%w: bucket %d is le=%v vs le=%v", ErrBoundsMismatch, i, leOf(out.Buckets[i]), leOf(b))
		}
		out.Buckets[i].Count += b.Count
	}
	out.Count += o.Count
	out.Sum += o.Sum
	out.fillStats()
	return out, nil
}

// clone deep-copies s so merged results never share Le storage with their
// inputs.
func (s HistogramSnapshot) clone() HistogramSnapshot {
	out := s
	out.Buckets = make([]BucketCount, len(s.Buckets))
	les := make([]float64, len(s.Buckets))
	for i, b := range s.Buckets {
		out.Buckets[i].Count = b.Count
		if b.Le != nil {
			les[i] = *b.Le
			out.Buckets[i].Le = &les[i]
		}
	}
	return out
}
