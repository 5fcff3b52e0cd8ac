package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metric descriptions. Histograms keep the admin API's units (latency in
// ms, cold start in s) so both views of a figure agree.
var (
	descRequests = prometheus.NewDesc("berth_requests_total",
		"Proxied requests by response class; class=error is a request that got no upstream response.",
		[]string{"deployment", "class"}, nil)
	descLatency = prometheus.NewDesc("berth_request_duration_ms",
		"Time from request to upstream response headers, in milliseconds.",
		[]string{"deployment"}, nil)
	descColdStart = prometheus.NewDesc("berth_cold_start_seconds",
		"Time from VM create to its first passing health probe, in seconds.",
		[]string{"deployment"}, nil)
	descAutoscale = prometheus.NewDesc("berth_autoscale_events_total",
		"Autoscaler actions; event names match the admin API's autoscale fields.",
		[]string{"deployment", "event"}, nil)
	descHostCPUPercent = prometheus.NewDesc("berth_host_cpu_percent",
		"Host CPU busy share over the last sampling interval, 0-100.", nil, nil)
	descHostMemUsed = prometheus.NewDesc("berth_host_memory_used_bytes",
		"Host memory in use (MemTotal - MemAvailable).", nil, nil)
	descHostMemTotal = prometheus.NewDesc("berth_host_memory_total_bytes",
		"Host memory size (MemTotal).", nil, nil)
	descHostCPUCount = prometheus.NewDesc("berth_host_cpu_count",
		"Online CPUs on the host.", nil, nil)
)

// collector reads the live counters at scrape time, so the exposition and
// the admin API's JSON are two views of one set of numbers.
type collector struct {
	reg  *Registry
	host *HostSampler
}

// NewCollector returns a prometheus.Collector exposing reg's per-deployment
// figures and host's latest sample. Either may be nil to leave that part
// out. Deleted deployments disappear from the exposition (Prometheus
// treats that as the series ending); their figures live on only in
// Registry.Global.
func NewCollector(reg *Registry, host *HostSampler) prometheus.Collector {
	return &collector{reg: reg, host: host}
}

// Describe sends every descriptor the collector can emit.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descRequests, descLatency, descColdStart, descAutoscale, descPhases,
		descHostCPUPercent, descHostMemUsed, descHostMemTotal, descHostCPUCount,
	} {
		ch <- d
	}
}

// Collect emits the current figures.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if c.reg != nil {
		c.reg.Each(func(id string, d *Deployment) {
			collectDeployment(ch, id, d.Snapshot())
			collectPhases(ch, id, d)
		})
	}
	if c.host != nil {
		if u := c.host.Latest(); u.Available {
			ch <- prometheus.MustNewConstMetric(descHostCPUPercent, prometheus.GaugeValue, u.CPUPercent)
			ch <- prometheus.MustNewConstMetric(descHostMemUsed, prometheus.GaugeValue, float64(u.MemoryUsedBytes))
			ch <- prometheus.MustNewConstMetric(descHostMemTotal, prometheus.GaugeValue, float64(u.MemoryTotalBytes))
			ch <- prometheus.MustNewConstMetric(descHostCPUCount, prometheus.GaugeValue, float64(u.CPUCount))
		}
	}
}

func collectDeployment(ch chan<- prometheus.Metric, id string, s DeploymentSnapshot) {
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- orInvalid(prometheus.NewConstMetric(desc, prometheus.CounterValue, float64(v), labels...))
	}
	r := s.Requests
	counter(descRequests, r.C2xx, id, "2xx")
	counter(descRequests, r.C3xx, id, "3xx")
	counter(descRequests, r.C4xx, id, "4xx")
	counter(descRequests, r.C5xx, id, "5xx")
	counter(descRequests, r.Errors, id, "error")

	ch <- constHistogram(descLatency, s.LatencyMs, id)
	ch <- constHistogram(descColdStart, s.ColdStartS, id)

	a := s.Autoscale
	for _, e := range []struct {
		name string
		v    uint64
	}{
		{"vms_created", a.VMsCreated},
		{"vms_drained", a.VMsDrained},
		{"vms_reaped", a.VMsReaped},
		{"scale_up_events", a.ScaleUpEvents},
		{"scale_down_events", a.ScaleDownEvents},
		{"cold_start_waits", a.ColdStartWaits},
		{"cold_start_hits", a.ColdStartHits},
		{"cold_start_timeouts", a.ColdStartTimeouts},
		{"boot_timeouts", a.BootTimeouts},
		{"create_failures", a.CreateFailures},
	} {
		counter(descAutoscale, e.v, id, e.name)
	}
}

// constHistogram converts a snapshot; its cumulative bucket counts are
// already what Prometheus wants. The +Inf bucket is implied by the count.
func constHistogram(desc *prometheus.Desc, s HistogramSnapshot, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(s.Buckets))
	for _, b := range s.Buckets {
		if b.Le != nil {
			buckets[*b.Le] = b.Count
		}
	}
	return orInvalid(prometheus.NewConstHistogram(desc, s.Count, s.Sum, buckets, labels...))
}

// orInvalid turns a construction error into an invalid metric, which the
// handler reports, rather than panicking inside a scrape.
func orInvalid(m prometheus.Metric, err error) prometheus.Metric {
	if err != nil {
		return prometheus.NewInvalidMetric(descRequests, err)
	}
	return m
}

// Handler serves reg's and host's figures, and those of the more
// collectors, in the Prometheus exposition format (text, or protobuf if the scraper asks). It uses its own
// prometheus.Registry, so nothing registered globally leaks in, and keeps
// serving the good metrics if one fails to build.
func Handler(reg *Registry, host *HostSampler, more ...prometheus.Collector) http.Handler {
	pr := prometheus.NewPedanticRegistry()
	pr.MustRegister(NewCollector(reg, host)) // cannot fail: fresh registry, fixed descriptors
	pr.MustRegister(more...)
	return promhttp.HandlerFor(pr, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
