package obsplugin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/plugin/obsplugin"
)

// TestAdapter: the telemetry API sees /api/... with the namespace in the
// context and as the path value "ns", the rest after /api/ as "rest";
// other paths, /ui included, are a 404 that never reaches it.
func TestAdapter(t *testing.T) {
	var got []string
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" ns="+plugin.Namespace(r.Context())+" pv="+r.PathValue("ns")+" rest="+r.PathValue("rest"))
		w.WriteHeader(http.StatusNoContent)
	})
	p := obsplugin.New(api)
	serve := func(method, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r = r.WithContext(plugin.WithCall(r.Context(), "team-a", json.RawMessage(`{}`)))
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		return w
	}
	if w := serve("GET", "/api/deployments/web/logs?limit=5"); w.Code != http.StatusNoContent {
		t.Errorf("api: %d %s", w.Code, w.Body)
	}
	if w := serve("DELETE", "/api/alerts/a1"); w.Code != http.StatusNoContent {
		t.Errorf("api: %d %s", w.Code, w.Body)
	}
	want := []string{
		"GET /api/deployments/web/logs?limit=5 ns=team-a pv=team-a rest=deployments/web/logs",
		"DELETE /api/alerts/a1? ns=team-a pv=team-a rest=alerts/a1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the API saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, path := range []string{"/ui", "/", "/apix", "/api"} {
		w := serve("GET", path)
		var e struct{ Error string }
		if w.Code != http.StatusNotFound || json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error == "" {
			t.Errorf("GET %s: %d %s, want a 404 envelope", path, w.Code, w.Body)
		}
	}
	if len(got) != 2 {
		t.Errorf("the API saw other paths: %q", got)
	}
	if s := string(p.Status()); s != `{"configured":true}` {
		t.Errorf("status %s", s)
	}
}

// TestNotConfigured: without an API, every API path is app-lb's 409.
func TestNotConfigured(t *testing.T) {
	p := obsplugin.New(nil)
	r := httptest.NewRequest("GET", "/api/fleet", nil)
	r = r.WithContext(plugin.WithCall(r.Context(), "team-a", nil))
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	if w.Code != http.StatusConflict || strings.TrimSpace(w.Body.String()) != `{"error":"the obs plugin is not configured"}` {
		t.Errorf("%d %s", w.Code, w.Body)
	}
	if s := string(p.Status()); s != `{"configured":false}` {
		t.Errorf("status %s", s)
	}
	if i := p.Info(); i.ID != obsplugin.ID || i.PerNamespace() || !i.DefaultEnabled {
		t.Errorf("info %+v", i)
	}
}
