// Package spec fills in the defaults of a deployment spec, validates it and
// computes its ETag, following app-lb's write semantics (app-lb.md §2.4).
//
// A write goes through [Normalize] and then [Validate]; the normalized spec
// is what gets stored, returned and hashed by [ETag]. Normalize runs first
// because several rules (a site needs a root, a static deployment needs a
// route) are satisfied by defaults the host supplies through [Options].
//
// Decisions where app-lb leaves room, recorded here so callers can rely on
// them:
//
//   - A route host is lowercased and loses trailing dots, but a port is not
//     stripped: Validate refuses it, because the data plane ignores the port
//     of a request and a rule naming one would silently match every port.
//   - apitype.SiteSpec.Index is a plain string, so an explicit "" cannot be
//     told from an absent index; both become "index.html".
//   - scaling on a static or site deployment, and health on a site, are
//     accepted and validated but have no effect.
//   - A namespace of "" stays absent (meaning "default"); an explicit
//     "default" is kept as sent.
//   - upstreams and discovery may be given together (discovery with
//     bootstrap upstreams); either one makes the deployment static.
//   - A path_prefix may not contain "?" or "#": request paths never do, so
//     such a rule could never match.
//   - vm.driver defaults to process. vm.port may be left out (0) for
//     process, which gives each replica its own port in $PORT; it is
//     returned as 0, meaning "the driver assigns it".
//   - A plain "http://" upstream is refused; plain upstreams are written
//     host:port, so every upstream has exactly one spelling.
package spec

import (
	"strings"

	"github.com/berth-dev/berth/apitype"
)

// Options carry the host facts that defaults and validation depend on.
type Options struct {
	// BaseDomain, when set, gives a spec with no host or host_suffix rule an
	// automatic route {host: "<id>.<BaseDomain>"}. A vm spec with no routes
	// at all is left route-less: it is a headless sandbox on purpose.
	BaseDomain string
	// Drivers lists the vm drivers this host can run, e.g. ["process"]. A
	// vm.driver outside it is refused with the list in the message; an empty
	// list refuses every vm spec.
	Drivers []string
	// SitesDir is where site roots live, one subtree per namespace: a site
	// with an empty root gets <SitesDir>/<namespace>/<id>, a relative root
	// is resolved in <SitesDir>/<namespace>, and an absolute one must lie
	// there (or in SiteRootsAllow). Empty (and no SiteRootsAllow) refuses
	// every site. See siteroot.go.
	SitesDir string
	// SiteRootsAllow lists more directories site roots may lie in, for
	// writers that cover the whole fleet (the registry clears it for
	// confined ones).
	SiteRootsAllow []string
	// StoreRootsAllow lists the directories an absolute store root (a
	// mount's, artifact's or build's store: /path) may lie in, for writers
	// that cover the whole fleet (the registry clears it for confined
	// ones, whose specs then name stores by URL or "local"). Empty refuses
	// absolute store roots: they read the host's disk.
	StoreRootsAllow []string
	// ImageExists, when set, reports whether the local image store holds
	// an image: a vm spec for an image-based driver (container,
	// firecracker, kvm, libvirt) must then name one it holds in vm.image,
	// so a missing image is a 400 at registration, not a boot loop.
	ImageExists func(name string) bool
	// MaxReplicasCeiling, when positive, is the most scaling.max_replicas
	// a vm spec may ask for (berth serve: DefaultMaxReplicasCeiling).
	MaxReplicasCeiling int
	// Mounter, when set, reports whether a vm driver attaches vm.mounts
	// at all (it declares vm.CanMount) and whether writable ones too
	// (vm.Mounter's WritableMounts): vm.mounts on a driver that attaches
	// none, or a read_only false on one that attaches only read-only
	// ones, is refused rather than ignored. Nil skips both checks.
	Mounter func(driver string) (attaches, writable bool)
	// Discovery says the server is in a fleet whose service membership
	// it follows: a static spec may then take its upstreams from a
	// service (discovery.service_id); false refuses discovery.
	Discovery bool
	// WorkspaceArchives says the server has a bucket to fetch
	// vm.workspace_archive.s3_key from; false refuses the section.
	WorkspaceArchives bool
	// BuildAllowLocal lets build.repo be a local path or file:// URL
	// (berth serve --allow-local-repos), for writers that cover the whole
	// fleet (the registry clears it for confined ones: a local path reads
	// the host's disk). BuildAllowHTTP lets it be a plain http:// remote.
	// Otherwise only https:// remotes are accepted.
	BuildAllowLocal, BuildAllowHTTP bool
}

// FieldError is one validation failure. Field is a JSON path into the spec,
// such as "routes[2].host_suffix" or "scaling.max_replicas", so the client
// can see which part of its document was refused.
type FieldError struct {
	Field string
	Msg   string
}

// Error returns "<field>: <msg>".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// DefaultNamespace is the namespace of a spec whose namespace is absent.
const DefaultNamespace = "default"

// Site defaults (app-lb.md §3.7).
const (
	DefaultSiteIndex        = "index.html"
	DefaultSiteCacheControl = "public, max-age=300"
)

// DefaultRedirectStatus is the status of a route redirect that names none.
const DefaultRedirectStatus = 301

// Kind reports how the deployment serves. Upstreams or discovery make it
// static even when other backends are (invalidly) present too, then a site
// makes it a site; everything else is a vm.
func Kind(s *apitype.DeploymentSpec) apitype.DeploymentKind {
	switch {
	case len(s.Upstreams) > 0 || s.Discovery != nil:
		return apitype.KindStatic
	case s.Site != nil:
		return apitype.KindSite
	}
	return apitype.KindVM
}

// Namespace returns the spec's namespace, "default" when absent.
func Namespace(s *apitype.DeploymentSpec) string {
	if s.Namespace == "" {
		return DefaultNamespace
	}
	return s.Namespace
}

// Normalize fills in defaults in place. It is idempotent, and it never fails:
// whatever it cannot make sense of is left for [Validate] to refuse.
func Normalize(s *apitype.DeploymentSpec, o Options) {
	if s == nil {
		return
	}
	// routes: null would reach clients that iterate it; the contract says
	// the field is an array.
	if s.Routes == nil {
		s.Routes = []apitype.RouteRule{}
	}
	for i := range s.Routes {
		r := &s.Routes[i]
		r.Host = normHost(r.Host)
		r.HostSuffix = normSuffix(r.HostSuffix)
		if rd := r.Redirect; rd != nil {
			if rd.Status == nil {
				rd.Status = ptr(DefaultRedirectStatus)
			}
			if rd.KeepPath == nil {
				rd.KeepPath = ptr(true)
			}
		}
	}
	kind := Kind(s)
	if o.BaseDomain != "" && validID(s.ID) && !hasHostRule(s.Routes) &&
		!(kind == apitype.KindVM && len(s.Routes) == 0) {
		if base := normHost(strings.TrimLeft(o.BaseDomain, ".")); base != "" {
			s.Routes = append(s.Routes, apitype.RouteRule{Host: strings.ToLower(s.ID) + "." + base})
		}
	}
	if st := s.Site; st != nil {
		normalizeSiteRoot(s, o)
		if st.Index == "" {
			st.Index = DefaultSiteIndex
		}
		if st.CacheControl == "" {
			st.CacheControl = DefaultSiteCacheControl
		}
	}
	if kind == apitype.KindVM && s.VM != nil {
		if s.VM.Driver == "" {
			// The documented default. A namespace-confined writer, which
			// may not use process unless the operator allows it, gets its
			// default from package admin before Normalize runs.
			s.VM.Driver = apitype.DriverProcess
		}
		s.Scaling = fillScaling(s.Scaling)
	}
	stampSecrets(s)
}

// stampSecrets binds every secret reference to the deployment's namespace.
// A client-sent namespace is overwritten, so a spec can only ever name
// secrets behind its own wall.
func stampSecrets(s *apitype.DeploymentSpec) {
	ns := Namespace(s)
	ref := func(r *apitype.SecretRef) {
		if r != nil {
			r.Namespace = ns
		}
	}
	env := func(es []apitype.SecretEnv) {
		for i := range es {
			es[i].Namespace = ns
		}
	}
	if vm := s.VM; vm != nil {
		env(vm.EnvFrom)
		for i := range vm.Mounts {
			ref(vm.Mounts[i].Auth)
		}
		if vm.Workspace != nil {
			ref(vm.Workspace.Auth)
		}
	}
	if a := s.Auth; a != nil {
		ref(a.ClientSecret)
		if a.JWT != nil {
			ref(a.JWT.Secret)
		}
	}
	if s.Build != nil {
		ref(s.Build.Auth)
	}
	if s.Artifact != nil {
		ref(s.Artifact.Auth)
	}
	if u := s.Update; u != nil {
		ref(u.Auth)
		env(u.EnvFrom)
	}
}

func hasHostRule(rs []apitype.RouteRule) bool {
	for _, r := range rs {
		if r.Host != "" || r.HostSuffix != "" {
			return true
		}
	}
	return false
}

// normHost lowercases a route host and drops trailing dots, as the data
// plane does to a request's Host. A host made only of dots is kept so that
// Validate refuses it instead of the rule silently losing its condition.
func normHost(h string) string {
	h = strings.ToLower(h)
	if t := strings.TrimRight(h, "."); t != "" {
		return t
	}
	return h
}

// normSuffix is the fixed point of route.NormalizeSuffix plus the trailing
// dot rule of normHost: every leading dot goes, not just one, so that a
// second Normalize changes nothing. All dots become "." which Validate
// refuses.
func normSuffix(s string) string {
	s = strings.ToLower(s)
	t := strings.Trim(s, ".")
	if t == "" && s != "" {
		return "."
	}
	return t
}

func ptr[T any](v T) *T { return &v }
