// Package obs serves the obs plugin's API over berth's embedded telemetry
// store (package telemetry): a namespace's fleet overview, one
// deployment's metrics and logs, and alert rules whose webhooks are told
// when a deployment's errors over the trailing minute pass a threshold.
//
// The Handler serves paths relative to the plugin's mount point
// (/api/fleet, /api/deployments/{id}, /api/deployments/{id}/logs,
// /api/alerts, /api/alerts/{id}); whoever mounts it has checked the
// caller against the namespace and passes it in the request's context
// (WithNamespace). Which of the namespace's deployments the caller may see
// is asked of Options.Visible, so that one the caller cannot see answers
// exactly as one that does not exist.
package obs

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/netguard"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/telemetry"
	"github.com/berth-dev/berth/internal/web"
)

// Telemetry is what the handler reads (implemented by *telemetry.Store).
type Telemetry interface {
	Series(ctx context.Context, ns, dep string, from, to time.Time, step time.Duration) (telemetry.Series, error)
	Backends(ctx context.Context, ns, dep string, from time.Time) ([]string, error)
	Logs(ctx context.Context, q telemetry.LogQuery) ([]apitype.ObsLogRow, *int64, error)
	Errors(ctx context.Context, ns, dep string, from, to time.Time) (int64, error)
	Stats() telemetry.Stats
	Retention() time.Duration
	FlushEvery() time.Duration
}

// DB keeps the alert rules (implemented by *store.Store).
type DB interface {
	ObsAlerts(ctx context.Context) ([]store.ObsAlert, error)
	PutObsAlert(ctx context.Context, a store.ObsAlert) error
	DeleteObsAlert(ctx context.Context, ns, id string) error
}

// Defaults of Options.
const (
	DefaultAttempts   = 5
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = time.Minute
	DefaultTimeout    = 10 * time.Second
	// EvaluateEvery is how often Run checks the alert rules.
	EvaluateEvery = 10 * time.Second
	// MaxAlerts is how many rules one namespace may have.
	MaxAlerts = 100
	// MaxBody is the largest request body (app-lb's 64 KiB).
	MaxBody = 64 << 10
)

// Options configure a Handler. Telemetry, Store, Visible and Deployments
// are required.
type Options struct {
	Telemetry Telemetry
	Store     DB
	// Key seals the rules' webhook URLs at rest (the secret store's key).
	Key secrets.Key
	// Visible reports whether deployment id exists in namespace ns and
	// r's caller may see it; Deployments lists those of ns it may see.
	Visible     func(r *http.Request, ns, id string) bool
	Deployments func(r *http.Request, ns string) []string
	// Self is berth's own listeners, which a webhook must not reach;
	// AllowLinkLocal lets webhooks reach link-local and metadata addresses.
	Self           *netguard.Self
	AllowLinkLocal bool
	// RootCAs, when set, are the CAs webhook receivers' certificates are
	// checked against instead of the system's (tests).
	RootCAs *x509.CertPool

	Now func() time.Time // default time.Now
	// Sleep waits out a retry's backoff, returning early with ctx's error.
	Sleep      func(ctx context.Context, d time.Duration) error
	Attempts   int           // per firing, the first included; default 5
	Backoff    time.Duration // the first retry's wait, doubling; default 1 s
	MaxBackoff time.Duration // default 1 min
	Timeout    time.Duration // of each webhook request; default 10 s
	Log        *slog.Logger
}

// Handler serves the obs API and evaluates the alert rules.
type Handler struct {
	o      Options
	mux    *http.ServeMux
	client *http.Client

	wmu    sync.Mutex // serialises the rules' writes (store and memory) with Reload
	mu     sync.Mutex
	rules  map[string]*rule
	ctx    context.Context // ends with Close: deliveries under way stop
	cancel context.CancelFunc
	sends  sync.WaitGroup
}

// rule is an alert rule as the evaluator keeps it.
type rule struct {
	apitype.ObsAlert
	firing bool // the last evaluation found the metric past the threshold
}

type nsKey struct{}

// WithNamespace returns ctx carrying the namespace the handler serves.
func WithNamespace(ctx context.Context, ns string) context.Context {
	return context.WithValue(ctx, nsKey{}, ns)
}

func namespaceOf(r *http.Request) (string, error) {
	ns, _ := r.Context().Value(nsKey{}).(string)
	if ns == "" {
		return "", &web.Error{Status: http.StatusInternalServerError, Message: "the obs API was mounted without a namespace"}
	}
	return ns, nil
}

// NewHandler loads the alert rules. A stored rule that does not open with
// o.Key is an error: the key is not the one it was sealed with.
func NewHandler(ctx context.Context, o Options) (*Handler, error) {
	if o.Telemetry == nil || o.Store == nil || o.Visible == nil || o.Deployments == nil {
		return nil, errors.New("obs: Options.Telemetry, Store, Visible and Deployments are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{o: o, mux: http.NewServeMux(), rules: map[string]*rule{}}
	h.client = netguard.Client(o.Self, o.AllowLinkLocal, "webhook", o.Timeout)
	if o.RootCAs != nil {
		h.client.Transport.(*http.Transport).TLSClientConfig = newTLSConfig(o.RootCAs)
	}
	rows, err := o.Store.ObsAlerts(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		a, err := h.unseal(r)
		if err != nil {
			return nil, err
		}
		h.rules[a.ID] = &rule{ObsAlert: a}
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.route("GET /api/fleet", h.fleet)
	h.route("GET /api/deployments/{id}", h.deployment)
	h.route("GET /api/deployments/{id}/logs", h.logs)
	h.route("GET /api/alerts", h.listAlerts)
	h.route("POST /api/alerts", h.postAlert)
	h.route("DELETE /api/alerts/{id}", h.deleteAlert)
	return h, nil
}

func (h *Handler) route(pattern string, fn web.HandlerFunc) {
	h.mux.Handle(pattern, web.Handle(h.o.Log, fn))
}

// ServeHTTP serves the API; a path it does not have is a 404, as app-lb's
// plugin answers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.mux.Handler(r); pattern == "" {
		web.WriteError(h.o.Log, w, r, web.Errorf(http.StatusNotFound, "the obs plugin has no %s %s", r.Method, r.URL.Path))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// Close stops deliveries under way and waits for them.
func (h *Handler) Close() {
	h.cancel()
	h.sends.Wait()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
