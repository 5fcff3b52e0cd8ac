// Package admin serves berth's admin API: the app-lb-compatible JSON API for
// deployments, scaling, upstream drains, health, ingress and metrics.
//
// Paths, bodies, status codes and the error envelope follow app-lb.md §2 and
// the wire types in package apitype. Handlers return errors; package web turns
// them into the {"error": "..."} envelope.
package admin

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/metrics"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/web"
)

// Options configure the admin API.
type Options struct {
	Registry  *registry.Registry
	Fleet     *fleet.Manager // runs vm deployments' replicas
	Metrics   *metrics.Registry
	Host      *metrics.HostSampler
	PublicIPs []string // served by GET /ingress
	Revision  string   // build revision, in x-heyo-revision on /healthz
	Started   time.Time
	Log       *slog.Logger
}

// API is the admin http.Handler.
type API struct {
	o   Options
	mux *http.ServeMux
}

// New returns the admin API handler.
func New(o Options) *API {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Started.IsZero() {
		o.Started = time.Now()
	}
	a := &API{o: o, mux: http.NewServeMux()}
	h := func(pattern string, fn web.HandlerFunc) { a.mux.Handle(pattern, web.Handle(o.Log, fn)) }

	h("GET /healthz", a.healthz)
	h("GET /ingress", a.ingress)
	h("GET /metrics", a.metrics)
	a.mux.Handle("GET /metrics/prometheus", metrics.Handler(o.Metrics, o.Host))

	h("POST /deployments", a.register)
	h("GET /deployments", a.list)
	h("GET /deployments/{id}", a.get)
	h("PUT /deployments/{id}", a.update)
	h("DELETE /deployments/{id}", a.delete)
	h("PATCH /deployments/{id}/scaling", a.scale)
	h("PUT /deployments/{id}/upstreams/{upstream}/drain", a.drain)
	h("DELETE /deployments/{id}/upstreams/{upstream}/drain", a.undrain)
	h("POST /deployments/{id}/exec", a.exec)
	h("GET /deployments/{id}/shell", a.shell)
	h("GET /deployments/{id}/logs", a.logs)
	h("DELETE /deployments/{id}/vms/{sandbox_id}", a.evict)

	return a
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := a.mux.Handler(r)
	if pattern != "" {
		a.mux.ServeHTTP(w, r) // sets the path values h needs
		return
	}
	// No pattern matched: the mux would answer a plain-text 404, or 405 with
	// an Allow header. Keep its decision (and Allow) but answer in the
	// envelope, as every other error is.
	probe := &statusProbe{header: http.Header{}}
	h.ServeHTTP(probe, r)
	if allow := probe.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	if probe.status == http.StatusMethodNotAllowed {
		web.WriteError(a.o.Log, w, r, web.Errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, probe.header.Get("Allow")))
		return
	}
	web.WriteError(a.o.Log, w, r, web.Errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path))
}

// statusProbe records what a handler would answer, discarding the body.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int)        { p.status = code }

func (a *API) healthz(w http.ResponseWriter, r *http.Request) error {
	rev := a.o.Revision
	if rev == "" {
		rev = "unknown"
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("x-heyo-revision", rev)
	_, err := w.Write([]byte("ok\n"))
	return err
}

// errorFor maps registry and spec errors onto the envelope.
func errorFor(err error, id string) error {
	var fe *spec.FieldError
	switch {
	case errors.As(err, &fe):
		return &web.Error{Status: http.StatusBadRequest, Message: fe.Error()}
	case errors.Is(err, registry.ErrNotFound):
		return web.Errorf(http.StatusNotFound, "no deployment %q", id)
	case errors.Is(err, registry.ErrExists):
		return web.Errorf(http.StatusPreconditionFailed, "deployment already exists")
	case errors.Is(err, registry.ErrPrecondition):
		return web.Errorf(http.StatusPreconditionFailed, "If-Match does not match the current deployment spec")
	default:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the deployment was not saved", Err: err}
	}
}
