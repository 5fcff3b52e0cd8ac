// Package server is berth's composition root: it opens the store, builds the
// registry, data plane and admin API, binds the listeners, and runs them until
// its context ends, then drains.
//
// Listening is separate from serving: New binds both listeners, so an address
// of ":0" is resolved (and logged) before Run, which tests rely on.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/admin"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/certs"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/computerapi"
	"github.com/berth-dev/berth/internal/disks"
	"github.com/berth-dev/berth/internal/egress"
	"github.com/berth-dev/berth/internal/feed"
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/fleet/fleetca"
	"github.com/berth-dev/berth/internal/fleet/hop"
	"github.com/berth-dev/berth/internal/gate"
	"github.com/berth-dev/berth/internal/grant"
	"github.com/berth-dev/berth/internal/guard"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/inventory"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/metrics"
	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/netguard"
	"github.com/berth-dev/berth/internal/notify"
	"github.com/berth-dev/berth/internal/obs"
	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/ratelimit"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/rollout"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/sessions"
	"github.com/berth-dev/berth/internal/siem"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/telemetry"
	"github.com/berth-dev/berth/internal/tracing"
	"github.com/berth-dev/berth/internal/ui"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/drivers"
	"github.com/berth-dev/berth/internal/web"
	"github.com/berth-dev/berth/internal/workspace"
)

// Options configure a Server. The zero value of every field has a usable
// default except DataDir.
type Options struct {
	ProxyAddr string // data plane listener; default 0.0.0.0:6188
	// TLSConfig, when set, serves the data plane over TLS too: HTTPS
	// (HTTP/1.1 and HTTP/2) on a TCP listener and HTTP/3 on a UDP socket,
	// both at ProxyTLSAddr. It must carry a certificate (Certificates,
	// GetCertificate or GetConfigForClient); the listeners take copies,
	// adding the ALPN protocols they serve to NextProtos when it has
	// none. Nil serves plaintext only.
	TLSConfig *tls.Config
	// ProxyTLSAddr is the TLS listeners' address, the TCP and the UDP one;
	// default 0.0.0.0:6189. With port 0 both get the same free port.
	ProxyTLSAddr string
	// ACMEChallenge answers ACME HTTP-01 challenges on the plaintext
	// listener (proxy.Options.Challenge).
	ACMEChallenge func(w http.ResponseWriter, r *http.Request) bool
	// RedirectHTTPS answers plaintext requests (but ACME challenges) with
	// a 308 to the HTTPS listener's port; HSTS is the
	// Strict-Transport-Security value of responses over TLS (empty:
	// none). They apply only with TLSConfig.
	RedirectHTTPS bool
	HSTS          string
	// Certs configures the certificate manager (package certs) that
	// serves the TLS listeners when TLSConfig is nil: ACME when
	// Certs.Email is set, a static pair (StaticCert and StaticKey), or
	// both. The server fills Dir (default <DataDir>/acme), Key (the
	// secret key), HTTPPort, TLSPort and Log.
	Certs certs.Options
	// AdminTLSCert and AdminTLSKey (PEM files) serve the admin API over
	// TLS; or AdminACMEHost: over TLS with the data plane's ACME
	// certificate for that name, ordered as if a deployment routed it.
	AdminTLSCert, AdminTLSKey string
	AdminACMEHost             string

	// GoogleIssuer is the OpenID Connect issuer the gates' google
	// provider signs in with: "" is Google's. Tests name one on loopback.
	GoogleIssuer string

	AdminAddr string // admin API listener; default 127.0.0.1:9090
	// DataDir is where the store lives; created 0700. A relative path is
	// taken from the working directory at New and made absolute there.
	DataDir string
	// Store is the store backend (see Store); nil opens the SQLite store
	// in DataDir. A store given here stays the caller's: the server never
	// closes it, and the caller closes it once Run has returned (or New
	// has failed).
	Store Store
	// StoreEtcd, with Endpoints set (and Store nil), keeps the store in
	// etcd instead (berth serve --store etcd://…).
	StoreEtcd EtcdStoreOptions

	// SitesDir is where site deployments' roots live, one subtree per
	// namespace (<SitesDir>/<namespace>); default <DataDir>/sites. A site
	// root outside it (or SiteRootsAllow) is refused.
	SitesDir string
	// SiteRootsAllow lists more directories site roots may lie in; only
	// callers that cover the whole fleet may use them. Neither it nor
	// SitesDir may contain DataDir.
	SiteRootsAllow []string

	TrustedProxies []netip.Prefix // peers whose X-Forwarded-* headers are kept
	BaseDomain     string         // auto route <id>.<BaseDomain> for host-less specs
	PublicIPs      []string       // served by GET /ingress
	Revision       string         // build revision for /healthz

	// DrainTimeout bounds how long shutdown waits for in-flight requests and
	// open websockets; default 30s.
	DrainTimeout time.Duration
	// RolloutSurge is how many replicas beyond scaling.max_replicas a
	// candidate-first rollout may run (berth serve --rollout-surge);
	// default 1.
	RolloutSurge int
	// ReadHeaderTimeout and IdleTimeout protect the listeners from slow or
	// idle clients; defaults 10s and 120s.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// BodyReadTimeout ends a proxied request whose body goes this long
	// without a byte (408, and the backend's request canceled); default
	// 30s (proxy.DefaultBodyReadTimeout), negative for none.
	BodyReadTimeout time.Duration
	// StdHTTP serves the data plane with net/http alone instead of the
	// proxy's HTTP/1.1 front end (proxy.H1Server), which serves plain
	// HTTP/1.x requests itself and hands everything else to net/http.
	StdHTTP bool
	// UpstreamResponseTimeout bounds how long a backend may take to send a
	// response head (proxy.Options.UpstreamResponseTimeout); past it the
	// client gets 504. Zero means 60 s.
	UpstreamResponseTimeout time.Duration
	// ArtifactMaxBytes bounds one blob uploaded to the artifact store
	// (<DataDir>/artifacts, served at /namespaces/{ns}/artifacts); zero is
	// artifact.DefaultMaxBlobBytes (4 GiB).
	ArtifactMaxBytes int64
	// ArtifactAllowPrivate lets the artifact stores deployments name be
	// reached at loopback and private addresses (artifact.OpenOptions);
	// ArtifactRoots lists the directories an absolute store root may lie in.
	ArtifactAllowPrivate bool
	ArtifactRoots        []string
	// S3 is how berth reaches S3-compatible buckets: vm.workspace stores
	// s3://bucket[/prefix] (whose vm.workspace.auth, when set, replaces
	// the credentials) and the workspace archive bucket. Endpoint empty is
	// AWS's.
	S3 workspace.S3Options
	// WorkspaceArchiveBucket is the bucket vm.workspace_archive.s3_key
	// names an object of (the whole key, as cloud resolved it); empty
	// refuses vm.workspace_archive.
	WorkspaceArchiveBucket string
	// beforeSnapshotRename runs in each workspace capture between the
	// fsync of its snapshot and the rename (tests: a crash there).
	beforeSnapshotRename func(tmp string)
	// AllowLinkLocalUpstreams lets upstreams reach link-local and cloud
	// metadata addresses, which are otherwise refused when a static
	// upstream is written and when the proxy dials.
	AllowLinkLocalUpstreams bool

	// RegistryCAFile is a PEM file of CA certificates that registries'
	// TLS certificates are verified with, besides the system's roots.
	RegistryCAFile string
	// RegistryAllowInsecure lists registry hosts (host or host:port) that
	// image pulls may reach over plain HTTP or on a loopback address;
	// others are refused, as are link-local and metadata addresses always.
	RegistryAllowInsecure []string
	// ImageBudget is the bytes of images POST /images/sweep trims the
	// store to; zero means DefaultImageBudget.
	ImageBudget int64

	// GuardDryRun counts and logs the requests guard rules match without
	// refusing any (app-lb's APP_LB_GUARD_ENFORCE=0).
	GuardDryRun bool
	// SIEM configures detection (package siem): zero fields take app-lb's
	// thresholds; Disabled turns detection off (the guard still applies).
	SIEM siem.Config
	// Tracing exports the data plane's spans (berth serve --otlp-endpoint
	// and after); no Endpoint traces nothing.
	Tracing tracing.Config

	// TelemetryRetention is how long the telemetry store (access records,
	// job output, events, metrics; <DataDir>/telemetry.db) keeps rows;
	// TelemetryMaxBytes caps its used size, the oldest logs going first.
	// Zero takes telemetry.DefaultRetention (7 days) and
	// telemetry.DefaultMaxBytes (1 GiB).
	TelemetryRetention time.Duration
	TelemetryMaxBytes  int64
	// TelemetryAccessRows bounds each deployment's access records stored
	// as rows per second (telemetry.Options.AccessRows); zero takes
	// telemetry.DefaultAccessRows.
	TelemetryAccessRows int
	// ObsWebhookRoots, when set, are the CAs obs alert webhooks'
	// certificates are checked against instead of the system's (tests).
	ObsWebhookRoots *x509.CertPool

	// AgentCommand and AgentEnv override how the process driver starts the
	// in-sandbox agent (default: this executable's "agent" mode); tests use
	// them to make the test binary the agent.
	AgentCommand []string
	AgentEnv     []string
	// Drivers are the operator's settings for the vm drivers (package
	// drivers), which cmd/berth reads from the environment.
	Drivers drivers.Options
	// GuestNetwork is the guest bridge the isolating drivers put replicas
	// on (cmd/berth reads it from BERTH_BRIDGE, BERTH_GUEST_SUBNET and
	// BERTH_GUEST_EGRESS); the zero value is berth0 on the default subnet,
	// with its state in <DataDir>/net.
	GuestNetwork hostnet.Config

	// AdminUser and AdminPassword are the operator's HTTP Basic credential
	// (BERTH_ADMIN_USER, default "admin"; BERTH_ADMIN_PASSWORD). With a
	// password every admin route but /healthz needs a credential; without
	// one, callers with no credential are trusted, so New refuses an
	// AdminAddr that is not a loopback address.
	AdminUser, AdminPassword string
	// SecretKey seals the secret store (BERTH_SECRET_KEY). Empty uses the
	// key file in DataDir, generated on first use; see package secrets.
	SecretKey string
	// TenantTokenMaxTTL caps the lifetime of tokens minted by namespace
	// credentials; default 90 days.
	TenantTokenMaxTTL time.Duration
	// AdminHosts are the host names (or host:port) the admin API answers
	// to besides localhost, loopback addresses and the address a request
	// arrived on (BERTH_ADMIN_HOSTS); any other Host is answered 421, so a
	// DNS-rebinding page cannot reach the admin API (see auth.Guard).
	AdminHosts []string
	// Brake tunes the failed-credential brake; zero fields take package
	// auth's defaults.
	Brake auth.BrakeConfig

	// EgressAddr is where the Computers' egress proxy (package egress)
	// listens. Default: port 0 on the guest bridge's gateway when the host
	// has a guest network (containers reach it there, host processes
	// too), else on 127.0.0.1; the port chosen is remembered in the data
	// directory and taken again at the next start when free, since it is
	// written into the proxy variables of the commands Computers run and
	// background processes keep it across berth restarts. "off" runs no
	// proxy: Computers then get no proxy variables.
	EgressAddr string

	// MaxReplicasCeiling is the most scaling.max_replicas any spec may ask
	// for; 0 means spec.DefaultMaxReplicasCeiling (100), negative none.
	MaxReplicasCeiling int
	// ConfinedDrivers are the vm drivers namespace-confined callers may
	// use (nil: auth.DefaultConfinedDrivers — not process);
	// NamespaceDrivers overrides the list for particular namespaces.
	ConfinedDrivers  []string
	NamespaceDrivers map[string][]string
	// NamespaceReplicaQuota bounds the sum of max_replicas over one
	// namespace's vm deployments written by confined callers; 0 means
	// auth.DefaultNamespaceReplicaQuota (20), negative none.
	NamespaceReplicaQuota int

	// ComputerCapacity, when MaxActive is positive, registers this host's
	// Computer capacity (hostCapacitySchema: at most MaxActive Computers
	// starting or running, ReservedHeadroom of them held back) in the host
	// capacity registry at start-up; the fleet's slots are the registry's
	// sum of MaxActive − ReservedHeadroom (package computer). Zero leaves
	// the registry as stored (empty: computer.DefaultFleetLimit slots).
	ComputerCapacity computer.HostCapacity
	// ComputerRecycleAfter, when positive, replaces a Computer's sandbox
	// older than that at a quiet moment, keeping its workspace.
	ComputerRecycleAfter time.Duration

	// DiskTTL and DiskOrphanTTL are how long after its last change a
	// stopped VM disk and an orphaned one are kept before the disk sweep
	// removes them (package disks); zero: disks.DefaultTTL and
	// disks.DefaultOrphanTTL, negative: never. DiskSweep is the sweep's
	// period (zero: disks.DefaultSweepEvery); DiskArchiveOnExpire archives
	// an expired disk into the artifact store before it is removed.
	DiskTTL, DiskOrphanTTL, DiskSweep time.Duration
	DiskArchiveOnExpire               bool

	// HostUpdates lets fleet-wide admins start host-update jobs (POST
	// /deployments/{id}/update), which run a deployment's update.commands
	// on this host as berth's user (berth serve --host-updates,
	// BERTH_HOST_UPDATES). Off, every such start is refused.
	HostUpdates bool

	// AllowLocalRepos lets fleet-wide writers name a local git
	// repository (a path or file://) as a deployment's build.repo and a
	// workflow's repo (workflows are fleet-wide admins' only): one policy
	// for both users of the image builder's git fetch. berth serve
	// --allow-local-repos.
	AllowLocalRepos bool

	// Builds (the image-build job, package build): BuildAllowHTTP lets
	// build.repo be a plain http:// remote; BuildTimeout bounds a build
	// (0: build.DefaultTimeout); BuildNetwork gives RUN steps the host's
	// network (off: none). berth serve --build-allow-http,
	// --build-timeout, --build-network.
	BuildAllowHTTP, BuildNetwork bool
	BuildTimeout                 time.Duration

	// WorkflowAllowHTTP lets a workflow's repo be a plain http:// remote
	// (the image builder's AllowHTTP). berth serve --workflow-allow-http.
	WorkflowAllowHTTP bool

	// ExtraPlugins are compiled-in plugins hosted besides obs (tests give
	// a per-namespace one; berth serve gives none).
	ExtraPlugins []plugin.Plugin

	// Fleet joins this host to a fleet of berths on etcd (berth serve
	// --etcd, --etcd-dev); the zero value runs no etcd code.
	Fleet FleetOptions

	Log *slog.Logger

	// placeVMs places vm deployments in the fleet without the store on
	// etcd (tests: per-host SQLite stores holding the same deployments).
	placeVMs bool
}

// Server is a running berth gateway.
type Server struct {
	o        Options
	rollouts *rollout.Manager   // rollout operations
	feed     *feed.Feed         // the namespaces' event feeds, kept in the store
	gates    *gate.Manager      // deployments' sign-in gates
	browsers *ui.Sessions       // the web UI's signed-in browsers
	guard    *guard.Guard       // the operator's guard rules
	siem     *siem.Engine       // detection over the data plane's traffic
	tracing  *tracing.Tracing   // the data plane's span export; nil: off
	webhooks alertNotifier      // security alert webhooks; nil: none
	notifier *notify.Notifier   // the same, for the admin API
	limits   *ratelimit.Manager // deployments' per-client limits
	// wouldBlockLog paces the log lines of requests a guard rule would
	// block under --guard-enforce=false.
	wouldBlockLog rate.Sometimes
	sessions      *sessions.Manager // their sign-in sessions
	tokens        *auth.Tokens      // the app-tokens (the admin API's and the gates')
	log           *slog.Logger
	store         Store
	closeStore    func() error // closes the store New opened; nil: Options.Store's, the caller's
	etcdStore     *etcdBacked  // the store on etcd (Options.StoreEtcd); nil otherwise
	storeLost     chan error   // the etcd store's claim was taken by another berth
	registry      *registry.Registry
	proxy         *proxy.Handler
	metrics       *metrics.Registry
	fleet         *fleet.Manager
	// inventory hands the sandboxes found at start-up to the fleet and
	// the Computers, and destroys the orphans (its Run).
	inventory *inventory.Inventory
	// disks is the census of the VM disks on this host and its sweep.
	disks *disks.Manager
	// computers runs the Computers (package computer) on the fleet's
	// drivers; its sandboxes are invisible to the fleet.
	computers *computer.Manager
	// driverClosers end what the drivers keep beside their replicas
	// (spares), when Run ends.
	driverClosers []io.Closer
	// secrets is the sealed secret store; the VM pools resolve env_from
	// through it (ResolveEnv) when they create a replica.
	secrets *secrets.Store
	// sealKey is berth's secret key: it seals the secret store and, on
	// the fleet's first host, the fleet CA key.
	sealKey secrets.Key
	// images is the local image store: root filesystems for the
	// container and VM drivers (vm.image).
	images *image.Store
	host   *metrics.HostSampler
	// jobs runs the deployments' background jobs; workflows keeps the
	// registered CI workflows.
	jobs      *jobs.Manager
	workflows *jobs.Workflows

	proxyLn, adminLn net.Listener
	proxySrv         *http.Server
	proxyFront       frontEnd // proxySrv, or the H1Server in front of it
	// hopLn and hopSrv are the hop listener's (--fleet-listen); nil
	// without one.
	hopLn  net.Listener
	hopSrv *hop.Server
	// hopClient is this host's side of the hop as a client, once loaded
	// (openHop): the TLS its discovery-backed deployments dial hop peers
	// with (hopTLS). Nil: no hop; hop peers are left out.
	hopClient atomic.Pointer[hop.Config]
	// hopAdmin serves the admin requests other hosts forward over the
	// hop (the Computer API's), once made; nil until then.
	hopAdmin atomic.Pointer[http.Handler]
	// The TLS listeners (see Options.TLSConfig); nil without.
	tlsLn    net.Listener
	udpConn  net.PacketConn
	tlsSrv   *http.Server // HTTP/2, and everything under StdHTTP
	tlsFront frontEnd     // the H1Server over TLS, or tlsSrv
	h3       *proxy.H3Server
	// certs is the certificate manager (Options.Certs); nil when the
	// caller's TLSConfig or none serves the TLS listeners.
	certs         *certs.Manager
	routesChanged chan struct{} // to feedHosts
	// fleetChanged tells the fleet report's publisher that the routes
	// changed (runFleetViews); nil without a fleet.
	fleetChanged chan struct{}
	// discovered is the fleet's services' upstreams, as discovery-backed
	// deployments take them (registry.Options.Discovered).
	discovered discoveredPeers
	// placer places the vm deployments in the fleet (placement.go); nil
	// when they are not placed (no fleet, or the store is not on etcd).
	placer   *placer
	adminTLS bool // the admin listener speaks TLS

	adminSrv *http.Server
	// workspaces keeps vm deployments' workspaces (<DataDir>/workspaces);
	// wsAuth their stores' credentials, by deployment.
	workspaces workspaces
	wsAuthMu   sync.Mutex
	wsAuth     map[string]workspaceAuth
	artifacts  *artifact.Store // <DataDir>/artifacts
	trees      *artifact.Trees // <DataDir>/trees: unpacked artifacts replicas share
	egress     *egress.Proxy   // nil when EgressAddr is "off"
	egressLn   net.Listener
	ports      *portRoutes   // Computers' exposed ports on the data plane
	lock       *instanceLock // the data dir's, held until Run returns
	// self is berth's own listeners, which the proxy refuses to dial; filled
	// as they are bound.
	self *netguard.Self
	// builds remembers built deployments' build sections (buildChanged).
	builds buildSeen
	// queued is the pulls and builds an edit wanted while the
	// deployment's job ran (queuePull).
	queued pullQueue

	// telemetry is the embedded telemetry store; obs serves its API.
	telemetry *telemetry.Store
	obs       *obs.Handler
	// fleetHost is this host in its fleet of berths (Options.Fleet);
	// nil when it runs alone.
	fleetHost *fleetMember
	// revoked holds the serials the fleet CA revoked (its CRL, from etcd
	// and on the CA host from <data-dir>/fleet): the hop refuses them.
	revoked fleetca.Revocations
}

// New opens the store, restores deployments and binds the listeners.
func New(ctx context.Context, o Options) (_ *Server, err error) {
	if o.ProxyAddr == "" {
		o.ProxyAddr = "0.0.0.0:6188"
	}
	if o.AdminAddr == "" {
		o.AdminAddr = "127.0.0.1:9090"
	}
	if o.DataDir == "" {
		return nil, errors.New("server: a data directory is required")
	}
	// The fleet settings are checked as the data dir's fleet.json fills
	// them (berth fleet init or join: a fleet without --etcd).
	if f, err := o.Fleet.FromDataDir(o.DataDir); err != nil {
		return nil, err
	} else if err := f.Check(); err != nil {
		return nil, err
	}
	// Absolute from here on: the default (./berth-data) is relative, and
	// what is derived from it (Computer workspaces, replica and site
	// directories) must not depend on the working directory — the
	// drivers refuse a relative workspace.
	if o.DataDir, err = filepath.Abs(o.DataDir); err != nil {
		return nil, fmt.Errorf("server: data directory: %w", err)
	}
	if o.AdminPassword == "" && !loopback(o.AdminAddr) {
		return nil, fmt.Errorf("server: refusing to serve the admin API on %s without a credential: anyone who can reach it could change every deployment; set BERTH_ADMIN_PASSWORD (and mint tokens for other users), or bind --admin-addr to 127.0.0.1", o.AdminAddr)
	}
	if c := o.TLSConfig; c != nil && len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetConfigForClient == nil {
		return nil, errors.New("server: the TLS configuration has no certificate (Certificates, GetCertificate or GetConfigForClient)")
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 120 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	// The instance lock comes before the store: a second berth on this
	// data dir must not load (let alone reconcile) what the first runs.
	lock, err := lockDataDir(o.DataDir)
	if err != nil {
		return nil, err
	}
	// undo holds what New has opened so far, run last first when it
	// fails.
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	undo = append(undo, lock.release)
	if err := siteDirs(&o); err != nil {
		return nil, err
	}
	st := o.Store
	var closeStore func() error
	var onEtcd *etcdBacked
	switch {
	case st == nil && len(o.StoreEtcd.Endpoints) > 0:
		if st, onEtcd, err = openEtcdStore(ctx, o); err != nil {
			return nil, err
		}
		undo = append(undo, func() { onEtcd.close() })
		closeStore = onEtcd.close
	case st == nil:
		if err := checkNotOnEtcd(o.DataDir); err != nil {
			return nil, err
		}
		db, err := store.Open(o.DataDir)
		if err != nil {
			return nil, err
		}
		undo = append(undo, func() { db.Close() })
		st, closeStore = db, db.Close
	}
	tokens, sec, key, err := openAccess(ctx, st, o)
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, log: o.Log, store: st, tokens: tokens, closeStore: closeStore, etcdStore: onEtcd, storeLost: make(chan error, 1), lock: lock, metrics: metrics.NewRegistry(), host: metrics.NewHostSampler("/proc"), secrets: sec, sealKey: key}
	if err := s.openFleetCAKey(); err != nil {
		return nil, err
	}
	s.ports = &portRoutes{}
	s.self = new(netguard.Self)
	popts := proxy.Options{
		Log: o.Log, TrustedProxies: o.TrustedProxies, Resolve: s.ports.resolve,
		Self: s.self, AllowLinkLocal: o.AllowLinkLocalUpstreams, UpstreamResponseTimeout: o.UpstreamResponseTimeout,
		BodyReadTimeout: o.BodyReadTimeout, Challenge: o.ACMEChallenge,
	}
	if certsWanted(o) {
		// s.certs is made once the listeners are bound, before serving.
		popts.Challenge = func(w http.ResponseWriter, r *http.Request) bool { return s.certs.ServeHTTPChallenge(w, r) }
		s.routesChanged = make(chan struct{}, 1)
	}
	if o.TLSConfig != nil || certsWanted(o) {
		// Bound before the proxy is made: its redirect and Alt-Svc
		// name the port.
		if err := s.listenTLS(); err != nil {
			return nil, err
		}
		undo = append(undo, func() { s.tlsLn.Close(); s.udpConn.Close() })
		port := strconv.Itoa(s.tlsLn.Addr().(*net.TCPAddr).Port)
		popts.RedirectHTTPS, popts.HTTPSPort, popts.HSTS = o.RedirectHTTPS, s.tlsLn.Addr().(*net.TCPAddr).Port, o.HSTS
		popts.AltSvc = `h3=":` + port + `"; ma=86400`
	}
	if err := s.openSecurity(ctx, st, &popts); err != nil {
		return nil, err
	}
	undo = append(undo, func() { s.siem.Close(); s.guard.Close() })
	if o.Tracing.Log == nil {
		o.Tracing.Log = o.Log
	}
	if s.tracing, err = tracing.New(o.Tracing); err != nil {
		return nil, err
	}
	if s.tracing != nil {
		popts.Tracer = s.tracing.Tracer()
		undo = append(undo, func() { s.closeTracing() })
	}
	wh, err := notify.New(ctx, notify.Options{Store: st, Key: key, Self: s.self, AllowLinkLocal: o.AllowLinkLocalUpstreams, Log: o.Log})
	if err != nil {
		return nil, err
	}
	s.notifier, s.webhooks = wh, wh
	undo = append(undo, func() { wh.Close() })
	if err := s.openTelemetry(ctx, st, key); err != nil {
		return nil, err
	}
	undo = append(undo, s.closeTelemetry)
	popts.Observe = s.observe
	if s.limits, err = ratelimit.NewManager(ctx, st, ratelimit.Options{Log: o.Log, Changed: func(id string) { s.registry.Refresh(id) }}); err != nil {
		return nil, err
	}
	s.proxy = proxy.New(popts)
	if s.artifacts, err = artifact.NewStore(filepath.Join(o.DataDir, "artifacts"), artifact.StoreOptions{MaxBlobBytes: o.ArtifactMaxBytes}); err != nil {
		return nil, err
	}
	if s.trees, err = artifact.OpenTrees(filepath.Join(o.DataDir, "trees")); err != nil {
		return nil, fmt.Errorf("server: artifact trees: %w", err)
	}
	if s.images, err = s.openImages(ctx, st); err != nil {
		return nil, err
	}
	gcfg := o.GuestNetwork
	if gcfg.StateDir == "" {
		gcfg.StateDir = filepath.Join(o.DataDir, "net")
	}
	gnet := guestNetwork(ctx, gcfg, o.Log)
	ds, closers, err := drivers.Open(drivers.Config{
		Options: o.Drivers, DataDir: o.DataDir, AgentCommand: o.AgentCommand, AgentEnv: o.AgentEnv,
		Images: s.images, Net: gnet, Log: o.Log,
	})
	if err != nil {
		return nil, err
	}
	s.driverClosers = closers
	undo = append(undo, func() { drivers.CloseAll(closers, o.Log) })
	// One listing of the drivers at start-up, shared by the two owners of
	// sandboxes; it destroys the orphans once both have registered.
	s.inventory = inventory.New(ds, inventory.Options{Expect: []vm.OwnerKind{vm.OwnerDeployment, vm.OwnerComputer}, Log: o.Log})
	if err := s.inventory.List(ctx); err != nil {
		return nil, err
	}
	// Rollouts a killed berth left running are settled before anything
	// reads the deployments (the registry's Load, the pools' adoption).
	if s.feed, err = feed.Open(ctx, feed.Options{Store: st, Log: o.Log}); err != nil {
		return nil, err
	}
	s.rollouts = rollout.New(st, o.Log)
	if err := s.rollouts.Settle(ctx); err != nil {
		return nil, fmt.Errorf("server: settling rollouts: %w", err)
	}
	s.fleet = fleet.New(fleet.Options{Drivers: ds, Log: o.Log, Inventory: s.inventory, Surge: o.RolloutSurge, OnRollout: s.rollouts.Event, Records: st})
	// One preparer of images for deployments' replicas and Computers'
	// sandboxes: a registry reference is pulled (or its use by the
	// namespace proved) the same way for both.
	images := &imagePreparer{s: s, log: o.Log, started: map[string]bool{}}
	// The fleet (if any) before the Computers: a start, and the adoption
	// of the Computers still running, reserve its slots.
	if err := s.openFleet(ctx, s.fleet.DriverNames()); err != nil {
		return nil, err
	}
	undo = append(undo, s.closeFleet)
	if err := s.mirrorFleetTokens(ctx, tokens); err != nil {
		return nil, err
	}
	s.computers, err = computer.New(ctx, computer.Options{
		Store: st, Drivers: ds, Inventory: s.inventory, DataDir: o.DataDir, BaseDomain: portDomain(o), Log: o.Log,
		RecycleAfter: o.ComputerRecycleAfter, Prepare: images.prepareComputer, FleetSlots: s.computerSlots(),
		FleetHostID: s.fleetHostID(),
	})
	if err != nil {
		return nil, err
	}
	if s.fleetHost != nil {
		s.fleetHost.computers.Store(s.computers)
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		s.claimLocalComputers(cctx)
		ccancel()
	}
	if o.ComputerCapacity != (computer.HostCapacity{}) {
		if err := s.computers.SetHostCapacity(ctx, computer.LocalHost, o.ComputerCapacity); err != nil {
			return nil, fmt.Errorf("server: Computer capacity: %w", err)
		}
		o.Log.Info("Computer capacity", "host", computer.LocalHost, "max_active", o.ComputerCapacity.MaxActive, "reserved_headroom", o.ComputerCapacity.ReservedHeadroom)
	}
	s.disks = s.openDisks(ds)
	undo = append(undo, s.disks.Close)
	grants, grantKey, err := openGrants(ctx, st, o.DataDir)
	if err != nil {
		return nil, err
	}
	undo = append(undo, s.closeEgress)
	if err := s.openEgress(grants, grantKey, gnet); err != nil {
		return nil, err
	}
	s.ports.computers, s.ports.grants = s.computers, grants
	nsStore := namespaces.New(st)
	if err := s.openGates(ctx, st, tokens, sec, key, nsStore); err != nil {
		return nil, err
	}
	undo = append(undo, func() { s.gates.Close(); s.sessions.Close() })
	if s.browsers, err = ui.NewSessions(ui.SessionOptions{}); err != nil {
		return nil, err
	}
	undo = append(undo, s.browsers.Close)
	s.ports.gates = s.gates
	specOpts := spec.Options{
		BaseDomain: o.BaseDomain, Drivers: s.fleet.DriverNames(), ImageExists: s.imageExists,
		SitesDir: o.SitesDir, SiteRootsAllow: o.SiteRootsAllow, MaxReplicasCeiling: replicaCeiling(o),
		StoreRootsAllow: o.ArtifactRoots,
		BuildAllowLocal: o.AllowLocalRepos, BuildAllowHTTP: o.BuildAllowHTTP,
		Mounter:           s.fleet.Mounter,
		WorkspaceArchives: o.WorkspaceArchiveBucket != "",
		Discovery:         s.fleetHost != nil,
	}
	s.workspaces.s = s
	if err := s.openJobs(ctx); err != nil {
		return nil, err
	}
	undo = append(undo, s.jobs.Close, s.workflows.Close)
	var place func(string) registry.Placement
	var fence func(context.Context, string) error
	var changed func(string, *registry.Entry)
	if s.placing() {
		s.placer = newPlacer(s.fleetHost.m, o.Log)
		s.fleetHost.placer.Store(s.placer)
		place, fence, changed = s.placer.place, s.placer.holds, s.placer.changed
	}
	s.registry = registry.New(registry.Options{
		Store:       st,
		Publisher:   s.publisher(),
		Spec:        specOpts,
		Recorder:    func(id string) proxy.Recorder { return recorder{s.metrics.Get(id)} },
		Forget:      s.forgetDeployment,
		Pools:       s.fleet,
		ResolveEnv:  sec.ResolveEnv,
		Mounts:      s.resolveMounts,
		MountDigest: s.mountDigest,
		SiteRoot:    s.siteRoot,
		Metrics:     s.metrics.Get,
		Domains:     nsStore.Domains,
		Reserved:    s.reservedHost,
		Gate:        s.compileGate,
		Limit:       s.limiter,
		Images:      images,
		Workspace:   s.workspaces.hook,
		Feed:        s.feed.Exposed,
		Issues:      s.feed,
		Discovered:  s.discovered.get,
		HopTLS:      s.hopTLS,
		Place:       place,
		Fence:       fence,
		Changed:     changed,
		Log:         o.Log,
	})
	s.rollouts.SetRegistry(s.registry)
	if err := s.registry.Load(ctx); err != nil {
		return nil, err
	}
	// A deployment whose mounts a crash or a failure left unpulled gets
	// its pull now, as on register (autoPull).
	for _, e := range s.registry.List() {
		s.autoPull(ctx, e)
	}
	// No TCP keep-alive probes on the data plane's connections (as nginx):
	// idle timeouts end idle ones, and the probes' four setsockopt calls
	// were a tenth of a short connection's cost.
	if s.proxyLn, err = (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", o.ProxyAddr); err != nil {
		return nil, fmt.Errorf("proxy listener: %w", err)
	}
	undo = append(undo, func() { s.proxyLn.Close() })
	if s.adminLn, err = net.Listen("tcp", o.AdminAddr); err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	s.self.Add(s.proxyLn.Addr(), s.adminLn.Addr())
	if s.tlsLn != nil {
		s.self.Add(s.tlsLn.Addr(), s.udpConn.LocalAddr())
	}
	if s.egressLn != nil {
		s.self.Add(s.egressLn.Addr())
	}
	if certsWanted(o) {
		if err := s.openCerts(key); err != nil {
			return nil, err
		}
	}
	adminConf, err := s.adminTLSConfig(key)
	if err != nil {
		return nil, err
	}
	if adminConf != nil {
		s.adminLn, s.adminTLS = tls.NewListener(s.adminLn, adminConf), true
	}
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	// The hop listener's requests go to the same handler as the public
	// listener's, marked as hopped by the hop server; the public
	// listener's clients' own X-Berth-Hop is dropped (hop.Public; the
	// data plane never passes it to a backend either).
	dataPlane := web.Recover(o.Log, s.proxy)
	if err := s.openHop(dataPlane); err != nil {
		return nil, err
	}
	if s.hopLn != nil {
		undo = append(undo, func() { s.hopLn.Close() })
	}
	s.proxySrv = &http.Server{
		Handler:           hop.Public(dataPlane),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		Protocols:         protos,
		// HTTP/2 (h2c) has no header timeout of its own, and its idle
		// timeout (IdleTimeout, as HTTP/1's) counts from the last
		// stream: a connection that stops sending mid-frame (half a
		// HEADERS frame) would sit there for IdleTimeout. A connection
		// that sends nothing for ReadHeaderTimeout is pinged, and closed
		// if the ping is not answered within as long again; a client
		// stuck in a frame cannot answer.
		HTTP2:    &http.HTTP2Config{SendPingTimeout: o.ReadHeaderTimeout, PingTimeout: o.ReadHeaderTimeout},
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
	}
	s.proxyFront = s.proxySrv
	if !o.StdHTTP {
		s.proxyFront = s.proxy.NewH1Server(s.proxySrv, proxy.H1Options{Log: o.Log})
	}
	if s.tlsLn != nil {
		s.serveTLS()
	}
	var obsAPI http.Handler
	if s.obs != nil {
		obsAPI = s.obs
	}
	plugins, err := openPlugins(ctx, st, obsAPI, o.ExtraPlugins...)
	if err != nil {
		return nil, err
	}
	brake := auth.NewBrake(o.Brake)
	adminGate := auth.New(auth.Config{
		User: o.AdminUser, Password: o.AdminPassword, Tokens: tokens,
		Brake: brake, Log: o.Log, Event: s.adminEvent, Sessions: s.browsers,
	})
	api := admin.New(admin.Options{
		Registry: s.registry, Fleet: s.fleet, Metrics: s.metrics, Host: s.host, Rollouts: s.rollouts,
		PublicIPs: o.PublicIPs, Revision: o.Revision, Log: o.Log,
		Gate:   adminGate,
		Tokens: tokens, Secrets: sec, Namespaces: nsStore, Sessions: s.sessions, Images: s.images,
		ImageBudget: imageBudget(o), RegistryCredentials: registryCreds{st},
		Artifacts: s.artifacts,
		Certs:     s.certSource(), Collectors: s.collectors(),
		Guard: s.guard, SIEM: s.siem, Webhooks: s.notifier, RateLimits: s.limits, PortSignIns: st.ComputerPortsSigningInWith,
		Jobs: s.jobs, Workflows: s.workflows, Written: s.autoPull,
		Confinement: confinement(o),
		Upstreams:   admin.UpstreamGuard{Self: s.self, AllowLinkLocal: o.AllowLinkLocalUpstreams},
		Disks:       s.disks, RetiredDir: filepath.Join(o.DataDir, "retired"),
		Feed:     s.feed,
		ObsStats: s.obsStats,
		Plugins:  plugins,

		FleetHosts:  s.adminFleet(),
		FleetViews:  s.adminFleetViews(),
		FleetJoin:   s.adminFleetJoin(),
		FleetRenew:  s.adminFleetRenew(),
		FleetRevoke: s.adminFleetRevoke(),
	})
	// The Computer API shares the listener and the gate, and its brake
	// counts bad grants with bad admin credentials.
	var cman computerapi.Manager = s.computers
	if s.fleetHost != nil {
		// Creates claim the id in the fleet's Computer index first.
		cman = fleetComputerManager{Manager: s.computers, m: s.fleetHost.m, log: o.Log}
	}
	capi := computerapi.Options{Manager: cman, Grants: grants, Gate: adminGate, Brake: brake, Log: o.Log, Confinement: confinement(o),
		SignIn: func(ctx context.Context, ns, provider string) error {
			ns = cmp.Or(ns, "default")
			if _, err := nsStore.Provider(ctx, ns, provider); errors.Is(err, namespaces.ErrNotFound) {
				return fmt.Errorf("no auth provider %q in namespace %q (POST /auth-providers declares one)", provider, ns)
			} else if err != nil {
				return fmt.Errorf("the auth providers could not be read: %w", err)
			}
			return nil
		}}
	if s.egress != nil {
		capi.Egress = s.egress
	}
	computers := computerapi.New(capi)
	adminMux := http.NewServeMux()
	adminMux.Handle("/", api)
	// The web UI's pages, sign-in and assets; their scripts call the
	// admin API with the browser's session as the credential.
	pages := ui.New(ui.Options{Gate: adminGate, Sessions: s.browsers, Log: o.Log})
	for _, p := range ui.Patterns() {
		adminMux.Handle(p, pages)
	}
	// In a fleet, a Computer of another host is served through it.
	routed := s.fleetComputers(computers, !adminGate.Gated())
	adminMux.Handle("/computers", routed)
	adminMux.Handle("/computers/", routed)
	// The Computer API requests other hosts forward arrive on the hop
	// listener (hop.AdminHeader): the forwarding host's guard checked
	// their Host and Origin, the hop server that they did not pass
	// through a data plane, and the API authenticates the caller.
	hopAdmin := http.NewServeMux()
	hopAdmin.Handle("/computers", computers)
	hopAdmin.Handle("/computers/", computers)
	hopAdminH := web.Recover(o.Log, hopUngated(adminGate.Gated(), hopAdmin))
	s.hopAdmin.Store(&hopAdminH)
	s.adminSrv = &http.Server{
		// The guard (Host, Origin, berth's own hop marker) comes before
		// every route, the Computer API's too.
		Handler:           web.Recover(o.Log, auth.Guard(auth.GuardConfig{Hosts: o.AdminHosts, Log: o.Log}, adminMux)),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       time.Minute,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
	}
	if err := s.advertise(ctx); err != nil {
		return nil, err
	}
	o.Log.Info("berth listening", "proxy", s.ProxyAddr(), "proxy_tls", s.ProxyTLSAddr(), "admin", s.AdminAddr(), "admin_tls", s.adminTLS, "data_dir", o.DataDir, "deployments", s.registry.Len())
	return s, nil
}

// replicaCeiling is the spec.Options ceiling the server's options ask for.
func replicaCeiling(o Options) int {
	switch {
	case o.MaxReplicasCeiling == 0:
		return spec.DefaultMaxReplicasCeiling
	case o.MaxReplicasCeiling < 0:
		return 0
	}
	return o.MaxReplicasCeiling
}

// confinement is what the server's options let confined callers run.
func confinement(o Options) auth.Confinement {
	c := auth.Confinement{Drivers: map[string][]string{}, ReplicaQuota: o.NamespaceReplicaQuota}
	if o.ConfinedDrivers != nil {
		c.Drivers[""] = o.ConfinedDrivers
	}
	for ns, ds := range o.NamespaceDrivers {
		c.Drivers[ns] = ds
	}
	switch {
	case c.ReplicaQuota == 0:
		c.ReplicaQuota = auth.DefaultNamespaceReplicaQuota
	case c.ReplicaQuota < 0:
		c.ReplicaQuota = 0
	}
	return c
}

// frontEnd serves the data-plane listener: *http.Server or *proxy.H1Server.
type frontEnd interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// portDomain is the domain Computers' exposed ports are named under:
// <port>-<id>.<domain>. It is the base domain when one is set, else
// "localhost", whose subdomains resolve to the loopback address.
func portDomain(o Options) string {
	if o.BaseDomain != "" {
		return o.BaseDomain
	}
	return "localhost"
}

// ProxyAddr is the bound data-plane address.
func (s *Server) ProxyAddr() string { return s.proxyLn.Addr().String() }

// ProxyTLSAddr is the bound address of the data plane's TLS listeners (TCP
// for HTTPS, UDP for HTTP/3, the same port), or "" without TLS.
func (s *Server) ProxyTLSAddr() string {
	if s.tlsLn == nil {
		return ""
	}
	return s.tlsLn.Addr().String()
}

// AdminAddr is the bound admin address.
func (s *Server) AdminAddr() string { return s.adminLn.Addr().String() }

// Deploy writes a deployment as the operator would (a PUT on the admin
// API): cmd/berth's demo deployments.
func (s *Server) Deploy(ctx context.Context, sp apitype.DeploymentSpec) error {
	_, _, err := s.rollouts.Write(ctx, rollout.Request{Spec: sp}, registry.PutOptions{})
	return err
}

// DriverNames are the vm drivers this host runs.
func (s *Server) DriverNames() []string { return s.fleet.DriverNames() }

// ImportImage imports the root filesystem tree src as the image name,
// unless an image of that name is there already.
func (s *Server) ImportImage(ctx context.Context, name, src string) error {
	if s.images.Exists(name) {
		return nil
	}
	_, err := s.images.Import(ctx, name, src)
	return err
}

// Run serves until ctx ends, then drains: it stops accepting, lets in-flight
// requests and websockets finish up to DrainTimeout, and closes the store
// (the one New opened: not Options.Store).
func (s *Server) Run(ctx context.Context) error {
	// The background loops outlive ctx until the listeners have drained
	// (requests use the registry, fleet and Computers); Run starts each
	// and waits for every one of them before it closes the drivers and
	// the store.
	loopCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var loops sync.WaitGroup
	for _, l := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"computers", s.computers.Run},
		{"registry", s.registry.Run},
		{"fleet", s.fleet.Run},
		{"rollouts", s.rollouts.Run},
		{"feed", s.feed.Run},
		{"inventory", s.inventory.Run},
		{"disk sweep", s.disks.Run},
		{"host sampler", func(ctx context.Context) error { return s.host.Run(ctx, 2*time.Second) }},
		{"certificates", s.runCerts},
		{"certificate hosts", s.runFeedHosts},
		{"siem", func(ctx context.Context) error { s.siem.Run(ctx); return nil }},
		{"obs alerts", func(ctx context.Context) error { s.obs.Run(ctx); return nil }},
		{"replica logs", s.runReplicaLogs},
		{"fleet views", s.runFleetViews},
		{"fleet placement", s.runPlacement},
		{"fleet certificate renewal", s.runFleetRenew},
		{"fleet revocations", s.runFleetCRL},
		{"shared store sync", s.runSharedSync},
	} {
		loops.Go(func() {
			if err := l.run(loopCtx); err != nil && loopCtx.Err() == nil {
				s.log.Error("background loop stopped", "loop", l.name, "err", err)
			}
		})
	}
	// Requests' contexts end after the drain deadline (cancelReqs), not
	// with ctx: the drain lets them finish.
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	base := func(net.Listener) context.Context { return reqCtx }
	s.proxySrv.BaseContext, s.adminSrv.BaseContext = base, base
	if s.hopSrv != nil {
		s.hopSrv.SetBaseContext(base)
	}
	if s.tlsSrv != nil {
		s.tlsSrv.BaseContext = base
	}

	// The listeners' Serve calls end when they are closed below; Run
	// waits for them too.
	errc := make(chan error, 6)
	var serving sync.WaitGroup
	serving.Go(func() { errc <- s.proxyFront.Serve(s.proxyLn) })
	if s.tlsLn != nil {
		serving.Go(func() { errc <- s.tlsFront.Serve(s.tlsLn) })
		serving.Go(func() { errc <- s.h3.Serve(s.udpConn) })
	}
	serving.Go(func() { errc <- s.adminSrv.Serve(s.adminLn) })
	if s.hopSrv != nil {
		serving.Go(func() { errc <- s.hopSrv.Serve(s.hopLn) })
	}
	if s.egress != nil {
		serving.Go(func() { errc <- s.egress.Serve(s.egressLn) })
	}

	if s.etcdStore != nil {
		cctx, stopClaim := context.WithCancel(ctx)
		defer stopClaim()
		go s.etcdStore.keepClaim(cctx, s, s.storeLost)
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		s.log.Error("listener failed", "err", err)
	case err = <-s.storeLost:
		s.log.Error("stopping", "err", err)
	}
	s.log.Info("draining", "timeout", s.o.DrainTimeout, "in_flight", s.proxy.Active())
	// Running jobs are cancelled first (their commands killed, their
	// records written failed), so that log followers see them end and do
	// not hold the admin listener's drain. Workflow runs first: a run
	// would otherwise see its step's job end and try the next.
	s.workflows.Close()
	s.jobs.Close()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.DrainTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.proxyFront.Shutdown(dctx) })
	wg.Go(func() { s.adminSrv.Shutdown(dctx) })
	if s.hopSrv != nil {
		wg.Go(func() { s.hopSrv.Shutdown(dctx) })
	}
	if s.tlsLn != nil {
		wg.Go(func() { s.tlsFront.Shutdown(dctx) })
		wg.Go(func() { s.h3.Shutdown(dctx) })
	}
	wg.Wait()
	// Shutdown does not wait for hijacked connections (websockets); the
	// proxy counts them.
	if werr := s.proxy.Wait(dctx); werr != nil {
		s.log.Warn("drain deadline passed; closing what is left", "in_flight", s.proxy.Active())
	}
	cancelReqs()
	s.proxyFront.Close()
	s.adminSrv.Close()
	if s.hopSrv != nil {
		s.hopSrv.Close()
	}
	if s.tlsLn != nil {
		s.tlsFront.Close()
		s.h3.Close()
		s.udpConn.Close() // (the HTTP/3 server leaves it open)
	}
	s.closeEgress()
	serving.Wait()
	stopLoops()
	loops.Wait()
	// Leaving the fleet revokes this host's lease: it leaves the host list
	// and its Computers' fleet slots are freed (they keep running, and
	// the next start of berth takes their slots again).
	s.closeFleet()
	s.disks.Close() // archives under way end, recorded failed
	s.workspaces.close()
	drivers.CloseAll(s.driverClosers, s.log)
	s.gates.Close()
	s.sessions.Close()
	s.browsers.Close()
	if serr := s.siem.Close(); serr != nil {
		s.log.Error("some security alerts were not stored", "err", serr)
	}
	s.guard.Close()
	s.closeTelemetry()
	s.closeTracing()
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	s.notifier.Flush(fctx) // let queued alerts go out, briefly
	fcancel()
	s.notifier.Close()
	if s.closeStore != nil {
		if cerr := s.closeStore(); cerr != nil && err == nil {
			err = cerr
		}
	}
	s.lock.release()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	s.log.Info("stopped")
	return err
}

// openGrants opens the Computer grant issuer: the signing key in the data
// directory (generated on first use) and the issued grants in the store.
// It returns the key too, from which the egress proxy's is derived.
func openGrants(ctx context.Context, st Store, dataDir string) (*grant.Issuer, []byte, error) {
	key, err := grant.LoadKey(dataDir)
	if err != nil {
		return nil, nil, err
	}
	i, err := grant.New(ctx, grant.Config{Key: key, Store: st})
	return i, key, err
}

// recorder adapts a metrics set to the proxy's Recorder.
type recorder struct{ d *metrics.Deployment }

func (r recorder) Observe(status int, elapsed time.Duration, failed bool) {
	if failed {
		r.d.ObserveError()
		return
	}
	r.d.ObserveRequest(status, elapsed)
}

// ObservePhases records a held request's cold-start phases.
func (r recorder) ObservePhases(p proxy.Phases) {
	r.d.Phases.Observe(p.Queue, p.Pull, p.Create, p.Boot, p.FirstByte, p.Total)
}

// ArtifactSource opens the artifact store a deployment in namespace ns
// names (MountSpec.store, ArtifactSpec.store, BuildSpec.store), with key
// its API key: what the fetch jobs read through, under the operator's
// address and root policy.
func (s *Server) ArtifactSource(store, ns, key string) (artifact.Source, error) {
	return artifact.Open(store, ns, key, s.artifactOptions())
}

// artifactOptions are what deployments' artifact stores may reach.
func (s *Server) artifactOptions() artifact.OpenOptions {
	return artifact.OpenOptions{
		Local: s.artifacts, Self: s.self, AllowPrivate: s.o.ArtifactAllowPrivate,
		AllowLinkLocal: s.o.AllowLinkLocalUpstreams, Roots: s.o.ArtifactRoots,
	}
}

// ArtifactTrees is where fetched tarballs are unpacked, once per digest,
// for every replica that mounts them.
func (s *Server) ArtifactTrees() *artifact.Trees { return s.trees }

// closeTracing exports the spans still queued, for a few seconds at most,
// and stops the export.
func (s *Server) closeTracing() {
	if s.tracing == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.tracing.Close(ctx); err != nil {
		s.log.Warn("spans left unexported at shutdown", "err", err)
	}
	if n := s.tracing.Dropped(); n > 0 {
		s.log.Warn("spans dropped: the collector did not take them", "dropped", n, "exported", s.tracing.Exported())
	}
}
