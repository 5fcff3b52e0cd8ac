package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
)

// TestFleetDiscovery: two berths on one etcd. beta serves deployment api
// from a local upstream and publishes it as service "api"; alpha's
// static deployment front, discovery-backed by service "api", routes
// through beta's gateway to it. /fleet/deployments on either host shows
// both deployments on their hosts; alpha's discovery status lists beta's
// gateway; the fleet views refuse callers without a credential.
func TestFleetDiscovery(t *testing.T) {
	c := etcdtest.Start(t, 1)
	fleet := func(id string) func(*Options) {
		return func(o *Options) {
			o.Fleet = FleetOptions{Endpoints: c.Endpoints(), HostID: id, LeaseTTL: 2 * time.Second}
		}
	}
	a := startWith(t, "", fleet("alpha"))
	b := startWith(t, "", fleet("beta"))
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "api at beta for %s", r.Host)
	}))
	defer app.Close()

	if r := b.json("POST", "/deployments", `{"id":"api","routes":[{"host":"api.test"}],"upstreams":["`+strings.TrimPrefix(app.URL, "http://")+`"]}`); r.code != 201 {
		t.Fatalf("register api on beta: %d %s", r.code, r.body)
	}
	if r := a.json("POST", "/deployments", `{"id":"front","routes":[{"host":"api.test"}],"discovery":{"service_id":"api"}}`); r.code != 201 {
		t.Fatalf("register front on alpha: %d %s", r.code, r.body)
	}
	if r := a.json("POST", "/deployments", `{"id":"both","routes":[{"host":"both.test"}],"upstreams":["127.0.0.1:1"],"discovery":{"service_id":"api"}}`); r.code != 400 || !strings.Contains(errMsg(t, r), "discovery") {
		t.Fatalf("upstreams beside discovery: %d %s", r.code, r.body)
	}

	// Through alpha's gateway to beta's, to beta's upstream.
	var last resp
	waitForCond(t, "alpha to route front through beta", func() bool {
		last = get(t, a.proxy+"/", "api.test")
		return last.code == 200
	})
	if string(last.body) != "api at beta for api.test" {
		t.Fatalf("through alpha: %q", last.body)
	}

	gw := strings.TrimPrefix(b.proxy, "http://")
	r := a.do("GET", "/deployments/front/discovery-status?staged=true", "", "")
	var ds apitype.DiscoveryStatus
	if r.code != 200 || json.Unmarshal(r.body, &ds) != nil || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("discovery status: %d %v %s", r.code, r.header, r.body)
	}
	if ds.ServiceID != "api" || len(ds.Upstreams) != 1 || ds.Upstreams[0].Peer != gw || ds.Upstreams[0].Draining || ds.Version == nil || *ds.Version == 0 {
		t.Errorf("discovery status = %s, want beta's gateway %s", r.body, gw)
	}
	// Another namespace's deployment naming the same service gets none of
	// its members, and learns nothing of it.
	if r := a.json("POST", "/namespaces", `{"name":"team-a"}`); r.code != 201 && r.code != 200 {
		t.Fatalf("namespace: %d %s", r.code, r.body)
	}
	if r := a.json("POST", "/deployments", `{"id":"spy","namespace":"team-a","routes":[{"host":"spy.test"}],"discovery":{"service_id":"api"}}`); r.code != 201 {
		t.Fatalf("register spy on alpha: %d %s", r.code, r.body)
	}
	if e, ok := a.s.registry.Get("spy"); !ok || len(e.Upstreams) != 0 {
		t.Fatalf("team-a's spy got another namespace's members: %+v", e.Upstreams)
	}
	r = a.do("GET", "/deployments/spy/discovery-status", "", "")
	if r.code != 200 || !strings.Contains(string(r.body), `"upstreams":[]`) {
		t.Fatalf("spy's discovery status: %d %s", r.code, r.body)
	}
	if r := get(t, a.proxy+"/", "spy.test"); r.code == 200 {
		t.Fatalf("spy served through another namespace's members: %d %s", r.code, r.body)
	}
	if r := a.do("DELETE", "/deployments/spy", "", ""); r.code != 204 && r.code != 200 {
		t.Fatalf("delete spy: %d %s", r.code, r.body)
	}
	if r := a.do("GET", "/deployments/nope/discovery-status", "", ""); r.code != 404 {
		t.Errorf("discovery status of no deployment: %d %s", r.code, r.body)
	}

	// The fleet views need a credential, even on an ungated berth.
	if r := a.do("GET", "/fleet/deployments", "", ""); r.code != 403 || !strings.Contains(errMsg(t, r), "authenticated fleet view required") {
		t.Fatalf("ungated /fleet/deployments: %d %s", r.code, r.body)
	}
	for _, h := range []*harness{a, b} {
		var minted apitype.MintedToken
		if r := h.json("POST", "/tokens", `{"name":"viewer","admin":"view","deployments":["*"]}`); r.code != 201 || json.Unmarshal(r.body, &minted) != nil {
			t.Fatalf("mint: %d %s", r.code, r.body)
		}
		var fd apitype.FleetDeployments
		waitForCond(t, "both deployments in /fleet/deployments", func() bool {
			r := h.do("GET", "/fleet/deployments", "", "", "Authorization", "Bearer "+minted.Token)
			if r.code != 200 {
				t.Fatalf("/fleet/deployments: %d %s", r.code, r.body)
			}
			fd = apitype.FleetDeployments{}
			return json.Unmarshal(r.body, &fd) == nil && fd.Matched == 2
		})
		if fd.Deployments[0].ID != "api" || !slices.Equal(fd.Deployments[0].Hosts, []string{"beta"}) || fd.Deployments[0].Pool.Ready != 1 ||
			fd.Deployments[1].ID != "front" || !slices.Equal(fd.Deployments[1].Hosts, []string{"alpha"}) {
			t.Errorf("fleet deployments = %+v", fd)
		}
		r := h.do("GET", "/fleet", "", "", "Authorization", "Bearer "+minted.Token)
		var sum apitype.FleetSummary
		if r.code != 200 || json.Unmarshal(r.body, &sum) != nil || len(sum.Gateways) != 2 || sum.Pool.Deployments != 2 {
			t.Errorf("/fleet: %d %s", r.code, r.body)
		}
		r = h.do("GET", "/services", "", "", "Authorization", "Bearer "+minted.Token)
		var svcs apitype.FleetServices
		if r.code != 200 || json.Unmarshal(r.body, &svcs) != nil || len(svcs.Services) != 1 || svcs.Services[0].ID != "api" || svcs.Services[0].Members[0].Host != "beta" {
			t.Errorf("/services: %d %s", r.code, r.body)
		}
	}

	// beta drains: its member drains, and alpha has no upstream left.
	if r := a.do("POST", "/fleet/hosts/beta/drain", "", ""); r.code != 200 {
		t.Fatalf("drain beta: %d %s", r.code, r.body)
	}
	waitForCond(t, "alpha to drop beta's draining gateway", func() bool {
		e, ok := a.s.registry.Get("front")
		return ok && len(e.Upstreams) == 0
	})
	if r := get(t, a.proxy+"/", "api.test"); r.code == 200 {
		t.Errorf("front still served through a draining host: %d %s", r.code, r.body)
	}
}
