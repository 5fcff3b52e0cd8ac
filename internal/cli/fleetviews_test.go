package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/server"
)

// waitOutput runs a CLI command until its output satisfies ok, failing
// after a generous deadline (it waits for the fleet's reports to arrive;
// it asserts nothing about speed), and returns the last output.
func waitOutput(t *testing.T, what string, ok func(string) bool, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out, errs := berth(t, "", args...)
		if code == 0 && ok(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: berth %s: exit %d\nstdout: %s\nstderr: %s", what, strings.Join(args, " "), code, out, errs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestFleetViewCommands: get fleet, get fleet-deployments, get services
// and describe deployment's discovery section against two real berths on
// a real etcd member. alpha serves api from a local upstream (so it is
// service api's member); beta's front is discovery-backed by service
// api. A berth with no fleet says so.
func TestFleetViewCommands(t *testing.T) {
	c := etcdtest.Start(t, 1)
	fleet := func(id string) server.Options {
		return server.Options{Fleet: server.FleetOptions{Endpoints: c.Endpoints(), HostID: id, Slots: 4, LeaseTTL: 2 * time.Second}}
	}
	a := runServer(t, fleet("alpha"), nil)
	b := runServer(t, fleet("beta"), nil)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer app.Close()
	opA := []string{"--server", a, "--password", "opw"}
	opB := []string{"--server", b, "--password", "opw"}
	mustRun(t, `{"id":"api","routes":[{"host":"api.test"}],"upstreams":["`+strings.TrimPrefix(app.URL, "http://")+`"]}`,
		append(opA, "apply", "-f", "-")...)
	mustRun(t, `{"id":"front","routes":[{"host":"front.test"}],"discovery":{"service_id":"api"}}`, append(opB, "apply", "-f", "-")...)

	// Both reported, and beta's front has found alpha's member (it is
	// ready only then).
	out := waitOutput(t, "both hosts' reports in get fleet", func(out string) bool {
		return strings.Contains(out, "fleet pool: 2 deployments, 2 ready") && !strings.Contains(out, "never")
	}, append(opA, "get", "fleet")...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || strings.Join(strings.Fields(lines[0]), " ") != "HOST STATE DEPLOYMENTS READY IN-FLIGHT REPORTED" ||
		!strings.HasPrefix(lines[1], "alpha (this)") || !strings.Contains(lines[1], "active") || !strings.HasSuffix(lines[1], " ago") ||
		!strings.HasPrefix(lines[2], "beta ") || lines[4] != "fleet pool: 2 deployments, 2 ready, 0 draining, 0 pending, 0 in flight" {
		t.Fatalf("get fleet:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[3] != "1" || f[4] != "1" {
		t.Errorf("get fleet: alpha's row %q, want 1 deployment, 1 ready", lines[1])
	}
	if out := mustRun(t, "", append(opB, "get", "fleet", "-o", "name")...); out != "host/alpha\nhost/beta\n" {
		t.Errorf("get fleet -o name: %q", out)
	}
	if out := mustRun(t, "", append(opB, "get", "fleet", "-o", "json")...); !strings.Contains(out, `"self": "beta"`) || !strings.Contains(out, `"gateways"`) {
		t.Errorf("get fleet -o json:\n%s", out)
	}
	if code, _, _ := berth(t, "", append(opA, "get", "fleet", "alpha")...); code != exitUsage {
		t.Errorf("get fleet NAME: exit %d, want usage", code)
	}

	out = mustRun(t, "", append(opB, "get", "fleet-deployments")...)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAMESPACE KIND HOSTS READY DRAINING IN-FLIGHT" ||
		strings.Join(strings.Fields(lines[1])[:5], " ") != "api default static alpha 1" || !strings.HasPrefix(lines[2], "front ") || !strings.Contains(lines[2], "beta") {
		t.Fatalf("get fleet-deployments:\n%s", out)
	}
	if out := mustRun(t, "", append(opA, "get", "fleet-deployments", "-o", "name")...); out != "deployment/api\ndeployment/front\n" {
		t.Errorf("get fleet-deployments -o name: %q", out)
	}
	if out := mustRun(t, "", append(opA, "get", "fleet-deployment/front", "-o", "yaml")...); !strings.Contains(out, "id: front") || strings.Contains(out, "id: api") || !strings.Contains(out, "matched: 1") {
		t.Errorf("get fleet-deployment/front -o yaml:\n%s", out)
	}
	if code, _, errs := berth(t, "", append(opA, "get", "fleet-deployments", "-n", "team-x")...); code != 0 || !strings.Contains(errs, "No deployments found") {
		t.Errorf("get fleet-deployments -n team-x: %d %q", code, errs)
	}
	if code, _, errs := berth(t, "", append(opA, "get", "fleet-deployments", "nope")...); code == 0 || !strings.Contains(errs, `no deployment "nope"`) {
		t.Errorf("get fleet-deployments nope: %d %q", code, errs)
	}

	out = waitOutput(t, "service api in get services", func(out string) bool { return strings.Contains(out, "@alpha") },
		append(opB, "get", "services")...)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "SERVICE MEMBERS" || !strings.HasPrefix(lines[1], "api ") ||
		!strings.HasSuffix(lines[1], "@alpha") || strings.Contains(lines[1], "draining") {
		t.Fatalf("get services:\n%s", out)
	}
	peer := strings.TrimSuffix(strings.Fields(lines[1])[1], "@alpha")
	if out := mustRun(t, "", append(opA, "get", "services", "-o", "name")...); out != "service/api\n" {
		t.Errorf("get services -o name: %q", out)
	}
	if out := mustRun(t, "", append(opA, "get", "svc", "api", "-o", "json")...); !strings.Contains(out, `"peer": "`+peer+`"`) || !strings.Contains(out, `"revision"`) {
		t.Errorf("get svc api -o json:\n%s", out)
	}

	out = mustRun(t, "", append(opB, "describe", "deployment", "front")...)
	if !strings.Contains(out, "Discovery: service api, revision ") || !strings.Contains(out, "  "+peer+" ") {
		t.Errorf("describe deployment front: no discovery section naming %s:\n%s", peer, out)
	}
	if out := mustRun(t, "", append(opA, "describe", "deployment", "api")...); strings.Contains(out, "Discovery:") {
		t.Errorf("describe deployment api, not discovery-backed, shows discovery:\n%s", out)
	}

	// alpha drains: its member is marked so.
	mustRun(t, "", append(opA, "host", "drain", "alpha")...)
	waitOutput(t, "alpha's member draining", func(out string) bool { return strings.Contains(out, peer+"@alpha (draining)") },
		append(opB, "get", "services")...)

	alone := runServer(t, server.Options{}, nil)
	for _, kind := range []string{"fleet", "fleet-deployments", "services"} {
		if code, _, errs := berth(t, "", "--server", alone, "--password", "opw", "get", kind); code == 0 || !strings.Contains(errs, "not part of a fleet") {
			t.Errorf("get %s without a fleet: %d %q", kind, code, errs)
		}
	}
}
