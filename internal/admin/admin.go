// Package admin serves berth's admin API: the app-lb-compatible JSON API for
// deployments, scaling, upstream drains, health, ingress and metrics.
//
// Paths, bodies, status codes and the error envelope follow app-lb.md §2 and
// the wire types in package apitype. Handlers return errors; package web turns
// them into the {"error": "..."} envelope.
package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/disks"
	"github.com/berth-dev/berth/internal/feed"
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/guard"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/metrics"
	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/notify"
	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/ratelimit"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/rollout"
	"github.com/berth-dev/berth/internal/secrets"
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

	// Gate authenticates callers and enforces tiers and walls (package
	// auth); nil trusts every caller, as an ungated loopback server does.
	Gate       *auth.Gate
	Tokens     *auth.Tokens      // app-tokens; nil answers 503 on /tokens
	Secrets    *secrets.Store    // nil answers 503 on /secrets
	Namespaces *namespaces.Store // declared namespaces and auth providers
	Sessions   Sessions          // deployments' sign-in sessions; nil: none
	Images     *image.Store      // root filesystems; nil answers 503 on /images
	// ImageBudget is the bytes POST /images/sweep trims the images to.
	ImageBudget int64
	// RegistryCredentials maps namespaces' registry hosts to their
	// secrets; nil answers 503 on /namespaces/{ns}/registry-credentials.
	RegistryCredentials RegistryCredentials
	// Artifacts is the embedded artifact store served per namespace at
	// /namespaces/{name}/artifacts; nil answers 503 there.
	Artifacts *artifact.Store
	Guard     *guard.Guard // guard rules; nil answers 503 on /security/rules
	SIEM      SIEM         // detection; nil: GET /security says it is off
	// PortSignIns lists the Computer ports ("<id>:<port>") whose sign_in
	// names an auth provider, so that deleting it is refused while in use.
	PortSignIns func(ctx context.Context, ns, provider string) ([]string, error)
	Certs       CertSource // the HTTPS edge's certificates; nil: none
	// RateLimits are berth's own per-client limits of deployments
	// (/deployments/{id}/rate-limit); nil answers 503 there.
	RateLimits *ratelimit.Manager
	// Webhooks sends security alerts to the operator's webhooks (berth's
	// own /security/webhooks); nil answers 503 there.
	Webhooks *notify.Notifier
	// Written, when set, is called after a deployment was registered or
	// edited (not on a dry run), with the entry as stored: the server
	// starts the pulls a deployment needs before it can serve.
	Written func(ctx context.Context, e *registry.Entry)
	// Jobs runs the deployments' background jobs (the job start routes,
	// /jobs); Workflows keeps /workflows. Nil answers 503 there.
	Jobs      *jobs.Manager
	Workflows *jobs.Workflows
	// Collectors are exposed on /metrics/prometheus besides Metrics and
	// Host (the certificate manager's gauges).
	Collectors []prometheus.Collector

	// Confinement is what namespace-confined callers may run (drivers,
	// replica quota); the zero value allows auth.DefaultConfinedDrivers
	// and sets no quota.
	Confinement auth.Confinement
	// Upstreams refuses static upstreams at berth's own listeners and at
	// link-local and metadata addresses on every deployment write.
	Upstreams UpstreamGuard

	// Disks is the disk census (/disks, and /metrics' host_sandboxes);
	// nil answers 503 on /disks.
	Disks *disks.Manager
	// RetiredDir is where DELETE /deployments/{id}/retired-record keeps
	// the records it forgets (<data>/retired); "" answers 503 there.
	RetiredDir string
	// Rollouts records rollout operations; every spec write goes through
	// it. Nil: writes go to the registry alone and the rollout routes
	// answer 503.
	Rollouts *rollout.Manager
	// Feed is the namespaces' event feeds (/feeds); deployment writes and
	// deletes publish their lifecycle events to it when the spec asks
	// (feed.announce). Nil answers 503 on /feeds.
	Feed *feed.Feed
	// ObsStats is the telemetry queue's counters, in /metrics' obs for
	// fleet callers; nil leaves obs out.
	ObsStats func() apitype.ObsStats
	// FleetHosts is the fleet this berth belongs to (/fleet/hosts); nil,
	// when it runs alone, answers 409 fleet_not_configured there.
	FleetHosts FleetHosts
	// FleetViews is what the fleet's hosts publish (/fleet,
	// /fleet/deployments, /fleet/gateways/{id}/metrics, /fleet/network,
	// /services, /control-plane/config, discovery-status); nil, when
	// berth runs alone, answers 409 fleet_not_configured there.
	FleetViews FleetViews
	// FleetJoin signs joining hosts' certificates (POST /fleet/join) on
	// the host holding the fleet CA; nil answers 409 there.
	FleetJoin FleetJoiner
	// FleetRenew renews joined hosts' certificates (POST /fleet/renew) on
	// the host holding the fleet CA; nil answers 409 there.
	FleetRenew FleetRenewer
	// FleetRevoke revokes hosts' certificates (POST
	// /fleet/hosts/{id}/revoke) on the host holding the fleet CA; nil
	// answers 409 there.
	FleetRevoke FleetRevoker
	// Plugins hosts the compiled-in plugins (/api/plugins,
	// /namespaces/{name}/plugins); nil answers 503 there.
	Plugins *plugin.Host
}

// API is the admin http.Handler.
type API struct {
	o      Options
	mux    *http.ServeMux
	agents agentClients // kept-alive clients of the replicas' agents
	// streams holds a token per open event stream (GET /ui/events).
	streams chan struct{}
}

// New returns the admin API handler.
func New(o Options) *API {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Started.IsZero() {
		o.Started = time.Now()
	}
	a := &API{o: o, mux: http.NewServeMux(), streams: make(chan struct{}, maxEventStreams)}

	a.handle("GET /healthz", tierOpen, wallNone, a.healthz)
	a.handle("GET /ingress", tierView, wallNarrow, a.ingress)
	a.handle("GET /metrics", tierView, wallNarrow, a.metrics)
	a.handle("GET /security", tierView, wallNarrow, a.security)
	a.handleHTTP("GET /metrics/prometheus", tierView, wallFleet, metrics.Handler(o.Metrics, o.Host, o.Collectors...))
	a.handle("GET /metrics/cold-start", tierView, wallFleet, a.coldStarts)
	a.handle("GET /ui/events", tierView, wallNarrow, a.events) // berth's own

	a.handle("POST /deployments", tierCRUD, wallNarrow, a.register)
	a.handle("GET /deployments", tierCRUD, wallNarrow, a.list)
	a.handle("GET /deployments/{id}", tierCRUD, wallDeployment, a.get)
	a.handle("PUT /deployments/{id}", tierCRUD, wallDeployment, a.update)
	a.handle("DELETE /deployments/{id}", tierCRUD, wallDeployment, a.delete)
	a.handle("PATCH /deployments/{id}/scaling", tierCRUD, wallDeployment, a.scale)
	a.handle("PUT /deployments/{id}/upstreams/{upstream}/drain", tierCRUD, wallDeployment, a.drain)
	a.handle("DELETE /deployments/{id}/upstreams/{upstream}/drain", tierCRUD, wallDeployment, a.undrain)
	a.handle("POST /deployments/{id}/exec", tierCRUD, wallDeployment, a.exec)
	a.handle("GET /deployments/{id}/shell", tierCRUD, wallDeployment|queryToken, a.shell)
	a.handle("GET /deployments/{id}/logs", tierCRUD, wallDeployment, a.logs)
	a.handle("DELETE /deployments/{id}/vms/{sandbox_id}", tierCRUD, wallDeployment, a.evict)
	a.handle("GET /deployments/{id}/rate-limit", tierCRUD, wallDeployment, a.getRateLimit)       // berth's own
	a.handle("PUT /deployments/{id}/rate-limit", tierCRUD, wallDeployment, a.putRateLimit)       // berth's own
	a.handle("DELETE /deployments/{id}/rate-limit", tierCRUD, wallDeployment, a.deleteRateLimit) // berth's own

	a.handle("GET /whoami", tierAny, wallNone, a.whoami)
	a.handle("POST /tokens", tierCRUD, wallNarrow, a.mintToken)
	a.handle("GET /tokens", tierCRUD, wallNarrow, a.listTokens)
	a.handle("GET /tokens/{id}", tierCRUD, wallNarrow, a.getToken)
	a.handle("GET /tokens/{id}/provenance", tierCRUD, wallNarrow, a.tokenProvenance) // berth's own
	a.handle("PATCH /tokens/{id}", tierCRUD, wallNarrow, a.patchToken)
	a.handle("DELETE /tokens/{id}", tierCRUD, wallNarrow, a.revokeToken)
	a.handle("POST /secrets", tierCRUD, wallNarrow, a.postSecret)
	a.handle("GET /secrets", tierCRUD, wallNarrow, a.listSecrets)
	a.handle("GET /secrets/{id}", tierCRUD, wallNarrow, a.getSecret)
	a.handle("PUT /secrets/{id}", tierCRUD, wallNarrow, a.putSecret)
	a.handle("PATCH /secrets/{id}", tierCRUD, wallNarrow, a.patchSecret)
	a.handle("DELETE /secrets/{id}", tierCRUD, wallNarrow, a.deleteSecret)
	a.handle("GET /namespaces", tierView, wallNarrow, a.listNamespaces)
	a.handle("POST /namespaces", tierCRUD, wallFleet, a.declareNamespace)
	a.handle("DELETE /namespaces/{name}", tierCRUD, wallFleet, a.deleteNamespace)
	a.handle("GET /namespaces/{name}/artifacts", tierView, wallNarrow, a.artifactsInfo)
	a.handle("GET /namespaces/{name}/artifacts/{rest...}", tierView, wallNarrow, a.artifacts)
	a.handle("PUT /namespaces/{name}/artifacts/{rest...}", tierCRUD, wallNarrow, a.artifacts)
	a.handle("DELETE /namespaces/{name}/artifacts/{rest...}", tierCRUD, wallNarrow, a.artifacts)
	a.handle("GET /auth-providers", tierView, wallNarrow, a.listProviders)
	a.handle("GET /sessions", tierView, wallNarrow, a.listSessions)
	a.handle("DELETE /sessions", tierCRUD, wallNarrow, a.revokeSubject)
	a.handle("DELETE /sessions/{id}", tierCRUD, wallNarrow, a.deleteSession)
	a.handle("POST /auth-providers", tierCRUD, wallNarrow, a.putProvider)
	a.handle("GET /auth-providers/{namespace}/{name}", tierCRUD, wallNarrow, a.getProvider)
	a.handle("DELETE /auth-providers/{namespace}/{name}", tierCRUD, wallNarrow, a.deleteProvider)
	a.handle("GET /certs", tierCRUD, wallFleet, a.certs)
	a.handle("GET /certs/pending", tierCRUD, wallFleet, a.pendingCerts) // berth's own
	a.handle("GET /images", tierView, wallFleet, a.listImages)
	a.handle("POST /images", tierCRUD, wallFleet, a.importImage)
	a.handle("POST /images/pull", tierCRUD, wallNarrow, a.pullImage) // berth's own
	a.handle("POST /images/sweep", tierCRUD, wallFleet, a.sweepImages)
	a.handle("GET /namespaces/{ns}/registry-credentials", tierCRUD, wallNarrow, a.listRegistryCredentials)            // berth's own
	a.handle("PUT /namespaces/{ns}/registry-credentials/{host}", tierCRUD, wallNarrow, a.putRegistryCredential)       // berth's own
	a.handle("DELETE /namespaces/{ns}/registry-credentials/{host}", tierCRUD, wallNarrow, a.deleteRegistryCredential) // berth's own
	a.handle("GET /images/{name...}", tierView, wallFleet, a.getImage)
	a.handle("PATCH /images/{name...}", tierCRUD, wallFleet, a.patchImage)
	a.handle("DELETE /images/{name...}", tierCRUD, wallFleet, a.deleteImage)
	a.handle("POST /security/rules", tierCRUD, wallFleet, a.postRule)
	a.handle("PATCH /security/rules/{id}", tierCRUD, wallFleet, a.patchRule)
	a.handle("DELETE /security/rules/{id}", tierCRUD, wallFleet, a.deleteRule)
	a.handle("GET /security/webhooks", tierCRUD, wallFleet, a.listWebhooks)           // berth's own
	a.handle("POST /security/webhooks", tierCRUD, wallFleet, a.postWebhook)           // berth's own
	a.handle("DELETE /security/webhooks/{id}", tierCRUD, wallFleet, a.deleteWebhook)  // berth's own
	a.handle("POST /security/webhooks/{id}/test", tierCRUD, wallFleet, a.testWebhook) // berth's own
	a.routeJobs()
	a.routeDisks()
	a.routeFleetHosts()
	a.routeFleetViews()
	a.routeFleetJoin()
	a.routeRecords()
	a.routeRollouts()
	a.routeFeeds()
	a.routePlugins()

	return a
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	web.ServeMux(a.o.Log, a.mux, w, r)
}

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
	var we *web.Error
	var re *registry.RouteError
	switch {
	case errors.As(err, &we):
		return we // an admission refusal (PutOptions.Admit)
	case errors.As(err, &fe):
		return &web.Error{Status: http.StatusBadRequest, Message: fe.Error()}
	case errors.As(err, &re):
		return &web.Error{Status: re.Status, Message: re.Error()}
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
