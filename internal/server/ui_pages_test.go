package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/plugin"
)

// demoPlugin is a per-namespace plugin for the plugins page to install:
// its config has one string field, greeting.
type demoPlugin struct{}

func (demoPlugin) Info() plugin.Info {
	return plugin.Info{
		ID: "demo", Name: "Demo", Description: "A per-namespace plugin of the browser test.",
		ConfigSchema:  json.RawMessage(`{"type":"object","properties":{"greeting":{"type":"string"}},"additionalProperties":false}`),
		InstallSchema: json.RawMessage(`{"type":"object"}`),
	}
}
func (demoPlugin) Apply(context.Context, bool, json.RawMessage) error { return nil }
func (demoPlugin) Status() json.RawMessage                            { return json.RawMessage(`{"demo":true}`) }
func (demoPlugin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusNoContent)
}

// TestBrowserUIPages: headless Chromium, driven by Playwright
// (testdata/ui_pages.cjs), uses the network, plugins and Computers pages
// of a server with an operator password. /network, asked for before
// signing in, comes back after the sign-in and shows the deployment, its
// host and its replica; /plugins disables and enables obs (the card's
// state following), refuses an invalid config with the server's error on
// the field, enables the per-namespace demo plugin (installed so in the
// namespaces there are), uninstalls it from team, refuses a bad namespace
// on the install field and installs it in team again; the Computers page
// lists the Computers, follows one's facts (a fact made while it watches
// arrives on the stream) and shows the usage ledger. A token confined to
// team then sees only team's Computer, and is told the plugins are the
// operator's. Every page passes axe-core without serious or critical
// violations and logs no console error; screenshots (light, dark; 360 px,
// wide) go to BERTH_SCREENSHOT_DIR, else the test's temp dir.
func TestBrowserUIPages(t *testing.T) {
	nodeModules := needBrowser(t, "playwright-core", "axe-core")
	h := startWith(t, "", func(o *Options) {
		o.AdminPassword = "pw"
		o.ExtraPlugins = []plugin.Plugin{demoPlugin{}}
	})
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:pw"))
	must := func(code int, method, path, body string) []byte {
		t.Helper()
		r := h.json(method, path, body, "Authorization", basic)
		if r.code != code {
			t.Fatalf("%s %s: %d %s", method, path, r.code, r.body)
		}
		return r.body
	}
	must(201, "POST", "/deployments", vmSpec("web", `,"scaling":{"min_replicas":1,"max_replicas":2}`))
	must(201, "POST", "/namespaces", `{"name":"team"}`)
	must(201, "POST", "/computers", `{"id":"desk","backings":[{"kind":"process"}],"start":true}`)
	must(201, "POST", "/computers", `{"id":"teambox","namespace":"team","backings":[{"kind":"process"}]}`)
	must(200, "POST", "/computers/desk/exec", `{"argv":["/bin/sh","-c","echo hi"]}`)
	must(200, "POST", "/computers/desk/files/write", `{"path":"hello.txt","content":"hello"}`)
	var minted struct{ Token string }
	json.Unmarshal(must(201, "POST", "/tokens", `{"name":"team","admin":"admin","namespace":"team","deployments":[]}`), &minted)
	waitFor(t, "a ready replica of web", func() bool {
		var st struct{ Ready int }
		json.Unmarshal(must(200, "GET", "/deployments/web", ""), &st)
		return st.Ready == 1
	})

	shots := os.Getenv("BERTH_SCREENSHOT_DIR")
	if shots == "" {
		shots = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "ui_pages.cjs"), h.admin, minted.Token, shots)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodeModules)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the browser run failed: %v\n%s", err, out)
	}
	var got struct {
		browserRun
		Steps                   []string
		NetworkURL              string
		RouteRows               [][]string
		TopologyText            []string
		Listeners               []string
		ObsTags                 []string
		ConfigError             string
		ConfigInvalid           string
		NamespaceError          string
		InstalledOnEnable       []string
		InstalledAfterUninstall []string
		Installed               []string
		ObsInstalls             string
		ComputerRows            []string
		DeskState               string
		FactKinds               []string
		LiveFact                string
		FactsLive               string
		UsageRows               []string
		TeamComputerRows        []string
		TeamScope               string
		TeamPlugins             string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("browser output %q: %v", out, err)
	}
	t.Logf("browser saw %+v", got)

	// /network.
	if !strings.HasSuffix(got.NetworkURL, "/network") {
		t.Errorf("signing in from /network went to %s", got.NetworkURL)
	}
	if len(got.RouteRows) != 1 || len(got.RouteRows[0]) != 5 || got.RouteRows[0][0] != "web.test" || got.RouteRows[0][1] != "HTTP" ||
		got.RouteRows[0][2] != "web" || got.RouteRows[0][3] != "ready" || !strings.Contains(got.RouteRows[0][4], "healthy") {
		t.Errorf("the network's route table: %q", got.RouteRows)
	}
	for _, want := range []string{"Proxy · HTTP", "Proxy · HTTPS", "Admin API", "web.test", "web", "berth-web-"} {
		if !slices.ContainsFunc(got.TopologyText, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("the topology has no %q in %q", want, got.TopologyText)
		}
	}
	if len(got.Listeners) != 3 || !strings.Contains(got.Listeners[2], strings.TrimPrefix(h.admin, "http://")) {
		t.Errorf("listeners %q", got.Listeners)
	}

	// /plugins.
	if strings.Join(got.ObsTags, ",") != "enabled,disabled,enabled" {
		t.Errorf("obs's state through disable and enable: %v", got.ObsTags)
	}
	if !strings.Contains(got.ConfigError, "config.nope") || got.ConfigInvalid != "true" {
		t.Errorf("an invalid config: %q, field aria-invalid %q", got.ConfigError, got.ConfigInvalid)
	}
	if !strings.Contains(got.NamespaceError, "Bad_NS") {
		t.Errorf("a bad namespace: %q", got.NamespaceError)
	}
	if a, b, c := strings.Join(got.InstalledOnEnable, ","), strings.Join(got.InstalledAfterUninstall, ","), strings.Join(got.Installed, ","); a != "default,team" || b != "default" || c != "default,team" {
		t.Errorf("the demo plugin's installs on the page: %q when enabled, %q after uninstalling from team, %q after installing there", a, b, c)
	}
	if !strings.Contains(got.ObsInstalls, "nothing to install") {
		t.Errorf("obs's installs: %q", got.ObsInstalls)
	}
	var inst struct{ Namespaces []string }
	json.Unmarshal(must(200, "GET", "/api/plugins/demo/installs", ""), &inst)
	if !slices.Contains(inst.Namespaces, "team") {
		t.Errorf("the server has demo installed in %v", inst.Namespaces)
	}
	var obs struct{ Enabled bool }
	json.Unmarshal(must(200, "GET", "/api/plugins/obs", ""), &obs)
	if !obs.Enabled {
		t.Errorf("obs is left disabled")
	}

	// The Computers page.
	if strings.Join(got.ComputerRows, ",") != "desk,teambox" || got.DeskState != "running" {
		t.Errorf("the Computers page lists %v, desk %q", got.ComputerRows, got.DeskState)
	}
	for _, k := range []string{"lifecycle", "process.exited", "files.written"} {
		if !slices.Contains(got.FactKinds, k) {
			t.Errorf("desk's facts %v have no %s", got.FactKinds, k)
		}
	}
	if !strings.Contains(got.LiveFact, "live.txt") || got.FactsLive != "Live." {
		t.Errorf("the fact made while watching: %q (%q)", got.LiveFact, got.FactsLive)
	}
	if !slices.Contains(got.UsageRows, "desk") {
		t.Errorf("the usage ledger rows %v have no desk", got.UsageRows)
	}
	if strings.Join(got.TeamComputerRows, ",") != "teambox" || !strings.Contains(got.TeamScope, "namespace team") {
		t.Errorf("the team's token sees %v, told %q", got.TeamComputerRows, got.TeamScope)
	}
	if !strings.Contains(got.TeamPlugins, "operator") {
		t.Errorf("the team's token on /plugins: %q", got.TeamPlugins)
	}

	got.check(t, 8, "3 pages × 2 themes, and the team's 2 pages", 12, "3 pages × 2 themes × 2 widths")
}
