package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	berth "github.com/berth-dev/berth/internal/server"
	"github.com/berth-dev/berth/internal/server/servertest"
)

// waitFor polls cond until it holds, failing after a generous deadline
// (it waits for a condition; it asserts nothing about speed).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFleetViewRoutes drives every fleet view method against a real
// berth on a real etcd member: the views, the control-plane
// configuration's compare-and-set (a stale revision is ErrStaleRevision),
// a discovery-backed deployment's status, and /metrics?scope=fleet.
func TestFleetViewRoutes(t *testing.T) {
	ctx := context.Background()
	ec := etcdtest.Start(t, 1)
	url := servertest.Start(t, berth.Options{AdminPassword: "pw",
		Fleet: berth.FleetOptions{Endpoints: ec.Endpoints(), HostID: "alpha", LeaseTTL: 2 * time.Second}}, nil)
	op, err := client.New(url, client.WithBasicAuth("admin", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer app.Close()
	if _, err := op.Create(ctx, apitype.DeploymentSpec{ID: "api", Routes: []apitype.RouteRule{{Host: "api.test"}},
		Upstreams: []string{strings.TrimPrefix(app.URL, "http://")}}); err != nil {
		t.Fatalf("create api: %v", err)
	}
	if _, err := op.Create(ctx, apitype.DeploymentSpec{ID: "front", Routes: []apitype.RouteRule{{Host: "front.test"}},
		Discovery: &apitype.DiscoverySpec{ServiceID: "api"}}); err != nil {
		t.Fatalf("create front: %v", err)
	}

	var fd *apitype.FleetDeployments
	waitFor(t, "both deployments in the fleet", func() bool {
		fd, err = op.FleetDeployments(ctx, client.FleetQuery{})
		if err != nil {
			t.Fatalf("FleetDeployments: %v", err)
		}
		return fd.Matched == 2
	})
	if fd.Deployments[0].ID != "api" || !slices.Equal(fd.Deployments[0].Hosts, []string{"alpha"}) || fd.Deployments[1].ID != "front" {
		t.Errorf("FleetDeployments = %+v", fd)
	}
	if fd, err := op.FleetDeployments(ctx, client.FleetQuery{Offset: 1, Limit: 1}); err != nil || fd.Matched != 2 || fd.Offset != 1 ||
		len(fd.Deployments) != 1 || fd.Deployments[0].ID != "front" {
		t.Errorf("FleetDeployments offset 1 limit 1: %+v, %v", fd, err)
	}
	if fd, err := op.FleetDeployments(ctx, client.FleetQuery{Namespace: "team-x"}); err != nil || fd.Matched != 0 {
		t.Errorf("FleetDeployments of an empty namespace: %+v, %v", fd, err)
	}
	if _, err := op.FleetDeployments(ctx, client.FleetQuery{Limit: -1}); err == nil {
		t.Error("FleetDeployments with a negative limit: no error")
	}

	sum, err := op.FleetSummary(ctx)
	if err != nil || sum.Self != "alpha" || len(sum.Gateways) != 1 || sum.Gateways[0].ID != "alpha" || sum.Pool.Deployments != 2 {
		t.Errorf("FleetSummary: %+v, %v", sum, err)
	}
	gm, err := op.FleetGatewayMetrics(ctx, "alpha", client.FleetQuery{Limit: 1})
	if err != nil || gm.ID != "alpha" || gm.Matched != 2 || len(gm.Deployments) != 1 || gm.Deployments[0].ID != "api" {
		t.Errorf("FleetGatewayMetrics(alpha): %+v, %v", gm, err)
	}
	if _, err := op.FleetGatewayMetrics(ctx, "gamma", client.FleetQuery{}); !client.IsNotFound(err) {
		t.Errorf("FleetGatewayMetrics(gamma): %v, want 404", err)
	}
	nw, err := op.FleetNetwork(ctx)
	if err != nil || len(nw.Gateways) != 1 || !slices.Equal(nw.Gateways[0].Deployments, []string{"api", "front"}) ||
		!slices.Contains(nw.Gateways[0].RouteHosts, "api.test") {
		t.Errorf("FleetNetwork: %+v, %v", nw, err)
	}

	var svcs *apitype.FleetServices
	waitFor(t, "service api in /services", func() bool {
		svcs, err = op.Services(ctx, "", 0)
		if err != nil {
			t.Fatalf("Services: %v", err)
		}
		return len(svcs.Services) > 0
	})
	if svcs.Services[0].ID != "api" || len(svcs.Services[0].Members) != 1 || svcs.Services[0].Members[0].Host != "alpha" || svcs.Revision == 0 {
		t.Errorf("Services = %+v", svcs)
	}
	if s, err := op.Services(ctx, "api", 1); err != nil || len(s.Services) != 0 {
		t.Errorf("Services after api: %+v, %v", s, err)
	}
	if _, err := op.Services(ctx, "", 1000); client.StatusCode(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Services limit 1000: %v, want 400", err)
	}

	ds, err := op.DiscoveryStatus(ctx, "front")
	if err != nil || ds.ServiceID != "api" || len(ds.Upstreams) != 1 || ds.Upstreams[0].Peer == "" {
		t.Errorf("DiscoveryStatus(front): %+v, %v", ds, err)
	}
	if _, err := op.DiscoveryStatus(ctx, "api"); client.StatusCode(err) != http.StatusBadRequest {
		t.Errorf("DiscoveryStatus(api), not discovery-backed: %v, want 400", err)
	}

	// The control-plane configuration: compare-and-set on its revision.
	cfg, err := op.ControlPlaneConfig(ctx)
	if err != nil || cfg.Revision != 0 || cfg.TokenSync.Source != "etcd" {
		t.Fatalf("ControlPlaneConfig before a write: %+v, %v", cfg, err)
	}
	doc := apitype.ControlPlaneDoc{Gateways: []apitype.ControlPlaneGateway{{ID: "edge-1", URL: "https://edge-1.example:9090"}},
		ControlPlane: []apitype.ControlPlaneService{{ServiceID: "api", Description: "the API"}}}
	put, err := op.PutControlPlaneConfig(ctx, 0, doc)
	if err != nil || put.Revision == 0 || len(put.Config.Gateways) != 1 || put.Config.ControlPlane[0].ServiceID != "api" {
		t.Fatalf("PutControlPlaneConfig: %+v, %v", put, err)
	}
	if got, err := op.ControlPlaneConfig(ctx); err != nil || got.Revision != put.Revision || got.Config.Gateways[0].URL != doc.Gateways[0].URL {
		t.Errorf("ControlPlaneConfig after the write: %+v, %v", got, err)
	}
	_, err = op.PutControlPlaneConfig(ctx, 0, doc)
	if !errors.Is(err, client.ErrStaleRevision) || !client.IsConflict(err) || !strings.Contains(err.Error(), "stale") {
		t.Errorf("PutControlPlaneConfig on a stale revision: %v, want ErrStaleRevision", err)
	}
	bad := apitype.ControlPlaneDoc{Gateways: []apitype.ControlPlaneGateway{{ID: "edge-1", URL: "ftp://x"}}}
	_, err = op.PutControlPlaneConfig(ctx, put.Revision, bad)
	if client.StatusCode(err) != http.StatusBadRequest || errors.Is(err, client.ErrStaleRevision) || !strings.Contains(err.Error(), "config.gateways[0].url") {
		t.Errorf("PutControlPlaneConfig with a bad URL: %v, want a 400 naming the field", err)
	}
	if _, err := op.PutControlPlaneConfig(ctx, -1, doc); err == nil {
		t.Error("PutControlPlaneConfig with a negative revision: no error")
	}

	m, err := op.Metrics(ctx, client.MetricsQuery{Fleet: true})
	if err != nil || m.Fleet.Deployments != 2 {
		t.Errorf("Metrics scope=fleet: %+v, %v", m, err)
	}

	// A berth with no fleet says so, and a 409 there is not a stale
	// revision.
	alone, _ := client.New(gatedServer(t), client.WithBasicAuth("admin", "pw"))
	if _, err := alone.FleetSummary(ctx); !client.IsConflict(err) {
		t.Errorf("FleetSummary without a fleet: %v, want 409", err)
	}
	if _, err := alone.PutControlPlaneConfig(ctx, 0, doc); !client.IsConflict(err) || errors.Is(err, client.ErrStaleRevision) {
		t.Errorf("PutControlPlaneConfig without a fleet: %v, want a 409 that is not ErrStaleRevision", err)
	}
}
