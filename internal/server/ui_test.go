package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/apitype"
)

// TestBrowserUI: headless Chromium, driven by Playwright (testdata/ui.cjs),
// uses the web UI on a server with an operator password: it is sent to
// sign in, a wrong password is refused on the page (no browser dialog),
// the right one opens the dashboard, where a deployment that scales from
// zero goes from idle to ready after a request to it; the browser scales
// it (an invalid policy's error shown on the field first), is refused an
// invalid edit, switches the theme and signs out. A token confined to a
// namespace then signs in and sees only its namespace's deployment, in a
// browser whose event stream fails, so the pages poll /metrics instead.
// The operator then blocks a scanner's client from its alert on /siem for
// 15 minutes (the rule appears, the client is refused, its hit shows on
// the rule's sparkline) and deletes the rule; archives a disk on /storage
// and purges a retained one (the dialog asks to force it); and opens a
// shell from the dashboard, where `echo hi-$((40+2))` prints hi-42 in the
// terminal. Every page passes axe-core without serious or critical
// violations and logs no console error (a CSP violation is one).
// Screenshots (light, dark; 360 px, wide) go to BERTH_SCREENSHOT_DIR, else
// the test's temp dir.
func TestBrowserUI(t *testing.T) {
	nodeModules := needBrowser(t, "playwright-core", "axe-core")
	t.Setenv("SHELL", "/bin/sh") // the shell the terminal opens
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
	// For the dashboard's operator sections: a secret, listed by name only.
	must(201, "POST", "/secrets", `{"id":"db-password","data":{"password":"hunter2-value"}}`)
	// For /siem: an alert with a client to block (a scanner at
	// 127.0.0.2, asking for 40 missing pages of a host nobody serves).
	alert := uiScannerAlert(t, h, basic)
	// For /storage: a retained orphan disk to purge, and one to archive.
	retained, archived := leaveReplica(t, h.dir, "gone", 1), leaveReplica(t, h.dir, "old", 2)
	must(204, "PATCH", "/disks/"+retained, `{"retain":true,"note":"postmortem"}`)

	shots := os.Getenv("BERTH_SCREENSHOT_DIR")
	if shots == "" {
		shots = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "ui.cjs"), h.admin, h.s.ProxyAddr(), minted.Token, shots,
		strconv.FormatInt(alert.ID, 10), retained, archived)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodeModules)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the browser run failed: %v\n%s", err, out)
	}
	var got struct {
		browserRun
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
		// The dashboard's charts and sections.
		Charts struct {
			RpsLabel, LatencyLabel, ColdLabel, ScaleLabel, Certs, Jobs, SecretText string
			LatencyBars, ColdParts, Tables                                         int
			ColdTable, Secrets, Tokens, Namespaces                                 []string
		}
		DrainButtons   int
		EvictAsk       string
		TeamNamespaces []string
		TeamCerts      string
		TeamCold       string
		// /siem, /storage and the shell.
		AlertClient      string
		Runbook          []string
		RuleSummary      string
		RuleLifetimeSecs int64
		AlertBlocked     string
		BlockedHit       struct{ Status int }
		SparkTotal       int
		SparkLabel       string
		RulesAfterDelete []string
		RetainedBadge    string
		ArchiveStatus    string
		PurgeForce       string
		PurgeFocus       string
		DisksAfterPurge  []string
		ShellState       string
		ShellText        string
		ShellClosedFocus string
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
	c := got.Charts
	if !strings.HasPrefix(c.RpsLabel, "Throughput over the last 5 minutes") || c.LatencyBars < 1 || !strings.Contains(c.LatencyLabel, "p99") {
		t.Errorf("the throughput and latency charts: %q; %d bars, %q", c.RpsLabel, c.LatencyBars, c.LatencyLabel)
	}
	if c.ColdParts < 1 || !strings.Contains(c.ColdLabel, "web") || len(c.ColdTable) == 0 || !strings.HasPrefix(c.ColdTable[0], "web") {
		t.Errorf("the cold-start chart: %d parts for web, %q, table %q", c.ColdParts, c.ColdLabel, c.ColdTable)
	}
	if !strings.Contains(c.ScaleLabel, "ready now") || c.Tables != 4 {
		t.Errorf("the autoscale chart %q; %d tables of numbers, want 4", c.ScaleLabel, c.Tables)
	}
	if !slices.Contains(c.Secrets, "db-password") || strings.Contains(c.SecretText, "hunter2") || !slices.Contains(c.Tokens, "team") || !slices.Contains(c.Namespaces, "team") {
		t.Errorf("the sections: secrets %v, tokens %v, namespaces %v", c.Secrets, c.Tokens, c.Namespaces)
	}
	if c.Certs == "" || strings.Contains(c.Certs, "Loading") || c.Jobs == "" || strings.Contains(c.Jobs, "Loading") {
		t.Errorf("the certificates section says %q, jobs %q", c.Certs, c.Jobs)
	}
	if got.DrainButtons < 1 || !strings.Contains(got.EvictAsk, "berth-web-") {
		t.Errorf("web's replicas: %d drain buttons, evict asks %q", got.DrainButtons, got.EvictAsk)
	}
	if !slices.Equal(got.TeamNamespaces, []string{"team"}) || !strings.Contains(got.TeamCerts, "Not available") || !strings.Contains(got.TeamCold, "fleet-wide") {
		t.Errorf("the team's sections: namespaces %v, certificates %q, cold starts %q", got.TeamNamespaces, got.TeamCerts, got.TeamCold)
	}
	checkBrowserSecurityStorageShell(t, h, basic, alert, retained, archived, got.AlertClient, got.Runbook, got.RuleSummary,
		got.RuleLifetimeSecs, got.AlertBlocked, got.BlockedHit.Status, got.SparkTotal, got.SparkLabel, got.RulesAfterDelete)
	if got.RetainedBadge != "retained" || !strings.Contains(got.PurgeForce, "retained") || got.PurgeFocus != "purge-force" {
		t.Errorf("the retained disk: badge %q, the purge dialog asks %q, focus on %q", got.RetainedBadge, got.PurgeForce, got.PurgeFocus)
	}
	if slices.Contains(got.DisksAfterPurge, retained) || !slices.Contains(got.DisksAfterPurge, archived) {
		t.Errorf("after the purge the page lists %v", got.DisksAfterPurge)
	}
	if got.ArchiveStatus != "succeeded" {
		t.Errorf("the archive's status on the page: %q", got.ArchiveStatus)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "replicas", retained)); !os.IsNotExist(err) {
		t.Errorf("the purged disk's directory: %v", err)
	}
	var inv apitype.DiskInventory
	json.Unmarshal(must(200, "GET", "/disks", ""), &inv)
	if i := slices.IndexFunc(inv.Disks, func(d apitype.DiskInfo) bool { return d.SandboxID == archived }); i < 0 || inv.Disks[i].Archived == nil {
		t.Errorf("the archived disk in the census: %+v", inv.Disks)
	}
	if slices.ContainsFunc(inv.Disks, func(d apitype.DiskInfo) bool { return d.SandboxID == retained }) {
		t.Errorf("the purged disk is still in the census")
	}
	if !strings.HasPrefix(got.ShellState, "Connected to berth-web-") || !strings.Contains(got.ShellText, "hi-42") || got.ShellClosedFocus != "shell" {
		t.Errorf("the shell: state %q, terminal %q, focus after closing on %q", got.ShellState, got.ShellText, got.ShellClosedFocus)
	}
	got.check(t, 17, "7 pages or dialogs × 2 themes, the edit, evict and purge dialogs", 28, "7 pages or dialogs × 2 themes × 2 widths")
}

// uiScannerAlert makes 127.0.0.2 a scanner to the SIEM (40 missing pages
// of a host nobody serves) and returns its alert.
func uiScannerAlert(t *testing.T, h *harness, basic string) apitype.SecurityAlert {
	t.Helper()
	c := fromAddr(h, "127.0.0.2")
	port := h.proxy[strings.LastIndexByte(h.proxy, ':')+1:]
	for i := range 40 {
		if code, _ := fetch(t, c, fmt.Sprintf("http://nobody.test:%s/missing/%d", port, i)); code != 404 {
			t.Fatalf("the scanner's miss %d: %d", i, code)
		}
	}
	var found apitype.SecurityAlert
	waitFor(t, "the scanner's alert", func() bool {
		for _, a := range h.security("?rule=traffic.scanner", "Authorization", basic).Alerts {
			if a.Client == "127.0.0.2" {
				found = a
				return true
			}
		}
		return false
	})
	return found
}

// checkBrowserSecurityStorageShell checks what the browser saw on /siem:
// the alert's card, its runbook, the block it made for 15 minutes and the
// rule's card, the blocked client's request and its bar on the rule's
// sparkline, and the rule gone once deleted (from the server too).
func checkBrowserSecurityStorageShell(t *testing.T, h *harness, basic string, alert apitype.SecurityAlert, retained, archived,
	client string, runbook []string, summary string, lifetimeSecs int64, blocked string, hitStatus, sparkTotal int, sparkLabel string, after []string) {
	t.Helper()
	if client != "127.0.0.2" {
		t.Errorf("alert %d's card names client %q", alert.ID, client)
	}
	if len(runbook) != len(alert.Response.Investigate) || len(runbook) == 0 || runbook[0] != alert.Response.Investigate[0] {
		t.Errorf("the runbook on the page %q, the alert's %q", runbook, alert.Response.Investigate)
	}
	if !strings.Contains(summary, "127.0.0.2") || lifetimeSecs != 15*60 || !strings.HasPrefix(blocked, "Blocked by rule ") || !strings.Contains(blocked, ", expires in ") {
		t.Errorf("the block: rule %q for %d s; the alert says %q", summary, lifetimeSecs, blocked)
	}
	if hitStatus != 403 || sparkTotal < 1 || !strings.Contains(sparkLabel, "Hits over the last 1 h") {
		t.Errorf("the blocked client's request: %d; the sparkline totals %d (%q)", hitStatus, sparkTotal, sparkLabel)
	}
	if len(after) != 0 {
		t.Errorf("after the delete the page lists rules %v", after)
	}
	if s := h.security("", "Authorization", basic); len(s.Rules) != 0 {
		t.Errorf("after the delete the server has rules %+v", s.Rules)
	}
}

// TestUISessionWrites: the admin routes /siem, /storage and the shell
// call, as a signed-in browser's session calls them. Without the session's
// CSRF token every write is 403 and changes nothing; with it a guard rule
// is made and deleted, a disk retained and purged (a retained one only
// with force; a bad force is an envelope naming the field). The shell's
// websocket upgrade is authenticated by the cookie, and refused from a
// foreign Origin.
func TestUISessionWrites(t *testing.T) {
	h := startWith(t, "", func(o *Options) { o.AdminPassword = "pw" })
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:pw"))
	disk := leaveReplica(t, h.dir, "gone", 1)
	req, _ := http.NewRequest("POST", h.admin+"/login", strings.NewReader(url.Values{"secret": {"pw"}, "next": {"/siem"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", h.admin)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signin, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	signin.Body.Close()
	cookie, _, _ := strings.Cut(signin.Header.Get("Set-Cookie"), ";")
	if signin.StatusCode != 303 || !strings.HasPrefix(cookie, "berth_ui=") {
		t.Fatalf("sign-in: %d %v", signin.StatusCode, signin.Header)
	}
	page := h.do("GET", "/siem", "", "", "Cookie", cookie)
	m := regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`).FindSubmatch(page.body)
	if page.code != 200 || m == nil {
		t.Fatalf("/siem: %d, no CSRF token", page.code)
	}
	csrf := string(m[1])
	session := func(method, path, body string, withCSRF bool) resp {
		t.Helper()
		hdr := []string{"Cookie", cookie, "Origin", h.admin}
		if withCSRF {
			hdr = append(hdr, "X-CSRF-Token", csrf)
		}
		return h.json(method, path, body, hdr...)
	}
	rule := `{"action":"block","match":{"client":"203.0.113.7"},"expires_in_secs":900,"note":"from the UI"}`
	for _, w := range [][3]string{
		{"POST", "/security/rules", rule},
		{"PATCH", "/disks/" + disk, `{"retain":true}`},
		{"POST", "/disks/" + disk + "/archive", ""},
		{"DELETE", "/disks/" + disk + "?force=true", ""},
	} {
		if r := session(w[0], w[1], w[2], false); r.code != 403 || !strings.Contains(string(r.body), "CSRF") {
			t.Errorf("%s %s without the CSRF token: %d %s", w[0], w[1], r.code, r.body)
		}
	}
	if s := h.security("", "Authorization", basic); len(s.Rules) != 0 {
		t.Errorf("a refused write made rules %+v", s.Rules)
	}
	var inv apitype.DiskInventory
	json.Unmarshal(h.json("GET", "/disks", "", "Authorization", basic).body, &inv)
	if i := slices.IndexFunc(inv.Disks, func(d apitype.DiskInfo) bool { return d.SandboxID == disk }); i < 0 || inv.Disks[i].Retain || len(inv.Archives) != 0 {
		t.Errorf("after refused writes the disk is %+v", inv)
	}

	r := session("POST", "/security/rules", rule, true)
	var v apitype.RuleView
	if r.code != 201 || json.Unmarshal(r.body, &v) != nil || v.Match.Client != "203.0.113.7" || v.ExpiresAt == nil || *v.ExpiresAt-v.CreatedAt != 900 {
		t.Fatalf("POST /security/rules: %d %s", r.code, r.body)
	}
	if r := session("DELETE", "/security/rules/"+v.ID, "", true); r.code != 204 {
		t.Errorf("DELETE the rule: %d %s", r.code, r.body)
	}
	if r := session("PATCH", "/disks/"+disk, `{"retain":"yes"}`, true); r.code != 422 || !strings.Contains(string(r.body), `"retain`) {
		t.Errorf("a bad retain: %d %s", r.code, r.body)
	}
	if r := session("PATCH", "/disks/"+disk, `{"retain":true}`, true); r.code != 204 {
		t.Errorf("retain: %d %s", r.code, r.body)
	}
	if r := session("DELETE", "/disks/"+disk, "", true); r.code != 409 {
		t.Errorf("purge a retained disk without force: %d %s", r.code, r.body)
	}
	if r := session("DELETE", "/disks/"+disk+"?force=maybe", "", true); r.code != 400 || !strings.Contains(string(r.body), "force") {
		t.Errorf("a bad force: %d %s", r.code, r.body)
	}
	var out apitype.DiskOutcome
	if r := session("DELETE", "/disks/"+disk+"?force=true", "", true); r.code != 200 || json.Unmarshal(r.body, &out) != nil || !slices.Equal(out.Removed, []string{disk}) {
		t.Errorf("purge with force: %d %s", r.code, r.body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws := "ws" + strings.TrimPrefix(h.admin, "http") + "/deployments/nope/shell"
	for _, c := range []struct {
		origin, cookie string
		want           int
	}{
		{"http://evil.example", cookie, 403},
		{h.admin, "", 401},
		{h.admin, cookie, 404}, // past the gate: there is no such deployment
	} {
		hdr := http.Header{"Origin": {c.origin}}
		if c.cookie != "" {
			hdr.Set("Cookie", c.cookie)
		}
		conn, r, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: hdr})
		if err == nil {
			conn.CloseNow()
		}
		if r == nil || r.StatusCode != c.want {
			t.Errorf("the shell from %s, cookie %v: %v %v, want %d", c.origin, c.cookie != "", r, err, c.want)
		}
	}
}
