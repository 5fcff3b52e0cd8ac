package admin

import (
	"context"
	"fmt"
	"iter"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/netguard"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/web"
)

// admit returns the registry's admission check for a deployment write by p:
// what a namespace-confined caller may not do even in its own namespace.
// It runs on the normalized spec under the registry's lock (quota sums).
func (a *API) admit(p *auth.Principal) func(s *apitype.DeploymentSpec, prev *registry.Entry, others iter.Seq[*registry.Entry]) error {
	return func(s *apitype.DeploymentSpec, prev *registry.Entry, others iter.Seq[*registry.Entry]) error {
		if err := a.checkStores(s); err != nil {
			return err
		}
		if !p.Confined() || s.VM == nil {
			return nil
		}
		ns, c := spec.Namespace(s), a.o.Confinement
		if d := string(s.VM.Driver); !c.AllowsDriver(p, ns, d) {
			return web.Errorf(http.StatusForbidden, "vm.driver: %q is not allowed for namespace %q (allowed: %s); the operator allows drivers per namespace", d, ns, driverList(c.DriversFor(ns)))
		}
		// berth's own S3 credentials and its archive bucket are the
		// operator's: a namespace reaches them only through what is its
		// own (its secret; its namespace's prefix of the bucket).
		if w := s.VM.Workspace; w != nil && strings.HasPrefix(w.Store, "s3://") && w.Auth == nil {
			return web.Errorf(http.StatusForbidden, "vm.workspace.auth: required for an s3:// store written by a namespace credential (a secret of namespace %q with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); berth's own S3 credentials serve fleet-wide writers only", ns)
		}
		if wa := s.VM.WorkspaceArchive; wa != nil && wa.S3Key != "" && !strings.HasPrefix(wa.S3Key, ns+"/") {
			return web.Errorf(http.StatusForbidden, "vm.workspace_archive.s3_key: %q is outside namespace %q's part of the archive bucket: a namespace credential names keys under %q", wa.S3Key, ns, ns+"/")
		}
		if f := spec.LoaderEnv(s); f != "" {
			return web.Invalid(f, "sets the dynamic loader or libc up to load what it names; a namespace credential may not set it")
		}
		if q := c.ReplicaQuota; q > 0 {
			mine := spec.Scaling(s.Scaling).MaxReplicas
			total := mine
			for e := range others {
				if e.Kind == apitype.KindVM && namespace(e) == ns {
					total += spec.Scaling(e.Spec.Scaling).MaxReplicas
				}
			}
			before := 0
			if prev != nil && prev.Kind == apitype.KindVM {
				before = spec.Scaling(prev.Spec.Scaling).MaxReplicas
			}
			// A write that does not raise the namespace's sum is let
			// through even above the quota, so it can be brought down.
			if total > q && mine > before {
				return web.Errorf(http.StatusForbidden, "scaling.max_replicas: %d would bring namespace %q to %d replicas in all, above its quota of %d", mine, ns, total, q)
			}
		}
		return nil
	}
}

// defaultDriver fills in vm.driver for a namespace-confined caller that
// left it out. The documented default, process (spec.Normalize), is not
// one such a caller may use unless the operator allows it, so it gets the
// first driver its namespace may use that this host has; with none, the
// write is refused naming vm.driver. Unconfined callers get process.
func (a *API) defaultDriver(p *auth.Principal, s *apitype.DeploymentSpec) error {
	if !p.Confined() || s.VM == nil || s.VM.Driver != "" || spec.Kind(s) != apitype.KindVM {
		return nil
	}
	ns := spec.Namespace(s)
	allowed := a.o.Confinement.DriversFor(ns)
	var host []string
	if a.o.Fleet != nil {
		host = a.o.Fleet.DriverNames()
	}
	for _, d := range allowed {
		if slices.Contains(host, d) {
			s.VM.Driver = apitype.Driver(d)
			return nil
		}
	}
	return web.Errorf(http.StatusForbidden, "vm.driver: required: none of the drivers namespace %q may use (%s) is available on this host (available: %s)", ns, driverList(allowed), driverList(host))
}

func driverList(ds []string) string {
	if len(ds) == 0 {
		return "none"
	}
	return strings.Join(ds, ", ")
}

// UpstreamGuard refuses, at write time, static upstreams that would point
// the data plane at berth itself (its proxy, admin or egress listener) or
// at link-local and cloud metadata addresses. Names are resolved with a
// short timeout; a name that does not resolve is let through, for the
// dial-time check.
type UpstreamGuard struct {
	// Self is berth's bound listeners (the set the proxy's dial-time
	// check uses); nil checks none.
	Self *netguard.Self
	// AllowLinkLocal lets upstreams reach link-local and metadata
	// addresses (berth serve --allow-link-local-upstreams).
	AllowLinkLocal bool
	// Lookup resolves a name; nil uses net.DefaultResolver.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Timeout bounds the resolution of one write's names; default 2s.
	Timeout time.Duration
}

// check returns a 400 naming upstreams[i] for the first refused upstream.
func (g UpstreamGuard) check(ctx context.Context, ups []string) error {
	if len(ups) == 0 {
		return nil
	}
	type target struct {
		host string
		port uint16
		ips  []netip.Addr
	}
	ts := make([]target, len(ups))
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	lookup := g.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, u := range ups {
		addr, _, err := spec.Upstream(u)
		if err != nil {
			continue // Validate refuses it
		}
		ap, err := netip.ParseAddrPort(addr)
		if err == nil {
			ts[i] = target{port: ap.Port(), ips: []netip.Addr{ap.Addr()}}
			continue
		}
		host, port, _ := net.SplitHostPort(addr)
		pn, _ := strconv.ParseUint(port, 10, 16)
		ts[i] = target{host: host, port: uint16(pn)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ips, _ := lookup(rctx, host) // unresolved: left to dial time
			ts[i].ips = ips
		}()
	}
	wg.Wait()
	for i, t := range ts {
		for _, ip := range t.ips {
			via := ""
			if t.host != "" {
				via = fmt.Sprintf(" (%s resolves to %s)", t.host, ip)
			}
			if !g.AllowLinkLocal {
				if why := netguard.Forbidden(ip); why != "" {
					return web.Invalid(fmt.Sprintf("upstreams[%d]", i), "%q is %s%s; upstreams may not reach it unless the operator allows link-local upstreams", ups[i], why, via)
				}
			}
			if g.Self.Contains(netip.AddrPortFrom(ip, t.port)) {
				return web.Invalid(fmt.Sprintf("upstreams[%d]", i), "%q is one of berth's own listeners%s; an upstream may not point the data plane at berth itself", ups[i], via)
			}
		}
	}
	return nil
}

// checkStores refuses, for every writer, a store field that names this
// server's own artifact route for another namespace than the spec's
// (artifact.CheckNamespace): using it would be refused anyway, at the
// pull, build or workspace capture, after the write had been accepted.
func (a *API) checkStores(s *apitype.DeploymentSpec) error {
	ns := spec.Namespace(s)
	var fields [][2]string
	if v := s.VM; v != nil {
		if v.Workspace != nil {
			fields = append(fields, [2]string{"vm.workspace.store", v.Workspace.Store})
		}
		for i, m := range v.Mounts {
			fields = append(fields, [2]string{fmt.Sprintf("vm.mounts[%d].store", i), m.Store})
		}
	}
	if s.Build != nil {
		fields = append(fields, [2]string{"build.store", s.Build.Store})
	}
	if s.Artifact != nil {
		fields = append(fields, [2]string{"artifact.store", s.Artifact.Store})
	}
	for _, f := range fields {
		if err := artifact.CheckNamespace(f[1], ns, a.o.Upstreams.Self); err != nil {
			return web.Errorf(http.StatusForbidden, "%s: %v", f[0], err)
		}
	}
	return nil
}
