package admin

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/guard"
	"github.com/berth-dev/berth/internal/store"
)

// withGuard gives r's API a guard over a store of its own.
func (r *rig) withGuard() *guard.Guard {
	r.t.Helper()
	st, err := store.Open(r.t.TempDir())
	if err != nil {
		r.t.Fatal(err)
	}
	g, err := guard.New(r.t.Context(), guard.Options{Store: st, Enforce: true})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		g.Close()
		st.Close()
	})
	r.api.o.Guard = g
	return g
}

// TestSecurityRules: POST, PATCH and DELETE /security/rules with app-lb's
// statuses and messages; fleet-wide, so a namespace's token is refused.
func TestSecurityRules(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("POST", "/security/rules", operator, `{"match": {"client": "203.0.113.9"}}`), http.StatusServiceUnavailable, "guard rules are not enabled")
	g := r.withGuard()

	w := r.do("POST", "/security/rules", operator, `{"match": {"client": " 203.0.113.0/24 ", "method": "post"}, "note": "scanner", "expires_in_secs": 600}`)
	want(t, w, http.StatusCreated)
	v := decode[apitype.RuleView](t, w)
	if v.ID == "" || v.Action != apitype.RuleBlock || v.Match.Client != "203.0.113.0/24" || v.Match.Method != "POST" ||
		v.Summary != "from 203.0.113.0/24, method POST" || v.Note != "scanner" || v.ExpiresAt == nil || !v.Enforcing || v.Hits != 0 {
		t.Errorf("POST = %s", w.Body)
	}
	// The same conditions again: the same rule, its note replaced.
	w = r.do("POST", "/security/rules", operator, `{"action": "block", "match": {"client": "203.0.113.0/24", "method": "POST"}, "note": "again"}`)
	want(t, w, http.StatusCreated)
	if v2 := decode[apitype.RuleView](t, w); v2.ID != v.ID || v2.Note != "again" || v2.ExpiresAt != nil || g.Len() != 1 {
		t.Errorf("re-POST = %s (Len %d)", w.Body, g.Len())
	}

	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		msgs                     []string
	}{
		{"empty match", "POST", "/security/rules", `{"match": {"host": "  "}}`, 400, []string{"a rule needs at least one condition — an empty match would apply to every request to the data plane"}},
		{"no match", "POST", "/security/rules", `{"action": "allow"}`, 400, []string{"a rule needs at least one condition"}},
		{"bad client", "POST", "/security/rules", `{"match": {"client": "203.0.113.0/33"}}`, 400, []string{"match.client: "}},
		{"bad action", "POST", "/security/rules", `{"action": "deny", "match": {"host": "a"}}`, 400, []string{"action: "}},
		{"long ua", "POST", "/security/rules", fmt.Sprintf(`{"match": {"user_agent_contains": "%0129d"}}`, 0), 400, []string{"match.user_agent_contains: at most 128"}},
		{"bad expiry", "POST", "/security/rules", `{"match": {"host": "a"}, "expires_in_secs": 0}`, 400, []string{"expires_in_secs: "}},
		{"expiry type", "POST", "/security/rules", `{"match": {"host": "a"}, "expires_in_secs": "soon"}`, 422, []string{"expires_in_secs"}},
		{"patch without the field", "PATCH", "/security/rules/" + v.ID, `{}`, 400, []string{"expires_in_secs: required"}},
		{"patch zero", "PATCH", "/security/rules/" + v.ID, `{"expires_in_secs": 0}`, 400, []string{"expires_in_secs: "}},
		{"patch a string", "PATCH", "/security/rules/" + v.ID, `{"expires_in_secs": "60"}`, 400, []string{"expires_in_secs: expected"}},
		{"patch unknown", "PATCH", "/security/rules/000000000000", `{"expires_in_secs": null}`, 404, []string{`no rule "000000000000"`}},
		{"delete unknown", "DELETE", "/security/rules/000000000000", "", 404, []string{`no rule "000000000000"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want(t, r.do(tt.method, tt.path, operator, tt.body), tt.status, tt.msgs...)
		})
	}
	if n := g.Len(); n != 1 {
		t.Errorf("refused writes left %d rules, want 1", n)
	}
	w = r.do("POST", "/security/rules", operator, `{"match": {}}`)
	if got := decode[map[string]string](t, w)["error"]; got != guard.ErrEmptyMatch.Error() {
		t.Errorf("empty match: %q, want app-lb's message verbatim", got)
	}

	w = r.do("PATCH", "/security/rules/"+v.ID, operator, `{"expires_in_secs": 60}`)
	want(t, w, http.StatusOK)
	if p := decode[apitype.RuleView](t, w); p.ID != v.ID || p.ExpiresAt == nil || p.Note != "again" {
		t.Errorf("PATCH 60 = %s", w.Body)
	}
	w = r.do("PATCH", "/security/rules/"+v.ID, operator, `{"expires_in_secs": null}`)
	want(t, w, http.StatusOK)
	if p := decode[apitype.RuleView](t, w); p.ExpiresAt != nil {
		t.Errorf("PATCH null = %s, want a permanent rule", w.Body)
	}

	// Fleet-wide: a namespace's admin token is refused, rule or none.
	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	want(t, r.do("POST", "/security/rules", team, `{"match": {"deployment": "web"}}`), http.StatusForbidden)
	want(t, r.do("PATCH", "/security/rules/"+v.ID, team, `{"expires_in_secs": null}`), http.StatusForbidden)
	want(t, r.do("DELETE", "/security/rules/"+v.ID, team, ""), http.StatusForbidden)
	want(t, r.do("DELETE", "/security/rules/000000000000", team, ""), http.StatusForbidden)
	viewer := r.mint(`{"name": "viewer", "admin": "view", "deployments": ["*"]}`)
	want(t, r.do("DELETE", "/security/rules/"+v.ID, viewer, ""), http.StatusForbidden)
	if g.Len() != 1 {
		t.Fatal("a refused caller changed the rules")
	}

	want(t, r.do("DELETE", "/security/rules/"+v.ID, operator, ""), http.StatusNoContent)
	want(t, r.do("DELETE", "/security/rules/"+v.ID, operator, ""), http.StatusNotFound, "no rule")

	// At the limit a new rule is a 409; a re-post of one in force is not.
	for i := range guard.MaxRules {
		want(t, r.do("POST", "/security/rules", operator, fmt.Sprintf(`{"match": {"path_prefix": "/p%d/"}}`, i)), http.StatusCreated)
	}
	want(t, r.do("POST", "/security/rules", operator, `{"match": {"path_prefix": "/one-more/"}}`), http.StatusConflict, "at the 256-rule limit; remove one first")
	want(t, r.do("POST", "/security/rules", operator, `{"match": {"path_prefix": "/p7/"}, "expires_in_secs": 60}`), http.StatusCreated)
}
