package guard

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/clocktest"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/web"
)

// The tests run the guard over a real store in t.TempDir(), with a clock
// they move by hand.

// failing is the real store with writes that fail while fail is set, to
// see a write that did not land.
type failing struct {
	*store.Store
	fail atomic.Bool
}

var errDisk = errors.New("disk on fire")

func (f *failing) PutGuardRule(ctx context.Context, r store.GuardRule) error {
	if f.fail.Load() {
		return errDisk
	}
	return f.Store.PutGuardRule(ctx, r)
}

func (f *failing) DeleteGuardRules(ctx context.Context, ids []string) error {
	if f.fail.Load() {
		return errDisk
	}
	return f.Store.DeleteGuardRules(ctx, ids)
}

type rig struct {
	t     *testing.T
	dir   string
	st    *failing
	clock *clocktest.Clock
	g     *Guard
}

func newRig(t *testing.T, enforce bool) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir(), clock: clocktest.New(time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC))}
	r.open(enforce)
	return r
}

// open (re)opens the store and the guard over r.dir.
func (r *rig) open(enforce bool) {
	r.t.Helper()
	st, err := store.Open(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	r.st = &failing{Store: st}
	g, err := New(r.t.Context(), Options{Store: r.st, Enforce: enforce, Now: r.clock.Now})
	if err != nil {
		st.Close()
		r.t.Fatal(err)
	}
	r.g = g
	r.t.Cleanup(func() {
		g.Close()
		st.Close()
	})
}

// reopen closes the guard and the store, and opens them again.
func (r *rig) reopen(enforce bool) {
	r.t.Helper()
	r.g.Close()
	if err := r.st.Close(); err != nil {
		r.t.Fatal(err)
	}
	r.open(enforce)
}

func (r *rig) add(spec apitype.RuleSpec) apitype.RuleView {
	r.t.Helper()
	v, err := r.g.Add(r.t.Context(), spec)
	if err != nil {
		r.t.Fatalf("Add(%+v): %v", spec, err)
	}
	return v
}

func (r *rig) stored() []store.GuardRule {
	r.t.Helper()
	rows, err := r.st.GuardRules(r.t.Context())
	if err != nil {
		r.t.Fatal(err)
	}
	return rows
}

func secs(n int64) *int64 { return &n }

func block(m apitype.RuleMatch) apitype.RuleSpec {
	return apitype.RuleSpec{Action: apitype.RuleBlock, Match: m}
}

func allow(m apitype.RuleMatch) apitype.RuleSpec {
	return apitype.RuleSpec{Action: apitype.RuleAllow, Match: m}
}

var (
	scanner = netip.MustParseAddr("203.0.113.9")
	other   = netip.MustParseAddr("198.51.100.1")
)

// req is a request; check runs it.
type req struct {
	client                                  netip.Addr
	host, deployment, method, path, userAgt string
}

func (r *rig) check(q req) Verdict {
	return r.g.Check(q.client, q.host, q.deployment, q.method, q.path, q.userAgt)
}

var plain = req{client: other, host: "web.example", deployment: "web", method: "GET", path: "/index.html", userAgt: "Mozilla/5.0"}

// TestNormalize: trimming, case, canonical clients; each refusal names
// its field.
func TestNormalize(t *testing.T) {
	got, err := Normalize(apitype.RuleSpec{Match: apitype.RuleMatch{
		Client: " 203.0.113.77/24 ", Host: " Web.Example ", Deployment: " web ", PathPrefix: " /Admin ",
		PathContains: " .Git ", Method: " get ", UserAgentContains: " SQLMap ",
	}, Note: "  why  ", ExpiresInSecs: secs(60)})
	if err != nil {
		t.Fatal(err)
	}
	want := apitype.RuleSpec{Action: apitype.RuleBlock, Match: apitype.RuleMatch{
		Client: "203.0.113.0/24", Host: "web.example", Deployment: "web", PathPrefix: "/Admin",
		PathContains: ".Git", Method: "GET", UserAgentContains: "sqlmap",
	}, Note: "why", ExpiresInSecs: secs(60)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Normalize (-want +got):\n%s", diff)
	}
	for in, want := range map[string]string{
		"203.0.113.9":            "203.0.113.9",
		"203.0.113.9/32":         "203.0.113.9",
		"::ffff:203.0.113.9":     "203.0.113.9",
		"::ffff:203.0.113.0/120": "203.0.113.0/24",
		"2001:DB8::1/32":         "2001:db8::/32",
		"2001:db8::1":            "2001:db8::1",
		"0.0.0.0/0":              "0.0.0.0/0",
	} {
		n, err := Normalize(block(apitype.RuleMatch{Client: in}))
		if err != nil || n.Match.Client != want {
			t.Errorf("client %q → %q, %v; want %q", in, n.Match.Client, err, want)
		}
	}
	if n, _ := Normalize(allow(apitype.RuleMatch{Host: "a"})); n.Action != apitype.RuleAllow {
		t.Errorf("allow normalized to %q", n.Action)
	}

	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tt := range []struct {
		name  string
		spec  apitype.RuleSpec
		field string
	}{
		{"action", apitype.RuleSpec{Action: "deny", Match: apitype.RuleMatch{Host: "a"}}, "action: "},
		{"bad client", block(apitype.RuleMatch{Client: "nope"}), "match.client: "},
		{"bad cidr", block(apitype.RuleMatch{Client: "203.0.113.0/33"}), "match.client: "},
		{"zoned client", block(apitype.RuleMatch{Client: "fe80::1%eth0"}), "match.client: "},
		{"long client", block(apitype.RuleMatch{Client: long(257)}), "match.client: "},
		{"long host", block(apitype.RuleMatch{Host: long(254)}), "match.host: at most 253"},
		{"long deployment", block(apitype.RuleMatch{Deployment: long(257)}), "match.deployment: at most 256"},
		{"long prefix", block(apitype.RuleMatch{PathPrefix: "/" + long(256)}), "match.path_prefix: at most 256"},
		{"long contains", block(apitype.RuleMatch{PathContains: long(257)}), "match.path_contains: at most 256"},
		{"long method", block(apitype.RuleMatch{Method: strings.Repeat("G", 17)}), "match.method: at most 16"},
		{"bad method", block(apitype.RuleMatch{Method: "GE T"}), "match.method: "},
		{"long ua", block(apitype.RuleMatch{UserAgentContains: long(129)}), "match.user_agent_contains: at most 128"},
		{"control", block(apitype.RuleMatch{PathContains: "a\x00b"}), "match.path_contains: must not contain control"},
		{"long note", apitype.RuleSpec{Match: apitype.RuleMatch{Host: "a"}, Note: long(257)}, "note: at most 256"},
		{"zero expiry", apitype.RuleSpec{Match: apitype.RuleMatch{Host: "a"}, ExpiresInSecs: secs(0)}, "expires_in_secs: "},
		{"negative expiry", apitype.RuleSpec{Match: apitype.RuleMatch{Host: "a"}, ExpiresInSecs: secs(-5)}, "expires_in_secs: "},
		{"huge expiry", apitype.RuleSpec{Match: apitype.RuleMatch{Host: "a"}, ExpiresInSecs: secs(MaxExpiresInSecs + 1)}, "expires_in_secs: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Normalize(tt.spec)
			var fe *web.FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), tt.field) {
				t.Errorf("Normalize = %v, want a *web.FieldError starting %q", err, tt.field)
			}
		})
	}
	// At the limits is fine, counted in characters.
	if _, err := Normalize(apitype.RuleSpec{Match: apitype.RuleMatch{Host: long(253), UserAgentContains: strings.Repeat("é", 128),
		Method: strings.Repeat("G", 16), PathPrefix: long(256)}, Note: long(256), ExpiresInSecs: secs(MaxExpiresInSecs)}); err != nil {
		t.Errorf("a spec at every limit: %v", err)
	}
	for _, m := range []apitype.RuleMatch{{}, {Host: "  ", Method: "\t"}} {
		_, err := Normalize(block(m))
		if !errors.Is(err, ErrEmptyMatch) || err.Error() != "a rule needs at least one condition — an empty match would apply to every request to the data plane" {
			t.Errorf("empty match %+v: %v", m, err)
		}
	}
}

// TestID: the id is a function of the normalized action and conditions
// only, and the length prefixes keep field splits apart.
func TestID(t *testing.T) {
	n1, _ := Normalize(apitype.RuleSpec{Match: apitype.RuleMatch{Host: "A.example ", Method: "get"}, Note: "one", ExpiresInSecs: secs(5)})
	n2, _ := Normalize(apitype.RuleSpec{Action: "block", Match: apitype.RuleMatch{Host: "a.example", Method: "GET"}, Note: "two"})
	id := ID(n1.Action, n1.Match)
	if len(id) != 12 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Fatalf("id %q is not 12 hex digits", id)
	}
	if id2 := ID(n2.Action, n2.Match); id2 != id {
		t.Errorf("same conditions, ids %s and %s", id, id2)
	}
	if ID(apitype.RuleAllow, n1.Match) == id {
		t.Error("allow and block of the same conditions share an id")
	}
	if ID(apitype.RuleBlock, apitype.RuleMatch{PathPrefix: "ab"}) == ID(apitype.RuleBlock, apitype.RuleMatch{PathPrefix: "a", PathContains: "b"}) {
		t.Error("moving a byte between fields kept the id")
	}
	// Pinned, so a change of the hash input (which would orphan every
	// stored rule's identity) is deliberate.
	if got := ID(apitype.RuleBlock, apitype.RuleMatch{Client: "203.0.113.9"}); got != pinnedID {
		t.Errorf("ID(block from 203.0.113.9) = %s, want %s", got, pinnedID)
	}
}

const pinnedID = "0054e1b09ea3"

// TestRepost: posting the same conditions again replaces the rule's note
// and expiry and keeps its hits and creation time.
func TestRepost(t *testing.T) {
	r := newRig(t, true)
	v1 := r.add(apitype.RuleSpec{Match: apitype.RuleMatch{Client: scanner.String()}, Note: "first", ExpiresInSecs: secs(60)})
	for range 3 {
		if got := r.check(req{client: scanner}); got != Block {
			t.Fatalf("Check = %v, want block", got)
		}
	}
	r.clock.Add(30 * time.Second)
	v2 := r.add(apitype.RuleSpec{Match: apitype.RuleMatch{Client: " " + scanner.String() + "/32"}, Note: "extended", ExpiresInSecs: secs(3600)})
	if v2.ID != v1.ID || v2.CreatedAt != v1.CreatedAt || v2.Hits != 3 || v2.Note != "extended" || *v2.ExpiresAt != *v1.ExpiresAt+3600-30 {
		t.Errorf("re-post:\n first %+v\nsecond %+v", v1, v2)
	}
	if n := r.g.Len(); n != 1 {
		t.Errorf("Len = %d after a re-post, want 1", n)
	}
	r.clock.Add(time.Hour - time.Second)
	if got := r.check(req{client: scanner}); got != Block {
		t.Errorf("Check within the extended expiry = %v, want block", got)
	}
	rows := r.stored()
	if len(rows) != 1 || rows[0].Note != "extended" || !rows[0].ExpiresAt.Equal(time.Unix(*v2.ExpiresAt, 0)) {
		t.Errorf("stored after re-post: %+v", rows)
	}
}

// TestAllowBeatsBlock: a matching allow exempts from any matching block,
// whether posted before or after it.
func TestAllowBeatsBlock(t *testing.T) {
	for _, allowFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("allow first ", allowFirst), func(t *testing.T) {
			r := newRig(t, true)
			specs := []apitype.RuleSpec{
				block(apitype.RuleMatch{Client: "203.0.113.0/24"}),
				allow(apitype.RuleMatch{Client: scanner.String(), PathPrefix: "/health"}),
			}
			if allowFirst {
				specs[0], specs[1] = specs[1], specs[0]
			}
			for _, s := range specs {
				r.add(s)
				r.clock.Add(time.Second)
			}
			for _, tt := range []struct {
				q    req
				want Verdict
			}{
				{req{client: scanner, path: "/healthz"}, Exempt},
				{req{client: scanner, path: "/login"}, Block},
				{req{client: netip.MustParseAddr("203.0.113.10"), path: "/healthz"}, Block},
				{req{client: other, path: "/healthz"}, Pass},
			} {
				if got := r.check(tt.q); got != tt.want {
					t.Errorf("Check(%v %s) = %v, want %v", tt.q.client, tt.q.path, got, tt.want)
				}
			}
			st := r.g.Stats()
			if st.Blocked != 2 || st.Exempted != 1 || st.Rules != 2 || !st.Enforcing {
				t.Errorf("Stats = %+v, want 2 blocked, 1 exempted", st)
			}
			for _, v := range r.g.Views(false) {
				want := map[apitype.RuleAction]int{apitype.RuleBlock: 2, apitype.RuleAllow: 1}[v.Action]
				if v.Hits != want || v.LastHit == nil {
					t.Errorf("%s rule: %d hits (last %v), want %d", v.Action, v.Hits, v.LastHit, want)
				}
			}
		})
	}
}

// TestNotEnforcing: with enforcement off a block is a would-block, counted
// alike, and the views say so.
func TestNotEnforcing(t *testing.T) {
	r := newRig(t, false)
	r.add(block(apitype.RuleMatch{PathContains: "/.git/"}))
	if got := r.check(req{path: "/app/.git/config"}); got != WouldBlock {
		t.Errorf("Check = %v, want would-block", got)
	}
	if st := r.g.Stats(); st.Blocked != 1 || st.Enforcing {
		t.Errorf("Stats = %+v", st)
	}
	if v := r.g.Views(false); len(v) != 1 || v[0].Enforcing || v[0].Hits != 1 {
		t.Errorf("Views = %+v", v)
	}
}

// TestConditions: each condition as §6.3 has it, all AND'd.
func TestConditions(t *testing.T) {
	r := newRig(t, true)
	mapped := netip.AddrFrom16(scanner.As16())
	for _, tt := range []struct {
		m     apitype.RuleMatch
		hit   []req
		nohit []req
	}{
		{apitype.RuleMatch{Client: "203.0.113.0/24"},
			[]req{{client: scanner}, {client: mapped}},
			[]req{{client: other}, {}, {client: netip.MustParseAddr("2001:db8::1")}}},
		{apitype.RuleMatch{Client: "2001:db8::/32"},
			[]req{{client: netip.MustParseAddr("2001:db8:ffff::9")}},
			[]req{{client: netip.MustParseAddr("2001:db9::1")}, {client: scanner}, {}}},
		{apitype.RuleMatch{Client: "::ffff:203.0.113.9"},
			[]req{{client: scanner}, {client: mapped}},
			[]req{{client: other}}},
		{apitype.RuleMatch{Host: "Web.Example"},
			[]req{{host: "web.example"}},
			[]req{{host: "www.web.example"}, {host: "web.example.org"}}},
		{apitype.RuleMatch{Method: "post"},
			[]req{{method: "POST"}, {method: "post"}, {method: "Post"}},
			[]req{{method: "GET"}, {method: "POSTS"}, {}}},
		{apitype.RuleMatch{PathPrefix: "/Admin"},
			[]req{{path: "/Admin"}, {path: "/Admin/x"}},
			[]req{{path: "/admin"}, {path: "/x/Admin"}}},
		{apitype.RuleMatch{PathContains: "wp-login"},
			[]req{{path: "/blog/wp-login.php"}},
			[]req{{path: "/blog/WP-LOGIN.php"}}},
		{apitype.RuleMatch{UserAgentContains: "SQLMap"},
			[]req{{userAgt: "sqlmap/1.7"}, {userAgt: "x SQLMAP"}, {userAgt: "SqLmAp"}},
			[]req{{userAgt: "sql map"}, {userAgt: "sqlma"}, {}}},
		{apitype.RuleMatch{Deployment: "web", Method: "DELETE"},
			[]req{{deployment: "web", method: "delete"}},
			[]req{{deployment: "web", method: "GET"}, {deployment: "api", method: "DELETE"}}},
	} {
		v := r.add(block(tt.m))
		for _, q := range tt.hit {
			if got := r.check(q); got != Block {
				t.Errorf("rule %q: %+v → %v, want block", v.Summary, q, got)
			}
		}
		for _, q := range tt.nohit {
			if got := r.check(q); got != Pass {
				t.Errorf("rule %q: %+v → %v, want pass", v.Summary, q, got)
			}
		}
		if err := r.g.Delete(t.Context(), v.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSummary: app-lb's phrase, in its order, of the parts present.
func TestSummary(t *testing.T) {
	all := apitype.RuleMatch{Client: "203.0.113.0/24", Host: "a.example", Deployment: "web", PathPrefix: "/api",
		PathContains: "..", Method: "POST", UserAgentContains: "curl"}
	if got, want := Summary(all), "from 203.0.113.0/24, to web, host a.example, method POST, path under /api, path containing .., user-agent containing curl"; got != want {
		t.Errorf("Summary = %q\nwant      %q", got, want)
	}
	if got := Summary(apitype.RuleMatch{Method: "GET", Deployment: "api"}); got != "to api, method GET" {
		t.Errorf("Summary = %q", got)
	}
}

// TestExpiry: an expired rule stops matching at its expiry, leaves the
// views, and is swept from the store; SetExpiry moves or removes it.
func TestExpiry(t *testing.T) {
	r := newRig(t, true)
	v := r.add(apitype.RuleSpec{Match: apitype.RuleMatch{Client: scanner.String()}, ExpiresInSecs: secs(60)})
	keep := r.add(block(apitype.RuleMatch{Host: "forever.example"}))
	if v.ExpiresAt == nil || *v.ExpiresAt != r.clock.Now().Unix()+60 || keep.ExpiresAt != nil {
		t.Fatalf("expires_at %v / %v", v.ExpiresAt, keep.ExpiresAt)
	}
	r.clock.Add(59 * time.Second)
	if got := r.check(req{client: scanner}); got != Block {
		t.Errorf("at 59 s: %v, want block", got)
	}
	r.clock.Add(time.Second)
	if got := r.check(req{client: scanner}); got != Pass {
		t.Errorf("at 60 s: %v, want pass", got)
	}
	if n, views := r.g.Len(), r.g.Views(false); n != 1 || len(views) != 1 || views[0].ID != keep.ID {
		t.Errorf("after expiry: Len %d, Views %+v", n, views)
	}
	if len(r.stored()) != 2 {
		t.Error("the expired rule left the store before a sweep")
	}
	r.g.Sweep(t.Context())
	if rows := r.stored(); len(rows) != 1 || rows[0].ID != keep.ID {
		t.Errorf("stored after sweep: %+v", rows)
	}
	if _, err := r.g.SetExpiry(t.Context(), v.ID, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetExpiry of an expired rule: %v, want ErrNotFound", err)
	}
	if err := r.g.Delete(t.Context(), v.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete of an expired rule: %v, want ErrNotFound", err)
	}

	// SetExpiry: a time limit, then permanent again.
	got, err := r.g.SetExpiry(t.Context(), keep.ID, secs(10))
	if err != nil || got.ExpiresAt == nil || *got.ExpiresAt != r.clock.Now().Unix()+10 {
		t.Fatalf("SetExpiry(10) = %+v, %v", got, err)
	}
	if got, err = r.g.SetExpiry(t.Context(), keep.ID, nil); err != nil || got.ExpiresAt != nil {
		t.Fatalf("SetExpiry(nil) = %+v, %v", got, err)
	}
	if rows := r.stored(); len(rows) != 1 || !rows[0].ExpiresAt.IsZero() {
		t.Errorf("stored after SetExpiry(nil): %+v", rows)
	}
	if _, err := r.g.SetExpiry(t.Context(), keep.ID, secs(0)); err == nil || !strings.HasPrefix(err.Error(), "expires_in_secs: ") {
		t.Errorf("SetExpiry(0): %v", err)
	}
	if _, err := r.g.SetExpiry(t.Context(), "000000000000", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetExpiry(unknown): %v", err)
	}

	// A rule that expires while berth is down is dropped at start.
	if _, err := r.g.SetExpiry(t.Context(), keep.ID, secs(5)); err != nil {
		t.Fatal(err)
	}
	r.reopen(true)
	r.clock.Add(5 * time.Second)
	r.reopen(true)
	if n, rows := r.g.Len(), r.stored(); n != 0 || len(rows) != 0 {
		t.Errorf("after a restart past its expiry: Len %d, stored %+v", n, rows)
	}
}

// TestReopen: rules, their hits and last hit survive a restart; the
// per-minute series start empty.
func TestReopen(t *testing.T) {
	r := newRig(t, true)
	a := r.add(apitype.RuleSpec{Match: apitype.RuleMatch{Client: "2001:db8::/32"}, Note: "v6 scanner", ExpiresInSecs: secs(86400)})
	r.clock.Add(time.Second)
	b := r.add(allow(apitype.RuleMatch{Host: "status.example"}))
	r.clock.Add(time.Second)
	c := r.add(block(apitype.RuleMatch{UserAgentContains: "nikto"}))
	for range 5 {
		r.check(req{client: netip.MustParseAddr("2001:db8::7")})
	}
	before := r.g.Views(false)
	r.reopen(true)
	after := r.g.Views(false)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("views across a restart (-before +after):\n%s", diff)
	}
	if len(after) != 3 || after[0].ID != a.ID || after[0].Hits != 5 || after[0].LastHit == nil {
		t.Errorf("after restart: %+v (ids %s %s %s)", after, a.ID, b.ID, c.ID)
	}
	if v := r.g.Views(true); v[0].Hits != 5 || len(v[0].HitsRecent) != 60 || sum(v[0].HitsRecent) != 0 {
		t.Errorf("recent hits after restart: %+v", v[0])
	}
	if got := r.check(req{client: netip.MustParseAddr("2001:db8::7")}); got != Block {
		t.Errorf("a reloaded rule: %v, want block", got)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestHitsBatched: hits reach the store at a Sweep (and Close), as
// increments, without double counting across re-posts.
func TestHitsBatched(t *testing.T) {
	r := newRig(t, true)
	v := r.add(block(apitype.RuleMatch{Method: "TRACE"}))
	for range 4 {
		r.check(req{method: "trace"})
	}
	if rows := r.stored(); rows[0].Hits != 0 {
		t.Errorf("hits stored before a sweep: %d", rows[0].Hits)
	}
	r.g.Sweep(t.Context())
	if rows := r.stored(); rows[0].Hits != 4 || !rows[0].LastHit.Equal(r.clock.Now()) {
		t.Errorf("after a sweep: %+v", rows[0])
	}
	r.check(req{method: "TRACE"})
	r.add(apitype.RuleSpec{Match: apitype.RuleMatch{Method: "trace"}, Note: "again"}) // writes 5
	r.check(req{method: "TRACE"})
	r.g.Sweep(t.Context())
	r.g.Sweep(t.Context())
	if rows := r.stored(); rows[0].Hits != 6 || rows[0].ID != v.ID {
		t.Errorf("after re-post and sweeps: %d hits, want 6", rows[0].Hits)
	}
}

// TestFull: MaxRules rules, then ErrFull for a new one; a re-post of one
// in force is still a replace, and a delete makes room.
func TestFull(t *testing.T) {
	r := newRig(t, true)
	ids := fill(t, r.g, MaxRules)
	if _, err := r.g.Add(t.Context(), block(apitype.RuleMatch{Host: "one-more.example"})); !errors.Is(err, ErrFull) || err.Error() != "at the 256-rule limit; remove one first" {
		t.Errorf("rule %d: %v, want ErrFull", MaxRules+1, err)
	}
	if _, err := r.g.Add(t.Context(), apitype.RuleSpec{Match: apitype.RuleMatch{PathPrefix: "/p0/"}, Note: "re-post"}); err != nil {
		t.Errorf("re-post at the limit: %v", err)
	}
	if err := r.g.Delete(t.Context(), ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := r.g.Delete(t.Context(), ids[0]); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	r.add(block(apitype.RuleMatch{Host: "one-more.example"}))
	if n := len(r.stored()); n != MaxRules {
		t.Errorf("%d rules stored, want %d", n, MaxRules)
	}
}

// fill adds n distinct block rules on path prefixes /p<i>/ and returns
// their ids.
func fill(tb testing.TB, g *Guard, n int) []string {
	tb.Helper()
	ids := make([]string, n)
	for i := range n {
		v, err := g.Add(context.Background(), block(apitype.RuleMatch{PathPrefix: fmt.Sprintf("/p%d/", i)}))
		if err != nil {
			tb.Fatal(err)
		}
		ids[i] = v.ID
	}
	return ids
}

// TestHitsRecent: per-minute buckets over the last hour, oldest first,
// rolling over as the clock moves; the global series alike.
func TestHitsRecent(t *testing.T) {
	r := newRig(t, true)
	v := r.add(block(apitype.RuleMatch{Client: scanner.String()}))
	r.add(allow(apitype.RuleMatch{Client: scanner.String(), Method: "OPTIONS"}))
	hit := func(n int) {
		for range n {
			r.check(req{client: scanner})
		}
	}
	recent := func() []int {
		for _, x := range r.g.Views(true) {
			if x.ID == v.ID {
				return x.HitsRecent
			}
		}
		t.Fatal("rule gone")
		return nil
	}
	last := func(xs ...int) []int { // the newest len(xs) buckets as xs
		out := make([]int, 60)
		copy(out[60-len(xs):], xs)
		return out
	}
	hit(2)
	r.clock.Add(time.Minute)
	hit(3)
	if diff := cmp.Diff(last(2, 3), recent()); diff != "" {
		t.Errorf("after two minutes (-want +got):\n%s", diff)
	}
	r.clock.Add(58 * time.Minute)
	hit(1)
	want := last(1)
	want[0], want[1] = 2, 3
	if diff := cmp.Diff(want, recent()); diff != "" {
		t.Errorf("at the end of the hour (-want +got):\n%s", diff)
	}
	r.clock.Add(time.Minute) // the first minute falls out; its bucket is reused
	hit(4)
	want = last(4)
	want[0], want[58] = 3, 1
	if diff := cmp.Diff(want, recent()); diff != "" {
		t.Errorf("after the hour rolled over (-want +got):\n%s", diff)
	}
	r.check(req{client: scanner, method: "OPTIONS"})
	st := r.g.Stats()
	if diff := cmp.Diff(want, st.BlockedRecent); diff != "" {
		t.Errorf("blocked_recent (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(last(1), st.ExemptedRecent); diff != "" {
		t.Errorf("exempted_recent (-want +got):\n%s", diff)
	}
	if st.HitsBucketSecs != 60 || st.HitsWindowSecs != 3600 || st.Blocked != 10 || st.Exempted != 1 {
		t.Errorf("Stats = %+v", st)
	}
	r.clock.Add(2 * time.Hour)
	if got := recent(); sum(got) != 0 {
		t.Errorf("two hours on: %v, want all zero", got)
	}
	if v := r.g.Views(false); v[0].HitsRecent != nil {
		t.Error("Views(false) carries hits_recent")
	}
}

// TestPersistFailure: a write the store refuses is in force anyway and
// answered ErrNotSaved; the sweep retries it until it lands.
func TestPersistFailure(t *testing.T) {
	r := newRig(t, true)
	r.st.fail.Store(true)
	v, err := r.g.Add(t.Context(), block(apitype.RuleMatch{Client: scanner.String()}))
	if !errors.Is(err, ErrNotSaved) || !errors.Is(err, errDisk) || v.ID == "" {
		t.Fatalf("Add with a failing store = %+v, %v; want the view and ErrNotSaved", v, err)
	}
	if got := r.check(req{client: scanner}); got != Block {
		t.Errorf("an unsaved rule: %v, want block (in force)", got)
	}
	r.g.Sweep(t.Context())
	if len(r.stored()) != 0 {
		t.Fatal("stored while the store fails")
	}
	r.st.fail.Store(false)
	r.g.Sweep(t.Context())
	if rows := r.stored(); len(rows) != 1 || rows[0].ID != v.ID || rows[0].Hits != 1 {
		t.Fatalf("after the retry: %+v", rows)
	}
	r.st.fail.Store(true)
	if err := r.g.Delete(t.Context(), v.ID); !errors.Is(err, ErrNotSaved) {
		t.Fatalf("Delete with a failing store: %v", err)
	}
	if got := r.check(req{client: scanner}); got != Pass {
		t.Errorf("a deleted rule: %v, want pass", got)
	}
	r.st.fail.Store(false)
	r.g.Sweep(t.Context())
	if rows := r.stored(); len(rows) != 0 {
		t.Errorf("after the delete's retry: %+v", rows)
	}
}

// TestConcurrent: Check against writers and sweeps, for the race detector.
func TestConcurrent(t *testing.T) {
	r := newRig(t, true)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var blocks atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r.check(req{client: scanner, path: "/p3/x"}) == Block {
					blocks.Add(1)
				}
				r.g.Views(true)
				r.g.Stats()
			}
		})
	}
	ids := fill(t, r.g, 8)
	r.g.Sweep(t.Context())
	for _, id := range ids[:4] {
		if err := r.g.Delete(t.Context(), id); err != nil {
			t.Error(err)
		}
	}
	r.g.Sweep(t.Context())
	close(stop)
	wg.Wait()
	if st := r.g.Stats(); int64(st.Blocked) != blocks.Load() {
		t.Errorf("blocked %d, counted %d", st.Blocked, blocks.Load())
	}
}

// TestCheckAllocs pins the request path at zero allocations with the
// rule set full, for a miss, a block and an exemption.
func TestCheckAllocs(t *testing.T) {
	r := newRig(t, true)
	fill(t, r.g, MaxRules-2)
	r.add(block(apitype.RuleMatch{Client: "203.0.113.0/24", UserAgentContains: "Scanner"}))
	r.add(allow(apitype.RuleMatch{Client: scanner.String(), Method: "head"}))
	mapped := netip.AddrFrom16(scanner.As16())
	for _, tt := range []struct {
		q    req
		want Verdict
	}{
		{plain, Pass},
		{req{client: mapped, method: "GET", path: "/p255x", userAgt: "a SCANNER b"}, Block},
		{req{client: scanner, method: "HEAD", path: "/", userAgt: "scanner"}, Exempt},
	} {
		if got := r.check(tt.q); got != tt.want {
			t.Fatalf("Check(%+v) = %v, want %v", tt.q, got, tt.want)
		}
		if n := testing.AllocsPerRun(1000, func() { r.check(tt.q) }); n != 0 {
			t.Errorf("Check(%v) allocates %v times", tt.want, n)
		}
	}
	g0 := &Guard{}
	g0.snap.Store(&snapshot{})
	if n := testing.AllocsPerRun(1000, func() { g0.Check(scanner, "", "", "", "", "") }); n != 0 {
		t.Errorf("Check with no rules allocates %v times", n)
	}
}

// TestAllowAlone: an allow rule with no block to beat still answers Exempt
// — the request is served and the SIEM leaves its source alone (a monitor,
// a load test) — and counts as exempted.
func TestAllowAlone(t *testing.T) {
	r := newRig(t, true)
	mon := netip.MustParseAddr("198.51.100.7")
	r.add(allow(apitype.RuleMatch{Client: mon.String()}))
	if got := r.check(req{client: mon, path: "/x"}); got != Exempt {
		t.Errorf("Check(allowed client) = %v, want exempt", got)
	}
	if got := r.check(req{client: netip.MustParseAddr("198.51.100.8"), path: "/x"}); got != Pass {
		t.Errorf("Check(other client) = %v, want pass", got)
	}
	if st := r.g.Stats(); st.Exempted != 1 || st.Blocked != 0 {
		t.Errorf("Stats = %+v, want 1 exempted", st)
	}
}

// TestFirstBlockAcrossIndexes: the first matching block rule (oldest
// first) takes the hit whether it is a one-address rule (found by lookup)
// or a CIDR (found by a scan).
func TestFirstBlockAcrossIndexes(t *testing.T) {
	for _, cidrFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("cidr first ", cidrFirst), func(t *testing.T) {
			r := newRig(t, true)
			specs := []apitype.RuleSpec{block(apitype.RuleMatch{Client: "203.0.113.0/24"}), block(apitype.RuleMatch{Client: "203.0.113.9"})}
			if !cidrFirst {
				specs[0], specs[1] = specs[1], specs[0]
			}
			for _, s := range specs {
				r.add(s)
				r.clock.Add(time.Second)
			}
			if got := r.check(req{client: netip.MustParseAddr("203.0.113.9"), path: "/"}); got != Block {
				t.Fatalf("Check = %v, want block", got)
			}
			for _, v := range r.g.Views(false) {
				want := 0
				if v.Match.Client == specs[0].Match.Client {
					want = 1
				}
				if v.Hits != want {
					t.Errorf("rule %s: %d hits, want %d (the oldest takes it)", v.Summary, v.Hits, want)
				}
			}
		})
	}
}
