package route

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestConflicts(t *testing.T) {
	h := func(host, suffix, path string) *Rule { return &Rule{Host: host, HostSuffix: suffix, PathPrefix: path} }
	tests := []struct {
		a, b         *Rule
		shares, ties bool
	}{
		{h("a.test", "", "/"), h("a.test", "", "/"), true, true},
		{h("a.test", "", "/"), h("a.test", "", "/x"), true, false},
		{h("a.test", "", "/ab"), h("a.test", "", "/cd"), true, false}, // same score, no common path
		{h("a.test", "", ""), h("b.test", "", ""), false, false},
		{h("x.a.test", "", ""), h("", "a.test", ""), true, false},
		{h("", "a.test", ""), h("", "b.a.test", ""), true, false},
		{h("", "b.test", "/abc"), h("", "a.b.test", "/a"), true, true}, // 100005+4 = 100007+2 on x.a.b.test/abc
		{h("", "a.test", ""), h("", "ba.test", ""), false, false},
		{h("", "a.test", "/"), h("", "a.test", "/"), true, true},
		{h("", "", "/"), h("", "", "/"), false, true}, // host-less: no host shared, but a tie
		{h("", "", "/"), h("a.test", "", "/"), false, false},
		{h("x.b.test", "a.test", ""), h("x.b.test", "", ""), false, false}, // a matches nothing
	}
	for _, tt := range tests {
		for _, p := range [][2]*Rule{{tt.a, tt.b}, {tt.b, tt.a}} {
			if got := p[0].SharesHosts(p[1]); got != tt.shares {
				t.Errorf("%+v SharesHosts %+v = %v, want %v", *p[0], *p[1], got, tt.shares)
			}
			if got := p[0].Ties(p[1]); got != tt.ties {
				t.Errorf("%+v Ties %+v = %v, want %v", *p[0], *p[1], got, tt.ties)
			}
		}
	}
	for _, tt := range []struct {
		r               *Rule
		domain          string
		covered, reache bool
	}{
		{h("a.test", "", ""), "a.test", true, true},
		{h("x.a.test", "", ""), "a.test", true, true},
		{h("xa.test", "", ""), "a.test", false, false},
		{h("", "a.test", ""), "a.test", true, true},
		{h("", "test", ""), "a.test", false, true},
		{h("", "", "/"), "a.test", false, false},
	} {
		if got := tt.r.CoveredBy(tt.domain); got != tt.covered {
			t.Errorf("%+v CoveredBy %s = %v", *tt.r, tt.domain, got)
		}
		if got := tt.r.Overlaps(tt.domain); got != tt.reache {
			t.Errorf("%+v Overlaps %s = %v", *tt.r, tt.domain, got)
		}
	}
	if !Covers("a.test", "x.a.test") || Covers("a.test", "xa.test") || !Covers("a.test", "a.test") {
		t.Error("Covers")
	}
}

// TestIndexNear checks Index.Near against a scan of every rule: each
// deployment with a rule that ties with or shares hosts with the probe is
// among those Near returns, across random sets, replacements and removals.
func TestIndexNear(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	set := map[string][]Rule{}
	var x Index
	for step := range 2000 {
		id := fmt.Sprintf("d%02d", rng.IntN(30))
		if rng.IntN(4) == 0 {
			delete(set, id)
			x.Delete(id)
		} else {
			rs := randomRules(rng)
			set[id] = rs
			x.Set(id, rs)
		}
		for _, probe := range randomRules(rng) {
			near := x.Near(&probe)
			if !slices.IsSorted(near) {
				t.Fatalf("step %d: Near(%+v) = %v, not sorted", step, probe, near)
			}
			for did, rs := range set {
				for i := range rs {
					if (probe.Ties(&rs[i]) || probe.SharesHosts(&rs[i])) && !slices.Contains(near, did) {
						t.Fatalf("step %d: Near(%+v) = %v misses %s (rule %+v)", step, probe, near, did, rs[i])
					}
				}
			}
		}
		if len(x.Rules(id)) != len(set[id]) {
			t.Fatalf("step %d: Rules(%s) = %v, want %v", step, id, x.Rules(id), set[id])
		}
	}
}
