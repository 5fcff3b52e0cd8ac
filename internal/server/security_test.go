package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
)

// fromAddr is a client whose connections come from the loopback address
// src (127.0.0.2, 127.0.0.3, …: each is its own source to the SIEM), and
// whose every *.test name dials berth's proxy.
func fromAddr(h *harness, src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, _ := net.SplitHostPort(addr); strings.HasSuffix(host, ".test") {
			addr = strings.TrimPrefix(h.proxy, "http://")
		}
		return d.DialContext(ctx, network, addr)
	}}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func fetch(t *testing.T, c *http.Client, u string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

func (h *harness) security(query string, hdr ...string) apitype.SecurityResponse {
	h.t.Helper()
	r := h.do("GET", "/security"+query, "", "", hdr...)
	if r.code != 200 {
		h.t.Fatalf("GET /security%s: %d %s", query, r.code, r.body)
	}
	var s apitype.SecurityResponse
	if err := json.Unmarshal(r.body, &s); err != nil {
		h.t.Fatalf("GET /security: %v in %s", err, r.body)
	}
	return s
}

// awaitAlert polls GET /security until an alert of rule from client is
// there (the SIEM analyses in batches off the request path), within a
// bound that only turns a missing alert into a failure.
func (h *harness) awaitAlert(rule, client string) apitype.SecurityAlert {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, a := range h.security("?rule=" + rule).Alerts {
			if a.Client == client {
				return a
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no %s alert from %s: %+v", rule, client, h.security("").Alerts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSecurityThroughBerth is the SIEM and the guard end to end: a
// signed-in user (a valid app-token for its gated deployment) browsing 500
// missing pages raises nothing, while an anonymous client doing the same
// to another deployment is found probing — as its socket address, whatever
// X-Forwarded-For it sends. The alert's block-client action, posted as it
// comes, refuses that client and nobody else; the alert and the rule are
// still there after a restart, and a namespace's caller sees neither.
func TestSecurityThroughBerth(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/missing/") {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	t.Cleanup(up.Close)
	upstream := strings.TrimPrefix(up.URL, "http://")
	dir := t.TempDir()
	h := start(t, dir)
	for _, d := range []string{
		fmt.Sprintf(`{"id": "app", "routes": [{"host": "app.test"}], "upstreams": [%q], "auth": {"provider": "app-token"}}`, upstream),
		fmt.Sprintf(`{"id": "open", "routes": [{"host": "open.test"}], "upstreams": [%q]}`, upstream),
		fmt.Sprintf(`{"id": "theirs", "namespace": "other", "routes": [{"host": "theirs.test"}], "upstreams": [%q]}`, upstream),
	} {
		if r := h.json("POST", "/deployments", d); r.code != 201 {
			t.Fatalf("deployment: %d %s", r.code, r.body)
		}
	}
	var tok struct {
		Token string `json:"token"`
	}
	r := h.json("POST", "/tokens", `{"name": "alice", "admin": "none", "deployments": ["app"]}`)
	if r.code != 201 || json.Unmarshal(r.body, &tok) != nil {
		t.Fatalf("token: %d %s", r.code, r.body)
	}
	port := h.proxy[strings.LastIndexByte(h.proxy, ':')+1:]
	user, scanner := fromAddr(h, "127.0.0.3"), fromAddr(h, "127.0.0.2")

	for i := range 500 {
		if code, _ := fetch(t, user, fmt.Sprintf("http://app.test:%s/missing/%d", port, i), "Authorization", "Bearer "+tok.Token); code != 404 {
			t.Fatalf("the user's miss %d: %d", i, code)
		}
	}
	for i := range 40 {
		if code, _ := fetch(t, scanner, fmt.Sprintf("http://open.test:%s/missing/%d", port, i), "X-Forwarded-For", "203.0.113.5"); code != 404 {
			t.Fatalf("the scanner's miss %d: %d", i, code)
		}
	}
	alert := h.awaitAlert("traffic.scanner", "127.0.0.2")
	if alert.Deployment != "open" || alert.Severity != apitype.SeverityMedium || alert.Technique != "T1595" || alert.Count < 1 {
		t.Errorf("scanner alert: %+v", alert)
	}
	// The user's requests came first, and the SIEM analyses in order:
	// had they counted, their alert would be there by now.
	for _, a := range h.security("").Alerts {
		if a.Client == "127.0.0.3" || a.Client == "203.0.113.5" {
			t.Errorf("alert against the signed-in user or the forged address: %+v", a)
		}
	}

	var block *apitype.SuggestedAction
	for i, a := range alert.Response.Actions {
		if a.Kind == "block-client" {
			block = &alert.Response.Actions[i]
		}
	}
	if block == nil || len(alert.Response.Investigate) == 0 {
		t.Fatalf("the alert suggests no block-client: %+v", alert.Response)
	}
	rule, _ := json.Marshal(block.Rule)
	c := contracttest.MustLoad(t)
	if r := h.json("POST", "/security/rules", string(rule)); r.code != 201 {
		t.Fatalf("posting the suggested rule %s: %d %s", rule, r.code, r.body)
	} else if err := c.CheckJSON("RuleView", r.body); err != nil {
		t.Errorf("RuleView: %v\n%s", err, r.body)
	}
	if code, body := fetch(t, scanner, "http://open.test:"+port+"/"); code != 403 || body != "blocked\n" {
		t.Errorf("the blocked scanner: %d %q", code, body)
	}
	if code, _ := fetch(t, user, "http://open.test:"+port+"/"); code != 200 {
		t.Errorf("another client: %d", code)
	}
	for _, path := range []string{"/security", "/security?severity=high&limit=5"} {
		if r := h.do("GET", path, "", ""); r.code != 200 {
			t.Errorf("GET %s: %d", path, r.code)
		} else if err := c.CheckJSON("SecurityResponse", r.body); err != nil {
			t.Errorf("SecurityResponse: %v\n%s", err, r.body)
		}
	}
	if r := h.do("GET", "/metrics", "", ""); r.code != 200 {
		t.Errorf("GET /metrics: %d", r.code)
	} else if err := c.CheckJSON("MetricsResponse", r.body); err != nil {
		t.Errorf("MetricsResponse: %v", err)
	}
	sec := h.security("")
	if len(sec.Rules) != 1 || sec.Guard.Blocked != 1 || !sec.Guard.Enforcing || sec.Stats == nil || sec.Stats.Observed < 540 {
		t.Errorf("security: rules %+v, guard %+v, stats %+v", sec.Rules, sec.Guard, sec.Stats)
	}
	var m apitype.MetricsResponse
	if r := h.do("GET", "/metrics?summary=true", "", ""); r.code != 200 || json.Unmarshal(r.body, &m) != nil || m.Security == nil ||
		m.Security.Open < 1 || m.Security.Rules != 1 || m.Security.Blocked != 1 {
		t.Errorf("/metrics security: %+v", m.Security)
	}

	// A namespace's caller sees none of it: the alert is another
	// deployment's, and the rule is fleet-wide.
	var ns struct {
		Token string `json:"token"`
	}
	if r := h.json("POST", "/tokens", `{"name": "them", "admin": "view", "namespace": "other"}`); r.code != 201 || json.Unmarshal(r.body, &ns) != nil {
		t.Fatalf("namespace token: %d %s", r.code, r.body)
	}
	if s := h.security("", "Authorization", "Bearer "+ns.Token); len(s.Alerts) != 0 || len(s.Rules) != 0 || s.Stats != nil || s.Guard.Blocked != 0 {
		t.Errorf("a namespace caller sees %+v", s)
	}
	if r := h.json("POST", "/security/rules", `{"match": {"client": "198.51.100.1"}}`, "Authorization", "Bearer "+ns.Token); r.code != 403 {
		t.Errorf("a namespace caller posting a guard rule: %d %s", r.code, r.body)
	}
	if r := h.json("POST", "/security/rules", `{"match": {"client": "198.51.100.1"}, "expire_in_secs": 60}`); r.code != 400 || !strings.Contains(string(r.body), "expire_in_secs") {
		t.Errorf("a misspelt key: %d %s, want 400 naming it", r.code, r.body)
	}

	// After a restart.
	h.stop()
	h = start(t, dir)
	sec = h.security("?rule=traffic.scanner")
	if len(sec.Alerts) != 1 || sec.Alerts[0].ID != alert.ID || len(sec.Rules) != 1 {
		t.Errorf("after a restart: alerts %+v, rules %+v", sec.Alerts, sec.Rules)
	}
	port = h.proxy[strings.LastIndexByte(h.proxy, ':')+1:]
	if code, body := fetch(t, fromAddr(h, "127.0.0.2"), "http://open.test:"+port+"/"); code != 403 || body != "blocked\n" {
		t.Errorf("the scanner after a restart: %d %q", code, body)
	}
}

// TestRateLimitThroughBerth: a deployment's per-client limit answers 429
// with Retry-After past its burst, per client address.
func TestRateLimitThroughBerth(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	t.Cleanup(up.Close)
	h := start(t, "")
	if r := h.json("POST", "/deployments", fmt.Sprintf(`{"id": "api", "routes": [{"host": "api.test"}], "upstreams": [%q]}`, strings.TrimPrefix(up.URL, "http://"))); r.code != 201 {
		t.Fatalf("deployment: %d %s", r.code, r.body)
	}
	// A refill this slow never adds a token during the test.
	if r := h.json("PUT", "/deployments/api/rate-limit", `{"requests_per_sec": 0.001, "burst": 2}`); r.code != 200 {
		t.Fatalf("rate limit: %d %s", r.code, r.body)
	}
	port := h.proxy[strings.LastIndexByte(h.proxy, ':')+1:]
	a, b := fromAddr(h, "127.0.0.4"), fromAddr(h, "127.0.0.5")
	for i := range 2 {
		if code, _ := fetch(t, a, "http://api.test:"+port+"/"); code != 200 {
			t.Fatalf("request %d within the burst: %d", i, code)
		}
	}
	req, _ := http.NewRequest("GET", "http://api.test:"+port+"/", nil)
	resp, err := a.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || string(body) != "rate limit exceeded\n" {
		t.Errorf("past the burst: %d %q Retry-After %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if code, _ := fetch(t, b, "http://api.test:"+port+"/"); code != 200 {
		t.Errorf("another client: %d", code)
	}
	if r := h.do("DELETE", "/deployments/api/rate-limit", "", ""); r.code != 204 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	if code, _ := fetch(t, a, "http://api.test:"+port+"/"); code != 200 {
		t.Errorf("after the limit went: %d", code)
	}
}

// TestSecurityUnderLoad: with 256 guard rules and the SIEM on, concurrent
// keep-alive clients at full speed lose no request, and the pipeline
// accounts for every one: observed = analysed + dropped (a full queue
// drops and counts, never blocks a request).
func TestSecurityUnderLoad(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	t.Cleanup(up.Close)
	h := start(t, "")
	if r := h.json("POST", "/deployments", fmt.Sprintf(`{"id": "app", "routes": [{"host": "app.test"}], "upstreams": [%q]}`, strings.TrimPrefix(up.URL, "http://"))); r.code != 201 {
		t.Fatalf("deployment: %d %s", r.code, r.body)
	}
	for i := range 256 {
		m := fmt.Sprintf(`{"client": "198.51.%d.%d"}`, i/200, i%200)
		if i%4 == 3 {
			m = fmt.Sprintf(`{"path_prefix": "/wp-admin/%d", "user_agent_contains": "sqlmap"}`, i)
		}
		if r := h.json("POST", "/security/rules", `{"action": "block", "match": `+m+`}`); r.code != 201 {
			t.Fatalf("rule %d: %d %s", i, r.code, r.body)
		}
	}
	if r := h.json("POST", "/security/rules", `{"match": {"client": "198.51.100.1"}}`); r.code != 409 {
		t.Errorf("a 257th rule: %d %s, want 409", r.code, r.body)
	}
	port := h.proxy[strings.LastIndexByte(h.proxy, ':')+1:]
	const workers, each = 8, 1500
	errs := make(chan error, workers)
	for range workers {
		go func() {
			c := fromAddr(h, "127.0.0.6")
			for i := range each {
				resp, err := c.Get(fmt.Sprintf("http://app.test:%s/page/%d", port, i))
				if err != nil {
					errs <- fmt.Errorf("request %d: %v", i, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("request %d: %d", i, resp.StatusCode)
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := h.security("").Stats
		if st == nil {
			t.Fatal("no stats")
		}
		if st.Observed >= workers*each && st.Analyzed+st.Dropped == st.Observed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pipeline does not account for %d requests: %+v", workers*each, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGuardDryRun: with GuardDryRun (--guard-enforce=false) a request a
// rule blocks is served, and counted on the rule; the views say the guard
// is not enforcing.
func TestGuardDryRun(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	t.Cleanup(up.Close)
	h := startWith(t, "", func(o *Options) { o.GuardDryRun = true })
	if r := h.json("POST", "/deployments", fmt.Sprintf(`{"id": "app", "routes": [{"host": "app.test"}], "upstreams": [%q]}`, strings.TrimPrefix(up.URL, "http://"))); r.code != 201 {
		t.Fatalf("deployment: %d %s", r.code, r.body)
	}
	var v apitype.RuleView
	if r := h.json("POST", "/security/rules", `{"match": {"client": "127.0.0.7"}}`); r.code != 201 || json.Unmarshal(r.body, &v) != nil || v.Enforcing {
		t.Fatalf("rule: %d %s", r.code, r.body)
	}
	port := h.proxy[strings.LastIndexByte(h.proxy, ':')+1:]
	if code, _ := fetch(t, fromAddr(h, "127.0.0.7"), "http://app.test:"+port+"/"); code != 200 {
		t.Errorf("a would-block request: %d, want served", code)
	}
	sec := h.security("")
	if len(sec.Rules) != 1 || sec.Rules[0].Hits != 1 || sec.Guard.Enforcing || sec.Guard.Blocked != 1 {
		t.Errorf("rules %+v guard %+v", sec.Rules, sec.Guard)
	}
}
