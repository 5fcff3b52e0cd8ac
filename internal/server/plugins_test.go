package server

import (
	"encoding/json"
	"slices"
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

// TestPlugins: the plugin routes answer the contract's PluginView,
// NamespacePlugin and PluginInstalls; a config the schema refuses is a 400
// naming the field; dispatch to a plugin that is off is 409
// plugin_disabled, to one the namespace has not installed 409
// plugin_not_installed, and otherwise reaches the plugin (obs, not
// configured: its 409); confined tokens act only in their own namespace,
// with no existence oracle, and not at all on the fleet routes; the
// records survive a restart.
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
	if v.ID != "obs" || v.Enabled || string(v.Config) != "{}" || v.PerNamespace == nil || !*v.PerNamespace {
		t.Errorf("obs before any write: %+v", v)
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

	// Off: nothing reaches obs, and no namespace installs it.
	refused(w.call(nil, "GET", "/namespaces/team-a/plugins/obs/api/fleet", w.a, ""), 409, `plugin "obs" is disabled`, "plugin_disabled")
	refused(w.call(nil, "PUT", "/namespaces/team-a/plugins/obs", w.a, `{}`), 409, `plugin "obs" is disabled`, "plugin_disabled")
	r = w.call(nil, "POST", "/api/plugins/obs/enable", w.op, "")
	check("PluginView", r, 200)
	json.Unmarshal(r.body, &v)
	if !v.Enabled || !slices.Equal(v.InstalledIn, []string{"team-a"}) {
		t.Errorf("enabled: %+v, want it installed in the declared team-a", v)
	}
	check("PluginView", w.call(nil, "PUT", "/api/plugins/obs", w.op, `{"enabled":true,"config":{}}`), 200)

	// team-a has it (enabling installed it); team-b not yet.
	refused(w.call(nil, "GET", "/namespaces/team-b/plugins/obs/api/fleet", w.b, ""), 409, `plugin "obs" is not installed in namespace "team-b"`, "plugin_not_installed")
	refused(w.call(nil, "POST", "/namespaces/team-b/plugins/obs/api/alerts", w.b, `{}`), 409, `plugin "obs" is not installed`, "plugin_not_installed")
	refused(w.call(nil, "GET", "/namespaces/team-a/plugins/obs/api/fleet?window=1h", w.a, ""), 409, "the obs plugin is not configured", "")
	refused(w.call(nil, "GET", "/namespaces/team-a/plugins/obs/ui", w.a, ""), 404, "the obs plugin has no /ui", "")
	refused(w.call(nil, "GET", "/namespaces/team-a/plugins/nope/api/fleet", w.a, ""), 404, `no plugin named "nope"`, "")
	check("NamespacePlugin", w.call(nil, "GET", "/namespaces/team-a/plugins", w.a, ""), 200)
	check("NamespacePlugin", w.call(nil, "GET", "/namespaces/team-a/plugins/obs", w.a, ""), 200)

	// team-b installs it for itself, with a config the schema checks.
	refused(w.call(nil, "PUT", "/namespaces/team-b/plugins/obs", w.b, `{"config":{"level":"debug"}}`), 400, "config.level: unknown field", "")
	r = w.call(nil, "PUT", "/namespaces/team-b/plugins/obs", w.b, `{"config":{}}`)
	check("NamespacePlugin", r, 200)
	var np apitype.NamespacePlugin
	json.Unmarshal(r.body, &np)
	if !np.Installed || !np.Enabled || !strings.HasPrefix(np.InstalledBy, "token:") || np.InstalledAt == nil {
		t.Errorf("team-b's install: %s", r.body)
	}
	refused(w.call(nil, "DELETE", "/namespaces/team-b/plugins/obs/api/alerts/a1", w.b, ""), 409, "the obs plugin is not configured", "")

	// Walls: team-b reaches nothing of team-a's, and a plugin that exists
	// and is installed there answers exactly as one that does not.
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
	// A view token of team-a reads but does not install.
	var view auth.MintedView
	w.must(201, "POST", "/tokens", w.op, `{"name":"v","admin":"view","namespace":"team-a","deployments":[]}`, &view)
	check("NamespacePlugin", w.call(nil, "GET", "/namespaces/team-a/plugins/obs", bearer(view.Token), ""), 200)
	if r := w.call(nil, "DELETE", "/namespaces/team-a/plugins/obs", bearer(view.Token), ""); r.code != 403 {
		t.Errorf("view token uninstalls: %s", r)
	}
	refused(w.call(nil, "GET", "/namespaces/Team_A/plugins", w.op, ""), 400, `"Team_A" is not a valid namespace name`, "")

	r = w.call(nil, "GET", "/api/plugins/obs/installs", w.op, "")
	check("PluginInstalls", r, 200)
	var ins apitype.PluginInstalls
	json.Unmarshal(r.body, &ins)
	if !slices.Equal(ins.Namespaces, []string{"team-a", "team-b"}) || ins.Installs["team-a"].InstalledBy != nil ||
		ins.Installs["team-b"].InstalledBy == nil || *ins.Installs["team-b"].InstalledBy != np.InstalledBy {
		t.Errorf("installs: %s", r.body)
	}
	want := string(r.body)

	// The records survive a restart.
	w.node.stop()
	n := startNode(t, w.o)
	r = n.call(nil, "GET", "/api/plugins/obs/installs", w.op, "")
	if r.code != 200 || string(r.body) != want {
		t.Errorf("installs after a restart: %s\nwant %s", r, want)
	}
	r = n.call(nil, "GET", "/api/plugins/obs", w.op, "")
	json.Unmarshal(r.body, &v)
	if !v.Enabled || v.UpdatedAt == 0 || !slices.Equal(v.InstalledIn, []string{"team-a", "team-b"}) {
		t.Errorf("obs after a restart: %s", r)
	}
	// Disabled, it keeps its installs and answers plugin_disabled.
	n.must(200, "POST", "/api/plugins/obs/disable", w.op, "", nil)
	r = n.call(nil, "GET", "/namespaces/team-b/plugins/obs/api/fleet", w.b, "")
	if msg, code := envelopeOf(t, r); r.code != 409 || code != "plugin_disabled" {
		t.Errorf("disabled: %d %s %s", r.code, msg, code)
	}
	r = n.call(nil, "DELETE", "/namespaces/team-b/plugins/obs", w.b, "")
	check("NamespacePlugin", r, 200)
	if strings.Contains(string(r.body), "installed_at") || !strings.Contains(string(r.body), `"installed":false`) {
		t.Errorf("uninstalled: %s", r.body)
	}
}
