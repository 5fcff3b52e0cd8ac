package plugin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/web"
)

// probe is a plugin that records what reaches it.
type probe struct {
	id       string
	perNS    bool
	applyErr error

	mu      sync.Mutex
	applied []string // "on <config>" / "off <config>"
	served  []string // "<ns> <method> <path>?<query> <install config> <body>"
}

const probeSchema = `{
	"type": "object",
	"properties": {
		"url": {"type": "string", "format": "uri"},
		"retention": {
			"type": "object",
			"properties": {"days": {"type": "integer", "minimum": 1}},
			"additionalProperties": false
		}
	},
	"additionalProperties": false
}`

func (p *probe) Info() plugin.Info {
	i := plugin.Info{ID: p.id, Name: "Probe " + p.id, Description: "records what reaches it", ConfigSchema: json.RawMessage(probeSchema)}
	if p.perNS {
		i.InstallSchema = json.RawMessage(`{"type":"object","properties":{"level":{"enum":["info","debug"]}},"additionalProperties":false}`)
	}
	return i
}

func (p *probe) Apply(_ context.Context, on bool, cfg json.RawMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	state := "off"
	if on {
		state = "on"
	}
	p.applied = append(p.applied, state+" "+string(cfg))
	return p.applyErr
}

func (p *probe) Status() json.RawMessage { return json.RawMessage(`{"probed":true}`) }

func (p *probe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.served = append(p.served, strings.Join([]string{plugin.Namespace(r.Context()), r.Method, r.URL.Path + "?" + r.URL.RawQuery,
		string(plugin.InstallConfig(r.Context())), string(body)}, " "))
	p.mu.Unlock()
	w.WriteHeader(http.StatusTeapot)
}

func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func newHost(t *testing.T, st *store.Store, ps ...plugin.Plugin) *plugin.Host {
	t.Helper()
	h, err := plugin.New(t.Context(), plugin.Options{Records: st, Plugins: ps, Now: func() time.Time { return time.Unix(1760000000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// webErr asserts err is a *web.Error with the status (and code) and returns
// its message.
func webErr(t *testing.T, err error, status int, code string) string {
	t.Helper()
	var we *web.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T), want a *web.Error %d", err, err, status)
	}
	if we.Status != status || we.Code != code {
		t.Fatalf("error %d code %q (%s), want %d code %q", we.Status, we.Code, we.Message, status, code)
	}
	return we.Message
}

// TestConfigSchema: a config the plugin's schema refuses is a 400 naming
// the failing field's path, and nothing is stored or applied.
func TestConfigSchema(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	p := &probe{id: "probe"}
	h := newHost(t, st, p)
	for _, c := range []struct{ config, field string }{
		{`{"url": 7}`, "config.url: "},
		{`{"url": "not a uri"}`, "config.url: "},
		{`{"retention": {"days": 0}}`, "config.retention.days: "},
		{`{"retention": {"days": 1.5}}`, "config.retention.days: "},
		{`{"retention": {"weeks": 2}}`, "config.retention.weeks: unknown field"},
		{`{"bogus": true}`, "config.bogus: unknown field"},
		{`[]`, "config: "},
		{`null`, "config: "},
	} {
		_, err := h.Set(t.Context(), "probe", plugin.Update{Enabled: true, Config: json.RawMessage(c.config)})
		if msg := webErr(t, err, 400, ""); !strings.HasPrefix(msg, c.field) {
			t.Errorf("config %s: %q, want it to start %q", c.config, msg, c.field)
		}
	}
	v, err := h.Plugin("probe")
	if err != nil {
		t.Fatal(err)
	}
	if v.Enabled || string(v.Config) != `{}` || v.UpdatedAt != 0 || len(p.applied) != 0 {
		t.Errorf("after refused configs: %+v, applied %q; want untouched", v, p.applied)
	}
	v, err = h.Set(t.Context(), "probe", plugin.Update{Enabled: true, Config: json.RawMessage(`{"url": "https://obs.example/x", "retention": {"days": 3}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !v.Enabled || string(v.Config) != `{"url":"https://obs.example/x","retention":{"days":3}}` || v.UpdatedAt != 1760000000 {
		t.Errorf("accepted: %+v", v)
	}
	if _, err := h.Set(t.Context(), "nope", plugin.Update{}); !strings.Contains(webErr(t, err, 404, ""), `no plugin named "nope"`) {
		t.Error(err)
	}
}

// TestBadPlugins: a plugin that is not well formed stops the host.
func TestBadPlugins(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	for name, ps := range map[string][]plugin.Plugin{
		"bad id":     {&probe{id: "Probe"}},
		"duplicate":  {&probe{id: "a"}, &probe{id: "a"}},
		"schema":     {schemaPlugin{`{"type": 7}`}},
		"refuses {}": {schemaPlugin{`{"type":"object","required":["url"]}`}},
		"reference":  {schemaPlugin{`{"$ref": "https://example.com/s.json"}`}},
	} {
		if _, err := plugin.New(t.Context(), plugin.Options{Records: st, Plugins: ps}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

type schemaPlugin struct{ s string }

func (s schemaPlugin) Info() plugin.Info {
	return plugin.Info{ID: "s", ConfigSchema: json.RawMessage(s.s)}
}
func (schemaPlugin) Apply(context.Context, bool, json.RawMessage) error { return nil }
func (schemaPlugin) Status() json.RawMessage                            { return nil }
func (schemaPlugin) ServeHTTP(http.ResponseWriter, *http.Request)       {}

// TestDispatch: a request reaches the plugin only when it is enabled and
// (per-namespace) installed in the namespace, with the namespace, the
// rest of the path, the query, the body and the install's config.
func TestDispatch(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	p, fleetwide := &probe{id: "probe", perNS: true}, &probe{id: "wide"}
	h := newHost(t, st, p, fleetwide)
	serve := func(ns, id, method, rest, body string) (*httptest.ResponseRecorder, error) {
		r := httptest.NewRequest(method, "/namespaces/"+ns+"/plugins/"+id+"/"+rest+"?window=1h", strings.NewReader(body))
		w := httptest.NewRecorder()
		return w, h.Serve(w, r, ns, id, rest)
	}
	_, err := serve("team-a", "probe", "GET", "api/fleet", "")
	webErr(t, err, 409, plugin.CodeDisabled)
	// Installing needs the plugin on.
	_, err = h.Install(t.Context(), "team-a", "probe", "token:abc", nil)
	webErr(t, err, 409, plugin.CodeDisabled)
	if _, err := h.Set(t.Context(), "probe", plugin.Update{Enabled: true, Namespaces: []string{"team-b"}}); err != nil {
		t.Fatal(err)
	}
	_, err = serve("team-a", "probe", "GET", "api/fleet", "")
	if msg := webErr(t, err, 409, plugin.CodeNotInstalled); !strings.Contains(msg, `"team-a"`) {
		t.Errorf("not installed: %q", msg)
	}
	_, err = h.Install(t.Context(), "team-a", "probe", "token:abc", json.RawMessage(`{"level": "trace"}`))
	if msg := webErr(t, err, 400, ""); !strings.HasPrefix(msg, "config.level: ") {
		t.Errorf("bad install config: %q", msg)
	}
	v, err := h.Install(t.Context(), "team-a", "probe", "token:abc", json.RawMessage(`{"level": "debug"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !v.Installed || !v.Enabled || v.InstalledBy != "token:abc" || v.InstalledAt == nil || *v.InstalledAt != 1760000000 || string(v.Config) != `{"level":"debug"}` {
		t.Errorf("install view %+v", v)
	}
	w, err := serve("team-a", "probe", "POST", "api/alerts/x%2Fy", `{"threshold":1}`)
	if err != nil || w.Code != http.StatusTeapot {
		t.Fatalf("dispatch: %v %d", err, w.Code)
	}
	// team-b got the plugin when it was enabled (it was known then).
	w, err = serve("team-b", "probe", "DELETE", "", "")
	if err != nil || w.Code != http.StatusTeapot {
		t.Fatalf("dispatch to team-b: %v %d", err, w.Code)
	}
	want := []string{`team-a POST /api/alerts/x%2Fy?window=1h {"level":"debug"} {"threshold":1}`, `team-b DELETE /?window=1h {} `}
	if strings.Join(p.served, "\n") != strings.Join(want, "\n") {
		t.Errorf("served\n%s\nwant\n%s", strings.Join(p.served, "\n"), strings.Join(want, "\n"))
	}
	// A fleet-wide plugin needs no install, and has none.
	if _, err := h.Install(t.Context(), "team-a", "wide", "", nil); err == nil {
		t.Error("installed a fleet-wide plugin")
	}
	_, err = serve("team-a", "wide", "GET", "x", "")
	webErr(t, err, 409, plugin.CodeDisabled)
	if _, err := h.Set(t.Context(), "wide", plugin.Update{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	if w, err := serve("team-a", "wide", "GET", "x", ""); err != nil || w.Code != http.StatusTeapot || fleetwide.served[0] != "team-a GET /x?window=1h  " {
		t.Errorf("fleet-wide dispatch: %v %d %q", err, w.Code, fleetwide.served)
	}
	_, err = serve("team-a", "nope", "GET", "x", "")
	webErr(t, err, 404, "")
	// Disabling stops the dispatch and keeps the installs.
	if _, err := h.Set(t.Context(), "probe", plugin.Update{Enabled: false}); err != nil {
		t.Fatal(err)
	}
	_, err = serve("team-a", "probe", "GET", "api/fleet", "")
	webErr(t, err, 409, plugin.CodeDisabled)
	if v, _ := h.InNamespace("team-a", "probe"); !v.Installed || v.Enabled {
		t.Errorf("disabled: %+v", v)
	}
	if v, _ := h.Uninstall(t.Context(), "team-a", "probe"); v.Installed || v.InstalledAt != nil || v.Config != nil {
		t.Errorf("uninstalled: %+v", v)
	}
}

// TestRecordsSurviveRestart: the records, installs and switches are read
// back by a new host on the reopened store, and an enabled plugin is
// applied at start; an Apply error is last_error, the switch kept.
func TestRecordsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	p := &probe{id: "probe", perNS: true, applyErr: errors.New("connection refused")}
	h := newHost(t, st, p, &probe{id: "wide"})
	v, err := h.Set(t.Context(), "probe", plugin.Update{Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:34199"}`), Namespaces: []string{"team-b"}})
	if err != nil {
		t.Fatal(err)
	}
	if !v.Enabled || v.LastError != "connection refused" {
		t.Errorf("failing apply: %+v", v)
	}
	if _, err := h.Install(t.Context(), "team-a", "probe", "token:abc", json.RawMessage(`{"level":"info"}`)); err != nil {
		t.Fatal(err)
	}
	if err := h.NamespaceKnown(t.Context(), "team-c"); err != nil {
		t.Fatal(err)
	}
	if err := h.NamespaceRemoved(t.Context(), "team-b"); err != nil {
		t.Fatal(err)
	}
	before, err := h.Installs("probe")
	if err != nil {
		t.Fatal(err)
	}
	views := h.Plugins()
	st.Close()

	st = openStore(t, dir)
	defer st.Close()
	p2 := &probe{id: "probe", perNS: true}
	h2 := newHost(t, st, p2, &probe{id: "wide"})
	after, err := h2.Installs("probe")
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := json.Marshal(before)
	b2, _ := json.Marshal(after)
	if string(b1) != string(b2) {
		t.Errorf("installs before restart\n%s\nafter\n%s", b1, b2)
	}
	if want := `{"plugin":"probe","enabled":true,"namespaces":["team-a","team-c"],"installs":{"team-a":{"installed_at":1760000000,"installed_by":"token:abc","config":{"level":"info"}},"team-c":{"installed_at":1760000000,"config":{}}}}`; string(b2) != want {
		t.Errorf("installs\n%s\nwant\n%s", b2, want)
	}
	views[0].LastError = "" // the new plugin applies without error
	v1, _ := json.Marshal(views)
	v2, _ := json.Marshal(h2.Plugins())
	if string(v1) != string(v2) {
		t.Errorf("views before restart\n%s\nafter\n%s", v1, v2)
	}
	if len(p2.applied) != 1 || p2.applied[0] != `on {"url":"http://127.0.0.1:34199"}` {
		t.Errorf("applied at start: %q", p2.applied)
	}
	if _, err := h2.Installs("wide"); err == nil {
		t.Error("installs of a fleet-wide plugin")
	}
}
