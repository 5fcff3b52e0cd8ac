package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBrowserUI: headless Chromium, driven by Playwright (testdata/ui.cjs),
// uses the web UI on a server with an operator password: it is sent to
// sign in, a wrong password is refused on the page (no browser dialog),
// the right one opens the dashboard, where a deployment that scales from
// zero goes from idle to ready after a request to it; the browser scales
// it (an invalid policy's error shown on the field first), is refused an
// invalid edit, switches the theme and signs out. A token confined to a
// namespace then signs in and sees only its namespace's deployment, in a
// browser whose event stream fails, so the pages poll /metrics instead. Every
// page passes axe-core without serious or critical violations and logs no
// console error. Screenshots (light, dark; 360 px, wide) go to
// BERTH_SCREENSHOT_DIR, else the test's temp dir.
func TestBrowserUI(t *testing.T) {
	nodeModules := needBrowser(t, "playwright-core", "axe-core")
	h := startWith(t, "", func(o *Options) { o.AdminPassword = "pw" })
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:pw"))
	must := func(code int, method, path, body string) []byte {
		t.Helper()
		r := h.json(method, path, body, "Authorization", basic)
		if r.code != code {
			t.Fatalf("%s %s: %d %s", method, path, r.code, r.body)
		}
		return r.body
	}
	must(201, "POST", "/deployments", vmSpec("web", `,"scaling":{"min_replicas":0,"max_replicas":2}`))
	must(201, "POST", "/namespaces", `{"name":"team"}`)
	must(201, "POST", "/deployments", vmSpec("teamapp", `,"namespace":"team","scaling":{"min_replicas":0,"max_replicas":1}`))
	var minted struct{ Token string }
	json.Unmarshal(must(201, "POST", "/tokens", `{"name":"team","admin":"admin","namespace":"team","deployments":[]}`), &minted)

	shots := os.Getenv("BERTH_SCREENSHOT_DIR")
	if shots == "" {
		shots = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "ui.cjs"), h.admin, h.s.ProxyAddr(), minted.Token, shots)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodeModules)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the browser run failed: %v\n%s", err, out)
	}
	var got struct {
		ConsoleErrors []string
		Axe           []struct {
			Page, ID, Impact, Help string
			Nodes                  []string
		}
		AxeRuns []struct {
			Page  string
			Rules int
		}
		Shots              []string
		Steps              []string
		LoginURL           string
		WrongPassword      string
		Cookies            []map[string]any
		Live               string
		Request            struct{ Status int }
		ReadyTile          string
		ScaleError         string
		ScaleInvalid       string
		Replicas           string
		EditError          string
		EditInvalid        string
		Directory          []string
		Theme              string
		CookiesAfterLogout []string
		AfterLogoutURL     string
		TeamCards          []string
		TeamWho            string
		TeamLive           string
		TeamDirectory      []string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("browser output %q: %v", out, err)
	}
	t.Logf("browser saw %+v", got)
	if !strings.HasSuffix(got.LoginURL, "/login?next=%2Fdashboard") {
		t.Errorf("not signed in, /dashboard went to %s", got.LoginURL)
	}
	if got.WrongPassword != "Wrong user, password or token." {
		t.Errorf("a wrong password: %q", got.WrongPassword)
	}
	if len(got.Cookies) != 1 || got.Cookies[0]["name"] != "berth_ui" || got.Cookies[0]["httpOnly"] != true || got.Cookies[0]["sameSite"] != "Strict" || got.Cookies[0]["path"] != "/" {
		t.Errorf("session cookies %v", got.Cookies)
	}
	if got.Live != "Live." {
		t.Errorf("the dashboard is %q, want fed by the event stream", got.Live)
	}
	if got.Request.Status != 200 || got.ReadyTile != "1" {
		t.Errorf("after a request (%d) the ready tile says %q", got.Request.Status, got.ReadyTile)
	}
	if !strings.Contains(got.ScaleError, "min_replicas") || got.ScaleInvalid != "true" {
		t.Errorf("an invalid scale: %q, field aria-invalid %q", got.ScaleError, got.ScaleInvalid)
	}
	if !strings.Contains(got.Replicas, "/3 ready") || !strings.Contains(got.Replicas, "min 1") {
		t.Errorf("after scaling the card says %q", got.Replicas)
	}
	if !strings.Contains(got.EditError, "max_replicas") || got.EditInvalid != "true" {
		t.Errorf("an invalid edit: %q, field aria-invalid %q", got.EditError, got.EditInvalid)
	}
	if strings.Join(got.Directory, ",") != "teamapp.test,web.test" {
		t.Errorf("the directory lists %v", got.Directory)
	}
	if got.Theme != "dark" {
		t.Errorf("the theme after a reload is %q, want the dark one chosen", got.Theme)
	}
	if len(got.CookiesAfterLogout) != 0 || !strings.Contains(got.AfterLogoutURL, "/login") {
		t.Errorf("after sign-out: cookies %v, /dashboard at %s", got.CookiesAfterLogout, got.AfterLogoutURL)
	}
	if strings.Join(got.TeamCards, ",") != "teamapp" || strings.Join(got.TeamDirectory, ",") != "teamapp" || !strings.Contains(got.TeamWho, "namespace team") {
		t.Errorf("the team's token sees cards %v, directory %v, as %q", got.TeamCards, got.TeamDirectory, got.TeamWho)
	}
	if !strings.HasPrefix(got.TeamLive, "Updated every 2 s") {
		t.Errorf("without the event stream the dashboard says %q, want polling", got.TeamLive)
	}
	for _, e := range got.ConsoleErrors {
		t.Errorf("console: %s", e)
	}
	for _, v := range got.Axe {
		if v.Impact == "serious" || v.Impact == "critical" {
			t.Errorf("axe on %s: %s (%s) %s at %v", v.Page, v.ID, v.Impact, v.Help, v.Nodes)
		} else {
			t.Logf("axe on %s: %s (%s) %s at %v", v.Page, v.ID, v.Impact, v.Help, v.Nodes)
		}
	}
	if len(got.AxeRuns) != 9 {
		t.Errorf("axe ran on %d pages, want 9 (4 pages × 2 themes, and the edit dialog)", len(got.AxeRuns))
	}
	for _, r := range got.AxeRuns {
		if r.Rules < 10 {
			t.Errorf("axe applied %d rules to %s", r.Rules, r.Page)
		}
	}
	if len(got.Shots) != 16 {
		t.Errorf("%d screenshots, want 4 pages × 2 themes × 2 widths", len(got.Shots))
	}
	for _, p := range got.Shots {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("screenshot %s: %v", p, err)
		}
		if b := img.Bounds(); b.Dx() < 360 || b.Dy() < 300 {
			t.Errorf("screenshot %s is %v", p, b)
		}
	}
}
