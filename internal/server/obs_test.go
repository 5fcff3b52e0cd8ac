package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/telemetry"
)

// TestObsThroughBerth: a request proxied by a real berth shows up in its
// deployment's logs (path without the query, the backend that served it)
// and in its namespace's fleet, in the contract's shapes; /metrics' obs
// counts it for the operator. A team-a token reads nothing of team-b's
// telemetry, and what it is refused answers the same whether the thing
// exists or not.
func TestObsThroughBerth(t *testing.T) {
	c := contracttest.MustLoad(t)
	w := startTenants(t, Options{})
	w.must(201, "POST", "/namespaces", w.op, `{"name":"team-a","domains":["a.test"]}`, nil)
	w.must(201, "POST", "/namespaces", w.op, `{"name":"team-b","domains":["b.test"]}`, nil)
	aUp, bUp := addr(backend(t, "team-a")), addr(backend(t, "team-b"))
	w.must(201, "POST", "/deployments", w.a, staticBody("a-web", "", `[{"host":"web.a.test"}]`, aUp), nil)
	w.must(201, "POST", "/deployments", w.b, staticBody("b-web", "", `[{"host":"web.b.test"}]`, bUp), nil)
	if r := w.proxyGet("web.a.test", "/items/7?token=SECRET-QUERY"); r.code != 200 {
		t.Fatalf("proxied: %d %s", r.code, r.body)
	}
	if r := w.proxyGet("web.b.test", "/b-only"); r.code != 200 {
		t.Fatalf("proxied: %d %s", r.code, r.body)
	}
	if err := w.s.telemetry.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	base := "/namespaces/team-a/plugins/obs/api"
	r := w.call(nil, "GET", base+"/deployments/a-web/logs", w.a, "")
	if r.code != 200 {
		t.Fatalf("logs: %s", r)
	}
	if err := c.CheckJSON("ObsLogs", r.body); err != nil {
		t.Error(err)
	}
	var logs apitype.ObsLogs
	json.Unmarshal(r.body, &logs)
	if len(logs.Rows) != 1 || logs.Rows[0].Source != "access" || !strings.HasPrefix(logs.Rows[0].Message, "GET /items/7 200 ") ||
		logs.Rows[0].Backend == nil || *logs.Rows[0].Backend != aUp {
		t.Fatalf("logs %s", r.body)
	}
	if strings.Contains(string(r.body), "SECRET-QUERY") {
		t.Errorf("the query string was stored: %s", r.body)
	}
	r = w.call(nil, "GET", base+"/fleet?window=15m", w.a, "")
	if err := c.CheckJSON("ObsFleet", r.body); r.code != 200 || err != nil {
		t.Fatalf("fleet: %s %v", r, err)
	}
	var fl apitype.ObsFleet
	json.Unmarshal(r.body, &fl)
	if len(fl.Deployments) != 1 || fl.Deployments[0].ID != "a-web" || fl.Deployments[0].LogLines != 1 {
		t.Errorf("team-a's fleet %s", r.body)
	}
	var sum float64
	for _, b := range fl.Deployments[0].Buckets {
		if b.RequestsPerSec != nil {
			sum += *b.RequestsPerSec * float64(fl.StepSecs)
		}
	}
	if sum != 1 {
		t.Errorf("the fleet's buckets count %v requests, want 1", sum)
	}
	r = w.call(nil, "GET", base+"/deployments/a-web", w.a, "")
	if err := c.CheckJSON("ObsDeployment", r.body); r.code != 200 || err != nil {
		t.Fatalf("deployment: %s %v", r, err)
	}
	var dep apitype.ObsDeployment
	json.Unmarshal(r.body, &dep)
	if len(dep.Backends) != 1 || dep.Backends[0] != aUp {
		t.Errorf("backends %v, want [%s]", dep.Backends, aUp)
	}

	// The wall: team-b's namespace is one 403 whatever exists there; its
	// deployment seen through team-a's namespace is the 404 of none.
	other := w.call(nil, "GET", "/namespaces/team-b/plugins/obs/api/deployments/b-web/logs", w.a, "")
	none := w.call(nil, "GET", "/namespaces/team-z/plugins/obs/api/deployments/b-web/logs", w.a, "")
	if other.code != 403 || none.code != 403 || strings.Replace(errorOf(t, other), "team-b", "team-z", 1) != errorOf(t, none) {
		t.Errorf("team-b's namespace: %s; a namespace that does not exist: %s", other, none)
	}
	other = w.call(nil, "GET", base+"/deployments/b-web/logs", w.a, "")
	none = w.call(nil, "GET", base+"/deployments/b-none/logs", w.a, "")
	if other.code != 404 || none.code != 404 || strings.Replace(errorOf(t, other), "b-web", "b-none", 1) != errorOf(t, none) {
		t.Errorf("team-b's deployment: %s; one that does not exist: %s", other, none)
	}
	if r := w.call(nil, "POST", base+"/alerts", w.a, `{"deployment":"b-web","threshold":1,"webhook_url":"https://example.com/h"}`); r.code != 400 {
		t.Errorf("an alert on team-b's deployment: %s", r)
	}
	// The operator reads team-b's, and /metrics counts both requests.
	w.must(200, "GET", "/namespaces/team-b/plugins/obs/api/deployments/b-web/logs", w.op, "", &logs)
	if len(logs.Rows) != 1 || !strings.HasPrefix(logs.Rows[0].Message, "GET /b-only 200") {
		t.Errorf("team-b's logs %+v", logs.Rows)
	}
	r = w.call(nil, "GET", "/metrics", w.op, "")
	if err := c.CheckJSON("MetricsResponse", r.body); err != nil {
		t.Error(err)
	}
	var m apitype.MetricsResponse
	json.Unmarshal(r.body, &m)
	if m.Obs == nil || m.Obs.Shipped < 2 || !m.Obs.Healthy || m.Obs.Dropped != 0 {
		t.Errorf("/metrics obs %+v", m.Obs)
	}
	var ma apitype.MetricsResponse
	w.must(200, "GET", "/metrics", w.a, "", &ma)
	if ma.Obs != nil {
		t.Errorf("a namespace token sees /metrics' obs %+v", ma.Obs)
	}
}

// TestReplicaOutputInTelemetry: what a vm deployment's replica prints
// reaches the telemetry store, under the replica as its backend.
func TestReplicaOutputInTelemetry(t *testing.T) {
	h := start(t, "")
	if r := h.json("POST", "/deployments", vmSpec("web", `,"scaling":{"min_replicas":1,"max_replicas":1}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "a ready replica", func() bool { return h.status("web").Ready == 1 })
	vmID := h.status("web").VMs[0].SandboxID
	var logs apitype.ObsLogs
	waitFor(t, "the replica's output in the telemetry store", func() bool {
		r := h.do("GET", "/namespaces/default/plugins/obs/api/deployments/web/logs?q=listening", "", "")
		return r.code == 200 && json.Unmarshal(r.body, &logs) == nil && len(logs.Rows) > 0
	})
	row := logs.Rows[0]
	if row.Message != "test app listening" || row.Source != "stdout" || row.Backend == nil || *row.Backend != vmID {
		t.Errorf("row %+v (backend %v), want the app's line from %s", row, row.Backend, vmID)
	}
}

// TestSampledUsagePerDeployment: the telemetry sample carries a
// deployment's CPU and memory, summed over its replicas as the driver
// reads them, and none for a deployment with no replica.
func TestSampledUsagePerDeployment(t *testing.T) {
	h := start(t, "")
	if r := h.json("POST", "/deployments", vmSpec("web", `,"scaling":{"min_replicas":1,"max_replicas":1}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	if r := h.json("POST", "/deployments", vmSpec("idle", `,"scaling":{"min_replicas":0,"max_replicas":1}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "a ready replica", func() bool { return h.status("web").Ready == 1 })
	got := map[string]telemetry.Gauge{}
	for _, g := range h.s.sampleGauges() {
		got[g.Deployment] = g
	}
	if g := got["web"]; g.Ready != 1 || g.MemoryBytes <= 0 || g.CPUPercent < 0 {
		t.Errorf("web's gauge %+v, want one ready replica with its memory and CPU read", g)
	}
	if g, ok := got["idle"]; !ok || g.MemoryBytes != -1 || g.CPUPercent != -1 {
		t.Errorf("idle's gauge %+v (present %v), want no usage (-1) with no replica", g, ok)
	}
}
