package siem

import "github.com/prometheus/client_golang/prometheus"

var (
	alertsDesc = prometheus.NewDesc("berth_siem_alerts_total",
		"Security alerts raised (new alerts, not folded repeats), by rule and severity.", []string{"rule", "severity"}, nil)
	observationsDesc = prometheus.NewDesc("berth_siem_observations_total",
		"Requests and authentication events offered to the detection engine.", nil, nil)
	droppedDesc = prometheus.NewDesc("berth_siem_dropped_total",
		"Observations not analysed: reason queue (the analysis queue was full) or clients (the per-source table was full).", []string{"reason"}, nil)
	suppressedDesc = prometheus.NewDesc("berth_siem_suppressed_total",
		"Alert occurrences folded into an earlier alert or refused by the per-minute cap.", nil, nil)
)

type collector struct{ e *Engine }

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- alertsDesc
	ch <- observationsDesc
	ch <- droppedDesc
	ch <- suppressedDesc
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	e := c.e
	e.qmu.Lock()
	observed, dropped := e.observed, e.dropped
	e.qmu.Unlock()
	e.mu.Lock()
	byRule := make(map[ruleSev]uint64, len(e.st.byRule))
	for k, v := range e.st.byRule {
		byRule[k] = v
	}
	suppressed, clientDrops := e.st.suppressed, e.st.clientDrops
	e.mu.Unlock()
	for k, v := range byRule {
		ch <- prometheus.MustNewConstMetric(alertsDesc, prometheus.CounterValue, float64(v), k.rule, k.sev)
	}
	ch <- prometheus.MustNewConstMetric(observationsDesc, prometheus.CounterValue, float64(observed))
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(dropped), "queue")
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(clientDrops), "clients")
	ch <- prometheus.MustNewConstMetric(suppressedDesc, prometheus.CounterValue, float64(suppressed))
}
