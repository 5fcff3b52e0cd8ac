package gate

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counters count gate decisions by decision (allow, deny, signin) and
// reason. The set of reasons is small and fixed by the code, so the
// counters are kept in a map that only grows by a few keys.
type counters struct {
	mu sync.RWMutex
	m  map[string]*atomic.Uint64
}

func newCounters() *counters { return &counters{m: map[string]*atomic.Uint64{}} }

func (c *counters) add(decision, reason string) {
	key := decision + "/" + reason
	c.mu.RLock()
	n := c.m[key]
	c.mu.RUnlock()
	if n == nil {
		c.mu.Lock()
		if n = c.m[key]; n == nil {
			n = new(atomic.Uint64)
			c.m[key] = n
		}
		c.mu.Unlock()
	}
	n.Add(1)
}

func (c *counters) snapshot() map[string]uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[string]uint64, len(c.m))
	for k, n := range c.m {
		out[k] = n.Load()
	}
	return out
}

// Collector exposes the decisions as berth_gate_decisions_total.
type Collector struct{ c *counters }

var decisionsDesc = prometheus.NewDesc("berth_gate_decisions_total",
	"Sign-in gate decisions, by decision (allow, deny, signin) and reason.", []string{"decision", "reason"}, nil)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- decisionsDesc }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for k, n := range c.c.snapshot() {
		d, r, _ := strings.Cut(k, "/")
		ch <- prometheus.MustNewConstMetric(decisionsDesc, prometheus.CounterValue, float64(n), d, r)
	}
}
