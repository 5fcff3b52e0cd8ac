package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/tracing"
	"github.com/berth-dev/berth/internal/tracing/otlptest"
)

// TestTracing: with Tracing set, a proxied request's spans reach the
// collector, named for its deployment and namespace, and the upstream's
// traceparent is in the client's trace; a bad endpoint refuses to start.
func TestTracing(t *testing.T) {
	recv := otlptest.Start(t)
	var got string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Traceparent")
	}))
	defer up.Close()
	n := startNode(t, Options{AdminPassword: "s3cret", Tracing: tracing.Config{Endpoint: recv.Addr, Insecure: true, Sample: 1}})
	n.must(201, "POST", "/deployments", basic("admin", "s3cret"),
		fmt.Sprintf(`{"id":"tr","namespace":"team","routes":[{"host":"tr.test"}],"upstreams":[%q]}`, strings.TrimPrefix(up.URL, "http://")), nil)
	req, _ := http.NewRequest("GET", "http://"+n.s.ProxyAddr()+"/x", nil)
	req.Host = "tr.test"
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := n.s.tracing.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var srv, upstream *otlptest.Span
	for _, s := range recv.Spans() {
		switch s.Name {
		case "GET":
			srv = &s
		case "upstream":
			upstream = &s
		}
	}
	if srv == nil || upstream == nil || srv.Attrs["berth.deployment"] != "tr" || srv.Attrs["berth.namespace"] != "team" ||
		srv.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || upstream.ParentSpanID != srv.SpanID {
		t.Fatalf("spans %+v", recv.Spans())
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + upstream.SpanID + "-01"; got != want {
		t.Errorf("upstream got traceparent %q, want %q", got, want)
	}

	m := n.call(nil, "GET", "/metrics/prometheus", basic("admin", "s3cret"), "")
	exported := fmt.Sprintf("berth_trace_spans_exported_total %d\n", n.s.tracing.Exported())
	if n.s.tracing.Exported() < 3 || !strings.Contains(string(m.body), exported) || !strings.Contains(string(m.body), "berth_trace_spans_dropped_total 0\n") {
		t.Errorf("metrics lack the trace export counters (%d exported): %s", n.s.tracing.Exported(), m)
	}

	if _, err := tryStart(t, Options{Tracing: tracing.Config{Endpoint: "no-port", Sample: 1}}); err == nil || !strings.Contains(err.Error(), "--otlp-endpoint") {
		t.Errorf("bad endpoint: %v, want an error naming --otlp-endpoint", err)
	}
}
