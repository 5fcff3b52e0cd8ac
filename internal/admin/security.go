package admin

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/siem"
	"github.com/berth-dev/berth/internal/web"
)

// SIEM is the detection engine (package siem) as GET /security and
// /metrics read it.
type SIEM interface {
	Enabled() bool
	WindowSecs() int
	Alerts(f siem.Filter) ([]apitype.SecurityAlert, apitype.SeverityTotals)
	Stats() apitype.SiemStats
	Summary() (open, urgent int, dropped uint64, atCapacity bool)
}

// security is GET /security?severity=&rule=&deployment=&namespace=&limit=
// (app-lb §6): the SIEM's alerts, newest first, with the guard rules in
// force and their counts, from one fetch. A caller below the fleet sees
// the alerts of the deployments it reaches, the rules that name one of
// them, and no engine statistics (they would describe traffic it cannot
// see).
func (a *API) security(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := 200
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return web.Invalid("limit", "expected a positive whole number, got %q", v)
		}
		limit = min(n, 1000)
	}
	p := caller(r)
	resp := apitype.SecurityResponse{
		GeneratedAt: time.Now().UnixMilli(),
		Alerts:      []apitype.SecurityAlert{},
		Rules:       []apitype.RuleView{},
		Guard:       apitype.GuardStats{HitsBucketSecs: 60, HitsWindowSecs: 3600},
	}
	if e := a.o.SIEM; e != nil && e.Enabled() {
		resp.Enabled = true
		resp.WindowSecs = e.WindowSecs()
		f := siem.Filter{MinSeverity: apitype.Severity(q.Get("severity")), Rule: q.Get("rule"), Deployment: q.Get("deployment"), Limit: limit}
		switch ns := q.Get("namespace"); ns {
		case "":
		case "default":
			f.Namespaces = []string{"", "default"}
		default:
			f.Namespaces = []string{ns}
		}
		if !p.Fleet() {
			// Only the alerts of deployments the caller reaches.
			f.Visible = func(dep, ns string) bool { return dep != "" && p.Touches(dep, ns) }
		}
		resp.Alerts, resp.Totals = e.Alerts(f)
		if resp.Alerts == nil {
			resp.Alerts = []apitype.SecurityAlert{}
		}
		if p.Fleet() {
			st := e.Stats()
			resp.Stats = &st
		}
	}
	if g := a.o.Guard; g != nil {
		resp.Guard = g.Stats()
		resp.Rules = g.Views(true)
		if !p.Fleet() {
			resp.Rules = slices.DeleteFunc(resp.Rules, func(v apitype.RuleView) bool { return !a.ruleVisible(p, v) })
			// The fleet's counts describe traffic the caller cannot see.
			resp.Guard = apitype.GuardStats{Rules: len(resp.Rules), Enforcing: resp.Guard.Enforcing,
				HitsBucketSecs: resp.Guard.HitsBucketSecs, HitsWindowSecs: resp.Guard.HitsWindowSecs}
		}
	}
	web.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// ruleVisible reports a guard rule a caller below the fleet may see: one
// limited to a deployment it reaches.
func (a *API) ruleVisible(p *auth.Principal, v apitype.RuleView) bool {
	dep := v.Match.Deployment
	if dep == "" {
		return false
	}
	e, ok := a.o.Registry.Get(dep)
	return ok && visible(p, e)
}

// securitySummary is MetricsResponse.security: nil when detection is off.
func (a *API) securitySummary(p *auth.Principal) *apitype.SecuritySummary {
	e := a.o.SIEM
	if e == nil || !e.Enabled() || !p.Fleet() {
		return nil
	}
	open, urgent, dropped, full := e.Summary()
	s := &apitype.SecuritySummary{Open: open, Urgent: urgent, Dropped: int(dropped), ClientsAtCapacity: full}
	if g := a.o.Guard; g != nil {
		st := g.Stats()
		s.Rules, s.Blocked = st.Rules, st.Blocked
	}
	return s
}
