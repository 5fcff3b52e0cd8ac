// Package registry owns the set of deployments: it validates and persists
// every write, keeps the in-memory view, and publishes a fresh immutable
// routing table to the data plane after each change.
//
// Writes are serialised by one mutex held across the store write and the
// table swap, so the order in which writes are acknowledged is the order in
// which the data plane sees them. Reads (Get, List, the data plane) never
// take that lock for long: the published state is copy-on-write.
package registry

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/metrics"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/route"
	"github.com/berth-dev/berth/internal/site"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
)

// Store is the persistence the registry needs.
type Store interface {
	Deployments(ctx context.Context) ([]store.Deployment, error)
	// Deployment returns one (an error wrapping store.ErrNotFound when
	// there is none).
	Deployment(ctx context.Context, id string) (store.Deployment, error)
	PutDeployment(ctx context.Context, d store.Deployment, createOnly bool, ifRevision int64) (store.Deployment, error)
	DeleteDeployment(ctx context.Context, id string) error
	UpstreamDrains(ctx context.Context) ([]store.UpstreamDrain, error)
	PutUpstreamDrain(ctx context.Context, d store.UpstreamDrain) error
	DeleteUpstreamDrain(ctx context.Context, deployment, upstream string) error
}

// Publisher receives each new routing table (implemented by *proxy.Handler).
type Publisher interface {
	Swap(t *proxy.Table)
}

// Pools runs the replica pools of vm deployments (implemented by
// *fleet.Manager).
type Pools interface {
	Ensure(cfg fleet.Config) *fleet.Pool
	Remove(ctx context.Context, id string)
}

// EnvResolver resolves a spec's env_from secret references in a namespace.
type EnvResolver func(ctx context.Context, namespace string, refs []apitype.SecretEnv) (map[string]string, error)

// Errors the registry returns; the admin API maps them to statuses.
var (
	ErrNotFound     = errors.New("registry: no such deployment")
	ErrExists       = errors.New("registry: deployment already exists")
	ErrPrecondition = errors.New("registry: precondition failed")
	ErrNoUpstream   = errors.New("registry: no such upstream")
	ErrNotStatic    = errors.New("registry: not a static deployment")
	ErrLastUpstream = errors.New("registry: no other healthy upstream is accepting")
)

// Peer is a discovered member of a service: the address a backend dials,
// and, for a member over the hop, the fleet host it is (the name its
// certificate must carry).
type Peer struct {
	Addr   string // host:port
	HostID string // the member's fleet host
	Hop    bool   // Addr is the host's hop listener: dial it with Options.HopTLS(HostID)
}

// Options configure a Registry.
type Options struct {
	Store     Store
	Publisher Publisher
	Spec      spec.Options
	// Recorder returns the metrics sink for a deployment id (may be nil).
	Recorder func(id string) proxy.Recorder
	// Forget is called when a deployment is deleted (e.g. to drop metrics).
	Forget func(id string)
	// Discovered returns a service's current peers (the members that
	// are not draining) among the members serving deployments of
	// namespace: a static deployment with discovery is served by them,
	// rebuilt on Refresh. Nil serves such a deployment with no upstreams.
	Discovered func(namespace, serviceID string) []Peer
	// HopTLS returns the TLS client configuration of the hop to fleet
	// host hostID (hop.Config.ClientTLS); nil, or a nil answer, means
	// this host has no hop, and a discovered hop peer is left out.
	HopTLS func(hostID string) *tls.Config
	// Pools runs vm deployments; nil refuses them at activation.
	Pools Pools
	// ResolveEnv resolves vm.env_from at each replica create.
	ResolveEnv EnvResolver
	// Mounts resolves a deployment's vm.mounts at each replica create:
	// the vm.Mount of each MountSpec, in order, with Source the host tree
	// the mount-pull job unpacked it into, Target its path and ReadOnly
	// its read_only (default true; see MountTargets). Nil fails the
	// creates of a deployment with mounts, saying nothing pulls them.
	Mounts MountResolver
	// MountDigest returns the digest mount m of deployment id was last
	// pulled to ("" when it has not been, or was pulled with another
	// store, ref or strip_components). Every Put and Load stamps it into
	// the spec's vm.mounts[i].digest, overwriting what a client sent, so
	// the status reports it, and the pool's template (the canonical JSON
	// of vm) changes with it: a pull that changes a digest recycles the
	// pool by putting the spec again. A vm deployment with a mount
	// without a digest has no pool at all; its requests are answered 503
	// saying its mounts are being pulled. Nil: no mount is ever pulled.
	MountDigest func(ctx context.Context, id string, m apitype.MountSpec) string
	// SiteRoot returns the tree a site deployment with an artifact section
	// serves: its last artifact pull's (ok false: none yet). Such a site
	// serves that tree instead of site.root (which is still validated),
	// and, until it has one, nothing: its requests are answered 503
	// saying its bundle is being pulled. Refresh picks up a new pull.
	// Nil: such sites serve nothing.
	SiteRoot func(id string) (root string, ok bool)
	// Metrics returns the metric set of a deployment, for pools.
	Metrics func(id string) *metrics.Deployment
	Log     *slog.Logger
	Now     func() time.Time

	// Domains returns the domains assigned to namespaces, by namespace,
	// for the route ownership checks (ownership.go); nil: none assigned.
	Domains func(ctx context.Context) (map[string][]string, error)
	// Reserved says why no deployment may route host (a Computer's
	// exposed port, the admin API's own name), or "" when one may; nil:
	// none is reserved.
	Reserved func(host string) string
	// Gate compiles a spec's auth gate (package gate); nil refuses specs
	// with one, since nothing would enforce it.
	Gate func(s *apitype.DeploymentSpec) (proxy.Gate, error)
	// Limit returns the per-client limit of deployment id, consulted
	// whenever the deployment is compiled (Load, Put, Refresh); nil: no
	// deployment has one. It must answer a nil interface for none (not a
	// nil pointer in one). The limit is kept outside the spec (package
	// ratelimit), so a change of it is published by Refresh.
	Limit func(id string) proxy.Limiter
	// Images readies vm deployments' images: Prepare runs before each
	// replica create (fleet.Config.Prepare: a registry reference is
	// pulled there when missing, and its config fills what the spec leaves
	// empty), Prefetch when a deployment is written, so the first request
	// need not wait for the pull. nil: images are local only.
	Images ImagePreparer
	// Workspace returns the workspace hook of a vm deployment
	// (fleet.Config.Workspace) at each activation, or nil for one that has
	// none (it may return one for a deployment whose spec just dropped
	// vm.workspace, so that the old replicas' directories are still
	// captured); it keeps one workspace per deployment across spec writes.
	// Nil fails the creates of deployments with vm.workspace or
	// vm.workspace_archive, saying nothing keeps their workspaces.
	Workspace func(s *apitype.DeploymentSpec) fleet.Workspace
	// Feed returns the handler that serves namespace ns's event feed at
	// a deployment's feed.expose path; nil refuses specs that set one.
	Feed func(ns string) http.Handler
	// Place says where vm deployment id's replicas run (Placement): a
	// fleet runs each on one host. It is consulted at each activation
	// (Load, Put) and by Placed; nil: here, always.
	Place func(id string) Placement
	// Fence, with Place, runs right before each replica create of vm
	// deployment id (fleet.Config.Fence); an error fails the create (this
	// host no longer holds the deployment).
	Fence func(ctx context.Context, id string) error
	// Changed hears every deployment loaded or written (e its new entry)
	// and every one deleted (e nil), under the registry's lock, in the
	// order of the writes: it must not block or call the registry.
	Changed func(id string, e *Entry)
	// Issues hears the operational issues (replica create and boot
	// failures, boot and cold-start timeouts, static upstreams' health
	// flips) of the deployments whose spec asks for it (feed.issues); nil:
	// nobody listens.
	Issues Issues
}

// Issues hears deployments' operational issues (package feed). Issue may be
// called under a pool's lock: it must not block or call back.
type Issues interface {
	Issue(namespace, deployment, what, detail string)
}

// ImagePreparer readies the images of vm deployments (package server
// answers it from the image store).
type ImagePreparer interface {
	Prepare(ctx context.Context, namespace string, spec *vm.Spec) error
	Prefetch(namespace, image string)
}

// Registry is the deployment set. Safe for concurrent use.
type Registry struct {
	o Options

	mu   sync.Mutex // serialises writes; guards deps and replicas
	deps map[string]*Entry
	// replicas holds, by deployment, the data plane pool a vm deployment's
	// fleet pool publishes into; like the fleet pool, it lives until the
	// deployment is deleted.
	replicas map[string]*proxy.Pool
	// table is the routing table last published; each write derives the
	// next one from it (route.Table.Edit), at the cost of the change.
	table *proxy.Table
	// routes indexes every deployment's rules for the ownership checks.
	routes route.Index
}

// Entry is one deployment as the registry holds it. Entries are immutable
// once published; a write replaces the entry.
type Entry struct {
	Spec      apitype.DeploymentSpec
	Kind      apitype.DeploymentKind
	ETag      string
	Revision  int64
	CreatedAt time.Time
	UpdatedAt time.Time
	Pool      *proxy.Pool // static backends or a vm pool's replicas; nil for sites
	Upstreams []string    // as written, in spec order, for static
	peers     []Peer      // a discovery-backed deployment's, as Discovered gave them
	Site      *site.Config
	VMPool    *fleet.Pool // the replica pool of a vm deployment
	// placement is where a vm deployment runs, as Options.Place said at
	// its activation (placed: it was asked).
	placement Placement
	placed    bool
	// fwd holds the requests of a vm deployment placed on another host
	// while that host does not answer, until the deployment moves or the
	// host is back; it is kept across the entries of one deployment.
	fwd   *placeHold
	dp    *proxy.Deployment
	rules []route.Rule // Spec.Routes as routing rules
}

// RolloutRevision is the entry's rollout_revision: the lowercase hex
// SHA-256 of its canonical spec, the ETag without its quotes.
func (e *Entry) RolloutRevision() string { return strings.Trim(e.ETag, `"`) }

// TemplateKey is what a vm deployment's replica template is compared by
// (fleet.Config.Key): a change of it is a rollout. "" for other kinds.
func TemplateKey(s *apitype.DeploymentSpec) string {
	if s.VM == nil {
		return ""
	}
	key, _ := json.Marshal(s.VM)
	return string(key)
}

// New returns an empty registry. Call Load to restore persisted state.
func New(o Options) *Registry {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Registry{o: o, deps: map[string]*Entry{}, replicas: map[string]*proxy.Pool{}}
}

// Load restores deployments and upstream drains from the store and publishes
// the routing table. A stored spec that no longer validates is logged and
// skipped, never deleted.
func (r *Registry) Load(ctx context.Context) error {
	rows, err := r.o.Store.Deployments(ctx)
	if err != nil {
		return fmt.Errorf("load deployments: %w", err)
	}
	drains, err := r.o.Store.UpstreamDrains(ctx)
	if err != nil {
		return fmt.Errorf("load upstream drains: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, row := range rows {
		e, err := r.fromRowLocked(ctx, row, nil)
		if err != nil {
			r.o.Log.Error("skipping a stored deployment", "id", row.ID, "err", err)
			continue
		}
		r.installLocked(e)
	}
	// Stored routes predate the ownership rules, or a domain assignment
	// since: they stay served (refusing one would hand its hosts to
	// whichever rule is next), but say so.
	for _, id := range slices.Sorted(mapsKeys(r.deps)) {
		if err := r.checkRoutes(ctx, &r.deps[id].Spec, PutOptions{}); err != nil {
			r.o.Log.Warn("a stored deployment's routes break the host ownership rules; it is still served, but writes to it are refused until its routes are fixed", "id", id, "err", err)
		}
	}
	r.applyDrainsLocked(drains, nil)
	r.publishLocked()
	return nil
}

// fromRowLocked makes the entry of a stored deployment as Load does:
// decoded, normalized (its mounts' digests stamped), validated and built,
// reusing prev's pool (nil: none) as Put does. It does not activate it.
// r.mu is held.
func (r *Registry) fromRowLocked(ctx context.Context, row store.Deployment, prev *Entry) (*Entry, error) {
	var s apitype.DeploymentSpec
	if err := json.Unmarshal(row.Spec, &s); err != nil {
		return nil, fmt.Errorf("its stored spec does not decode: %w", err)
	}
	spec.Normalize(&s, r.o.Spec)
	r.stampMounts(ctx, &s)
	if err := spec.Validate(&s, r.o.Spec); err != nil {
		return nil, fmt.Errorf("its stored spec no longer validates: %w", err)
	}
	e, err := r.build(s, prev, false)
	if err != nil {
		return nil, err
	}
	e.Revision, e.CreatedAt, e.UpdatedAt = row.Revision, row.CreatedAt, row.UpdatedAt
	return e, nil
}

// installLocked activates e (persisted already) and makes it its
// deployment's entry, in the registry and the route index, and tells
// Options.Changed. The caller
// publishes the table, then calls replacedLocked with the entry e
// replaced. r.mu is held.
func (r *Registry) installLocked(e *Entry) {
	r.activateFrom(e, r.deps[e.Spec.ID])
	r.deps[e.Spec.ID] = e
	r.routes.Set(e.Spec.ID, e.rules)
	r.changed(e.Spec.ID, e)
}

// replacedLocked finishes the replacement of prev by e, once the table
// without prev is published: a deployment that no longer has a replica
// pool (no longer a vm deployment, or one whose mounts are not pulled)
// loses its replicas, as on Delete. r.mu is held.
func (r *Registry) replacedLocked(ctx context.Context, prev, e *Entry) {
	if prev != nil && prev.VMPool != nil && e.VMPool == nil {
		r.removePoolLocked(ctx, e.Spec.ID)
	}
}

// unlinkLocked takes deployment id out of the registry and the route
// index, returning its entry (nil when there is none). The caller
// publishes the table, then calls retireLocked. r.mu is held.
func (r *Registry) unlinkLocked(id string) *Entry {
	e := r.deps[id]
	if e == nil {
		return nil
	}
	delete(r.deps, id)
	r.routes.Delete(id)
	return e
}

// retireLocked tears down what a removed deployment leaves once the data
// plane no longer routes to it: its replica pool, and (Options.Forget)
// its metrics. r.mu is held.
func (r *Registry) retireLocked(ctx context.Context, id string, e *Entry) {
	if e.Kind == apitype.KindVM {
		r.removePoolLocked(ctx, id)
	}
	if e.fwd != nil {
		e.fwd.moved() // its held requests find it gone
	}
	r.changed(id, nil)
	if r.o.Forget != nil {
		r.o.Forget(id)
	}
}

// applyDrainsLocked makes the drain state of the static upstreams of the
// deployments in only (every deployment when nil) what drains, the
// stored upstream drains, say: a stored drain drains its upstream (with
// its reason and start), and an upstream without one takes traffic.
// r.mu is held.
func (r *Registry) applyDrainsLocked(drains []store.UpstreamDrain, only map[string]bool) {
	type key struct{ deployment, upstream string }
	want := make(map[key]store.UpstreamDrain, len(drains))
	for _, d := range drains {
		want[key{d.Deployment, d.Upstream}] = d
	}
	for id, e := range r.deps {
		if only != nil && !only[id] || e.Kind != apitype.KindStatic || e.Pool == nil {
			continue
		}
		for _, b := range e.Pool.Backends() {
			d, stored := want[key{id, b.ID}]
			reason, since, draining := b.DrainInfo()
			switch {
			case stored && (!draining || reason != d.Reason || !since.Equal(d.StartedAt)):
				b.Drain(d.Reason, d.StartedAt)
			case !stored && draining:
				b.Undrain()
			}
		}
	}
}

// build makes an entry from a normalized, validated spec, reusing prev's pool
// when the backends did not change, so in-flight counts, health and drains
// carry over and no connection is disturbed.
func (r *Registry) build(s apitype.DeploymentSpec, prev *Entry, dry bool) (*Entry, error) {
	etag, err := spec.ETag(&s)
	if err != nil {
		return nil, err
	}
	e := &Entry{Spec: s, Kind: spec.Kind(&s), ETag: etag, rules: rules(s.Routes)}
	switch e.Kind {
	case apitype.KindStatic:
		e.Upstreams = slices.Clone(s.Upstreams)
		hopTLS := map[string]*tls.Config{}
		if s.Discovery != nil {
			// The service's current members, not the spec's.
			e.Upstreams = nil
			if r.o.Discovered != nil {
				for _, p := range r.o.Discovered(s.Namespace, s.Discovery.ServiceID) {
					if _, _, err := spec.Upstream(p.Addr); err != nil {
						continue // a peer no backend can be made of
					}
					if p.Hop {
						var c *tls.Config
						if r.o.HopTLS != nil {
							c = r.o.HopTLS(p.HostID)
						}
						if c == nil {
							continue // a hop peer, and this host has no hop
						}
						hopTLS[p.Addr] = c
					}
					e.Upstreams = append(e.Upstreams, p.Addr)
					e.peers = append(e.peers, p)
				}
			}
		}
		if prev != nil && prev.Pool != nil && slices.Equal(prev.Upstreams, e.Upstreams) && slices.Equal(prev.peers, e.peers) {
			e.Pool = prev.Pool
			break
		}
		var bs []*proxy.Backend
		for _, u := range e.Upstreams {
			addr, tls, err := spec.Upstream(u)
			if err != nil {
				return nil, err
			}
			b := proxy.NewBackend(u, addr, tls)
			if c := hopTLS[u]; c != nil {
				b.TLS, b.Scheme, b.TLSConfig = true, "https", c
			}
			if prev != nil && prev.Pool != nil {
				// Keep the drain state of upstreams that stay.
				if old := prev.Pool.Find(u); old != nil {
					if reason, since, ok := old.DrainInfo(); ok {
						b.Drain(reason, since)
					}
				}
			}
			bs = append(bs, b)
		}
		e.Pool = proxy.NewPool(bs...)
	case apitype.KindSite:
		cfg := siteConfig(s.Site)
		base, ok := spec.SiteBase(&s, r.o.Spec)
		if !ok {
			// Validate let it through, so only options without a sites
			// directory get here; serve nothing rather than an
			// unconfined root.
			return nil, fmt.Errorf("site root %q lies outside the sites directory", s.Site.Root)
		}
		cfg.Within = base
		e.Site = &cfg
		if s.Artifact != nil {
			root, ok := "", false
			if r.o.SiteRoot != nil {
				root, ok = r.o.SiteRoot(s.ID)
			}
			if ok {
				cfg.Root, cfg.Within = root, root
			} else {
				e.Site = nil
			}
		}
	}
	dp := &proxy.Deployment{ID: s.ID, Namespace: s.Namespace, Pool: e.Pool}
	if s.Auth != nil {
		if r.o.Gate == nil {
			return nil, &spec.FieldError{Field: "auth", Msg: "this server enforces no auth gates"}
		}
		g, err := r.o.Gate(&s)
		if err != nil {
			return nil, &spec.FieldError{Field: "auth", Msg: err.Error()}
		}
		dp.Gate = g
	}
	if s.Maintenance != nil {
		dp.Maintenance = *s.Maintenance
	}
	if f := s.Feed; f != nil && f.Expose != "" {
		if r.o.Feed == nil {
			return nil, &spec.FieldError{Field: "feed.expose", Msg: "this server serves no event feeds"}
		}
		dp.Feed, dp.FeedPath = r.o.Feed(spec.Namespace(&s)), f.Expose
	}
	dp.Limit = r.limit(s.ID)
	if e.Site != nil {
		dp.Site = site.New(*e.Site)
	} else if e.Kind == apitype.KindSite {
		dp.Unavailable = "this site's bundle is being pulled; it serves once it is (if this lasts, its last artifact-pull job failed)"
	}
	if r.o.Recorder != nil && !dry { // a dry run leaves no metrics behind
		dp.Metrics = r.o.Recorder(s.ID)
	}
	e.dp = dp
	return e, nil
}

// activateFrom connects a vm deployment to its replica pool (or, placed
// on another host, to that host; prev is the entry it replaces, nil for
// none). It runs after the
// spec was persisted, so a failed write never reconfigures a running pool.
func (r *Registry) activateFrom(e, prev *Entry) {
	if e.Kind != apitype.KindVM || r.o.Pools == nil {
		return
	}
	if r.o.Place != nil {
		e.placement, e.placed = r.o.Place(e.Spec.ID), true
		if !e.placement.Here {
			r.placedElsewhere(e, prev, e.placement)
			return
		}
	}
	if a := e.Spec.Artifact; a != nil && (e.Spec.VM.Image == "" || r.o.Spec.ImageExists != nil && !r.o.Spec.ImageExists(e.Spec.VM.Image)) {
		// The image is what the artifact pull imports.
		e.dp.Unavailable = "this deployment's image is being pulled; it has no replicas until it is (if this lasts, its last artifact-pull job failed)"
		return
	}
	if b := e.Spec.Build; b != nil && (e.Spec.VM.Image == "" || r.o.Spec.ImageExists != nil && !r.o.Spec.ImageExists(e.Spec.VM.Image)) {
		// The image is what the image-build job imports.
		e.dp.Unavailable = fmt.Sprintf("deployment %s has not been built yet: POST /deployments/%s/build (if one ran, its image-build job failed)", e.Spec.ID, e.Spec.ID)
		return
	}
	if i := Unpulled(e.Spec.VM); i >= 0 {
		// No replica may boot without its data: no pool until the mount
		// pull stamps every digest and puts the spec again.
		e.dp.Unavailable = "this deployment's mounts are being pulled; it has no replicas until they are (if this lasts, its last mount-pull job failed)"
		return
	}
	bs := r.replicas[e.Spec.ID]
	if bs == nil {
		bs = proxy.NewPool()
		if prev != nil && prev.fwd != nil {
			// The deployment moved here: requests held while it ran
			// elsewhere pick from the same pool, its replicas'.
			bs = prev.fwd.pool
			bs.Set(nil)
			prev.fwd.moved()
		}
		r.replicas[e.Spec.ID] = bs
	}
	cfg := r.poolConfig(&e.Spec)
	cfg.Revision = e.RolloutRevision()
	cfg.Backends = replicaSet{bs}
	p := r.o.Pools.Ensure(cfg)
	e.VMPool, e.Pool = p, bs
	if r.o.Images != nil && e.Spec.VM.Image != "" {
		r.o.Images.Prefetch(e.Spec.Namespace, e.Spec.VM.Image)
	}
	e.dp.Pool, e.dp.Hold = bs, p
}

// stampMounts sets each vm.mounts[i].digest of s from Options.MountDigest.
func (r *Registry) stampMounts(ctx context.Context, s *apitype.DeploymentSpec) {
	if s.VM == nil {
		return
	}
	for i := range s.VM.Mounts {
		m := &s.VM.Mounts[i]
		m.Digest = ""
		if r.o.MountDigest != nil {
			m.Digest = r.o.MountDigest(ctx, s.ID, *m)
		}
	}
}

// Unpulled returns the index of the first of v's mounts without a digest
// (not pulled on this host), or -1.
func Unpulled(v *apitype.VmSpec) int {
	if v == nil {
		return -1
	}
	for i, m := range v.Mounts {
		if m.Digest == "" {
			return i
		}
	}
	return -1
}

// MountResolver resolves the vm.mounts of deployment id (Options.Mounts).
type MountResolver func(ctx context.Context, id string, mounts []apitype.MountSpec) ([]vm.Mount, error)

// MountTargets maps each of mounts to its vm.Mount: Source from tree (the
// host directory the pull unpacked it into), Target its path, ReadOnly
// its read_only, true when unset. It is what a MountResolver returns once
// it knows the trees.
func MountTargets(mounts []apitype.MountSpec, tree func(apitype.MountSpec) (string, error)) ([]vm.Mount, error) {
	out := make([]vm.Mount, 0, len(mounts))
	for i, m := range mounts {
		src, err := tree(m)
		if err != nil {
			return nil, fmt.Errorf("vm.mounts[%d] (%s): %w", i, m.Path, err)
		}
		out = append(out, vm.Mount{Source: src, Target: m.Path, ReadOnly: m.ReadOnly == nil || *m.ReadOnly})
	}
	return out, nil
}

// poolConfig derives a pool's configuration from a vm spec.
func (r *Registry) poolConfig(s *apitype.DeploymentSpec) fleet.Config {
	v := s.VM
	key := TemplateKey(s)
	pol := spec.Scaling(s.Scaling)
	hc := spec.Health(s)
	cfg := fleet.Config{
		Deployment: s.ID,
		Driver:     string(v.Driver),
		Key:        key,
		Template: vm.Spec{
			Image: v.Image, Command: v.StartCommand, Port: v.Port, Env: maps.Clone(v.EnvVars),
			WorkDir: v.WorkingDirectory, SetupHooks: slices.Clone(v.SetupHooks),
			SizeClass: string(v.SizeClass), OpenPorts: slices.Clone(v.OpenPorts),
		},
		Policy: autoscale.Policy{
			Min: pol.MinReplicas, Max: pol.MaxReplicas, Warm: pol.WarmPool, Target: pol.TargetConcurrency,
			ScaleToZeroAfter: secs(pol.ScaleToZeroAfterSecs), DrainTimeout: secs(pol.DrainTimeoutSecs),
			BootTimeout: secs(pol.BootTimeoutSecs), ColdStartTimeout: secs(pol.ColdStartTimeoutSecs),
		},
		Retain:     pol.IdleAction == apitype.IdleAction("retain"),
		HealthPath: hc.Path,
		HealthTCP:  hc.Path == "",
		HealthPort: hc.Port,
		Timeout:    hc.Timeout,
	}
	if hc.Expect != nil && hc.Path != "" {
		cfg.ExpectHeader, cfg.ExpectValue = hc.Expect.Name, hc.Expect.Value
	}
	if v.DiskSizeGB != nil {
		cfg.Template.DiskSizeGB = *v.DiskSizeGB
	}
	if im, ns := r.o.Images, s.Namespace; im != nil && v.Image != "" {
		cfg.Prepare = func(ctx context.Context, sp *vm.Spec) error { return im.Prepare(ctx, ns, sp) }
	}
	cfg.Template.TTL = DefaultTTL
	if v.TTLSeconds != nil {
		// 0 turns the backstop off: such replicas outlive a berth that is
		// gone for good.
		cfg.Template.TTL = secs(*v.TTLSeconds)
	}
	if v.Driver == apitype.DriverProcess {
		// Process replicas share the host's loopback: each gets its own
		// port in $PORT, and is probed there.
		cfg.Template.Port = 0
		if s.Health == nil || s.Health.Port == nil {
			cfg.HealthPort = 0
		}
	} else if cfg.HealthPort == v.Port {
		cfg.HealthPort = 0
	}
	if refs := v.EnvFrom; len(refs) > 0 && r.o.ResolveEnv != nil {
		ns := spec.Namespace(s)
		refs = slices.Clone(refs)
		cfg.Env = func(ctx context.Context) (map[string]string, error) { return r.o.ResolveEnv(ctx, ns, refs) }
	} else if len(v.EnvFrom) > 0 {
		cfg.Env = func(context.Context) (map[string]string, error) {
			return nil, errors.New("this deployment names secrets in vm.env_from, but no secret store is configured")
		}
	}
	if ms := v.Mounts; len(ms) > 0 && r.o.Mounts != nil {
		id, ms := s.ID, slices.Clone(ms)
		cfg.Mounts = func(ctx context.Context) ([]vm.Mount, error) { return r.o.Mounts(ctx, id, ms) }
	} else if len(v.Mounts) > 0 {
		cfg.Mounts = func(context.Context) ([]vm.Mount, error) {
			return nil, errors.New("this deployment names vm.mounts, but nothing on this server pulls them")
		}
	}
	if r.o.Workspace != nil {
		cfg.Workspace = r.o.Workspace(s)
	}
	if cfg.Workspace == nil && (v.Workspace != nil || v.WorkspaceArchive != nil) {
		cfg.Workspace = noWorkspace{}
	}
	// A durable workspace has one owner at a time: the new template's
	// replica starts from what the old one leaves, so it cannot be a
	// candidate beside it.
	cfg.Recreate = v.Workspace != nil
	if w, ok := cfg.Workspace.(WorkspaceWaiter); ok {
		// The wait for the replica a new one replaces (a rollout's
		// drain) runs in Prepare, before the create takes a create slot.
		prep := cfg.Prepare
		cfg.Prepare = func(ctx context.Context, sp *vm.Spec) error {
			w.Wait(ctx)
			if prep != nil {
				return prep(ctx, sp)
			}
			return nil
		}
	}
	if fence, id := r.o.Fence, s.ID; fence != nil && r.o.Place != nil {
		// A host creates a placed deployment's replica only while it
		// holds the deployment, read right before the create.
		cfg.Fence = func(ctx context.Context) error { return fence(ctx, id) }
	}
	if r.o.Metrics != nil {
		cfg.Metrics = r.o.Metrics(s.ID)
	}
	if is, ns, id := r.o.Issues, spec.Namespace(s), s.ID; is != nil && wantsIssues(s) {
		cfg.Issues = func(i fleet.Issue) { is.Issue(ns, id, i.What, i.Detail) }
	}
	return cfg
}

// wantsIssues reports a spec that publishes its issues (feed.issues).
func wantsIssues(s *apitype.DeploymentSpec) bool {
	return s.Feed != nil && s.Feed.Issues != nil && *s.Feed.Issues
}

// WorkspaceWaiter is a workspace hook (Options.Workspace) whose creates
// first wait, outside the fleet's create slots, for the workspace to be
// free: fleet.Config.Prepare calls Wait before anything else.
type WorkspaceWaiter interface {
	Wait(ctx context.Context)
}

// noWorkspace fails every create: nothing on this server keeps workspaces.
type noWorkspace struct{}

func (noWorkspace) Seed(context.Context, *vm.Spec) error {
	return errors.New("this deployment names vm.workspace or vm.workspace_archive, but nothing on this server keeps workspaces")
}
func (noWorkspace) Stopped(context.Context, string)   {}
func (noWorkspace) Suspended(context.Context, string) {}

// DefaultTTL is a replica's lease when its spec sets no vm.ttl_seconds (the
// default app-lb's code uses): berth renews it while it runs, and replicas of
// a berth that is gone for good end within this long.
const DefaultTTL = 3600 * time.Second

func secs(n int) time.Duration { return time.Duration(n) * time.Second }

func siteConfig(s *apitype.SiteSpec) site.Config {
	c := site.Config{Root: s.Root, Index: s.Index, NotFound: s.NotFound, CacheControl: s.CacheControl}
	if s.SPA != nil {
		c.SPA = *s.SPA
	}
	return c
}

// publishLocked swaps in the routing table for the current set. With the
// ids of the deployments that changed (written or deleted) since the last
// publish, it derives the table from the last one (the cost of the change);
// with none, it builds it from scratch.
func (r *Registry) publishLocked(changed ...string) {
	if r.table == nil || len(changed) == 0 {
		var b route.Builder[*proxy.Deployment]
		for _, id := range slices.Sorted(mapsKeys(r.deps)) {
			e := r.deps[id]
			b.Add(id, e.dp, e.rules)
		}
		r.table = b.Build()
	} else {
		ed := r.table.Edit()
		for _, id := range changed {
			if e := r.deps[id]; e != nil {
				ed.Put(id, e.dp, e.rules)
			} else {
				ed.Remove(id)
			}
		}
		r.table = ed.Table()
	}
	if r.o.Publisher != nil {
		r.o.Publisher.Swap(r.table)
	}
}

func mapsKeys(m map[string]*Entry) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// rules converts wire routes (already normalized) to routing rules.
func rules(rs []apitype.RouteRule) []route.Rule {
	out := make([]route.Rule, 0, len(rs))
	for _, r := range rs {
		rr := route.Rule{Host: r.Host, HostSuffix: r.HostSuffix, PathPrefix: r.PathPrefix}
		if r.StripPrefix != nil {
			rr.StripPrefix = *r.StripPrefix
		}
		if rd := r.Redirect; rd != nil {
			x := &route.Redirect{To: rd.To, Status: 301, KeepPath: true}
			if rd.Status != nil {
				x.Status = *rd.Status
			}
			if rd.KeepPath != nil {
				x.KeepPath = *rd.KeepPath
			}
			rr.Redirect = x
		}
		out = append(out, rr)
	}
	return out
}

// PutOptions qualify a write.
type PutOptions struct {
	CreateOnly bool   // If-None-Match: * — fail with ErrExists when the id exists
	MustExist  bool   // PUT — fail with ErrNotFound when it does not
	IfMatch    string // the ETag the current spec must have, unquoted-hex form with quotes as sent
	// Admit, when set, judges the normalized, validated spec against the
	// deployment it replaces (prev, nil on create) and the others, under the registry's lock so
	// that two writes cannot both pass a check on their sum (a namespace's
	// replica quota). An error it returns is returned by Put as is.
	// others yields every other deployment; Admit ranges over it only
	// when it needs to (a write need not cost the size of the fleet).
	Admit func(s *apitype.DeploymentSpec, prev *Entry, others iter.Seq[*Entry]) error

	// Restricted marks a writer that does not cover the whole fleet (a
	// namespace token, or a token scoped to deployments): its site root
	// must lie in the namespace's subtree of the sites directory (the
	// operator's extra site roots are not for it), and its routes must
	// lie under the namespace's domains (ownership.go).
	Restricted bool
	// Visible reports whether the writer may see deployment id of
	// namespace ns; a conflict names only deployments it can see. Nil: all.
	Visible func(id, ns string) bool
	// DryRun runs every check a write runs (validation, preconditions,
	// route ownership, Admit) and returns the entry the write would
	// store, without storing it or touching the running deployment.
	DryRun bool
}

// Put registers or replaces a deployment. The spec is normalized and
// validated here; a validation failure is a *spec.FieldError. It reports
// whether the deployment was created (as opposed to replaced).
func (r *Registry) Put(ctx context.Context, s apitype.DeploymentSpec, o PutOptions) (*Entry, bool, error) {
	so := r.o.Spec
	if o.Restricted {
		so.SiteRootsAllow = nil
		so.StoreRootsAllow = nil   // absolute store roots read the host's disk
		so.BuildAllowLocal = false // so does a build from a local repository
	}
	spec.Normalize(&s, so)
	r.stampMounts(ctx, &s)
	if err := spec.Validate(&s, so); err != nil {
		return nil, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.deps[s.ID]
	switch {
	case o.CreateOnly && prev != nil:
		return nil, false, ErrExists
	case o.MustExist && prev == nil:
		return nil, false, ErrNotFound
	case o.IfMatch != "" && (prev == nil || prev.ETag != o.IfMatch):
		return nil, false, ErrPrecondition
	}
	if s.Build != nil && s.VM != nil && s.VM.Image == "" && prev != nil && prev.Spec.Build != nil && prev.Spec.VM != nil {
		// A built deployment's vm.image is the image-build job's: an edit
		// that leaves it out (its writer re-sent its own spec) keeps
		// serving the last build instead of dropping the pool.
		s.VM.Image = prev.Spec.VM.Image
	}
	if err := r.checkRoutes(ctx, &s, o); err != nil {
		return nil, false, err
	}
	if o.Admit != nil {
		others := func(yield func(*Entry) bool) {
			for id, e := range r.deps {
				if id != s.ID && !yield(e) {
					return
				}
			}
		}
		if err := o.Admit(&s, prev, others); err != nil {
			return nil, false, err
		}
	}
	e, err := r.build(s, prev, o.DryRun)
	if err != nil {
		return nil, false, err
	}
	if o.DryRun {
		return e, prev == nil, nil
	}
	raw, err := json.Marshal(&e.Spec)
	if err != nil {
		return nil, false, err
	}
	row, err := r.o.Store.PutDeployment(ctx, store.Deployment{ID: s.ID, Namespace: s.Namespace, Spec: raw}, o.CreateOnly, 0)
	if errors.Is(err, store.ErrConflict) {
		return nil, false, ErrExists
	}
	if err != nil {
		return nil, false, fmt.Errorf("the deployment was not saved: %w", err)
	}
	e.Revision, e.CreatedAt, e.UpdatedAt = row.Revision, row.CreatedAt, row.UpdatedAt
	// Upstreams that left the spec take their persisted drains with them.
	if prev != nil && prev.Pool != nil && e.Pool != prev.Pool {
		for _, u := range prev.Upstreams {
			if !slices.Contains(e.Upstreams, u) {
				if err := r.o.Store.DeleteUpstreamDrain(ctx, s.ID, u); err != nil {
					r.o.Log.Warn("could not forget a drain", "deployment", s.ID, "upstream", u, "err", err)
				}
			}
		}
	}
	r.installLocked(e)
	r.publishLocked(s.ID)
	r.replacedLocked(ctx, prev, e)
	return e, prev == nil, nil
}

// limit is deployment id's per-client limit (Options.Limit), or nil.
func (r *Registry) limit(id string) proxy.Limiter {
	if r.o.Limit == nil {
		return nil
	}
	return r.o.Limit(id)
}

// Refresh recompiles the data plane's view of deployment id from what is
// kept outside its spec (its per-client limit: Options.Limit; the tree a
// site with an artifact serves: Options.SiteRoot; a discovery-backed
// deployment's upstreams: Options.Discovered) and
// publishes the routing table; call it after such a thing changed. It
// reports whether the deployment exists. Requests in flight finish under
// the view they started with.
func (r *Registry) Refresh(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.deps[id]
	if e == nil {
		return false
	}
	if e.Kind == apitype.KindSite && e.Spec.Artifact != nil || e.Spec.Discovery != nil {
		// The tree it serves (Options.SiteRoot) may have changed: a new
		// entry, published whole, so requests in flight finish on the
		// tree they started with.
		ne, err := r.build(e.Spec, e, false)
		if err != nil {
			r.o.Log.Error("could not refresh a deployment", "id", id, "err", err)
			return true
		}
		ne.Revision, ne.CreatedAt, ne.UpdatedAt = e.Revision, e.CreatedAt, e.UpdatedAt
		r.deps[id] = ne
		r.publishLocked(id)
		return true
	}
	dp := *e.dp
	dp.Limit = r.limit(id)
	ne := *e // entries are immutable once published: a change replaces one
	ne.dp = &dp
	r.deps[id] = &ne
	r.publishLocked(id)
	return true
}

// removePoolLocked stops a vm deployment's replica pool and forgets its data
// plane pool. r.mu is held.
func (r *Registry) removePoolLocked(ctx context.Context, id string) {
	if r.o.Pools != nil {
		r.o.Pools.Remove(ctx, id)
		delete(r.replicas, id)
	}
}

// Delete removes a deployment. Requests already in flight finish.
func (r *Registry) Delete(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deps[id] == nil {
		return ErrNotFound
	}
	if err := r.o.Store.DeleteDeployment(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("the deployment was not deleted: %w", err)
	}
	e := r.unlinkLocked(id)
	r.publishLocked(id)
	r.retireLocked(ctx, id, e)
	return nil
}

// Forget removes deployment id as Delete does, but only if its ETag is
// ifMatch (ErrPrecondition otherwise) and check, called with the entry,
// returns nil; both are judged under the registry's lock, so no write
// comes between them and the removal. It is DELETE
// /deployments/{id}/record: check refuses a deployment with anything
// live, so nothing is torn down.
func (r *Registry) Forget(ctx context.Context, id, ifMatch string, check func(*Entry) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.deps[id]
	switch {
	case e == nil:
		return ErrNotFound
	case e.ETag != ifMatch:
		return ErrPrecondition
	}
	if err := check(e); err != nil {
		return err
	}
	if err := r.o.Store.DeleteDeployment(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("the deployment was not deleted: %w", err)
	}
	r.unlinkLocked(id)
	r.publishLocked(id)
	r.retireLocked(ctx, id, e)
	return nil
}

// Get returns the deployment with the given id.
func (r *Registry) Get(id string) (*Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.deps[id]
	return e, ok
}

// Hosts are the exact hosts (route rules' host, normalized) that some
// deployment routes, each once, in no particular order: what the HTTPS
// edge orders certificates for.
func (r *Registry) Hosts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[string]struct{}, len(r.deps))
	out := make([]string, 0, len(r.deps))
	for _, e := range r.deps {
		for _, rule := range e.rules {
			if _, dup := seen[rule.Host]; rule.Host != "" && !dup {
				seen[rule.Host] = struct{}{}
				out = append(out, rule.Host)
			}
		}
	}
	return out
}

// HasNamespace reports whether any deployment is in namespace ns ("" and
// "default" are the default namespace), without List's copy and sort: a
// write asks it each time.
func (r *Registry) HasNamespace(ns string) bool {
	if ns == "default" {
		ns = ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.deps {
		if n := e.Spec.Namespace; n == ns || n == "default" && ns == "" {
			return true
		}
	}
	return false
}

// List returns all deployments sorted by id.
func (r *Registry) List() []*Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Entry, 0, len(r.deps))
	for _, e := range r.deps {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *Entry) int {
		switch {
		case a.Spec.ID < b.Spec.ID:
			return -1
		case a.Spec.ID > b.Spec.ID:
			return 1
		}
		return 0
	})
	return out
}

// Len is the number of deployments.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.deps)
}
