// Package tracing sets up the export of the data plane's spans: an
// OpenTelemetry tracer provider whose spans go, in batches, to an OTLP/HTTP
// collector (berth serve --otlp-endpoint).
//
// Requests never wait for the collector: ended spans go to a bounded queue
// that one goroutine exports from; when the queue is full (the collector is
// slow or down) new spans are dropped. Every export is bounded by
// ExportTimeout and is not retried: a batch the collector did not take is
// dropped, and counted (Dropped).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config is what berth serve's flags say about traces.
type Config struct {
	// Endpoint is the collector (--otlp-endpoint): host:port, or an
	// https:// (http:// with Insecure) URL whose path, if any, replaces
	// the default /v1/traces. Empty turns tracing off.
	Endpoint string
	// Insecure sends spans in plaintext (--otlp-insecure), for a
	// collector on loopback or a private network.
	Insecure bool
	// Sample is the share of traces berth starts that it records
	// (--trace-sample), in [0, 1]. A request that arrives with a
	// traceparent follows its sampled flag instead.
	Sample float64
	// ServiceVersion is the service.version resource attribute.
	ServiceVersion string
	// ExportTimeout bounds one export (its connection, request and
	// response); zero is DefaultExportTimeout.
	ExportTimeout time.Duration
	// BatchTimeout is the longest an ended span waits to be exported; zero
	// is DefaultBatchTimeout.
	BatchTimeout time.Duration
	// QueueSize bounds the spans waiting for export; zero is
	// DefaultQueueSize.
	QueueSize int
	Log       *slog.Logger
}

// Defaults of Config.
const (
	DefaultExportTimeout = 5 * time.Second
	DefaultBatchTimeout  = 5 * time.Second
	DefaultQueueSize     = 4096
)

// target is a validated Config.Endpoint.
type target struct {
	hostport, path string
}

// Validate checks c, naming the flag of what is wrong.
func (c Config) Validate() error {
	_, err := c.target()
	return err
}

func (c Config) target() (target, error) {
	if c.Sample < 0 || c.Sample > 1 || c.Sample != c.Sample {
		return target{}, fmt.Errorf("--trace-sample: %v is not a share between 0 and 1", c.Sample)
	}
	e := c.Endpoint
	if e == "" {
		if c.Insecure {
			return target{}, errors.New("--otlp-insecure needs --otlp-endpoint")
		}
		return target{}, nil
	}
	var t target
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil {
			return target{}, fmt.Errorf("--otlp-endpoint: %v", err)
		}
		switch {
		case u.Scheme == "http" && !c.Insecure:
			return target{}, fmt.Errorf("--otlp-endpoint %q is plaintext http: add --otlp-insecure to send spans unencrypted, or use https", e)
		case u.Scheme == "https" && c.Insecure:
			return target{}, fmt.Errorf("--otlp-endpoint %q is https but --otlp-insecure asks for plaintext: use one or the other", e)
		case u.Scheme != "http" && u.Scheme != "https":
			return target{}, fmt.Errorf("--otlp-endpoint %q: the scheme must be https (or http with --otlp-insecure); berth exports OTLP over HTTP only", e)
		case u.User != nil || u.RawQuery != "" || u.Fragment != "":
			return target{}, fmt.Errorf("--otlp-endpoint %q: give a scheme, host, port and path only (no user, query or fragment)", e)
		}
		t.hostport, t.path = u.Host, u.Path
	} else {
		t.hostport = e
	}
	host, port, err := net.SplitHostPort(t.hostport)
	if err != nil {
		return target{}, fmt.Errorf("--otlp-endpoint %q: want host:port or a URL with a port: %v", e, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return target{}, fmt.Errorf("--otlp-endpoint %q: %q is not a port", e, port)
	}
	if host == "" || strings.ContainsAny(host, " /?#@") {
		return target{}, fmt.Errorf("--otlp-endpoint %q: %q is not a host", e, host)
	}
	return t, nil
}

// Tracing is a running span export.
type Tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	exp      *countingExporter
}

// New starts exporting spans as c says; nil (and no error) when
// c.Endpoint is empty. Nothing is dialled until the first export.
func New(c Config) (*Tracing, error) {
	t, err := c.target()
	if err != nil || t.hostport == "" {
		return nil, err
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	timeout := cmpOr(c.ExportTimeout, DefaultExportTimeout)
	opts := []otlptracehttp.Option{
		otlptracehttp.WithEndpoint(t.hostport),
		otlptracehttp.WithTimeout(timeout),
		// A batch the collector does not take is dropped at once rather
		// than held for a minute of retries while the queue fills.
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}),
	}
	if t.path != "" {
		opts = append(opts, otlptracehttp.WithURLPath(t.path))
	}
	if c.Insecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	client, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	exp := &countingExporter{SpanExporter: client, log: c.Log}
	res := resource.NewSchemaless(
		attribute.String("service.name", "berth"),
		attribute.String("service.version", c.ServiceVersion),
	)
	p := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.Sample))),
		sdktrace.WithSpanProcessor(sdktrace.NewBatchSpanProcessor(exp,
			sdktrace.WithBatchTimeout(cmpOr(c.BatchTimeout, DefaultBatchTimeout)),
			sdktrace.WithExportTimeout(timeout),
			sdktrace.WithMaxQueueSize(cmpOr(c.QueueSize, DefaultQueueSize)),
		)),
	)
	return &Tracing{provider: p, tracer: p.Tracer("github.com/berth-dev/berth/internal/proxy"), exp: exp}, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Tracer is the data plane's tracer.
func (t *Tracing) Tracer() trace.Tracer { return t.tracer }

// Dropped is how many spans were dropped because the collector did not
// take the batch they were in (unreachable, refusing, or past
// ExportTimeout).
func (t *Tracing) Dropped() uint64 { return t.exp.dropped.Load() }

// Exported is how many spans the collector took.
func (t *Tracing) Exported() uint64 { return t.exp.exported.Load() }

// Flush exports the spans ended so far, waiting for ctx at most.
func (t *Tracing) Flush(ctx context.Context) error { return t.provider.ForceFlush(ctx) }

// Close exports what is queued, waiting for ctx at most, and stops.
func (t *Tracing) Close(ctx context.Context) error { return t.provider.Shutdown(ctx) }

// countingExporter counts what its exporter delivered and dropped, and
// logs the first failure of a run of them.
type countingExporter struct {
	sdktrace.SpanExporter
	log               *slog.Logger
	exported, dropped atomic.Uint64
	failing           atomic.Bool
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.dropped.Add(uint64(len(spans)))
		if !e.failing.Swap(true) {
			e.log.Warn("trace export failed; spans are dropped until the collector takes them again", "spans", len(spans), "err", err)
		}
		return err
	}
	e.exported.Add(uint64(len(spans)))
	if e.failing.Swap(false) {
		e.log.Info("trace export recovered", "dropped_total", e.dropped.Load())
	}
	return nil
}
