package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/store"
)

// echo is a per-namespace plugin that records the requests reaching it.
type echo struct {
	mu   sync.Mutex
	seen []string
}

func (*echo) Info() plugin.Info {
	return plugin.Info{ID: "echo", Name: "Echo", Description: "records requests",
		ConfigSchema: json.RawMessage(`{"type":"object"}`), InstallSchema: json.RawMessage(`{"type":"object"}`)}
}
func (*echo) Apply(context.Context, bool, json.RawMessage) error { return nil }
func (*echo) Status() json.RawMessage                            { return nil }
func (e *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.seen = append(e.seen, plugin.Namespace(r.Context())+" "+r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+string(body))
	e.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// TestPluginDispatchRoutes: through the API's routes, a plugin call
// reaches the plugin with the namespace of the path and the rest of it,
// GET at the view tier and other methods at the admin tier; a namespace
// that gets its first deployment gets the enabled per-namespace plugins,
// and one that uninstalled a plugin does not get it back by deploying.
func TestPluginDispatchRoutes(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := &echo{}
	if r.api.o.Plugins, err = plugin.New(t.Context(), plugin.Options{Records: st, Plugins: []plugin.Plugin{e}}); err != nil {
		t.Fatal(err)
	}
	want(t, r.do("POST", "/api/plugins/echo/enable", operator, ""), http.StatusOK)
	admin := r.mint(`{"name": "a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	view := r.mint(`{"name": "v", "admin": "view", "namespace": "team-a", "deployments": []}`)
	want(t, r.do("PUT", "/namespaces/team-a/plugins/echo", admin, ""), http.StatusOK) // no body: {}

	want(t, r.do("GET", "/namespaces/team-a/plugins/echo/api/deployments/web/logs?limit=5", view, ""), http.StatusAccepted)
	want(t, r.do("GET", "/namespaces/team-a/plugins/echo/", view, ""), http.StatusAccepted)
	want(t, r.do("POST", "/namespaces/team-a/plugins/echo/api/alerts", view, `{"a":1}`), http.StatusForbidden)
	want(t, r.do("POST", "/namespaces/team-a/plugins/echo/api/alerts", admin, `{"a":1}`), http.StatusAccepted)
	want(t, r.do("PATCH", "/namespaces/team-a/plugins/echo/x", admin, `{}`), http.StatusAccepted)
	want(t, r.do("GET", "/namespaces/team-b/plugins/echo/x", admin, ""), http.StatusForbidden, `"team-b"`)
	wantSeen := []string{
		"team-a GET /api/deployments/web/logs?limit=5 ",
		"team-a GET /? ",
		`team-a POST /api/alerts? {"a":1}`,
		"team-a PATCH /x? {}",
	}
	if strings.Join(e.seen, "\n") != strings.Join(wantSeen, "\n") {
		t.Errorf("the plugin saw\n%s\nwant\n%s", strings.Join(e.seen, "\n"), strings.Join(wantSeen, "\n"))
	}

	// A new namespace's first deployment installs the plugin there; after
	// an uninstall, neither replacing that deployment nor adding one does.
	want(t, r.do("POST", "/deployments", operator, `{"id": "c1", "namespace": "team-c", "routes": [{"host": "c1.example"}], "upstreams": ["127.0.0.1:9"]}`), http.StatusCreated)
	ins := decode[apitype.PluginInstalls](t, r.do("GET", "/api/plugins/echo/installs", operator, ""))
	if strings.Join(ins.Namespaces, ",") != "team-a,team-c" || ins.Installs["team-a"].InstalledBy == nil || ins.Installs["team-c"].InstalledBy != nil {
		t.Errorf("installs after team-c's first deployment: %+v", ins)
	}
	want(t, r.do("DELETE", "/namespaces/team-c/plugins/echo", operator, ""), http.StatusOK)
	want(t, r.do("POST", "/deployments", operator, `{"id": "c1", "namespace": "team-c", "routes": [{"host": "c1.example"}], "upstreams": ["127.0.0.1:8"]}`), http.StatusCreated)
	want(t, r.do("POST", "/deployments", operator, `{"id": "c2", "namespace": "team-c", "routes": [{"host": "c2.example"}], "upstreams": ["127.0.0.1:9"]}`), http.StatusCreated)
	ins = decode[apitype.PluginInstalls](t, r.do("GET", "/api/plugins/echo/installs", operator, ""))
	if strings.Join(ins.Namespaces, ",") != "team-a" {
		t.Errorf("installs after team-c uninstalled and deployed again: %v", ins.Namespaces)
	}
}
