package proxy

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Traces (Options.Tracer). A request gets a server span, from when its head
// was read to when the handler returns, whose children are its stages: the
// route lookup, the guard rules, the gate, a cold-start hold (with one
// child per phase), and one client span per upstream attempt. The upstream
// sees the attempt's span as its parent: berth replaces the client's
// traceparent (the trace id it names is kept) and passes its tracestate on.
//
// With no tracer the data plane does not look at traceparent at all: it is
// forwarded as any other field, and nothing here runs (every hook is behind
// one test of Handler.tracer).

// reqTrace is a traced request's server span and what its children need.
// The front end keeps one per connection (h1conn.trace); other requests
// carry theirs in their context.
type reqTrace struct {
	tracer trace.Tracer
	ctx    context.Context // carries span: the parent of the children
	span   trace.Span
	dep    *Deployment // what served the request, once known
	status int         // what the data plane answered, when it says so (499)
}

type traceKey struct{}

// traceOf is the trace of the request w answers, or nil.
func traceOf(w http.ResponseWriter, r *http.Request) *reqTrace {
	switch fw := w.(type) {
	case *h1Writer:
		if fw.c.trace.span != nil {
			return &fw.c.trace
		}
		return nil
	case *statusWriter:
		if t := traceOf(fw.ResponseWriter, r); t != nil {
			return t
		}
	}
	t, _ := r.Context().Value(traceKey{}).(*reqTrace)
	return t
}

// headerCarrier reads and writes W3C trace context fields of a canonical
// http.Header without canonicalising their names again.
type headerCarrier http.Header

func (c headerCarrier) Get(k string) string {
	var vv []string
	switch k {
	case "traceparent":
		vv = c["Traceparent"]
	case "tracestate":
		vv = c["Tracestate"]
		if len(vv) > 1 {
			return strings.Join(vv, ",") // one list, however many fields (W3C §3.3.1)
		}
	default:
		vv = http.Header(c).Values(k)
	}
	if len(vv) == 0 {
		return ""
	}
	return vv[0]
}

func (c headerCarrier) Set(k, v string) {
	switch k {
	case "traceparent":
		c["Traceparent"] = []string{v}
	case "tracestate":
		c["Tracestate"] = []string{v}
	default:
		http.Header(c).Set(k, v)
	}
}

func (c headerCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

var traceContext propagation.TraceContext

// startTrace starts r's server span, as a child of the span its
// traceparent names, if any. It returns the writer and request to serve
// with: a writer other than the front end's is wrapped to learn the
// status, and a request other than the front end's carries the trace in
// its context.
func (h *Handler) startTrace(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, *reqTrace) {
	fw, front := w.(*h1Writer)
	base := context.Background()
	if !front {
		base = r.Context()
	}
	ctx := traceContext.Extract(base, headerCarrier(r.Header))
	ctx, span := h.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(requestTime(w)))
	if span.IsRecording() {
		// (Set after the start, so an unsampled span costs no attributes
		// and a sampled one copies them once.)
		setServerAttrs(h, span, w, r)
	}
	if front {
		fw.c.trace = reqTrace{tracer: h.tracer, ctx: ctx, span: span}
		return w, r, &fw.c.trace
	}
	t := &reqTrace{tracer: h.tracer, ctx: ctx, span: span}
	t.ctx = context.WithValue(ctx, traceKey{}, t)
	if _, ok := w.(*obsWriter); !ok {
		w = &statusWriter{ResponseWriter: w}
	}
	return w, r.WithContext(t.ctx), t
}

// setServerAttrs sets a server span's attributes of the request.
func setServerAttrs(h *Handler, span trace.Span, w http.ResponseWriter, r *http.Request) {
	proto := "1.1"
	switch {
	case r.ProtoMajor == 2:
		proto = "2"
	case r.ProtoMajor == 3:
		proto = "3"
	case r.ProtoMinor == 0:
		proto = "1.0"
	}
	host, port := splitHostPort(r.Host)
	var buf [8]attribute.KeyValue
	attrs := append(buf[:0],
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path),
		attribute.String("url.scheme", scheme(r)),
		attribute.String("server.address", host),
		attribute.String("network.protocol.version", proto),
		attribute.String("client.address", h.clientAddr(w, r).String()),
	)
	if port > 0 {
		attrs = append(attrs, attribute.Int("server.port", port))
	}
	if ua := userAgent(r); ua != "" {
		attrs = append(attrs, attribute.String("user_agent.original", ua))
	}
	span.SetAttributes(attrs...)
}

// endTrace ends the server span of the request w answered.
func endTrace(w http.ResponseWriter, t *reqTrace) {
	status := t.status
	if status == 0 {
		switch w := w.(type) {
		case *h1Writer:
			status = w.status
		case *statusWriter:
			status = w.status
		case *obsWriter:
			status = w.status
		}
	}
	if status == 0 {
		status = http.StatusOK
	}
	if !t.span.IsRecording() {
		t.span.End()
		if fw, ok := w.(*h1Writer); ok && &fw.c.trace == t {
			fw.c.trace = reqTrace{}
		}
		return
	}
	attrs := [3]attribute.KeyValue{attribute.Int("http.response.status_code", status)}
	n := 1
	if t.dep != nil {
		attrs[1] = attribute.String("berth.deployment", t.dep.ID)
		attrs[2] = attribute.String("berth.namespace", t.dep.Namespace)
		n = 3
	}
	t.span.SetAttributes(attrs[:n]...)
	if status >= 500 {
		t.span.SetStatus(codes.Error, "")
	}
	t.span.End()
	if fw, ok := w.(*h1Writer); ok && &fw.c.trace == t {
		fw.c.trace = reqTrace{} // keep nothing of the request
	}
}

// child starts a span of the request's, named for its stage.
func (t *reqTrace) child(name string) trace.Span {
	_, s := t.tracer.Start(t.ctx, name)
	return s
}

// childAt starts a span of the request's that began at start.
func (t *reqTrace) childAt(name string, start time.Time) trace.Span {
	_, s := t.tracer.Start(t.ctx, name, trace.WithTimestamp(start))
	return s
}

// routed ends the route span s: the lookup found m (ok) or nothing.
func (t *reqTrace) routed(s trace.Span, d *Deployment) {
	if d != nil {
		t.dep = d
	}
	if d != nil && s.IsRecording() {
		s.SetAttributes(attribute.String("berth.deployment", d.ID), attribute.String("berth.namespace", d.Namespace))
	}
	s.End()
}

// serving notes the deployment that serves the request (once resolved).
func (t *reqTrace) serving(d *Deployment) { t.dep = d }

// guardDone ends the guard span s with its verdict.
func guardDone(s trace.Span, blocked bool) {
	if blocked {
		s.SetAttributes(attribute.String("berth.guard.verdict", "block"))
	}
	s.End()
}

// gateDone ends the gate span s: the gate answered the request with status
// (0: it let it through, credentialed or not).
func gateDone(s trace.Span, status int, credentialed bool) {
	if status != 0 {
		s.SetAttributes(attribute.Int("http.response.status_code", status))
	} else {
		s.SetAttributes(attribute.Bool("berth.gate.credentialed", credentialed))
	}
	s.End()
}

// holdDone ends the hold span s, which began at since: b became
// available (nil: the request stopped waiting, with err). The phases are
// its children, laid end to end from since: queue, pull, create, boot.
func (t *reqTrace) holdDone(s trace.Span, since time.Time, b *Backend, err error) {
	now := time.Now()
	if b == nil {
		if err != nil {
			s.SetStatus(codes.Error, err.Error())
		}
		s.End(trace.WithTimestamp(now))
		return
	}
	ph := phasesOf(b, since, now)
	s.SetAttributes(attribute.String("berth.backend", b.ID),
		attribute.Int64("berth.hold.queue_ms", ph.Queue.Milliseconds()),
		attribute.Int64("berth.hold.pull_ms", ph.Pull.Milliseconds()),
		attribute.Int64("berth.hold.create_ms", ph.Create.Milliseconds()),
		attribute.Int64("berth.hold.boot_ms", ph.Boot.Milliseconds()))
	ctx := trace.ContextWithSpan(t.ctx, s)
	at := since
	for _, p := range [...]struct {
		name string
		d    time.Duration
	}{{"hold.queue", ph.Queue}, {"hold.pull", ph.Pull}, {"hold.create", ph.Create}, {"hold.boot", ph.Boot}} {
		if p.d <= 0 {
			continue
		}
		_, ps := t.tracer.Start(ctx, p.name, trace.WithTimestamp(at))
		at = at.Add(p.d)
		ps.End(trace.WithTimestamp(at))
	}
	s.End(trace.WithTimestamp(now))
}

// attempt starts the client span of attempt n (from 0) to send r to b,
// and names it in r's traceparent (and passes r's tracestate on).
func (t *reqTrace) attempt(h http.Header, method string, b *Backend, n int) trace.Span {
	ctx, s := t.tracer.Start(t.ctx, "upstream", trace.WithSpanKind(trace.SpanKindClient))
	delete(h, "Tracestate") // (Inject sets it again when the trace has one)
	traceContext.Inject(ctx, headerCarrier(h))
	if !s.IsRecording() {
		return s
	}
	host, port := splitHostPort(b.Addr)
	attrs := [5]attribute.KeyValue{
		attribute.String("http.request.method", method),
		attribute.String("server.address", host),
		attribute.String("berth.backend", b.ID),
		attribute.Int("berth.attempt", n+1),
	}
	k := 4
	if port > 0 {
		attrs[4] = attribute.Int("server.port", port)
		k = 5
	}
	s.SetAttributes(attrs[:k]...)
	return s
}

// attemptDone ends an attempt's span: the backend answered status, or
// (failed) none came, for err.
func attemptDone(s trace.Span, status int, failed bool, err error) {
	if !s.IsRecording() {
		s.End()
		return
	}
	if status != 0 {
		s.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	switch {
	case err != nil:
		s.SetStatus(codes.Error, err.Error())
	case failed || status >= 500:
		s.SetStatus(codes.Error, "")
	}
	s.End()
}

// splitHostPort splits "host:port" (port 0 when absent or not a number).
func splitHostPort(hp string) (string, int) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return hp, 0
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return host, 0
	}
	return host, port
}
