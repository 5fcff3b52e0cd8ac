package route

import (
	"fmt"
	"strings"
	"testing"
)

type spec struct {
	id    string
	rules []Rule
}

func build(specs ...spec) *Table[string] {
	var b Builder[string]
	for _, s := range specs {
		b.Add(s.id, "t:"+s.id, s.rules)
	}
	return b.Build()
}

// naive is the reference: score every rule of every deployment.
func naive(specs []spec, host, path string) (id string, strip string, ok bool) {
	bestScore := -1
	for _, s := range specs {
		for i := range s.rules {
			r := &s.rules[i]
			if r.HostSuffix == "." || !r.Matches(host, path) {
				continue
			}
			sc := r.Score()
			if sc > bestScore || (sc == bestScore && s.id < id) {
				bestScore, id, ok = sc, s.id, true
			}
		}
	}
	if !ok {
		return "", "", false
	}
	bs := -1
	for _, s := range specs {
		if s.id != id {
			continue
		}
		for i := range s.rules {
			r := &s.rules[i]
			if r.StripPrefix && r.Matches(host, path) && r.Score() > bs {
				bs, strip = r.Score(), r.PathPrefix
			}
		}
	}
	return id, strip, true
}

func TestPrecedence(t *testing.T) {
	specs := []spec{
		{"host", []Rule{{Host: "a.example.com"}}},
		{"hostpath", []Rule{{Host: "a.example.com", PathPrefix: "/admin"}}},
		{"suffix", []Rule{{HostSuffix: "example.com", PathPrefix: "/api"}}},
		{"longsuffix", []Rule{{HostSuffix: "b.example.com"}}},
		{"root", []Rule{{PathPrefix: "/"}}},
		{"api", []Rule{{PathPrefix: "/api", StripPrefix: true}}},
		{"tie-b", []Rule{{Host: "tie.test"}}},
		{"tie-a", []Rule{{Host: "tie.test"}}},
		{"combo", []Rule{{Host: "c.example.com", HostSuffix: "example.com", PathPrefix: "/x"}}},
	}
	tab := build(specs...)
	tests := []struct {
		host, path, want, strip string
	}{
		{"a.example.com", "/api/x", "host", ""},
		{"a.example.com", "/admin/users", "hostpath", ""},
		{"a.example.com", "/adminx", "hostpath", ""}, // raw prefix, not segment
		{"z.example.com", "/api/v1", "suffix", ""},
		{"example.com", "/api", "suffix", ""},
		{"badexample.com", "/api/v1", "api", "/api"}, // label boundary
		{"x.b.example.com", "/", "longsuffix", ""},
		{"b.example.com", "/api", "suffix", ""}, // 100,011+4 > 100,013
		{"c.org", "/api/x", "api", "/api"},
		{"c.org", "/other", "root", ""},
		{"", "/api", "api", "/api"},
		{"tie.test", "/", "tie-a", ""},
		{"c.example.com", "/x", "combo", ""},
		{"c.example.com", "/y", "root", ""},
	}
	for _, tt := range tests {
		m, ok := tab.Lookup(tt.host, tt.path)
		if !ok || m.ID != tt.want || m.Strip != tt.strip {
			t.Errorf("Lookup(%q, %q) = %q strip %q ok %v; want %q strip %q", tt.host, tt.path, m.ID, m.Strip, ok, tt.want, tt.strip)
		}
		if ok && m.Target != "t:"+m.ID {
			t.Errorf("target %q for %q", m.Target, m.ID)
		}
		if id, strip, _ := naive(specs, tt.host, tt.path); id != tt.want || strip != tt.strip {
			t.Errorf("naive(%q,%q) = %q/%q; test table is wrong", tt.host, tt.path, id, strip)
		}
	}
	if _, ok := build(spec{"x", []Rule{{Host: "a"}}}).Lookup("b", "/"); ok {
		t.Error("unmatched host matched")
	}
	var empty Table[string]
	if _, ok := empty.Lookup("a", "/"); ok {
		t.Error("zero table matched")
	}
}

func TestStripFromOtherRule(t *testing.T) {
	// app-lb: strip_prefix comes from the most specific matching rule of the
	// winning deployment that has one, even when another rule won.
	tab := build(spec{"d", []Rule{{Host: "h"}, {PathPrefix: "/api", StripPrefix: true}}})
	m, ok := tab.Lookup("h", "/api/x")
	if !ok || m.Strip != "/api" || m.Rule.Host != "h" {
		t.Fatalf("got %+v", m)
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM:8080":  "example.com",
		"user@host:1":       "host",
		"[::1]:80":          "[::1]",
		"[::1]":             "[::1]",
		"plain":             "plain",
		"trailing.dot.com.": "trailing.dot.com",
	} {
		if got := NormalizeHost(in); got != want {
			t.Errorf("NormalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStripPath(t *testing.T) {
	for _, tt := range []struct{ path, prefix, want string }{
		{"/api/x", "/api", "/x"},
		{"/api", "/api", "/"},
		{"/apix", "/api", "/x"},
		{"/other", "/api", "/other"},
		{"/x", "", "/x"},
	} {
		if got := StripPath(tt.path, tt.prefix); got != tt.want {
			t.Errorf("StripPath(%q,%q) = %q, want %q", tt.path, tt.prefix, got, tt.want)
		}
	}
}

func TestLargeBucketsMatchNaive(t *testing.T) {
	var specs []spec
	for i := range 200 {
		specs = append(specs,
			spec{fmt.Sprintf("p%03d", i), []Rule{{PathPrefix: "/" + strings.Repeat("a", i%20)}}},
			spec{fmt.Sprintf("h%03d", i), []Rule{{Host: "h.test", PathPrefix: fmt.Sprintf("/%d", i%13)}}},
			spec{fmt.Sprintf("s%03d", i), []Rule{{HostSuffix: "s.test", PathPrefix: fmt.Sprintf("/%d", i%7), StripPrefix: i%2 == 0}}},
		)
	}
	tab := build(specs...)
	for _, host := range []string{"h.test", "s.test", "x.s.test", "none", ""} {
		for _, path := range []string{"/", "/aaaa", "/1", "/12", "/6x", "/aaaaaaaaaaaaaaaaaaaaaaaaa", "/zzz"} {
			id, strip, ok := naive(specs, host, path)
			m, ok2 := tab.Lookup(host, path)
			if ok != ok2 || m.ID != id || m.Strip != strip {
				t.Errorf("Lookup(%q,%q) = %q/%q/%v, naive %q/%q/%v", host, path, m.ID, m.Strip, ok2, id, strip, ok)
			}
		}
	}
}

// FuzzLookup checks the indexed table against the naive reference.
func FuzzLookup(f *testing.F) {
	f.Add("a.example.com", "/api/x", "example.com", "/api", "a.example.com", "/", "/a")
	f.Add("", "/", ".", "", "", "/x", "")
	f.Add("B.Example.com:80", "/apidocs", "example.com", "/api", "b.example.com", "/apid", "/apidocs")
	f.Fuzz(func(t *testing.T, host, path, suffix, prefix1, host2, prefix2, prefix3 string) {
		host = NormalizeHost(host)
		specs := []spec{
			{"a", []Rule{{HostSuffix: NormalizeSuffix(suffix), PathPrefix: prefix1, StripPrefix: true}}},
			{"b", []Rule{{Host: NormalizeHost(host2), PathPrefix: prefix2}}},
			{"c", []Rule{{PathPrefix: prefix3}, {PathPrefix: prefix1, StripPrefix: true}}},
			{"d", []Rule{{Host: NormalizeHost(host2), HostSuffix: NormalizeSuffix(suffix)}}},
		}
		var b Builder[string]
		for _, s := range specs {
			b.Add(s.id, s.id, s.rules)
		}
		tab := b.Build()
		id, strip, ok := naive(specs, host, path)
		m, ok2 := tab.Lookup(host, path)
		if ok != ok2 || m.ID != id || m.Strip != strip {
			t.Fatalf("Lookup(%q,%q) = %q/%q/%v, naive %q/%q/%v", host, path, m.ID, m.Strip, ok2, id, strip, ok)
		}
		_ = StripPath(path, m.Strip)
	})
}

// BenchmarkLookup10k measures a lookup among 10,000 deployments, each with an
// exact host and a path rule, plus suffix and path-only deployments.
func BenchmarkLookup10k(b *testing.B) {
	var bld Builder[int]
	for i := range 10_000 {
		switch i % 10 {
		case 0:
			bld.Add(fmt.Sprintf("s%05d", i), i, []Rule{{HostSuffix: fmt.Sprintf("tenant%d.example.net", i)}})
		case 1:
			bld.Add(fmt.Sprintf("p%05d", i), i, []Rule{{PathPrefix: fmt.Sprintf("/svc/%d", i)}})
		default:
			bld.Add(fmt.Sprintf("d%05d", i), i, []Rule{{Host: fmt.Sprintf("app%d.example.com", i)}, {Host: fmt.Sprintf("app%d.example.com", i), PathPrefix: "/api", StripPrefix: true}})
		}
	}
	tab := bld.Build()
	cases := []struct{ host, path string }{
		{"app5432.example.com", "/api/users/42"},
		{"x.y.tenant7770.example.net", "/index.html"},
		{"unknown.example.org", "/svc/9991/x"},
		{"nomatch.example.org", "/nothing/here"},
	}
	for _, c := range cases {
		b.Run(strings.SplitN(c.host, ".", 2)[0], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := tab.Lookup(c.host, c.path); !ok && c.host != "nomatch.example.org" {
					b.Fatal("no match")
				}
			}
		})
	}
}
