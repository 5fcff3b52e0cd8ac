package certs

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// run runs m.Run until the returned stop, which checks it returned nil.
func run(t *testing.T, ctx context.Context, m *Manager) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil when its context ends", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// metricValue is the value of the metric name{host} m's collector exports
// (-1 when there is none).
func metricValue(t testing.TB, m *Manager, name, host string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.Metric {
			for _, l := range mt.Label {
				if l.GetName() == "host" && l.GetValue() == host {
					return value(mt)
				}
			}
		}
	}
	return -1
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return -1
}
