package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/contracttest"
)

// envelopeOf decodes the error envelope of r, with its code.
func envelopeOf(t *testing.T, r reply) (msg, code string) {
	t.Helper()
	var e apitype.Error
	if err := json.Unmarshal(r.body, &e); err != nil || e.Message == "" {
		t.Fatalf("%s: not the error envelope", r)
	}
	return e.Message, e.Code
}

// TestPlugins: the plugin routes answer the contract's PluginView and
// NamespacePlugin; a config the schema refuses is a 400 naming the field;
// obs is on in a fresh berth and serves every namespace (berth records
// every namespace's telemetry: nothing to install), reaching the telemetry
// API with the namespace of the path; switched off it answers 409
// plugin_disabled, and the switch survives a restart; confined tokens act
// only in their own namespace, with no existence oracle, and not at all on
// the fleet routes. (The per-namespace install routes are tested on a
// probe plugin in packages plugin and admin.)
func TestPlugins(t *testing.T) {
	c := contracttest.MustLoad(t)
	w := startTenants(t, Options{})
	check := func(typ string, r reply, want int) {
		t.Helper()
		if r.code != want {
			t.Fatalf("%s: %s, want %d", typ, r, want)
		}
		if err := c.CheckJSON(typ, r.body); err != nil {
			t.Errorf("%s: %v\n%s", typ, err, r.body)
		}
	}
	refused := func(r reply, status int, prefix, code string) {
		t.Helper()
		if r.code != status {
			t.Fatalf("%s, want %d", r, status)
		}
		if msg, got := envelopeOf(t, r); !strings.HasPrefix(msg, prefix) || got != code {
			t.Errorf("%s, want %d %q… code %q", r, status, prefix, code)
		}
	}
	w.must(201, "POST", "/namespaces", w.op, `{"name":"team-a"}`, nil)

	// The fleet-level routes, the operator's only.
	check("PluginView", w.call(nil, "GET", "/api/plugins", w.op, ""), 200)
	r := w.call(nil, "GET", "/api/plugins/obs", w.op, "")
	check("PluginView", r, 200)
	var v apitype.PluginView
	json.Unmarshal(r.body, &v)
	if v.ID != "obs" || !v.Enabled || string(v.Config) != "{}" || (v.PerNamespace != nil && *v.PerNamespace) {
		t.Errorf("obs in a fresh berth: %+v, want on and fleet-wide", v)
	}
	refused(w.call(nil, "GET", "/api/plugins/nope", w.op, ""), 404, `no plugin named "nope"`, "")
	refused(w.call(nil, "PUT", "/api/plugins/obs", w.op, `{"enabled":true,"config":{"bogus":1}}`), 400, "config.bogus: ", "")
	refused(w.call(nil, "PUT", "/api/plugins/obs", w.op, `{"config":{}}`), 400, "enabled: ", "")
	refused(w.call(nil, "PUT", "/api/plugins/obs", w.op, `{"enabled":true,"confg":{}}`), 400, "confg: unknown field", "")
	for _, who := range []string{w.a, w.b} {
		for _, q := range [][2]string{{"GET", "/api/plugins"}, {"GET", "/api/plugins/obs"}, {"GET", "/api/plugins/obs/installs"},
			{"PUT", "/api/plugins/obs"}, {"POST", "/api/plugins/obs/enable"}, {"POST", "/api/plugins/nope/disable"}} {
			body := ""
			if q[0] == "PUT" {
				body = `{"enabled":true}`
			}
			if r := w.call(nil, q[0], q[1], who, body); r.code != 403 {
				t.Errorf("confined %s %s: %s, want 403", q[0], q[1], r)
			}
		}
	}

	// On: every namespace reaches its own telemetry, nothing to install.
	for ns, who := range map[string]string{"team-a": w.a, "team-b": w.b} {
		r := w.call(nil, "GET", "/namespaces/"+ns+"/plugins/obs/api/fleet?window=1h", who, "")
		check("ObsFleet", r, 200)
		var f apitype.ObsFleet
		json.Unmarshal(r.body, &f)
		if f.Window != "1h" {
			t.Errorf("%s's fleet: %s", ns, r.body)
		}
		r = w.call(nil, "GET", "/namespaces/"+ns+"/plugins/obs", who, "")
		check("NamespacePlugin", r, 200)
		var np apitype.NamespacePlugin
		json.Unmarshal(r.body, &np)
		if !np.Installed || !np.Enabled {
			t.Errorf("%s's obs: %s", ns, r.body)
		}
	}
	refused(w.call(nil, "PUT", "/namespaces/team-a/plugins/obs", w.a, `{}`), 409, `plugin "obs" is not installed per namespace`, "")
	refused(w.call(nil, "GET", "/namespaces/team-a/plugins/obs/ui", w.a, ""), 404, "the obs plugin has no /ui", "")
	refused(w.call(nil, "GET", "/namespaces/team-a/plugins/nope/api/fleet", w.a, ""), 404, `no plugin named "nope"`, "")
	check("NamespacePlugin", w.call(nil, "GET", "/namespaces/team-a/plugins", w.a, ""), 200)

	// Walls: team-b reaches nothing of team-a's, and a plugin that exists
	// there answers exactly as one that does not.
	for _, q := range [][2]string{{"GET", ""}, {"GET", "/obs"}, {"PUT", "/obs"}, {"DELETE", "/obs"}, {"GET", "/obs/api/fleet"}, {"POST", "/obs/api/alerts"}} {
		body := ""
		if q[0] == "PUT" || q[0] == "POST" {
			body = `{}`
		}
		there := w.call(nil, q[0], "/namespaces/team-a/plugins"+q[1], w.b, body)
		nowhere := w.call(nil, q[0], "/namespaces/team-a/plugins"+strings.Replace(q[1], "obs", "nope", 1), w.b, body)
		if there.code != 403 || string(there.body) != string(nowhere.body) || there.code != nowhere.code {
			t.Errorf("team-b %s team-a%s: %s; of a plugin that does not exist: %s; want the same 403", q[0], q[1], there, nowhere)
		}
	}
	// A view token of team-a reads its telemetry but writes no alert rule.
	var view auth.MintedView
	w.must(201, "POST", "/tokens", w.op, `{"name":"v","admin":"view","namespace":"team-a","deployments":[]}`, &view)
	check("ObsFleet", w.call(nil, "GET", "/namespaces/team-a/plugins/obs/api/fleet", bearer(view.Token), ""), 200)
	if r := w.call(nil, "POST", "/namespaces/team-a/plugins/obs/api/alerts", bearer(view.Token), `{}`); r.code != 403 {
		t.Errorf("view token writes an alert rule: %s", r)
	}
	refused(w.call(nil, "GET", "/namespaces/Team_A/plugins", w.op, ""), 400, `"Team_A" is not a valid namespace name`, "")

	// Off: nothing reaches obs; the switch survives a restart.
	check("PluginView", w.call(nil, "POST", "/api/plugins/obs/disable", w.op, ""), 200)
	refused(w.call(nil, "GET", "/namespaces/team-a/plugins/obs/api/fleet", w.a, ""), 409, `plugin "obs" is disabled`, "plugin_disabled")
	w.node.stop()
	n := startNode(t, w.o)
	r = n.call(nil, "GET", "/api/plugins/obs", w.op, "")
	json.Unmarshal(r.body, &v)
	if r.code != 200 || v.Enabled || v.UpdatedAt == 0 {
		t.Errorf("obs after a restart: %s, want still off", r)
	}
	if msg, code := envelopeOf(t, n.call(nil, "GET", "/namespaces/team-b/plugins/obs/api/fleet", w.b, "")); code != "plugin_disabled" {
		t.Errorf("disabled after a restart: %s %s", msg, code)
	}
	n.must(200, "POST", "/api/plugins/obs/enable", w.op, "", nil)
	check("ObsFleet", n.call(nil, "GET", "/namespaces/team-b/plugins/obs/api/fleet", w.b, ""), 200)
}
