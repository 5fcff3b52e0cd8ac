package certs

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descExpiry = prometheus.NewDesc("berth_cert_expiry_seconds",
		"When the certificate held for the name expires (unix seconds of its not_after).", []string{"host"}, nil)
	descFailures = prometheus.NewDesc("berth_cert_consecutive_failures",
		"Consecutive failed orders (issuance or renewal) of the name; 0 once one succeeds.", []string{"host"}, nil)
	descRenewFailures = prometheus.NewDesc("berth_cert_renewal_failures_total",
		"Failed renewals of the name's certificate since berth started.", []string{"host"}, nil)
)

// Collector exposes the certificates' expiry and order failures. The host
// label of a wildcard order is its base.
func (m *Manager) Collector() prometheus.Collector { return collector{m} }

type collector struct{ m *Manager }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descExpiry
	ch <- descFailures
	ch <- descRenewFailures
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	seen := map[string]bool{}
	emit := func(name string, notAfter float64) {
		if !seen[name] {
			seen[name] = true
			ch <- prometheus.MustNewConstMetric(descExpiry, prometheus.GaugeValue, notAfter, name)
		}
	}
	for _, h := range m.heldCerts() {
		for _, n := range h.cert.Leaf.DNSNames {
			emit(n, float64(h.cert.Leaf.NotAfter.Unix()))
		}
	}
	if m.static != nil {
		for _, n := range m.static.names {
			emit(n, float64(m.static.leaf.NotAfter.Unix()))
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for label, f := range m.failures {
		ch <- prometheus.MustNewConstMetric(descFailures, prometheus.GaugeValue, float64(f.Failures), label)
	}
	for label, n := range m.renewFailures {
		ch <- prometheus.MustNewConstMetric(descRenewFailures, prometheus.CounterValue, float64(n), label)
	}
}
