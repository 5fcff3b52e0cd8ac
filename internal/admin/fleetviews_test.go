package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/registry"
)

// fakeFleet stands in for the etcd-backed fleet behind the FleetHosts and
// FleetViews interfaces (etcdfleet's own tests cover etcd; the server's
// fleet tests the whole).
type fakeFleet struct {
	mu      sync.Mutex
	hosts   apitype.FleetHosts
	reports []apitype.FleetGatewayMetrics
	svcs    []apitype.FleetService
	cfg     apitype.ControlPlaneConfig
}

func (f *fakeFleet) Hosts(context.Context) (apitype.FleetHosts, error) { return f.hosts, nil }
func (f *fakeFleet) SetHostState(context.Context, string, string) error {
	return ErrNoFleetHost
}
func (f *fakeFleet) Reports(context.Context) ([]apitype.FleetGatewayMetrics, error) {
	return f.reports, nil
}
func (f *fakeFleet) Services(_ context.Context, after string, limit int) (apitype.FleetServices, error) {
	out := apitype.FleetServices{Revision: 7}
	for _, s := range f.svcs {
		if s.ID > after {
			if len(out.Services) == limit {
				out.Next = out.Services[limit-1].ID
				break
			}
			out.Services = append(out.Services, s)
		}
	}
	return out, nil
}
func (f *fakeFleet) DiscoveryStatus(_ context.Context, _, id string) (apitype.DiscoveryStatus, error) {
	v, src := 42, "etcd:///berth/fleet/services/"+id
	out := apitype.DiscoveryStatus{ServiceID: id, SourceURL: &src, Version: &v}
	for _, s := range f.svcs {
		if s.ID == id {
			for _, m := range s.Members {
				out.Upstreams = append(out.Upstreams, apitype.DiscoveryUpstream{Peer: m.Peer, Draining: m.Draining, InFlight: m.InFlight})
			}
		}
	}
	return out, nil
}
func (f *fakeFleet) ControlPlaneConfig(context.Context) (apitype.ControlPlaneConfig, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg, nil
}
func (f *fakeFleet) PutControlPlaneConfig(_ context.Context, expected int64, doc apitype.ControlPlaneDoc) (apitype.ControlPlaneConfig, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if expected != f.cfg.Revision {
		return f.cfg, ErrStaleConfig
	}
	f.cfg.Revision++
	f.cfg.Config = doc
	return f.cfg, nil
}

func newFakeFleet() *fakeFleet {
	pool := func(ready, draining, inflight int) apitype.FleetDeploymentPool {
		return apitype.FleetDeploymentPool{Ready: ready, Draining: draining, TotalInFlight: inflight}
	}
	return &fakeFleet{
		hosts: apitype.FleetHosts{Self: "a", Hosts: []apitype.FleetHost{
			{ID: "a", Address: "a:80", State: "active"}, {ID: "b", Address: "b:80", State: "draining"}, {ID: "c", Address: "c:80", State: "active"},
		}},
		reports: []apitype.FleetGatewayMetrics{
			{ID: "a", Address: "a:80", ReportedAt: 1000, Host: apitype.HostUsage{Available: true, CPUCount: 4}, Deployments: []apitype.FleetGatewayDeployment{
				{ID: "web", Namespace: "default", Kind: "static", Pool: pool(2, 0, 3), Routes: []string{"web.test/"}},
				{ID: "api", Namespace: "team-a", Kind: "vm", Pool: pool(1, 1, 0), Routes: []string{"api.test/v1"}},
			}},
			{ID: "b", Address: "b:80", ReportedAt: 2000, Deployments: []apitype.FleetGatewayDeployment{
				{ID: "web", Namespace: "default", Kind: "static", Pool: pool(1, 0, 1), Routes: []string{"web.test/"}},
			}},
		},
		svcs: []apitype.FleetService{
			{ID: "api", Members: []apitype.FleetServiceMember{{Peer: "a:80", Host: "a"}}},
			{ID: "web", Members: []apitype.FleetServiceMember{{Peer: "a:80", Host: "a"}, {Peer: "b:80", Draining: true, InFlight: 1, Host: "b"}}},
		},
		cfg: apitype.ControlPlaneConfig{Config: apitype.ControlPlaneDoc{Gateways: []apitype.ControlPlaneGateway{}, ControlPlane: []apitype.ControlPlaneService{}}, TokenSync: apitype.TokenSync{Source: "etcd"}},
	}
}

var fleetViewRoutes = []string{"/fleet", "/fleet/deployments", "/fleet/gateways/a/metrics", "/fleet/network", "/services", "/control-plane/config"}

// TestFleetViews: the fleet views' shapes over a fleet of three hosts, two
// of which report.
func TestFleetViews(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	ff := newFakeFleet()
	r.api.o.FleetHosts, r.api.o.FleetViews = ff, ff

	w := r.do("GET", "/fleet", operator, "")
	want(t, w, http.StatusOK)
	sum := decode[apitype.FleetSummary](t, w)
	if sum.Self != "a" || len(sum.Gateways) != 3 || sum.Gateways[1].State != "draining" || sum.Gateways[2].ReportedAt != 0 {
		t.Errorf("summary gateways = %+v", sum.Gateways)
	}
	if sum.Pool != (apitype.FleetPool{Deployments: 2, Ready: 4, Draining: 1, TotalInFlight: 4}) {
		t.Errorf("summary pool = %+v", sum.Pool)
	}
	if sum.Gateways[0].Pool != (apitype.FleetPool{Deployments: 2, Ready: 3, Draining: 1, TotalInFlight: 3}) || !sum.Gateways[0].Host.Available {
		t.Errorf("a's gateway = %+v", sum.Gateways[0])
	}

	w = r.do("GET", "/fleet/deployments", operator, "")
	want(t, w, http.StatusOK)
	ds := decode[apitype.FleetDeployments](t, w)
	if ds.Matched != 2 || len(ds.Deployments) != 2 || ds.Deployments[0].ID != "api" || ds.Deployments[1].ID != "web" {
		t.Fatalf("deployments = %+v", ds)
	}
	if web := ds.Deployments[1]; !slices.Equal(web.Hosts, []string{"a", "b"}) || web.Pool != (apitype.FleetDeploymentPool{Ready: 3, TotalInFlight: 4}) || len(web.Gateways) != 2 || web.Gateways[1].Pool.Ready != 1 {
		t.Errorf("web across the fleet = %+v", web)
	}
	w = r.do("GET", "/fleet/deployments?offset=1&limit=5", operator, "")
	if ds := decode[apitype.FleetDeployments](t, w); ds.Matched != 2 || ds.Offset != 1 || len(ds.Deployments) != 1 || ds.Deployments[0].ID != "web" {
		t.Errorf("offset 1 = %+v", ds)
	}
	if ds := decode[apitype.FleetDeployments](t, r.do("GET", "/fleet/deployments?namespace=team-a", operator, "")); ds.Matched != 1 || ds.Deployments[0].ID != "api" {
		t.Errorf("namespace team-a = %+v", ds)
	}
	want(t, r.do("GET", "/fleet/deployments?offset=-1", operator, ""), http.StatusBadRequest, "offset")

	w = r.do("GET", "/fleet/gateways/a/metrics", operator, "")
	want(t, w, http.StatusOK)
	gm := decode[apitype.FleetGatewayMetrics](t, w)
	if gm.ID != "a" || gm.Matched != 2 || gm.Fleet != (apitype.FleetPool{Deployments: 2, Ready: 3, Draining: 1, TotalInFlight: 3}) || gm.Host.CPUCount != 4 || gm.Deployments[0].ID != "api" {
		t.Errorf("a's metrics = %+v", gm)
	}
	want(t, r.do("GET", "/fleet/gateways/c/metrics", operator, ""), http.StatusNotFound, `"c"`)
	want(t, r.do("GET", "/fleet/gateways/zz/metrics", operator, ""), http.StatusNotFound, `"zz"`)

	w = r.do("GET", "/fleet/network", operator, "")
	want(t, w, http.StatusOK)
	nw := decode[apitype.FleetNetwork](t, w)
	if len(nw.Gateways) != 3 || !slices.Equal(nw.Gateways[0].RouteHosts, []string{"api.test", "web.test"}) || !slices.Equal(nw.Gateways[0].Deployments, []string{"api", "web"}) ||
		nw.Gateways[0].Address != "a:80" || len(nw.Gateways[2].Routes) != 0 || nw.Gateways[2].Routes == nil {
		t.Errorf("network = %+v", nw)
	}

	w = r.do("GET", "/services?after=api", operator, "")
	want(t, w, http.StatusOK)
	if sv := decode[apitype.FleetServices](t, w); len(sv.Services) != 1 || sv.Services[0].ID != "web" || len(sv.Services[0].Members) != 2 || sv.Revision != 7 {
		t.Errorf("services after api = %+v", sv)
	}
	if sv := decode[apitype.FleetServices](t, r.do("GET", "/services?limit=1", operator, "")); len(sv.Services) != 1 || sv.Next != "api" {
		t.Errorf("services, one a page = %+v", sv)
	}
	want(t, r.do("GET", "/services?limit=0", operator, ""), http.StatusBadRequest, "limit")

	// /metrics?scope=fleet rolls the pool up over the whole fleet, as
	// /fleet does; without it, /metrics is this host's.
	w = r.do("GET", "/metrics?scope=fleet&summary=true", operator, "")
	want(t, w, http.StatusOK)
	if m := decode[apitype.MetricsResponse](t, w); m.Fleet != sum.Pool {
		t.Errorf("/metrics?scope=fleet pool = %+v, want the fleet's %+v", m.Fleet, sum.Pool)
	}
	if m := decode[apitype.MetricsResponse](t, r.do("GET", "/metrics?summary=true", operator, "")); m.Fleet == sum.Pool {
		t.Errorf("/metrics without scope=fleet rolled up the fleet: %+v", m.Fleet)
	}
	want(t, r.do("GET", "/metrics?scope=galaxy", operator, ""), http.StatusBadRequest, "scope")
}

// TestControlPlaneConfig: the configuration's shape, a write at the
// revision read, a stale write's 409, and each bad field named.
func TestControlPlaneConfig(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	ff := newFakeFleet()
	r.api.o.FleetHosts, r.api.o.FleetViews = ff, ff
	w := r.do("GET", "/control-plane/config", operator, "")
	want(t, w, http.StatusOK)
	raw := decode[map[string]any](t, w)
	for _, k := range []string{"revision", "config", "externally_managed", "token_sync"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("GET /control-plane/config has no %q: %s", k, w.Body)
		}
	}
	if w.Header().Get("Cache-Control") != "no-store" {
		t.Error("the configuration is cacheable")
	}
	body := `{"expected_revision": 0, "config": {"gateways": [{"id": "edge-1", "url": "https://edge-1.test:8443"}], "control_plane": [{"service_id": "web"}]}}`
	w = r.do("PUT", "/control-plane/config", operator, body)
	want(t, w, http.StatusOK)
	if c := decode[apitype.ControlPlaneConfig](t, w); c.Revision != 1 || c.Config.Gateways[0].ID != "edge-1" || c.Config.ControlPlane[0].ServiceID != "web" {
		t.Errorf("after the put: %+v", c)
	}
	want(t, r.do("PUT", "/control-plane/config", operator, body), http.StatusConflict, "stale", "revision 1")
	for _, tc := range []struct{ body, field string }{
		{`{"config": {}}`, "expected_revision"},
		{`{"expected_revision": 1}`, "config"},
		{`{"expected_revision": 1, "config": {"gateways": [{"id": "", "url": "http://x"}]}}`, "config.gateways[0].id"},
		{`{"expected_revision": 1, "config": {"gateways": [{"id": "x", "url": "ftp://x"}]}}`, "config.gateways[0].url"},
		{`{"expected_revision": 1, "config": {"gateways": [{"id": "x", "url": "http://x"}, {"id": "x", "url": "http://y"}]}}`, "config.gateways[1].id"},
		{`{"expected_revision": 1, "config": {"control_plane": [{"service_id": "a/b"}]}}`, "config.control_plane[0].service_id"},
	} {
		want(t, r.do("PUT", "/control-plane/config", operator, tc.body), http.StatusBadRequest, tc.field)
	}
	if c, _ := ff.ControlPlaneConfig(context.Background()); c.Revision != 1 {
		t.Errorf("a refused write changed the configuration: %+v", c)
	}
	view := r.mint(`{"name": "viewer", "admin": "view", "deployments": ["*"]}`)
	want(t, r.do("GET", "/control-plane/config", view, ""), http.StatusOK)
	want(t, r.do("PUT", "/control-plane/config", view, body), http.StatusForbidden)
}

// TestFleetViewWalls: without a fleet each view answers 409
// fleet_not_configured; an Ungated caller gets 403; a namespace-confined
// caller gets the fleet-wide 403 except on /fleet/deployments and a
// gateway's metrics, narrowed to its namespace.
func TestFleetViewWalls(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	for _, p := range fleetViewRoutes {
		w := r.do("GET", p, operator, "")
		want(t, w, http.StatusConflict, "not part of a fleet")
		if !strings.Contains(w.Body.String(), `"code":"fleet_not_configured"`) {
			t.Errorf("GET %s without a fleet: %s", p, w.Body)
		}
	}
	want(t, r.do("GET", "/metrics?scope=fleet", operator, ""), http.StatusConflict, "not part of a fleet")
	ff := newFakeFleet()
	r.api.o.FleetHosts, r.api.o.FleetViews = ff, ff
	team := r.mint(`{"name": "team-a", "admin": "view", "namespace": "team-a", "deployments": []}`)
	for _, p := range []string{"/fleet", "/fleet/network", "/services", "/control-plane/config"} {
		want(t, r.do("GET", p, team, ""), http.StatusForbidden, "fleet-wide")
	}
	want(t, r.do("PUT", "/control-plane/config", team, `{"expected_revision": 0, "config": {}}`), http.StatusForbidden)
	want(t, r.do("GET", "/metrics?scope=fleet", team, ""), http.StatusForbidden, "fleet-wide")
	w := r.do("GET", "/fleet/deployments", team, "")
	want(t, w, http.StatusOK)
	if ds := decode[apitype.FleetDeployments](t, w); ds.Matched != 1 || ds.Deployments[0].ID != "api" {
		t.Errorf("a team-a token's deployments = %+v", ds)
	}
	want(t, r.do("GET", "/fleet/deployments?namespace=default", team, ""), http.StatusForbidden, "team-a")
	w = r.do("GET", "/fleet/gateways/a/metrics?namespace=team-a", team, "")
	want(t, w, http.StatusOK)
	if gm := decode[apitype.FleetGatewayMetrics](t, w); gm.Matched != 1 || gm.Deployments[0].ID != "api" || gm.Host != (apitype.HostUsage{}) {
		t.Errorf("a team-a token's view of a = %+v", gm)
	}
	for _, p := range fleetViewRoutes {
		if w := r.do("GET", p, "", ""); w.Code != http.StatusUnauthorized {
			t.Errorf("GET %s without a credential: %d %s", p, w.Code, w.Body)
		}
	}

	// An ungated server (no operator password) still refuses the views
	// to callers without a credential.
	ungated := New(Options{Registry: r.reg, FleetHosts: ff, FleetViews: ff})
	for _, p := range fleetViewRoutes {
		req := httptest.NewRequest("GET", p, nil)
		rec := httptest.NewRecorder()
		ungated.ServeHTTP(rec, req)
		want(t, rec, http.StatusForbidden, "authenticated fleet view required")
	}
}

// TestDiscoveryStatus: a discovery-backed deployment's status is the
// contract's camelCase DiscoveryStatus, not cached; a deployment without
// discovery is a 400; a confined caller gets the deployment wall.
func TestDiscoveryStatus(t *testing.T) {
	r := newRigWith(t, auth.Confinement{}, func(o *registry.Options) {
		o.Spec.Discovery = true
		o.Discovered = func(_, id string) []registry.Peer {
			return []registry.Peer{{Addr: "127.0.0.1:9"}, {Addr: "bad peer"}}
		}
	})
	ff := newFakeFleet()
	r.api.o.FleetHosts, r.api.o.FleetViews = ff, ff
	want(t, r.do("POST", "/deployments", operator, `{"id": "front", "routes": [{"host": "front.example"}], "discovery": {"service_id": "web"}}`), http.StatusCreated)
	want(t, r.do("POST", "/deployments", operator, staticApp), http.StatusCreated)
	if e, _ := r.reg.Get("front"); !slices.Equal(e.Upstreams, []string{"127.0.0.1:9"}) || len(e.Pool.Backends()) != 1 {
		t.Errorf("the discovery-backed deployment's upstreams = %v, want the service's valid peer", e.Upstreams)
	}

	w := r.do("GET", "/deployments/front/discovery-status?staged=true", operator, "")
	want(t, w, http.StatusOK)
	if w.Header().Get("Cache-Control") != "no-store" {
		t.Error("the discovery status is cacheable")
	}
	got := w.Body.String()
	for _, k := range []string{`"serviceId":"web"`, `"sourceUrl":"etcd:///berth/fleet/services/web"`, `"version":42`, `"peer":"b:80"`, `"draining":true`, `"inFlight":1`} {
		if !strings.Contains(got, k) {
			t.Errorf("discovery status %s lacks %s", got, k)
		}
	}
	want(t, r.do("GET", "/deployments/web/discovery-status", operator, ""), http.StatusBadRequest, "not discovery-backed")
	want(t, r.do("GET", "/deployments/none/discovery-status", operator, ""), http.StatusNotFound)
	want(t, r.do("GET", "/deployments/front/discovery-status?staged=maybe", operator, ""), http.StatusBadRequest, "staged")
	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	want(t, r.do("GET", "/deployments/front/discovery-status", team, ""), http.StatusForbidden, `"front"`)
	want(t, r.do("GET", "/deployments/none/discovery-status", team, ""), http.StatusForbidden, `"none"`)
}
