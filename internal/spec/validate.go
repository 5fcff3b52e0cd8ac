package spec

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/jwtverify"
	"github.com/berth-dev/berth/internal/route"
	"github.com/berth-dev/berth/internal/vm"
)

// Sanity caps: far above any real deployment, low enough that one spec
// cannot make the routing table or the health prober do unbounded work.
const (
	MaxRoutes    = 256
	MaxUpstreams = 256
	MaxMounts    = 8
	// MaxStripComponents bounds strip_components (a mount's, a site
	// bundle's): deeper than any real archive's wrapping directories.
	MaxStripComponents = 16
	MaxIDLen           = 128
	MaxNSLen           = 63
)

// ReservedIDPrefix starts the names of Computers' sandboxes
// (vm.ComputerPrefix), so no deployment may have an id that starts with it:
// its replicas would be named like a Computer's sandbox.
const ReservedIDPrefix = vm.ComputerPrefix

// Validate checks a spec, normally after [Normalize]. It returns nil or a
// *FieldError for the first problem, the checks running in a fixed order
// (identity, backend kind, routes, upstreams, vm, scaling, health, site,
// build/artifact, update, auth, feed, then the sections berth does not
// support yet) so a client always sees the same
// message for the same document.
func Validate(s *apitype.DeploymentSpec, o Options) error {
	return validate(s, o, false)
}

// ValidateGate is Validate for a probe spec that carries an auth gate to
// be checked (package namespaces checks auth providers this way): the
// checks that need the deployment's own routes (cookie_domain covering its
// hosts) are left to the gates that inherit the provider.
func ValidateGate(s *apitype.DeploymentSpec, o Options) error {
	return validate(s, o, true)
}

func validate(s *apitype.DeploymentSpec, o Options, gateProbe bool) error {
	if s == nil {
		return &FieldError{"spec", "required"}
	}
	v := validator{s: s, o: o, gateProbe: gateProbe}
	for _, check := range []func() *FieldError{
		v.identity, v.backends, v.routes, v.upstreams, v.vm, v.scaling,
		v.health, v.site, v.buildArtifact, v.update, v.auth, v.feed,
		v.unsupported,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

type validator struct {
	s         *apitype.DeploymentSpec
	o         Options
	gateProbe bool // ValidateGate: a provider's identity half, with no routes of its own
}

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

func (v validator) identity() *FieldError {
	if msg := idProblem(v.s.ID); msg != "" {
		return fieldErr("id", "%s", msg)
	}
	if v.s.Namespace != "" {
		if msg := namespaceProblem(v.s.Namespace); msg != "" {
			return fieldErr("namespace", "%s", msg)
		}
	}
	return nil
}

// idProblem: ids end up in file names, host names and URLs, hence the
// restricted alphabet and no leading dot or dash.
func idProblem(id string) string {
	switch {
	case id == "":
		return "required"
	case len(id) > MaxIDLen:
		return fmt.Sprintf("longer than %d characters", MaxIDLen)
	case id[0] == '.' || id[0] == '-':
		return fmt.Sprintf("%q must not start with '.' or '-'", id)
	case strings.HasPrefix(id, ReservedIDPrefix):
		// Replica names carry the deployment's id (vm.Name); Computers'
		// sandboxes run on the same drivers, named vm.ComputerPrefix+<id>.
		return fmt.Sprintf("%q: the prefix %q is reserved for Computers", id, ReservedIDPrefix)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("%q has invalid character %q (allowed: A-Z a-z 0-9 . _ -)", id, c)
		}
	}
	return ""
}

func validID(id string) bool { return idProblem(id) == "" }

func namespaceProblem(ns string) string {
	if len(ns) > MaxNSLen {
		return fmt.Sprintf("longer than %d characters", MaxNSLen)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Sprintf("%q has invalid character %q (allowed: a-z 0-9 -)", ns, c)
		}
	}
	return ""
}

// backends checks that exactly one of vm, static (upstreams and/or
// discovery) and site is given.
func (v validator) backends() *FieldError {
	s := v.s
	var given []string
	groups := 0
	if s.VM != nil {
		given = append(given, "vm")
		groups++
	}
	if len(s.Upstreams) > 0 || s.Discovery != nil {
		groups++
		if len(s.Upstreams) > 0 {
			given = append(given, "upstreams")
		}
		if s.Discovery != nil {
			given = append(given, "discovery")
		}
	}
	if s.Site != nil {
		given = append(given, "site")
		groups++
	}
	switch {
	case groups == 0 && s.Upstreams != nil:
		return fieldErr("upstreams", "must not be empty")
	case groups == 0:
		return fieldErr("spec", "one of vm, upstreams (or discovery) or site is required")
	case groups > 1:
		return fieldErr("spec", "exactly one of vm, upstreams (or discovery) or site is allowed, got %s", strings.Join(given, ", "))
	}
	return nil
}

func (v validator) routes() *FieldError {
	s := v.s
	if len(s.Routes) > MaxRoutes {
		return fieldErr("routes", "%d rules exceed the limit of %d", len(s.Routes), MaxRoutes)
	}
	for i, r := range s.Routes {
		f := fmt.Sprintf("routes[%d]", i)
		if r.Host == "" && r.HostSuffix == "" && r.PathPrefix == "" {
			return fieldErr(f, "an empty rule matches nothing: set host, host_suffix or path_prefix")
		}
		if r.Host != "" {
			if msg := hostProblem(r.Host, false); msg != "" {
				return fieldErr(f+".host", "%s", msg)
			}
		}
		if r.HostSuffix != "" {
			if msg := hostProblem(r.HostSuffix, true); msg != "" {
				return fieldErr(f+".host_suffix", "%s", msg)
			}
		}
		if r.PathPrefix != "" {
			if msg := pathProblem(r.PathPrefix); msg != "" {
				return fieldErr(f+".path_prefix", "%s", msg)
			}
		}
		if r.StripPrefix != nil && *r.StripPrefix && r.PathPrefix == "" {
			return fieldErr(f+".strip_prefix", "needs a path_prefix to strip")
		}
		if rd := r.Redirect; rd != nil {
			if msg := redirectURLProblem(rd.To); msg != "" {
				return fieldErr(f+".redirect.to", "%s", msg)
			}
			if rd.Status != nil {
				switch *rd.Status {
				case 301, 302, 303, 307, 308:
				default:
					return fieldErr(f+".redirect.status", "%d is not one of 301, 302, 303, 307, 308", *rd.Status)
				}
			}
		}
	}
	if len(s.Routes) == 0 {
		switch k := Kind(s); k {
		case apitype.KindStatic, apitype.KindSite:
			return fieldErr("routes", "a %s deployment needs at least one route", k)
		}
		if s.Auth != nil {
			return fieldErr("auth", "an auth gate needs routes to sit in front of")
		}
	}
	return nil
}

// hostProblem checks a route host or host_suffix. Case and one trailing
// dot are accepted since Normalize removes them (and a suffix's one leading
// dot); a port is refused rather than stripped, because the data plane
// ignores request ports and a rule naming one would match every port.
func hostProblem(h string, suffix bool) string {
	switch {
	case len(h) > route.MaxFieldLen:
		return fmt.Sprintf("longer than %d bytes", route.MaxFieldLen)
	case strings.Contains(h, "://"):
		return fmt.Sprintf("%q must be a bare host name, without a scheme", h)
	case strings.ContainsAny(h, "/?#"):
		return fmt.Sprintf("%q must be a bare host name, without a path", h)
	case strings.Contains(h, "@"):
		return fmt.Sprintf("%q must be a bare host name, without userinfo", h)
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; c <= ' ' || c == 0x7f {
			return fmt.Sprintf("%q must not contain spaces or control characters", h)
		}
	}
	if !suffix && strings.HasPrefix(h, "[") {
		if strings.HasSuffix(h, "]") {
			if ip := net.ParseIP(h[1 : len(h)-1]); ip != nil && strings.Contains(h, ":") {
				return ""
			}
			return fmt.Sprintf("%q is not a valid bracketed IPv6 address", h)
		}
		return fmt.Sprintf("%q must not include a port (request ports are ignored when matching)", h)
	}
	if strings.Contains(h, ":") {
		return fmt.Sprintf("%q must not include a port (request ports are ignored when matching)", h)
	}
	if !utf8.ValidString(h) || strings.IndexFunc(h, func(r rune) bool { return r >= utf8.RuneSelf }) >= 0 {
		return fmt.Sprintf("%q must be ASCII (write an internationalized name in its xn-- form)", h)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c == '*' {
			return fmt.Sprintf("%q: wildcards are not supported; use host_suffix to match subdomains", h)
		}
		if !hostByte(c) {
			return fmt.Sprintf("%q has invalid character %q", h, c)
		}
	}
	name := h
	if suffix {
		if strings.Trim(name, ".") == "" {
			return fmt.Sprintf("%q matches nothing", h)
		}
		name = strings.TrimPrefix(name, ".")
	} else if strings.HasPrefix(name, ".") {
		return fmt.Sprintf("%q must not start with '.' (use host_suffix to match subdomains)", h)
	}
	name = strings.TrimSuffix(name, ".")
	if name == "" || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return fmt.Sprintf("%q has an empty label", h)
	}
	return ""
}

// pathProblem checks a path_prefix (or any URL path a spec names): it is
// compared with the raw request path, which always starts with "/" and
// never holds a query, a fragment, spaces or control bytes.
func pathProblem(p string) string {
	switch {
	case len(p) > route.MaxFieldLen:
		return fmt.Sprintf("longer than %d bytes", route.MaxFieldLen)
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q must start with /", p)
	case strings.ContainsAny(p, "?#"):
		return fmt.Sprintf("%q must not contain ? or # (the query is not part of the path)", p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f {
			return fmt.Sprintf("%q must not contain spaces or control characters", p)
		}
	}
	return ""
}

func redirectURLProblem(to string) string {
	if to == "" {
		return "required: an absolute http(s) URL"
	}
	if len(to) > route.MaxFieldLen {
		return fmt.Sprintf("longer than %d bytes", route.MaxFieldLen)
	}
	for i := 0; i < len(to); i++ {
		if c := to[i]; c <= ' ' || c == 0x7f {
			return fmt.Sprintf("%q must not contain spaces or control characters", to)
		}
	}
	u, err := url.Parse(to)
	if err != nil {
		return fmt.Sprintf("%q is not a URL: %v", to, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("%q must be an absolute http:// or https:// URL", to)
	case u.Hostname() == "":
		return fmt.Sprintf("%q has no host", to)
	case u.User != nil:
		return fmt.Sprintf("%q must not contain userinfo", to)
	}
	return ""
}

func (v validator) upstreams() *FieldError {
	s := v.s
	if len(s.Upstreams) > MaxUpstreams {
		return fieldErr("upstreams", "%d upstreams exceed the limit of %d", len(s.Upstreams), MaxUpstreams)
	}
	seen := make(map[string]int, len(s.Upstreams))
	for i, u := range s.Upstreams {
		f := fmt.Sprintf("upstreams[%d]", i)
		addr, tls, err := Upstream(u)
		if err != nil {
			return fieldErr(f, "%v", err)
		}
		key := addr
		if tls {
			key = "https://" + addr
		}
		if j, dup := seen[key]; dup {
			return fieldErr(f, "%q duplicates upstreams[%d]", u, j)
		}
		seen[key] = i
	}
	if d := s.Discovery; d != nil && strings.TrimSpace(d.ServiceID) == "" {
		return fieldErr("discovery.service_id", "required")
	} else if d != nil && (len(d.ServiceID) > 253 || strings.ContainsFunc(d.ServiceID, func(r rune) bool { return r == '/' || r < 0x20 || r == 0x7f })) {
		return fieldErr("discovery.service_id", "%q: want at most 253 characters, no '/' or control characters", d.ServiceID)
	}
	return nil
}

var sizeClasses = []apitype.SizeClass{
	apitype.SizeMicro, apitype.SizeMini, apitype.SizeSmall,
	apitype.SizeMedium, apitype.SizeLarge, apitype.SizeXLarge,
}

// reservedMounts are guest paths a mount may not cover: the root, the
// kernel's pseudo file systems and the workspace, which berth owns.
var reservedMounts = []string{"/proc", "/sys", "/dev", "/boot", "/run", "/workspace"}

func (v validator) vm() *FieldError {
	vm := v.s.VM
	if vm == nil {
		return nil
	}
	avail := "none"
	if len(v.o.Drivers) > 0 {
		avail = strings.Join(v.o.Drivers, ", ")
	}
	switch {
	case vm.Driver == "":
		return fieldErr("vm.driver", "required (available on this host: %s)", avail)
	case !slices.Contains(v.o.Drivers, string(vm.Driver)):
		return fieldErr("vm.driver", "%q is not available on this host (available: %s)", vm.Driver, avail)
	}
	process := vm.Driver == apitype.DriverProcess
	switch {
	case process && vm.Port == 0:
		// Left out: each replica gets its own port in $PORT.
	case vm.Port < 1 || vm.Port > 65535:
		return fieldErr("vm.port", "%d is not a port in 1..65535", vm.Port)
	}
	if process && vm.Image != "" {
		return fieldErr("vm.image", "the process driver runs start_command on this host and has no images; remove vm.image, or name an image driver in vm.driver")
	}
	// An artifact deployment's image is what its pull imports, a built
	// one's what its last build produced (each job stamps it into
	// vm.image): absent or not there yet is fine.
	if v.o.ImageExists != nil && vm.Driver != apitype.DriverProcess && v.s.Artifact == nil && v.s.Build == nil {
		switch {
		case vm.Image == "":
			return fieldErr("vm.image", "required for the %s driver: name an image imported with `berth image import`", vm.Driver)
		case !v.o.ImageExists(vm.Image):
			return fieldErr("vm.image", "no image %q on this host; import it first (`berth image import %s DIR|TARBALL`)", vm.Image, vm.Image)
		}
	}
	if vm.SizeClass != "" && !slices.Contains(sizeClasses, vm.SizeClass) {
		return fieldErr("vm.size_class", "%q is not one of micro, mini, small, medium, large, xlarge", vm.SizeClass)
	}
	if vm.DiskSizeGB != nil && *vm.DiskSizeGB <= 0 {
		return fieldErr("vm.disk_size_gb", "must be greater than 0")
	}
	if vm.TTLSeconds != nil && *vm.TTLSeconds < 0 {
		return fieldErr("vm.ttl_seconds", "must not be negative")
	}
	seen := map[int]int{}
	for i, p := range vm.OpenPorts {
		f := fmt.Sprintf("vm.open_ports[%d]", i)
		if p < 1 || p > 65535 {
			return fieldErr(f, "%d is not a port in 1..65535", p)
		}
		if j, dup := seen[p]; dup {
			return fieldErr(f, "%d duplicates vm.open_ports[%d]", p, j)
		}
		seen[p] = i
	}
	for k, val := range sortedMap(vm.EnvVars) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fieldErr("vm.env_vars", "%q is not a valid variable name", k)
		}
		if strings.Contains(val, "\x00") {
			return fieldErr("vm.env_vars."+k, "must not contain NUL")
		}
	}
	if err := secretEnvs("vm.env_from", vm.EnvFrom); err != nil {
		return err
	}
	if err := v.mounts(vm); err != nil {
		return err
	}
	if err := v.workspace(vm); err != nil {
		return err
	}
	return nil
}

func (v validator) mounts(vm *apitype.VmSpec) *FieldError {
	if len(vm.Mounts) > MaxMounts {
		return fieldErr("vm.mounts", "%d mounts exceed the limit of %d", len(vm.Mounts), MaxMounts)
	}
	for i, m := range vm.Mounts {
		f := fmt.Sprintf("vm.mounts[%d]", i)
		p := m.Path
		switch {
		case !path.IsAbs(p):
			return fieldErr(f+".path", "%q must be an absolute path", p)
		case strings.IndexFunc(p, func(r rune) bool {
			return !(r < utf8.RuneSelf && (hostByte(byte(r)) || r == '/'))
		}) >= 0:
			return fieldErr(f+".path", "%q may only contain A-Z a-z 0-9 / . _ -", p)
		case slices.Contains(strings.Split(p, "/"), ".."):
			return fieldErr(f+".path", "%q must not contain ..", p)
		case path.Clean(p) != p:
			return fieldErr(f+".path", "%q must be a clean path (no trailing /, // or /./)", p)
		case p == "/":
			return fieldErr(f+".path", "cannot mount over /")
		}
		for _, r := range reservedMounts {
			if p == r || strings.HasPrefix(p, r+"/") {
				return fieldErr(f+".path", "%q is reserved (%s)", p, r)
			}
		}
		for j := range i {
			q := vm.Mounts[j].Path
			if p == q {
				return fieldErr(f+".path", "%q duplicates vm.mounts[%d]", p, j)
			}
			if strings.HasPrefix(p, q+"/") || strings.HasPrefix(q, p+"/") {
				return fieldErr(f+".path", "%q nests with vm.mounts[%d] (%q)", p, j, q)
			}
		}
		if m.Store == "" {
			return fieldErr(f+".store", "required")
		}
		if err := v.store(f+".store", m.Store); err != nil {
			return err
		}
		if m.Ref == "" {
			return fieldErr(f+".ref", "required")
		}
		if m.StripComponents != nil && (*m.StripComponents < 0 || *m.StripComponents > MaxStripComponents) {
			return fieldErr(f+".strip_components", "%d is out of range: 0 to %d", *m.StripComponents, MaxStripComponents)
		}
		if m.ReadOnly != nil && !*m.ReadOnly && vm.Driver == apitype.DriverKVM {
			return fieldErr(f+".read_only", "false is refused on the kvm driver, which would sync the mount back into the shared host tree")
		}
		if err := secretRef(f+".auth", m.Auth); err != nil {
			return err
		}
	}
	return v.mountDriver(vm)
}

// mountDriver refuses vm.mounts on a driver that cannot attach them
// (Options.Mounter), naming the drivers of this host that can, and a
// writable mount on a driver that attaches read-only ones only.
func (v validator) mountDriver(vm *apitype.VmSpec) *FieldError {
	if len(vm.Mounts) == 0 || v.o.Mounter == nil {
		return nil
	}
	attaches, writable := v.o.Mounter(string(vm.Driver))
	if !attaches {
		var can []string
		for _, d := range v.o.Drivers {
			if ok, _ := v.o.Mounter(d); ok {
				can = append(can, d)
			}
		}
		avail := "none"
		if len(can) > 0 {
			avail = strings.Join(can, ", ")
		}
		return fieldErr("vm.mounts", "the %s driver cannot attach mounts (drivers on this host that can: %s)", vm.Driver, avail)
	}
	for i, m := range vm.Mounts {
		if m.ReadOnly != nil && !*m.ReadOnly && !writable {
			return fieldErr(fmt.Sprintf("vm.mounts[%d].read_only", i), "false is refused on the %s driver, which attaches mounts read-only only", vm.Driver)
		}
	}
	return nil
}

func secretRef(field string, r *apitype.SecretRef) *FieldError {
	if r != nil && r.Secret == "" {
		return fieldErr(field+".secret", "required")
	}
	return nil
}

func secretEnvs(field string, es []apitype.SecretEnv) *FieldError {
	for i, e := range es {
		f := fmt.Sprintf("%s[%d]", field, i)
		if e.Secret == "" {
			return fieldErr(f+".secret", "required")
		}
		if e.As != "" && !envName(e.As) {
			return fieldErr(f+".as", "%q is not a valid environment variable name", e.As)
		}
	}
	return nil
}

func envName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

func (v validator) scaling() *FieldError {
	if err := validateScaling(v.s.Scaling); err != nil {
		return err
	}
	return v.replicaCeiling()
}

func (v validator) health() *FieldError {
	h := v.s.Health
	if h == nil {
		return nil
	}
	if p, ok := h.Path.Get(); ok {
		// The path goes verbatim into the probe's request line, so a
		// query is fine but a space or CR/LF would forge the request.
		switch {
		case len(p) > route.MaxFieldLen:
			return fieldErr("health.path", "longer than %d bytes", route.MaxFieldLen)
		case !strings.HasPrefix(p, "/"):
			return fieldErr("health.path", "%q must start with / (use null for a TCP check)", p)
		case strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			return fieldErr("health.path", "%q must not contain spaces or control characters", p)
		}
	}
	if h.Port != nil && (*h.Port < 1 || *h.Port > 65535) {
		return fieldErr("health.port", "%d is not a port in 1..65535", *h.Port)
	}
	if h.TimeoutSecs != nil && *h.TimeoutSecs < 0 {
		return fieldErr("health.timeout_secs", "must not be negative")
	}
	if eh := h.ExpectedHeader; eh != nil {
		if eh.Name == "" || strings.ContainsFunc(eh.Name, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == ':' }) {
			return fieldErr("health.expected_header.name", "%q is not a header name", eh.Name)
		}
		if strings.ContainsAny(eh.Value, "\r\n\x00") {
			return fieldErr("health.expected_header.value", "must not contain CR, LF or NUL")
		}
	}
	return nil
}

func (v validator) site() *FieldError {
	st := v.s.Site
	if st == nil {
		return nil
	}
	if st.Root == "" {
		return fieldErr("site.root", "required (an absolute directory on this host)")
	}
	if !isAbsPath(st.Root) {
		return fieldErr("site.root", "%q must be an absolute path", st.Root)
	}
	if strings.Contains(st.Root, "\x00") {
		return fieldErr("site.root", "must not contain NUL")
	}
	if err := siteRootProblem(v.s, v.o); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"site.index", st.Index}, {"site.not_found", st.NotFound}} {
		if f.v == "" {
			continue
		}
		if strings.HasPrefix(f.v, "/") || strings.Contains(f.v, "\\") {
			return fieldErr(f.name, "%q must be relative to site.root", f.v)
		}
		if slices.Contains(strings.Split(f.v, "/"), "..") {
			return fieldErr(f.name, "%q must not contain ..", f.v)
		}
		if strings.ContainsFunc(f.v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return fieldErr(f.name, "must not contain control characters")
		}
	}
	if strings.ContainsFunc(st.CacheControl, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
		return fieldErr("site.cache_control", "must not contain control characters")
	}
	return nil
}

// isAbsPath reports a slash-rooted path; berth's hosts are Unix.
func isAbsPath(p string) bool { return strings.HasPrefix(p, "/") }

func (v validator) buildArtifact() *FieldError {
	s := v.s
	kind := Kind(s)
	if b := s.Build; b != nil {
		if s.Artifact != nil {
			return fieldErr("build", "build and artifact are mutually exclusive")
		}
		if kind != apitype.KindVM {
			return fieldErr("build", "only a vm deployment can be built (this one is %s)", kind)
		}
		switch {
		case b.Repo == "" && b.Store == "":
			return fieldErr("build", "one of repo or store is required")
		case b.Repo != "" && b.Store != "":
			return fieldErr("build", "repo and store are mutually exclusive")
		case b.Store != "" && b.Ref == "":
			return fieldErr("build.ref", "required with store (a tag or digest of a Dockerfile manifest)")
		case b.Store != "" && b.Dockerfile != "":
			return fieldErr("build.dockerfile", "git source only: a Dockerfile manifest names its own recipe")
		case b.Store != "" && b.Context != "":
			return fieldErr("build.context", "git source only")
		case b.Store != "" && CheckStore(b.Store) != "":
			return fieldErr("build.store", "%s", CheckStore(b.Store))
		case b.ImageSizeMB != nil && *b.ImageSizeMB <= 0:
			return fieldErr("build.image_size_mb", "must be greater than 0")
		case b.ImageSizeMB != nil:
			// A built image is a tree, sized by what the Dockerfile put in
			// it; berth has no image size to set.
			return notSupported("build.image_size_mb", "berth does not size built images (a replica's disk is vm.disk_size_gb)")
		case b.ImageName != "" && !builtImageName(b.ImageName):
			return fieldErr("build.image_name", "%q is not a local image name: 1-128 letters, digits and . _ - : /, starting with a letter or digit, without \"..\", and no registry host (a built image is not pulled)", b.ImageName)
		case s.VM != nil && s.VM.Driver == apitype.DriverProcess:
			return fieldErr("build", "the process driver runs no images; name an image driver in vm.driver")
		}
		for _, f := range []struct{ field, val string }{{"build.dockerfile", b.Dockerfile}, {"build.context", b.Context}} {
			switch {
			case f.val == "":
			case b.Store != "":
				return fieldErr(f.field, "git source only")
			case isAbsPath(f.val) || path.Clean(f.val) != f.val || f.val == ".." || strings.HasPrefix(f.val, "../"):
				return fieldErr(f.field, "%q must be a clean path relative to the repository's root", f.val)
			}
		}
		if b.Repo != "" {
			if why := v.buildRepo(b.Repo); why != "" {
				return fieldErr("build.repo", "%s", why)
			}
		}
		if b.Store != "" {
			if err := v.store("build.store", b.Store); err != nil {
				return err
			}
		}
		if err := secretRef("build.auth", b.Auth); err != nil {
			return err
		}
	}
	if a := s.Artifact; a != nil {
		switch {
		case kind == apitype.KindStatic:
			return fieldErr("artifact", "only vm and site deployments take an artifact")
		case a.Store == "":
			return fieldErr("artifact.store", "required")
		case a.Ref == "":
			return fieldErr("artifact.ref", "required")
		case kind == apitype.KindSite && a.GrowGB != nil:
			return fieldErr("artifact.grow_gb", "not used by a site bundle")
		case kind == apitype.KindSite && a.ImageName != "":
			return fieldErr("artifact.image_name", "not used by a site bundle")
		case kind != apitype.KindSite && a.StripComponents != nil:
			return fieldErr("artifact.strip_components", "site bundles only")
		case a.GrowGB != nil && *a.GrowGB < 0:
			return fieldErr("artifact.grow_gb", "must not be negative")
		case a.StripComponents != nil && (*a.StripComponents < 0 || *a.StripComponents > MaxStripComponents):
			return fieldErr("artifact.strip_components", "%d is out of range: 0 to %d", *a.StripComponents, MaxStripComponents)
		case a.GrowGB != nil:
			// Refused rather than ignored: a rootfs imported from an
			// artifact is a directory tree, with no disk of its own to grow.
			return fieldErr("artifact.grow_gb", "berth cannot grow an image's disk: an imported rootfs is a directory tree (size the replicas' disks with vm.size_class); remove artifact.grow_gb")
		}
		if err := v.store("artifact.store", a.Store); err != nil {
			return err
		}
		if err := secretRef("artifact.auth", a.Auth); err != nil {
			return err
		}
		if kind == apitype.KindVM && s.VM.Driver == apitype.DriverProcess {
			return fieldErr("artifact", "the process driver has no images to import a rootfs into; name an image driver in vm.driver")
		}
	}
	return nil
}

// The bounds of an update job's timeouts: a whole run of commands, and
// the health re-probe after it.
const (
	MaxUpdateTimeoutSecs = 86400
	MaxVerifyTimeoutSecs = 3600
)

func (v validator) update() *FieldError {
	u := v.s.Update
	if u == nil {
		return nil
	}
	kind := Kind(v.s)
	switch {
	case kind == apitype.KindVM:
		return fieldErr("update", "only static and site deployments take an update job")
	case kind == apitype.KindSite && v.s.Artifact != nil:
		return fieldErr("update", "update and artifact are mutually exclusive on a site")
	case u.WorkingDir == "":
		return fieldErr("update.working_dir", "required")
	case !isAbsPath(u.WorkingDir):
		return fieldErr("update.working_dir", "%q must be an absolute path", u.WorkingDir)
	case len(u.Commands) == 0:
		return fieldErr("update.commands", "at least one command is required")
	case u.TimeoutSecs != nil && (*u.TimeoutSecs < 1 || *u.TimeoutSecs > MaxUpdateTimeoutSecs):
		return fieldErr("update.timeout_secs", "%d is out of range: 1 to %d seconds (default 600)", *u.TimeoutSecs, MaxUpdateTimeoutSecs)
	case u.VerifyTimeoutSecs != nil && (*u.VerifyTimeoutSecs < 0 || *u.VerifyTimeoutSecs > MaxVerifyTimeoutSecs):
		return fieldErr("update.verify_timeout_secs", "%d is out of range: 0 to %d seconds (default 60)", *u.VerifyTimeoutSecs, MaxVerifyTimeoutSecs)
	}
	for i, c := range u.Commands {
		if strings.TrimSpace(c) == "" {
			return fieldErr(fmt.Sprintf("update.commands[%d]", i), "must not be empty")
		}
	}
	for k, val := range sortedMap(u.Env) {
		if !envName(k) {
			return fieldErr("update.env", "%q is not a valid environment variable name", k)
		}
		if strings.ContainsRune(val, 0) {
			return fieldErr("update.env."+k, "must not contain a NUL byte")
		}
	}
	if err := secretEnvs("update.env_from", u.EnvFrom); err != nil {
		return err
	}
	return secretRef("update.auth", u.Auth)
}

var providers = []apitype.AuthProvider{apitype.ProviderGoogle, apitype.ProviderAppToken, apitype.ProviderJWT}

var pathScopes = []apitype.PathScope{apitype.PathPublic, apitype.PathNone, apitype.PathView, apitype.PathAdmin}

func (v validator) auth() *FieldError {
	a := v.s.Auth
	if a == nil {
		return nil
	}
	if a.ProviderRef != "" {
		var set []string
		if len(a.Provider.Providers) > 0 {
			set = append(set, "provider")
		}
		if a.ClientID != "" {
			set = append(set, "client_id")
		}
		if a.ClientSecret != nil {
			set = append(set, "client_secret")
		}
		if len(a.AllowedDomains) > 0 {
			set = append(set, "allowed_domains")
		}
		if len(a.AllowedEmails) > 0 {
			set = append(set, "allowed_emails")
		}
		if a.JWT != nil {
			set = append(set, "jwt")
		}
		if a.CookieDomain != "" {
			set = append(set, "cookie_domain")
		}
		if len(set) > 0 {
			return fieldErr("auth.provider_ref", "inherits the identity fields; remove %s", strings.Join(set, ", "))
		}
	} else {
		for i, p := range a.Provider.Providers {
			if !slices.Contains(providers, p) {
				return fieldErr(fmt.Sprintf("auth.provider[%d]", i), "%q is not one of google, app-token, jwt", p)
			}
		}
		// A gate written before app-tokens existed omits provider and
		// means google.
		google := len(a.Provider.Providers) == 0 || a.Provider.Has(apitype.ProviderGoogle)
		if a.ClientID != "" && !google {
			return fieldErr("auth.client_id", "only meaningful with the google provider")
		}
		jwtOnly := len(a.Provider.Providers) > 0 && !slices.ContainsFunc(a.Provider.Providers, func(p apitype.AuthProvider) bool { return p != apitype.ProviderJWT })
		if jwtOnly && (len(a.AllowedDomains) > 0 || len(a.AllowedEmails) > 0) {
			return fieldErr("auth.allowed_domains", "allow-lists do not apply to a jwt-only gate; use jwt.require")
		}
		if a.Provider.Has(apitype.ProviderJWT) && a.JWT == nil {
			return fieldErr("auth.jwt", "required with the jwt provider")
		}
		if a.JWT != nil && !a.Provider.Has(apitype.ProviderJWT) {
			return fieldErr("auth.jwt", "only meaningful with the jwt provider")
		}
		if google {
			if err := v.signIn(a); err != nil {
				return err
			}
		}
	}
	if err := secretRef("auth.client_secret", a.ClientSecret); err != nil {
		return err
	}
	for i, pp := range a.PublicPaths {
		f := fmt.Sprintf("auth.public_paths[%d]", i)
		if msg := pathProblem(pp.Path); msg != "" {
			return fieldErr(f+".path", "%s", msg)
		}
		if !slices.Contains(pathScopes, pp.Scope) {
			return fieldErr(f+".scope", "%q is not one of public, none, view, admin", pp.Scope)
		}
	}
	if a.BasePath != "" {
		if msg := pathProblem(a.BasePath); msg != "" {
			return fieldErr("auth.base_path", "%s", msg)
		}
	}
	if a.SessionTTLSecs != nil && (*a.SessionTTLSecs < 0 || *a.SessionTTLSecs > maxSessionTTL) {
		return fieldErr("auth.session_ttl_secs", "must be in 0..%d (30 days; 0 means the default, 43200)", maxSessionTTL)
	}
	if a.SessionScope != "" && !slices.Contains([]apitype.AdminScope{apitype.ScopeNone, apitype.ScopeView, apitype.ScopeAdmin}, a.SessionScope) {
		return fieldErr("auth.session_scope", "%q is not one of none, view, admin", a.SessionScope)
	}
	if a.CookieName != "" && !cookieToken(a.CookieName) {
		return fieldErr("auth.cookie_name", "%q is not a cookie name (letters, digits and !#$%%&'*+-.^_`|~)", a.CookieName)
	}
	if err := v.cookieDomain(a); err != nil {
		return err
	}
	if a.RedirectURL != "" {
		base := strings.TrimSuffix(cmpOr(a.BasePath, "/__applb/auth"), "/")
		u, err := url.Parse(a.RedirectURL)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			return fieldErr("auth.redirect_url", "must be an absolute http(s) URL")
		case u.Path != base+"/callback":
			return fieldErr("auth.redirect_url", "must end in %s/callback, where the gate answers the issuer", base)
		}
	}
	if j := a.JWT; j != nil {
		n := 0
		if j.Secret != nil {
			n++
		}
		if j.PublicKey != "" {
			n++
		}
		if j.JWKSURL != "" {
			n++
		}
		switch {
		case n != 1:
			return fieldErr("auth.jwt", "exactly one of secret, public_key and jwks_url is required")
		case len(j.Algorithms) == 0:
			return fieldErr("auth.jwt.algorithms", "required: the token's own header must not choose the algorithm")
		case j.Issuer == "":
			return fieldErr("auth.jwt.issuer", "required")
		case j.LeewaySecs != nil && (*j.LeewaySecs < 0 || *j.LeewaySecs > 300):
			return fieldErr("auth.jwt.leeway_secs", "must be in 0..300")
		}
		if err := secretRef("auth.jwt.secret", j.Secret); err != nil {
			return err
		}
		if err := jwtverify.Check(*j); err != nil {
			var fe *jwtverify.FieldError
			if errors.As(err, &fe) {
				return fieldErr("auth."+fe.Field, "%s", fe.Msg)
			}
			return fieldErr("auth.jwt", "%v", err)
		}
		if err := v.jwtSignIn(a, j); err != nil {
			return err
		}
	}
	return nil
}

// maxSessionTTL bounds session_ttl_secs: 30 days.
const maxSessionTTL = 30 * 24 * 3600

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// signIn checks the OpenID Connect sign-in of a gate with the google
// provider: a client to sign in with, and an allow-list (app-lb.md §3.6:
// an empty one is refused; ["*"] admits any account).
func (v validator) signIn(a *apitype.AuthGate) *FieldError {
	if a.ClientID == "" {
		return fieldErr("auth.client_id", "required with the google provider (the OAuth client berth signs people in with)")
	}
	if a.ClientSecret == nil && !v.gateProbe {
		return fieldErr("auth.client_secret", "required with the google provider")
	}
	if len(a.AllowedDomains) == 0 && len(a.AllowedEmails) == 0 {
		return fieldErr("auth.allowed_domains", "an allow-list is required with the google provider: allowed_domains, allowed_emails, or allowed_domains [\"*\"] for any account")
	}
	for i, d := range a.AllowedDomains {
		if d = strings.TrimPrefix(strings.TrimSpace(d), "@"); d == "" || strings.ContainsAny(d, " @/") && d != "*" {
			return fieldErr(fmt.Sprintf("auth.allowed_domains[%d]", i), "%q is not a domain", a.AllowedDomains[i])
		}
	}
	for i, e := range a.AllowedEmails {
		if _, dom, ok := strings.Cut(strings.TrimSpace(e), "@"); !ok || dom == "" || strings.ContainsAny(e, " /") {
			return fieldErr(fmt.Sprintf("auth.allowed_emails[%d]", i), "%q is not an email address", e)
		}
	}
	return nil
}

// jwtSignIn checks the browser sign-ins of a jwt gate.
func (v validator) jwtSignIn(a *apitype.AuthGate, j *apitype.JwtSpec) *FieldError {
	if j.LoginEndpoint != "" {
		return fieldErr("auth.jwt.login_endpoint", "not supported: berth takes no passwords; use login_url (hosted sign-in) or authorize_url and token_url (scoped sign-in)")
	}
	if j.LoginURL != "" {
		if j.Cookie == "" {
			return fieldErr("auth.jwt.cookie", "required with login_url: the issuer hands the token back in this cookie")
		}
		if msg := IssuerURLProblem(j.LoginURL); msg != "" {
			return fieldErr("auth.jwt.login_url", "%s", msg)
		}
	}
	if j.LoginRedirectParam != "" && j.LoginURL == "" {
		return fieldErr("auth.jwt.login_redirect_param", "only meaningful with login_url")
	}
	if (j.AuthorizeURL == "") != (j.TokenURL == "") {
		return fieldErr("auth.jwt.authorize_url", "authorize_url and token_url go together")
	}
	if j.AuthorizeURL != "" {
		if msg := IssuerURLProblem(j.AuthorizeURL); msg != "" {
			return fieldErr("auth.jwt.authorize_url", "%s", msg)
		}
		if msg := IssuerURLProblem(j.TokenURL); msg != "" {
			return fieldErr("auth.jwt.token_url", "%s", msg)
		}
		if a.CookieDomain != "" {
			return fieldErr("auth.jwt.authorize_url", "the scoped sign-in keeps a host-only session: it cannot be combined with cookie_domain")
		}
	}
	return nil
}

// IssuerURLProblem says what is wrong with an issuer's URL: it must be
// https, or http on loopback.
func IssuerURLProblem(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "must be an absolute URL"
	}
	switch u.Scheme {
	case "https":
		return ""
	case "http":
		h := u.Hostname()
		if ip := net.ParseIP(h); h == "localhost" || (ip != nil && ip.IsLoopback()) {
			return ""
		}
		return "must be https (http only on loopback)"
	}
	return "must be an https URL"
}

// cookieToken reports a valid cookie name (an RFC 9110 token).
func cookieToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// cookieDomain checks a gate's cookie_domain: a parent domain of two
// labels or more, which every host the deployment serves lies within (a
// session cookie for a domain the deployment does not serve would be sent
// to hosts it does not control).
func (v validator) cookieDomain(a *apitype.AuthGate) *FieldError {
	d := strings.ToLower(strings.TrimPrefix(a.CookieDomain, "."))
	if d == "" {
		return nil
	}
	if strings.Count(d, ".") < 1 || strings.ContainsAny(d, " /:*") {
		return fieldErr("auth.cookie_domain", "%q must be a parent domain of two labels or more", a.CookieDomain)
	}
	if v.gateProbe {
		return nil
	}
	within := func(h string) bool { h = strings.ToLower(h); return h == d || strings.HasSuffix(h, "."+d) }
	for i, r := range v.s.Routes {
		switch {
		case r.Host != "":
			if !within(r.Host) {
				return fieldErr("auth.cookie_domain", "routes[%d].host %q is not within %q", i, r.Host, d)
			}
		case r.HostSuffix != "":
			if !within(strings.TrimPrefix(r.HostSuffix, ".")) {
				return fieldErr("auth.cookie_domain", "routes[%d].host_suffix %q is not within %q", i, r.HostSuffix, d)
			}
		default:
			return fieldErr("auth.cookie_domain", "routes[%d] matches any host; with cookie_domain every route must name a host within %q", i, d)
		}
	}
	return nil
}

// feed checks feed.expose: a path the client sends (compared before any
// prefix is stripped), on one of the deployment's own routes, so that the
// feed is reachable where the spec says.
func (v validator) feed() *FieldError {
	f := v.s.Feed
	if f == nil || f.Expose == "" {
		return nil
	}
	p := f.Expose
	if msg := pathProblem(p); msg != "" {
		return fieldErr("feed.expose", "%s", msg)
	}
	if strings.Contains(p, "//") || slices.Contains(strings.Split(p, "/"), "..") || slices.Contains(strings.Split(p, "/"), ".") {
		return fieldErr("feed.expose", "%q must be a clean path (no empty, . or .. segments)", p)
	}
	if len(v.s.Routes) == 0 {
		return fieldErr("feed.expose", "the deployment has no routes to serve its feed on")
	}
	for _, r := range v.s.Routes {
		if r.Redirect == nil && strings.HasPrefix(p, r.PathPrefix) {
			return nil
		}
	}
	return fieldErr("feed.expose", "%q lies on none of the deployment's routes (no route without a redirect has a path_prefix it starts with)", p)
}

// sortedMap iterates a map in key order, so that the first error reported
// for a map field is deterministic.
func sortedMap(m map[string]string) func(func(string, string) bool) {
	return func(yield func(string, string) bool) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}

// builtImageName reports whether name can name a built image: a local
// image name (package image's ValidName) that is not a registry reference
// (its first path component has no "." or ":" and is not "localhost"), so
// the fleet never tries to pull what a build produced.
func builtImageName(name string) bool {
	if name == "" || len(name) > 128 || strings.Contains(name, "..") {
		return false
	}
	for i, c := range name {
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("._-:/", c)) {
			return false
		}
	}
	if host, _, ok := strings.Cut(name, "/"); ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
		return false
	}
	return true
}

// buildRepo applies the builder's transport policy to a build.repo
// (package build checks it again, with the address walls, when it
// fetches): https, http with BuildAllowHTTP, a local path or file:// URL
// with BuildAllowLocal. It returns why repo is refused, or "".
func (v validator) buildRepo(repo string) string {
	if strings.HasPrefix(repo, "-") || strings.ContainsFunc(repo, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Sprintf("%q is not a repository URL", repo)
	}
	if isAbsPath(repo) {
		if !v.o.BuildAllowLocal {
			return "local repositories are not allowed here (an https:// remote is)"
		}
		return ""
	}
	if i := strings.Index(repo, "::"); i >= 0 && !strings.Contains(repo[:i], "/") {
		return fmt.Sprintf("the %s:: transport is not allowed (https only)", repo[:i])
	}
	u, err := url.Parse(repo)
	if err != nil || u.Scheme == "" {
		return fmt.Sprintf("%q is not a URL with a scheme (https://…)", repo)
	}
	switch sc := strings.ToLower(u.Scheme); {
	case sc == "https", sc == "http" && v.o.BuildAllowHTTP:
		if u.User != nil {
			return "credentials in the URL are not allowed: give them as build.auth"
		}
		if u.Hostname() == "" {
			return fmt.Sprintf("%q names no host", repo)
		}
	case sc == "file" && v.o.BuildAllowLocal:
	case sc == "file":
		return "local repositories are not allowed here (an https:// remote is)"
	default:
		return fmt.Sprintf("the %s transport is not allowed (https only)", u.Scheme)
	}
	return ""
}
