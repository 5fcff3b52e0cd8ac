// Package otlptest is an OTLP/HTTP trace receiver on loopback for tests: it
// decodes what an exporter posts to /v1/traces and keeps the spans.
package otlptest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, its ids in hex.
type Span struct {
	Name                          string
	TraceID, SpanID, ParentSpanID string
	Kind                          tracepb.Span_SpanKind
	Attrs                         map[string]string // values as text
	Error                         bool              // status code error
	StatusMessage                 string
	StartUnixNano, EndUnixNano    uint64
	Service                       string // the resource's service.name
}

// Receiver collects the spans posted to it.
type Receiver struct {
	Addr string // host:port

	mu       sync.Mutex
	spans    []Span
	requests int
	stall    chan struct{} // when set, requests wait on it (a hung collector)
}

// Start runs a Receiver until the test ends.
func Start(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		r.mu.Lock()
		if r.stall != nil {
			close(r.stall)
			r.stall = nil
		}
		r.mu.Unlock()
		srv.Close()
	})
	r.Addr = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// Stall makes the receiver hold every request until the test ends, as a
// collector that accepted the connection and hung.
func (r *Receiver) Stall() {
	r.mu.Lock()
	r.stall = make(chan struct{})
	r.mu.Unlock()
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.requests++
	stall := r.stall
	r.mu.Unlock()
	if stall != nil {
		select {
		case <-stall:
		case <-req.Context().Done():
		}
		return
	}
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a protobuf POST to /v1/traces", http.StatusNotFound)
		return
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range msg.ResourceSpans {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				got = append(got, Span{
					Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentSpanID: hex.EncodeToString(s.ParentSpanId), Kind: s.Kind, Attrs: attrs(s.Attributes),
					Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, StatusMessage: s.GetStatus().GetMessage(),
					StartUnixNano: s.StartTimeUnixNano, EndUnixNano: s.EndTimeUnixNano, Service: service,
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = strconv.FormatBool(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
		default:
			m[kv.Key] = v.String()
		}
	}
	return m
}

// Spans is what was received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests is how many export requests arrived.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Named returns the received spans called name.
func (r *Receiver) Named(name string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
