package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/telemetry"
)

var now0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fixture is a Handler over a real telemetry store and a real main
// store, in which namespace team-a has deployment web and team-b has api.
type fixture struct {
	h     *Handler
	tel   *telemetry.Store
	st    *store.Store
	now   atomic.Int64
	mu    sync.Mutex
	waits []time.Duration
}

var deployments = map[string]string{"web": "team-a", "api": "team-b"}

func newFixture(t *testing.T, roots func() *httptest.Server) *fixture {
	t.Helper()
	f := &fixture{}
	f.now.Store(now0.UnixMilli())
	clock := func() time.Time { return time.UnixMilli(f.now.Load()) }
	tel, err := telemetry.Open(telemetry.Options{Dir: t.TempDir(), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Close() })
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	o := Options{
		Telemetry: tel, Store: st, Key: secrets.Key{1, 2, 3}, Now: clock,
		Visible: func(_ *http.Request, ns, id string) bool { return deployments[id] == ns },
		Deployments: func(_ *http.Request, ns string) []string {
			var out []string
			for id, dns := range deployments {
				if dns == ns {
					out = append(out, id)
				}
			}
			return out
		},
		Sleep: func(_ context.Context, d time.Duration) error {
			f.mu.Lock()
			f.waits = append(f.waits, d)
			f.mu.Unlock()
			return nil
		},
	}
	if roots != nil {
		srv := roots()
		pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
		o.RootCAs = pool
	}
	h, err := NewHandler(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	f.h, f.tel, f.st = h, tel, st
	return f
}

type answer struct {
	status int
	body   []byte
}

func (f *fixture) do(t *testing.T, ns, method, path string, body any) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	r := httptest.NewRequest(method, path, rd)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	r = r.WithContext(WithNamespace(r.Context(), ns))
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return answer{w.Code, w.Body.Bytes()}
}

func (f *fixture) traffic(t *testing.T, ns, dep string, ok, failed int) {
	t.Helper()
	for i := range ok + failed {
		status := 200
		if i >= ok {
			status = 502
		}
		f.tel.Access(&telemetry.Access{Time: time.UnixMilli(f.now.Load()).Add(-time.Duration(i+1) * 100 * time.Millisecond),
			Method: "GET", Path: "/x", Status: status, Duration: time.Millisecond, Deployment: dep, Namespace: ns, Backend: "sb-1"})
	}
	if err := f.tel.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestShapes: every answer of the API is the contract's shape.
func TestShapes(t *testing.T) {
	c := contracttest.MustLoad(t)
	f := newFixture(t, nil)
	f.traffic(t, "team-a", "web", 5, 2)
	for _, q := range []struct{ path, typ string }{
		{"/api/fleet", "ObsFleet"},
		{"/api/fleet?window=15m", "ObsFleet"},
		{"/api/deployments/web?window=24h", "ObsDeployment"},
		{"/api/deployments/web/logs?limit=3", "ObsLogs"},
	} {
		a := f.do(t, "team-a", "GET", q.path, nil)
		if a.status != 200 {
			t.Fatalf("%s: %d %s", q.path, a.status, a.body)
		}
		if err := c.CheckJSON(q.typ, a.body); err != nil {
			t.Errorf("%s: %v", q.path, err)
		}
	}
	a := f.do(t, "team-a", "POST", "/api/alerts", map[string]any{"deployment": "web", "threshold": 2, "webhook_url": "https://example.com/h"})
	if err := c.CheckJSON("ObsAlert", a.body); a.status != 201 || err != nil {
		t.Errorf("POST /api/alerts: %d %s %v", a.status, a.body, err)
	}
	var list []json.RawMessage
	json.Unmarshal(f.do(t, "team-a", "GET", "/api/alerts", nil).body, &list)
	if len(list) != 1 {
		t.Fatalf("%d alert rules listed", len(list))
	}
	if err := c.CheckJSON("ObsAlert", list[0]); err != nil {
		t.Error(err)
	}
	var fl apitype.ObsFleet
	json.Unmarshal(f.do(t, "team-a", "GET", "/api/fleet?window=15m", nil).body, &fl)
	if len(fl.Deployments) != 1 || fl.Deployments[0].ID != "web" || fl.Deployments[0].LogLines != 7 || fl.Deployments[0].ErrorLogs != 2 || fl.StepSecs != 10 {
		t.Errorf("fleet %+v", fl)
	}
	var logs apitype.ObsLogs
	json.Unmarshal(f.do(t, "team-a", "GET", "/api/deployments/web/logs?limit=3", nil).body, &logs)
	if len(logs.Rows) != 3 || logs.NextBeforeMs == nil || logs.Limit != 3 {
		t.Errorf("logs %+v", logs)
	}
}

// TestBadInput: bad parameters are 400s naming the field.
func TestBadInput(t *testing.T) {
	f := newFixture(t, nil)
	for _, q := range []struct{ method, path, field string }{
		{"GET", "/api/fleet?window=2h", "window"},
		{"GET", "/api/deployments/web/logs?limit=0", "limit"},
		{"GET", "/api/deployments/web/logs?limit=1001", "limit"},
		{"GET", "/api/deployments/web/logs?level=loud", "level"},
		{"GET", "/api/deployments/web/logs?from=x", "from"},
		{"GET", "/api/deployments/web/logs?from=20&to=10", "from"},
		{"GET", "/api/deployments/web/logs?grep=x", "grep"},
	} {
		a := f.do(t, "team-a", q.method, q.path, nil)
		if a.status != 400 || !strings.Contains(string(a.body), q.field) {
			t.Errorf("%s %s: %d %s, want a 400 naming %s", q.method, q.path, a.status, a.body, q.field)
		}
	}
	for _, q := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"threshold": 1, "webhook_url": "https://example.com/h"}, "deployment"},
		{map[string]any{"deployment": "api", "threshold": 1, "webhook_url": "https://example.com/h"}, "deployment"}, // team-b's
		{map[string]any{"deployment": "web", "webhook_url": "https://example.com/h"}, "threshold"},
		{map[string]any{"deployment": "web", "threshold": -1, "webhook_url": "https://example.com/h"}, "threshold"},
		{map[string]any{"deployment": "web", "threshold": 1, "webhook_url": "http://example.com/h"}, "webhook_url"},
		{map[string]any{"deployment": "web", "threshold": 1, "webhook_url": "https://169.254.169.254/h"}, "webhook_url"},
		{map[string]any{"deployment": "web", "threshold": 1}, "webhook_url"},
		{map[string]any{"deployment": "web", "threshold": 1, "webhook_url": "https://example.com/h", "metric": "latency"}, "metric"},
		{map[string]any{"deployment": "web", "threshold": 1, "webhook_url": "https://example.com/h", "severity": "x"}, "severity"},
	} {
		a := f.do(t, "team-a", "POST", "/api/alerts", q.body)
		if a.status != 400 || !strings.Contains(string(a.body), q.field) {
			t.Errorf("POST %v: %d %s, want a 400 naming %s", q.body, a.status, a.body, q.field)
		}
	}
}

// TestNoOracle: another namespace's deployment and alert rule answer
// exactly as ones that do not exist.
func TestNoOracle(t *testing.T) {
	f := newFixture(t, nil)
	f.traffic(t, "team-b", "api", 3, 0)
	a := f.do(t, "team-b", "POST", "/api/alerts", map[string]any{"deployment": "api", "threshold": 1, "webhook_url": "https://example.com/h"})
	if a.status != 201 {
		t.Fatalf("POST: %d %s", a.status, a.body)
	}
	var rule apitype.ObsAlert
	json.Unmarshal(a.body, &rule)
	for _, p := range []string{"/api/deployments/%s", "/api/deployments/%s/logs"} {
		other := f.do(t, "team-a", "GET", strings.Replace(p, "%s", "api", 1), nil)
		none := f.do(t, "team-a", "GET", strings.Replace(p, "%s", "nope", 1), nil)
		if other.status != 404 || none.status != 404 || strings.Replace(string(other.body), "api", "nope", 1) != string(none.body) {
			t.Errorf("%s: team-b's answers %d %s, a missing one %d %s", p, other.status, other.body, none.status, none.body)
		}
	}
	other := f.do(t, "team-a", "DELETE", "/api/alerts/"+rule.ID, nil)
	none := f.do(t, "team-a", "DELETE", "/api/alerts/oal_0000000000000000", nil)
	if other.status != 404 || none.status != 404 || strings.Replace(string(other.body), rule.ID, "oal_0000000000000000", 1) != string(none.body) {
		t.Errorf("DELETE team-b's rule: %d %s; a missing one: %d %s", other.status, other.body, none.status, none.body)
	}
	var list []apitype.ObsAlert
	json.Unmarshal(f.do(t, "team-a", "GET", "/api/alerts", nil).body, &list)
	if len(list) != 0 {
		t.Errorf("team-a lists %d rules", len(list))
	}
	var fl apitype.ObsFleet
	json.Unmarshal(f.do(t, "team-a", "GET", "/api/fleet", nil).body, &fl)
	for _, d := range fl.Deployments {
		if d.ID == "api" || d.LogLines != 0 {
			t.Errorf("team-a's fleet shows %+v", d)
		}
	}
	if a := f.do(t, "team-b", "DELETE", "/api/alerts/"+rule.ID, nil); a.status != 204 {
		t.Errorf("team-b's DELETE: %d %s", a.status, a.body)
	}
}

// TestAlertWebhookFiresAndRetries: a rule whose deployment's errors over
// the trailing minute pass its threshold POSTs to its webhook (an https
// server on loopback), retrying a failed attempt; it fires once per
// crossing, and the rule survives a restart (sealed in the main store).
func TestAlertWebhookFiresAndRetries(t *testing.T) {
	var mu sync.Mutex
	var got []Delivery
	var attempts int
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		attempts++
		if attempts == 1 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		var d Delivery
		json.NewDecoder(r.Body).Decode(&d)
		if r.Header.Get("X-Berth-Event") == EventObsAlert {
			got = append(got, d)
		}
	}))
	defer srv.Close()
	f := newFixture(t, func() *httptest.Server { return srv })
	a := f.do(t, "team-a", "POST", "/api/alerts", map[string]any{"deployment": "web", "threshold": 3, "webhook_url": srv.URL + "/hook"})
	if a.status != 201 {
		t.Fatalf("POST: %d %s", a.status, a.body)
	}
	var rule apitype.ObsAlert
	json.Unmarshal(a.body, &rule)
	if rule.Metric != "errors" || rule.Namespace == nil || *rule.Namespace != "team-a" || rule.WebhookURL != srv.URL+"/hook" {
		t.Errorf("rule %+v", rule)
	}
	f.traffic(t, "team-a", "web", 10, 3) // at the threshold: not above it
	f.h.Evaluate(context.Background())
	if attempts != 0 {
		t.Fatalf("fired at the threshold (%d attempts)", attempts)
	}
	f.traffic(t, "team-a", "web", 0, 2)
	f.h.Evaluate(context.Background())
	mu.Lock()
	if attempts != 2 || len(got) != 1 {
		t.Fatalf("%d attempts, %d deliveries; want 2 and 1 (a retry after the 503)", attempts, len(got))
	}
	d := got[0]
	mu.Unlock()
	if d.Alert.ID != rule.ID || d.Value != 5 || d.Alert.WebhookURL != "" || d.WindowSecs != 60 {
		t.Errorf("delivery %+v", d)
	}
	// notify.Backoff's first wait: the upper half of DefaultBackoff,
	// jittered.
	if len(f.waits) != 1 || f.waits[0] < DefaultBackoff/2 || f.waits[0] > DefaultBackoff {
		t.Errorf("backoffs %v, want one in [%v, %v]", f.waits, DefaultBackoff/2, DefaultBackoff)
	}
	f.h.Evaluate(context.Background()) // still above: no second firing
	if attempts != 2 {
		t.Errorf("fired again while still above the threshold: %d attempts", attempts)
	}
	// Sealed at rest, and loaded again by a new handler.
	rows, _ := f.st.ObsAlerts(context.Background())
	if len(rows) != 1 || bytes.Contains(rows[0].Sealed, []byte("hook")) {
		t.Fatalf("stored rows %+v", rows)
	}
	h2, err := NewHandler(context.Background(), f.h.o)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if l := h2.rulesOf("team-a"); len(l) != 1 || l[0].WebhookURL != srv.URL+"/hook" {
		t.Errorf("reloaded rules %+v", l)
	}
}
