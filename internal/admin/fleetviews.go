package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/web"
)

// FleetViews is what the fleet's hosts publish in etcd (package
// etcdfleet, adapted by the composition root), as the fleet view routes
// (/fleet, /fleet/deployments, /fleet/gateways/{id}/metrics,
// /fleet/network, /services, /control-plane/config) and
// /deployments/{id}/discovery-status read it.
type FleetViews interface {
	// Reports lists every live host's last report, by host id: its
	// address, usage and deployments (Fleet, Matched and Offset unset).
	// A host that has not reported yet is absent.
	Reports(ctx context.Context) ([]apitype.FleetGatewayMetrics, error)
	// Services lists the services with members after id after, at most
	// limit of them.
	Services(ctx context.Context, after string, limit int) (apitype.FleetServices, error)
	// DiscoveryStatus is service id's members as the contract's
	// DiscoveryStatus: its source, the revision read at (version) and its
	// members by peer.
	// Only the members serving deployments of namespace are listed.
	DiscoveryStatus(ctx context.Context, namespace, id string) (apitype.DiscoveryStatus, error)
	// ControlPlaneConfig reads the stored configuration (revision 0 and
	// empty lists before the first write).
	ControlPlaneConfig(ctx context.Context) (apitype.ControlPlaneConfig, error)
	// PutControlPlaneConfig writes doc if the stored revision is still
	// expected: ErrStaleConfig otherwise.
	PutControlPlaneConfig(ctx context.Context, expected int64, doc apitype.ControlPlaneDoc) (apitype.ControlPlaneConfig, error)
}

// ErrStaleConfig is PutControlPlaneConfig's answer when the stored
// configuration is no longer at the revision expected.
var ErrStaleConfig = errors.New("admin: the control-plane configuration changed since the expected revision")

// fleetPage is the page size of /fleet/deployments and
// /fleet/gateways/{id}/metrics when no limit is given, and the most
// /services lists at once.
const fleetPage = 100

// The fleet views (app-lb.md §2.3's multi-gateway views, with berth's own
// shapes: apitype's Fleet* types): view tier, always authenticated (an
// Ungated caller gets 403), fleet-wide except /fleet/deployments and
// /fleet/gateways/{id}/metrics, which narrow to a confined caller's
// namespace. Without a fleet they answer 409 fleet_not_configured.
func (a *API) routeFleetViews() {
	a.handle("GET /fleet", tierView, wallFleet, a.fleetSummary)
	a.handle("GET /fleet/deployments", tierView, wallNarrow, a.fleetDeployments)
	a.handle("GET /fleet/gateways/{id}/metrics", tierView, wallNarrow, a.fleetGateway)
	a.handle("GET /fleet/network", tierView, wallFleet, a.fleetNetwork)
	a.handle("GET /services", tierView, wallFleet, a.fleetServices)
	a.handle("GET /control-plane/config", tierView, wallFleet, a.getControlPlaneConfig)
	a.handle("PUT /control-plane/config", tierCRUD, wallFleet, a.putControlPlaneConfig)
	a.handle("GET /deployments/{id}/discovery-status", tierCRUD, wallDeployment, a.discoveryStatus)
}

// fleetViews refuses Ungated callers (the fleet views are always
// authenticated) and answers 409 without a fleet.
func (a *API) fleetViews(r *http.Request) (FleetViews, error) {
	if caller(r).Kind == auth.Ungated {
		return nil, web.Errorf(http.StatusForbidden, "authenticated fleet view required")
	}
	if a.o.FleetViews == nil {
		return nil, notInFleet()
	}
	return a.o.FleetViews, nil
}

func notInFleet() error {
	return &web.Error{Status: http.StatusConflict, Code: "fleet_not_configured",
		Message: "this berth is not part of a fleet: start it with --etcd ENDPOINTS (or --etcd-dev) to join one"}
}

func etcdUnavailable(what string, err error) error {
	return &web.Error{Status: http.StatusServiceUnavailable, Message: what + " could not be read from etcd", Err: err, Header: http.Header{"Retry-After": {"5"}}}
}

// fleetQuery is the namespace, offset and limit of a paged fleet view: a
// confined caller's namespace is its own (naming another is refused).
type fleetQuery struct {
	namespace     string
	offset, limit int
}

func parseFleetQuery(r *http.Request) (fleetQuery, error) {
	q := fleetQuery{namespace: r.URL.Query().Get("namespace"), limit: fleetPage}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"offset", &q.offset}, {"limit", &q.limit}} {
		v := r.URL.Query().Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return q, web.Invalid(p.name, "must be a non-negative integer, got %q", v)
		}
		*p.dst = n
	}
	if p := caller(r); p.Confined() {
		if q.namespace != "" && q.namespace != p.Token.Namespace {
			return q, web.Errorf(http.StatusForbidden, "this token is confined to namespace %q", p.Token.Namespace)
		}
		q.namespace = p.Token.Namespace
	}
	return q, nil
}

func poolOf(p apitype.FleetDeploymentPool) apitype.FleetPool {
	return apitype.FleetPool{Deployments: 1, Ready: p.Ready, Draining: p.Draining, Pending: p.Pending, TotalInFlight: p.TotalInFlight}
}

func addPool(dst *apitype.FleetDeploymentPool, p apitype.FleetDeploymentPool) {
	dst.Ready += p.Ready
	dst.Draining += p.Draining
	dst.Pending += p.Pending
	dst.TotalInFlight += p.TotalInFlight
}

// hostsAndReports reads the live hosts and their last reports, by host.
func (a *API) hostsAndReports(r *http.Request) (apitype.FleetHosts, map[string]apitype.FleetGatewayMetrics, error) {
	v, err := a.fleetViews(r)
	if err != nil {
		return apitype.FleetHosts{}, nil, err
	}
	f, err := a.fleetHosts()
	if err != nil {
		return apitype.FleetHosts{}, nil, err
	}
	hs, err := f.Hosts(r.Context())
	if err != nil {
		return apitype.FleetHosts{}, nil, etcdUnavailable("the fleet's hosts", err)
	}
	rs, err := v.Reports(r.Context())
	if err != nil {
		return apitype.FleetHosts{}, nil, etcdUnavailable("the fleet's reports", err)
	}
	byHost := make(map[string]apitype.FleetGatewayMetrics, len(rs))
	for _, rep := range rs {
		byHost[rep.ID] = rep
	}
	return hs, byHost, nil
}

func (a *API) fleetSummary(w http.ResponseWriter, r *http.Request) error {
	hs, byHost, err := a.hostsAndReports(r)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, summarize(hs, byHost))
	return nil
}

// summarize rolls the live hosts' reports up: each gateway's pool, and
// the contract's FleetPool over the whole fleet (a deployment on two
// hosts counts once in deployments).
func summarize(hs apitype.FleetHosts, byHost map[string]apitype.FleetGatewayMetrics) apitype.FleetSummary {
	out := apitype.FleetSummary{Self: hs.Self, GeneratedAt: time.Now().Unix(), Gateways: []apitype.FleetGateway{}}
	seen := map[string]bool{}
	for _, h := range hs.Hosts {
		g := apitype.FleetGateway{ID: h.ID, Address: h.Address, State: h.State}
		if rep, ok := byHost[h.ID]; ok {
			g.ReportedAt, g.Host = rep.ReportedAt, rep.Host
			for _, d := range rep.Deployments {
				p := poolOf(d.Pool)
				g.Pool = sumPool(g.Pool, p)
				if !seen[d.ID] {
					seen[d.ID] = true
				} else {
					p.Deployments = 0
				}
				out.Pool = sumPool(out.Pool, p)
			}
		}
		out.Gateways = append(out.Gateways, g)
	}
	return out
}

func sumPool(a, b apitype.FleetPool) apitype.FleetPool {
	return apitype.FleetPool{Deployments: a.Deployments + b.Deployments, Ready: a.Ready + b.Ready, Draining: a.Draining + b.Draining, Pending: a.Pending + b.Pending, TotalInFlight: a.TotalInFlight + b.TotalInFlight}
}

func (a *API) fleetDeployments(w http.ResponseWriter, r *http.Request) error {
	v, err := a.fleetViews(r)
	if err != nil {
		return err
	}
	q, err := parseFleetQuery(r)
	if err != nil {
		return err
	}
	rs, err := v.Reports(r.Context())
	if err != nil {
		return etcdUnavailable("the fleet's reports", err)
	}
	p := caller(r)
	byID := map[string]*apitype.FleetDeployment{}
	for _, rep := range rs {
		for _, d := range rep.Deployments {
			if q.namespace != "" && d.Namespace != q.namespace || !p.Touches(d.ID, d.Namespace) {
				continue
			}
			fd := byID[d.ID]
			if fd == nil {
				fd = &apitype.FleetDeployment{ID: d.ID, Namespace: d.Namespace, Kind: d.Kind, Hosts: []string{}, Gateways: []apitype.FleetDeploymentHost{}}
				byID[d.ID] = fd
			}
			fd.Hosts = append(fd.Hosts, rep.ID)
			fd.Gateways = append(fd.Gateways, apitype.FleetDeploymentHost{Host: rep.ID, Pool: d.Pool})
			addPool(&fd.Pool, d.Pool)
		}
	}
	ids := slices.Sorted(maps.Keys(byID))
	out := apitype.FleetDeployments{Deployments: []apitype.FleetDeployment{}, Matched: len(ids), Offset: q.offset}
	for _, id := range page(ids, q.offset, q.limit) {
		out.Deployments = append(out.Deployments, *byID[id])
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// page cuts s to [offset, offset+limit).
func page[T any](s []T, offset, limit int) []T {
	if offset >= len(s) {
		return nil
	}
	s = s[offset:]
	if limit < len(s) {
		s = s[:limit]
	}
	return s
}

func (a *API) fleetGateway(w http.ResponseWriter, r *http.Request) error {
	v, err := a.fleetViews(r)
	if err != nil {
		return err
	}
	q, err := parseFleetQuery(r)
	if err != nil {
		return err
	}
	rs, err := v.Reports(r.Context())
	if err != nil {
		return etcdUnavailable("the fleet's reports", err)
	}
	id := r.PathValue("id")
	i := slices.IndexFunc(rs, func(g apitype.FleetGatewayMetrics) bool { return g.ID == id })
	if i < 0 {
		return web.Errorf(http.StatusNotFound, "no gateway %q in the fleet (or it has not reported yet)", id)
	}
	rep, p := rs[i], caller(r)
	ds := slices.DeleteFunc(slices.Clone(rep.Deployments), func(d apitype.FleetGatewayDeployment) bool {
		return q.namespace != "" && d.Namespace != q.namespace || !p.Touches(d.ID, d.Namespace)
	})
	slices.SortFunc(ds, func(a, b apitype.FleetGatewayDeployment) int { return strings.Compare(a.ID, b.ID) })
	rep.Fleet = apitype.FleetPool{}
	for _, d := range ds {
		rep.Fleet = sumPool(rep.Fleet, poolOf(d.Pool))
	}
	rep.Matched, rep.Offset = len(ds), q.offset
	rep.Deployments = append([]apitype.FleetGatewayDeployment{}, page(ds, q.offset, q.limit)...)
	if !p.Fleet() {
		// As /metrics: a caller below the fleet sees its deployments, not
		// the host.
		rep.Host = apitype.HostUsage{}
	}
	web.WriteJSON(w, http.StatusOK, rep)
	return nil
}

func (a *API) fleetNetwork(w http.ResponseWriter, r *http.Request) error {
	hs, byHost, err := a.hostsAndReports(r)
	if err != nil {
		return err
	}
	out := apitype.FleetNetwork{Gateways: []apitype.FleetNetworkGateway{}}
	for _, h := range hs.Hosts {
		g := apitype.FleetNetworkGateway{ID: h.ID, Address: h.Address, State: h.State, Routes: []string{}, RouteHosts: []string{}, Deployments: []string{}}
		for _, d := range byHost[h.ID].Deployments {
			g.Deployments = append(g.Deployments, d.ID)
			for _, rt := range d.Routes {
				g.Routes = append(g.Routes, rt)
				if host, _, _ := strings.Cut(rt, "/"); host != "" && !slices.Contains(g.RouteHosts, host) {
					g.RouteHosts = append(g.RouteHosts, host)
				}
			}
		}
		slices.Sort(g.Routes)
		slices.Sort(g.RouteHosts)
		slices.Sort(g.Deployments)
		out.Gateways = append(out.Gateways, g)
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) fleetServices(w http.ResponseWriter, r *http.Request) error {
	v, err := a.fleetViews(r)
	if err != nil {
		return err
	}
	limit := fleetPage
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > fleetPage {
			return web.Invalid("limit", "must be an integer from 1 to %d, got %q", fleetPage, s)
		}
		limit = n
	}
	out, err := v.Services(r.Context(), r.URL.Query().Get("after"), limit)
	if err != nil {
		return etcdUnavailable("the fleet's services", err)
	}
	if out.Services == nil {
		out.Services = []apitype.FleetService{}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) getControlPlaneConfig(w http.ResponseWriter, r *http.Request) error {
	v, err := a.fleetViews(r)
	if err != nil {
		return err
	}
	c, err := v.ControlPlaneConfig(r.Context())
	if err != nil {
		return etcdUnavailable("the control-plane configuration", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	web.WriteJSON(w, http.StatusOK, c)
	return nil
}

func (a *API) putControlPlaneConfig(w http.ResponseWriter, r *http.Request) error {
	v, err := a.fleetViews(r)
	if err != nil {
		return err
	}
	var req apitype.ControlPlaneConfigPut
	if err := web.ReadJSON(w, r, &req); err != nil {
		return err
	}
	if req.ExpectedRevision == nil || *req.ExpectedRevision < 0 {
		return web.Invalid("expected_revision", "is required: the revision GET /control-plane/config answered (0 before the first write)")
	}
	if req.Config == nil {
		return web.Invalid("config", "is required")
	}
	if err := checkControlPlaneDoc(req.Config); err != nil {
		return err
	}
	c, err := v.PutControlPlaneConfig(r.Context(), *req.ExpectedRevision, *req.Config)
	if errors.Is(err, ErrStaleConfig) {
		return &web.Error{Status: http.StatusConflict, Code: "stale_revision",
			Message: fmt.Sprintf("expected_revision %d is stale: the configuration is at revision %d; read it again", *req.ExpectedRevision, c.Revision)}
	}
	if err != nil {
		return &web.Error{Status: http.StatusServiceUnavailable, Message: "the control-plane configuration could not be written to etcd", Err: err, Header: http.Header{"Retry-After": {"5"}}}
	}
	w.Header().Set("Cache-Control", "no-store")
	web.WriteJSON(w, http.StatusOK, c)
	return nil
}

// checkControlPlaneDoc validates a configuration, naming the field at
// fault; it fills absent lists with empty ones.
func checkControlPlaneDoc(d *apitype.ControlPlaneDoc) error {
	if d.Gateways == nil {
		d.Gateways = []apitype.ControlPlaneGateway{}
	}
	if d.ControlPlane == nil {
		d.ControlPlane = []apitype.ControlPlaneService{}
	}
	ids := map[string]bool{}
	for i, g := range d.Gateways {
		f := fmt.Sprintf("config.gateways[%d]", i)
		if !validID(g.ID, 63) {
			return web.Invalid(f+".id", "must be 1 to 63 letters, digits, '-', '_' or '.', got %q", g.ID)
		}
		if ids[g.ID] {
			return web.Invalid(f+".id", "%q is listed twice", g.ID)
		}
		ids[g.ID] = true
		u, err := url.Parse(g.URL)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return web.Invalid(f+".url", "must be an http:// or https:// URL with a host, got %q", g.URL)
		}
	}
	svcs := map[string]bool{}
	for i, s := range d.ControlPlane {
		f := fmt.Sprintf("config.control_plane[%d]", i)
		if s.ServiceID == "" || len(s.ServiceID) > 253 || strings.ContainsAny(s.ServiceID, "/\x00\n\r\t") {
			return web.Invalid(f+".service_id", "must be 1 to 253 characters without '/' or control characters, got %q", s.ServiceID)
		}
		if svcs[s.ServiceID] {
			return web.Invalid(f+".service_id", "%q is listed twice", s.ServiceID)
		}
		svcs[s.ServiceID] = true
		if len(s.Description) > 1024 {
			return web.Invalid(f+".description", "must be at most 1024 bytes")
		}
	}
	return nil
}

func validID(id string, maxLen int) bool {
	if id == "" || len(id) > maxLen {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// discoveryStatus is GET /deployments/{id}/discovery-status[?staged=true]:
// the contract's DiscoveryStatus of a discovery-backed deployment, its
// service's members as etcd holds them (version: the revision read at).
// berth applies a spec at once, so the staged spec is the current one.
func (a *API) discoveryStatus(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if s := r.URL.Query().Get("staged"); s != "" && s != "true" && s != "false" {
		return web.Invalid("staged", "must be true or false, got %q", s)
	}
	e, ok := a.o.Registry.Get(id)
	if !ok {
		return web.Errorf(http.StatusNotFound, "no deployment %q", id)
	}
	if e.Spec.Discovery == nil {
		return web.Errorf(http.StatusBadRequest, "deployment %q is not discovery-backed: its spec has no discovery", id)
	}
	if a.o.FleetViews == nil {
		return notInFleet()
	}
	out, err := a.o.FleetViews.DiscoveryStatus(r.Context(), e.Spec.Namespace, e.Spec.Discovery.ServiceID)
	if err != nil {
		return etcdUnavailable("the service's members", err)
	}
	if out.Upstreams == nil {
		out.Upstreams = []apitype.DiscoveryUpstream{}
	}
	w.Header().Set("Cache-Control", "no-store")
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}
