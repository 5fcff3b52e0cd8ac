package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PhaseSecBounds are the buckets of the cold-start phase histograms, in
// seconds: finer than ColdStartSecBounds at the low end, where berth's own
// share of a cold start lives.
var PhaseSecBounds = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120}

// PhaseNames are the cold-start phases, in order.
var PhaseNames = []string{"queue", "pull", "create", "boot", "first_byte", "total"}

// ColdPhases holds one histogram per phase of the requests held for a cold
// start: queue (waiting before a replica was created for it), pull (its
// image being pulled from a registry), create (the
// driver starting the sandbox), boot (until the health probe passed),
// first_byte (from ready to the response's first byte), and total.
type ColdPhases struct {
	h [6]*Histogram
}

func newColdPhases() *ColdPhases {
	var c ColdPhases
	for i := range c.h {
		c.h[i] = mustHistogram(PhaseSecBounds)
	}
	return &c
}

// Observe records one held request's phases. Lock-free, no allocation.
func (c *ColdPhases) Observe(queue, pull, create, boot, firstByte, total time.Duration) {
	for i, d := range [6]time.Duration{queue, pull, create, boot, firstByte, total} {
		c.h[i].Observe(d.Seconds())
	}
}

// Snapshot returns the histograms keyed by PhaseNames.
func (c *ColdPhases) Snapshot() map[string]HistogramSnapshot {
	out := make(map[string]HistogramSnapshot, len(c.h))
	for i, name := range PhaseNames {
		out[name] = c.h[i].Snapshot()
	}
	return out
}

var descPhases = prometheus.NewDesc("berth_cold_start_phase_seconds",
	"Time requests held for a cold start spent in each phase (queue, pull, create, boot, first_byte, total).",
	[]string{"deployment", "phase"}, nil)

func collectPhases(ch chan<- prometheus.Metric, id string, d *Deployment) {
	if d.Phases == nil {
		return
	}
	for i, name := range PhaseNames {
		ch <- constHistogram(descPhases, d.Phases.h[i].Snapshot(), id, name)
	}
}
