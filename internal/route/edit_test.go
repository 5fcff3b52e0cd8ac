package route

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// randomRules draws 0-3 rules from small vocabularies, so that deployments
// share buckets, tie on score and strip from one another's rules.
func randomRules(rng *rand.Rand) []Rule {
	hosts := []string{"", "", "a.test", "b.a.test", "c.test", "x.b.a.test"}
	suffixes := []string{"", "", "a.test", "test", "b.a.test", "."}
	prefixes := []string{"", "/", "/api", "/api/v1", "/a", "/static"}
	n := rng.IntN(4)
	var rs []Rule
	for range n {
		rs = append(rs, Rule{
			Host:        hosts[rng.IntN(len(hosts))],
			HostSuffix:  suffixes[rng.IntN(len(suffixes))],
			PathPrefix:  prefixes[rng.IntN(len(prefixes))],
			StripPrefix: rng.IntN(3) == 0,
		})
	}
	return rs
}

// TestEditMatchesBuild applies a random sequence of adds, removes and
// updates to a table with Edit, and after each step checks that it answers
// every request exactly like a table built from scratch from the same set,
// and that the tables it was derived from did not change.
func TestEditMatchesBuild(t *testing.T) {
	reqHosts := []string{"", "a.test", "b.a.test", "x.b.a.test", "y.x.b.a.test", "c.test", "d.c.test", "test", "other.org"}
	reqPaths := []string{"/", "/api", "/api/v1/x", "/apix", "/a", "/static/y", "", "/zzz"}
	for seedN := range uint64(20) {
		rng := rand.New(rand.NewPCG(seedN, 7))
		set := map[string][]Rule{} // the current deployments
		targets := map[string]string{}
		var tab *Table[string]
		type snap struct {
			tab  *Table[string]
			want *Table[string]
		}
		var old []snap
		for step := range 150 {
			e := tab.Edit()
			for range 1 + rng.IntN(3) { // one edit may carry several changes
				id := fmt.Sprintf("d%02d", rng.IntN(40))
				switch op := rng.IntN(4); {
				case op == 0 && len(set) > 0:
					delete(set, id)
					e.Remove(id)
				default:
					rs := randomRules(rng)
					set[id] = rs
					targets[id] = "t:" + id + fmt.Sprint(step)
					e.Put(id, "t:"+id+fmt.Sprint(step), rs)
				}
			}
			tab = e.Table()
			var b Builder[string]
			for _, id := range slices.Sorted(mapKeys(set)) {
				b.Add(id, targets[id], set[id])
			}
			want := b.Build()
			compareTables(t, fmt.Sprintf("seed %d step %d", seedN, step), tab, want, reqHosts, reqPaths, set)
			old = append(old, snap{tab, want})
			if step%10 == 9 {
				for i, s := range old {
					compareTables(t, fmt.Sprintf("seed %d, table of step %d after step %d", seedN, i, step), s.tab, s.want, reqHosts, reqPaths, nil)
				}
			}
			if t.Failed() {
				return
			}
		}
	}
}

func mapKeys(m map[string][]Rule) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func compareTables(t *testing.T, what string, got, want *Table[string], hosts, paths []string, set map[string][]Rule) {
	t.Helper()
	if got.Len() != want.Len() {
		t.Errorf("%s: Len %d, from scratch %d", what, got.Len(), want.Len())
	}
	for id := range set {
		if got.Routed(id) != want.Routed(id) {
			t.Errorf("%s: Routed(%s) = %v, from scratch %v", what, id, got.Routed(id), want.Routed(id))
		}
	}
	for _, h := range hosts {
		for _, p := range paths {
			g, gok := got.Lookup(h, p)
			w, wok := want.Lookup(h, p)
			same := gok == wok && g.ID == w.ID && g.Target == w.Target && g.Strip == w.Strip
			if same && gok {
				same = *g.Rule == *w.Rule
			}
			if !same {
				t.Errorf("%s: Lookup(%q, %q) = %+v %v, from scratch %+v %v", what, h, p, g, gok, w, wok)
			}
		}
	}
}

func TestEditZeroTable(t *testing.T) {
	var zero Table[int]
	if _, ok := zero.Lookup("a.test", "/"); ok {
		t.Fatal("the zero table matched")
	}
	e := zero.Edit()
	e.Put("a", 1, []Rule{{Host: "a.test"}})
	tab := e.Table()
	if m, ok := tab.Lookup("a.test", "/"); !ok || m.Target != 1 {
		t.Fatalf("Lookup = %+v %v, want a", m, ok)
	}
	if _, ok := zero.Lookup("a.test", "/"); ok {
		t.Fatal("Edit changed the table it started from")
	}
	e = tab.Edit()
	e.Remove("a")
	e.Remove("never")
	if tab2 := e.Table(); tab2.Len() != 0 || tab2.Routed("a") {
		t.Fatalf("after Remove: Len %d, Routed %v", tab2.Len(), tab2.Routed("a"))
	}
	if !tab.Routed("a") {
		t.Fatal("Remove changed the table it started from")
	}
}

func table10k() *Table[int] {
	var bld Builder[int]
	for i := range 10_000 {
		bld.Add(fmt.Sprintf("mem-%05d", i), i, []Rule{{Host: fmt.Sprintf("mem-%05d.bench.test", i)}})
	}
	return bld.Build()
}

// BenchmarkAddOneTo10k adds one deployment (a host rule, as bench/memory.sh
// registers) to a table of 10,000: with Edit, and by rebuilding it all as
// the registry did before.
func BenchmarkAddOneTo10k(b *testing.B) {
	tab := table10k()
	rules := []Rule{{Host: "new.bench.test"}}
	b.Run("edit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e := tab.Edit()
			e.Put("new", -1, rules)
			if e.Table().Len() != 10_001 {
				b.Fatal("wrong size")
			}
		}
	})
	b.Run("rebuild", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var bld Builder[int]
			for i := range 10_000 {
				bld.Add(fmt.Sprintf("mem-%05d", i), i, []Rule{{Host: fmt.Sprintf("mem-%05d.bench.test", i)}})
			}
			bld.Add("new", -1, rules)
			if bld.Build().Len() != 10_001 {
				b.Fatal("wrong size")
			}
		}
	})
}
