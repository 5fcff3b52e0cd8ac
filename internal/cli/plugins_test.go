package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth/internal/server"
)

// pluginServer answers the plugin and feed routes like berth does,
// recording each request as "METHOD path?query body".
func pluginServer(t *testing.T) (*fakeServer, func() []string) {
	var mu sync.Mutex
	var got []string
	record := func(r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, strings.TrimSpace(r.Method+" "+r.URL.RequestURI()+" "+string(b)))
		mu.Unlock()
	}
	plugins := `[{"id":"demo","name":"Demo","description":"d","config_schema":{},"enabled":true,"config":{},"updated_at":1767323045,"status":null,"per_namespace":true,"installed_in":["default","team"]},
		{"id":"obs","name":"Observability","description":"o","config_schema":{},"enabled":false,"config":{},"updated_at":1767323045,"last_error":"no backend","status":{"configured":false},"per_namespace":false}]`
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/plugins", func(w http.ResponseWriter, r *http.Request) { record(r); writeJSON(w, 200, plugins) })
	mux.HandleFunc("POST /api/plugins/{id}/{verb}", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		if r.PathValue("id") != "obs" {
			writeJSON(w, 404, errJSON(`no plugin named "`+r.PathValue("id")+`"`))
			return
		}
		writeJSON(w, 200, `{"id":"obs","name":"Observability","description":"o","config_schema":{},"enabled":`+map[string]string{"enable": "true", "disable": "false"}[r.PathValue("verb")]+`,"config":{},"updated_at":1,"status":null}`)
	})
	mux.HandleFunc("/namespaces/{ns}/plugins/{id}", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		if r.PathValue("id") == "obs" {
			writeJSON(w, 409, errJSON(`plugin "obs" is not installed per namespace: it serves every namespace once the operator enables it`))
			return
		}
		writeJSON(w, 200, `{"id":"demo","name":"Demo","description":"d","enabled":true,"installed":`+map[string]string{"PUT": "true", "DELETE": "false"}[r.Method]+`}`)
	})
	mux.HandleFunc("GET /feeds", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		writeJSON(w, 200, `[{"namespace":"default","events":2},{"namespace":"team","events":1}]`)
	})
	mux.HandleFunc("GET /feeds/{ns}", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		if r.PathValue("ns") != "default" {
			writeJSON(w, 404, errJSON(`no feed for namespace "`+r.PathValue("ns")+`" that this credential can read`))
			return
		}
		writeJSON(w, 200, `[{"id":2,"ts":1767323000,"last_ts":1767323045,"count":3,"namespace":"default","deployment":"web","kind":"issue","title":"web: 5xx","detail":"x","extra_field":1},
			{"id":1,"ts":1767322000,"last_ts":1767322000,"count":1,"namespace":"default","deployment":"web","kind":"deployed","title":"web deployed","detail":""}]`)
	})
	srv := &fakeServer{Server: httptest.NewServer(mux), t: t}
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
}

// fieldsOf is a table's lines with their columns' padding squeezed to
// one space, joined by "|".
func fieldsOf(table string) string {
	var rows []string
	for _, l := range strings.Split(strings.TrimSpace(table), "\n") {
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(rows, "|")
}

// TestPluginCommands: plugins lists the plugins (an apply error on stderr),
// enable, disable, install (with a config) and uninstall send what the
// API takes, the server's refusals are errors, and bad invocations are
// usage errors that send nothing.
func TestPluginCommands(t *testing.T) {
	srv, sent := pluginServer(t)
	for _, args := range [][]string{{"plugins"}, {"plugins", "ls"}} {
		r := run(t, srv, "", args...)
		lines := strings.Split(r.stdout, "\n")
		if r.code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], "namespace") || !strings.Contains(lines[1], "default,team") ||
			!strings.HasPrefix(lines[2], "obs") || !strings.Contains(lines[2], "error") || !strings.Contains(lines[2], "(every namespace)") ||
			!strings.Contains(r.stderr, "plugin/obs: its last apply failed: no backend") {
			t.Errorf("%v: exit %d\n%s\nstderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := run(t, srv, "", "plugins", "-o", "json"); r.code != 0 || !strings.Contains(r.stdout, `"last_error": "no backend"`) {
		t.Errorf("plugins -o json: %d %s", r.code, r.stdout)
	}
	if r := run(t, srv, "", "plugins", "-o", "name"); r.code != 0 || r.stdout != "plugin/demo\nplugin/obs\n" {
		t.Errorf("plugins -o name: %d %q %q", r.code, r.stdout, r.stderr)
	}
	sent()
	if r := run(t, srv, "", "plugins", "disable", "obs"); r.code != 0 || r.stdout != "plugin/obs disabled\n" {
		t.Errorf("disable: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := run(t, srv, "", "plugins", "enable", "obs"); r.code != 0 || r.stdout != "plugin/obs enabled\n" {
		t.Errorf("enable: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := run(t, srv, "", "plugins", "install", "demo", "-n", "team"); r.code != 0 || r.stdout != "plugin/demo installed in namespace team\n" {
		t.Errorf("install: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := run(t, srv, "", "plugins", "install", "demo", "--namespace", "team", "--config", `{"a":1}`); r.code != 0 {
		t.Errorf("install --config: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := run(t, srv, "", "plugins", "uninstall", "-n", "team", "demo"); r.code != 0 || r.stdout != "plugin/demo uninstalled from namespace team\n" {
		t.Errorf("uninstall: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := run(t, srv, "", "plugins", "install", "obs", "-n", "team"); r.code != 1 || !strings.Contains(r.stderr, "not installed per namespace") {
		t.Errorf("install obs: %d %q", r.code, r.stderr)
	}
	if r := run(t, srv, "", "plugins", "enable", "nope"); r.code != 1 || !strings.Contains(r.stderr, `no plugin named "nope"`) {
		t.Errorf("enable nope: %d %q", r.code, r.stderr)
	}
	want := []string{
		"POST /api/plugins/obs/disable", "POST /api/plugins/obs/enable",
		"PUT /namespaces/team/plugins/demo", `PUT /namespaces/team/plugins/demo {"config":{"a":1}}`, "DELETE /namespaces/team/plugins/demo",
		"PUT /namespaces/team/plugins/obs", "POST /api/plugins/nope/enable",
	}
	if got := sent(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sent\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range [][]string{
		{"plugins", "enable"}, {"plugins", "enable", "a", "b"}, {"plugins", "install", "demo"},
		{"plugins", "uninstall", "demo", "-n", "team", "--config", "{}"}, {"plugins", "install", "demo", "-n", "t", "--config", "{bad"},
		{"plugins", "frob"}, {"plugins", "ls", "extra"},
	} {
		if r := run(t, srv, "", bad...); r.code != 2 || r.stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", bad, r.code, r.stderr)
		}
	}
	if got := sent(); len(got) != 0 {
		t.Errorf("usage errors sent %v", got)
	}
}

// TestFeedCommands: get feeds lists the namespaces' feeds; feed NS, get
// feeds NS and get feed/NS print a namespace's events, --json as the
// server sent them; a feed the credential cannot read is an error.
func TestFeedCommands(t *testing.T) {
	srv, sent := pluginServer(t)
	r := run(t, srv, "", "get", "feeds")
	if r.code != 0 || fieldsOf(r.stdout) != "NAMESPACE EVENTS|default 2|team 1" {
		t.Errorf("get feeds: %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"feed", "default"}, {"get", "feeds", "default"}, {"get", "feed/default"}} {
		r := run(t, srv, "", args...)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) != 3 || fieldsOf(r.stdout) != "TIME KIND DEPLOYMENT COUNT TITLE|2026-01-02T03:04:05Z issue web 3 web: 5xx|2026-01-02T02:46:40Z deployed web 1 web deployed" {
			t.Errorf("%v: %d %q %q", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{{"feed", "default", "--json"}, {"feed", "default", "-o", "json"}} {
		r := run(t, srv, "", args...)
		var evs []map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &evs) != nil || len(evs) != 2 || evs[0]["extra_field"] != float64(1) {
			t.Errorf("%v: %d %q %q", args, r.code, r.stdout, r.stderr)
		}
	}
	if got := sent(); len(got) != 6 || got[0] != "GET /feeds" || got[1] != "GET /feeds/default?format=json" {
		t.Errorf("sent %q", got)
	}
	if r := run(t, srv, "", "feed", "team"); r.code != 1 || !strings.Contains(r.stderr, `no feed for namespace "team"`) {
		t.Errorf("feed team: %d %q", r.code, r.stderr)
	}
	for _, bad := range [][]string{{"feed"}, {"feed", "a", "b"}, {"feed", "default", "--json", "-o", "yaml"}, {"feed", "default", "-o", "name"}} {
		if r := run(t, srv, "", bad...); r.code != 2 || r.stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", bad, r.code, r.stderr)
		}
	}
}

// TestPluginsAndFeedsLive: against a real server, obs is listed,
// disabled and enabled again; installing it in a namespace is refused (it
// serves every namespace); a deployment that announces itself shows in
// get feeds and its namespace's feed.
func TestPluginsAndFeedsLive(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("BERTH_PASSWORD", "opw")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	t.Setenv("BERTH_SERVER", runServer(t, server.Options{}, nil))
	if out := mustRun(t, "", "plugins"); !strings.Contains(out, "obs ") || !strings.Contains(out, "enabled") {
		t.Errorf("plugins: %q", out)
	}
	mustRun(t, "", "plugins", "disable", "obs")
	if out := mustRun(t, "", "plugins"); !strings.Contains(out, "disabled") {
		t.Errorf("after disable: %q", out)
	}
	mustRun(t, "", "plugins", "enable", "obs")
	if code, _, errs := berth(t, "", "plugins", "install", "obs", "-n", "default"); code != 1 || !strings.Contains(errs, "not installed per namespace") {
		t.Errorf("install obs: exit %d, %q", code, errs)
	}
	spec := `{"id":"web","routes":[{"host":"web.test"}],"upstreams":["` + strings.TrimPrefix(up.URL, "http://") + `"],"feed":{"announce":true}}`
	mustRun(t, spec, "apply", "-f", "-")
	if out := mustRun(t, "", "get", "feeds"); fieldsOf(out) != "NAMESPACE EVENTS|default 1" {
		t.Errorf("get feeds: %q", out)
	}
	if out := mustRun(t, "", "feed", "default"); !strings.Contains(out, " deployed ") || !strings.Contains(out, " web ") {
		t.Errorf("feed default: %q", out)
	}
}
