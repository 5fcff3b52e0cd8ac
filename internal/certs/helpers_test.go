package certs

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"strings"
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

func tlsDial(e *env, name string) (*tls.Conn, error) {
	return tls.Dial("tcp", e.tlsLn.Addr().String(), &tls.Config{ServerName: name, RootCAs: e.pebble.Issuing, NextProtos: []string{"http/1.1"}})
}

// httpGet sends one HTTP/1.1 request on c and checks the answer.
func httpGet(c *tls.Conn, host string) error {
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "hello") {
		return fmt.Errorf("%s %q", resp.Status, b)
	}
	return nil
}

func pemEncode(w io.Writer, der []byte) { pem.Encode(w, &pem.Block{Type: "CERTIFICATE", Bytes: der}) }
