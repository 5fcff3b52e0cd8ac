// Package route matches requests to deployments: the data plane's routing
// table.
//
// A Table is immutable once built. The gateway builds a new one on every
// deployment change and swaps it in atomically, so lookups take no lock and a
// request always sees one consistent set of routes.
//
// Precedence follows app-lb (app-lb.md §3.2): across all deployments the single
// most specific rule wins, scored as
//
//	(host ? 1,000,000 : 0) + (host_suffix ? 100,000 + len(suffix) : 0) + len(path_prefix)
//
// with ties broken by the lexicographically smallest deployment id. For
// example, with rules {host: "a.example.com"}, {host_suffix: "example.com",
// path_prefix: "/api"} and {path_prefix: "/"}, a request for
// a.example.com/api goes to the first (1,000,000 beats 100,015), b.example.com/api
// to the second and c.org/api to the third.
package route

import (
	"cmp"
	"slices"
	"strings"
)

// MaxFieldLen bounds host, host_suffix and path_prefix so that the score tiers
// can never overlap: a suffix rule (≤ 100,000 + 2×MaxFieldLen) can never
// outscore an exact-host rule.
const MaxFieldLen = 4096

// Rule is one routing rule. Fields present are AND'd; an empty rule matches
// nothing.
type Rule struct {
	Host        string // exact host, lowercase, no port
	HostSuffix  string // apex and any subdomain at a label boundary; no leading dot
	PathPrefix  string // raw string prefix of the request path
	StripPrefix bool
	Redirect    *Redirect
}

// Redirect answers a matched request with a redirect instead of serving it.
type Redirect struct {
	To       string // absolute http(s) URL
	Status   int    // 301, 302, 303, 307 or 308
	KeepPath bool   // append the request path and query to To
}

// Score is the rule's precedence; higher wins.
func (r *Rule) Score() int {
	s := len(r.PathPrefix)
	if r.Host != "" {
		s += 1_000_000
	}
	if r.HostSuffix != "" {
		s += 100_000 + len(r.HostSuffix)
	}
	return s
}

// Empty reports whether the rule has no condition at all.
func (r *Rule) Empty() bool { return r.Host == "" && r.HostSuffix == "" && r.PathPrefix == "" }

// Match is the outcome of a lookup.
type Match[T any] struct {
	ID     string // the winning deployment
	Target T      // the value the deployment was added with
	Rule   *Rule  // the winning (most specific) rule
	// Strip is the path prefix to remove: that of the most specific matching
	// rule of the winning deployment that has strip_prefix set, or "".
	Strip string
}

type cand[T any] struct {
	score  int
	id     string
	prefix string
	suffix string // set only for rules that have both host and host_suffix
	rule   *Rule
	dep    *dep[T]
}

type dep[T any] struct {
	id     string
	target T
	rules  []Rule
}

// bucket holds the candidates that share a host key, ordered so that the first
// match is the bucket's winner.
type bucket[T any] struct {
	cands   []cand[T] // sorted by score desc, id asc
	byPath  map[string][]int
	lengths []int // distinct prefix lengths, descending; used with byPath
}

// smallBucket is the size below which a linear scan beats a map probe.
const smallBucket = 8

func (b *bucket[T]) finish() {
	slices.SortStableFunc(b.cands, func(x, y cand[T]) int {
		if c := cmp.Compare(y.score, x.score); c != 0 {
			return c
		}
		return strings.Compare(x.id, y.id)
	})
	if len(b.cands) <= smallBucket {
		return
	}
	b.byPath = make(map[string][]int)
	for i, c := range b.cands {
		if _, ok := b.byPath[c.prefix]; !ok {
			b.lengths = append(b.lengths, len(c.prefix))
		}
		b.byPath[c.prefix] = append(b.byPath[c.prefix], i)
	}
	slices.Sort(b.lengths)
	slices.Reverse(b.lengths)
	b.lengths = slices.Compact(b.lengths)
}

// first returns the best candidate in b matching host and path. Within a bucket
// every candidate has the same host part, so the score order is the prefix
// length order.
func (b *bucket[T]) first(host, path string) *cand[T] {
	if b == nil {
		return nil
	}
	if b.byPath == nil {
		for i := range b.cands {
			c := &b.cands[i]
			if strings.HasPrefix(path, c.prefix) && (c.suffix == "" || suffixMatch(host, c.suffix)) {
				return c
			}
		}
		return nil
	}
	for _, n := range b.lengths {
		if n > len(path) {
			continue
		}
		for _, i := range b.byPath[path[:n]] {
			c := &b.cands[i]
			if c.suffix == "" || suffixMatch(host, c.suffix) {
				return c
			}
		}
	}
	return nil
}

// Table is an immutable routing table. The zero value matches nothing.
type Table[T any] struct {
	exact  map[string]*bucket[T]
	suffix map[string]*bucket[T]
	any    *bucket[T]
	deps   map[string]*dep[T]
	n      int
}

// Builder accumulates deployments for a Table. Not safe for concurrent use.
type Builder[T any] struct {
	deps []*dep[T]
}

// Add registers a deployment's rules. Empty rules are ignored (validation
// refuses them; they would match nothing anyway). Rules must be normalized:
// hosts lowercase without port, suffix without leading dot.
func (b *Builder[T]) Add(id string, target T, rules []Rule) {
	b.deps = append(b.deps, &dep[T]{id: id, target: target, rules: slices.Clone(rules)})
}

// Build returns the table. The builder may be reused afterwards.
func (b *Builder[T]) Build() *Table[T] {
	t := &Table[T]{
		exact:  make(map[string]*bucket[T]),
		suffix: make(map[string]*bucket[T]),
		any:    &bucket[T]{},
		deps:   make(map[string]*dep[T], len(b.deps)),
	}
	get := func(m map[string]*bucket[T], k string) *bucket[T] {
		bk := m[k]
		if bk == nil {
			bk = &bucket[T]{}
			m[k] = bk
		}
		return bk
	}
	for _, d := range b.deps {
		t.deps[d.id] = d
		for i := range d.rules {
			r := &d.rules[i]
			if r.Empty() {
				continue
			}
			c := cand[T]{score: r.Score(), id: d.id, prefix: r.PathPrefix, rule: r, dep: d}
			switch {
			case r.Host != "":
				if r.HostSuffix != "" {
					c.suffix = r.HostSuffix
				}
				bk := get(t.exact, r.Host)
				bk.cands = append(bk.cands, c)
			case r.HostSuffix != "":
				if r.HostSuffix == "." {
					continue // matches nothing
				}
				bk := get(t.suffix, r.HostSuffix)
				bk.cands = append(bk.cands, c)
			default:
				t.any.cands = append(t.any.cands, c)
			}
			t.n++
		}
	}
	for _, bk := range t.exact {
		bk.finish()
	}
	for _, bk := range t.suffix {
		bk.finish()
	}
	t.any.finish()
	return t
}

// Len is the number of non-empty rules in the table.
func (t *Table[T]) Len() int { return t.n }

func better[T any](a, b *cand[T]) bool {
	if b == nil {
		return true
	}
	if a.score != b.score {
		return a.score > b.score
	}
	return a.id < b.id
}

// Lookup finds the deployment for a request. host must be normalized with
// NormalizeHost; an empty host matches only rules without host conditions.
func (t *Table[T]) Lookup(host, path string) (Match[T], bool) {
	var best *cand[T]
	if t == nil || t.deps == nil {
		return Match[T]{}, false
	}
	if host != "" {
		best = t.exact[host].first(host, path)
		if best == nil {
			for h := host; ; {
				if c := t.suffix[h].first(host, path); c != nil && better(c, best) {
					best = c
				}
				i := strings.IndexByte(h, '.')
				if i < 0 {
					break
				}
				h = h[i+1:]
			}
		}
	}
	if best == nil {
		best = t.any.first(host, path)
	}
	if best == nil {
		return Match[T]{}, false
	}
	m := Match[T]{ID: best.id, Target: best.dep.target, Rule: best.rule}
	if best.rule.StripPrefix {
		m.Strip = best.rule.PathPrefix
	} else {
		m.Strip = stripFor(best.dep, host, path)
	}
	return m, true
}

// stripFor finds the most specific rule of d that matches and strips.
func stripFor[T any](d *dep[T], host, path string) string {
	bestScore, strip := -1, ""
	for i := range d.rules {
		r := &d.rules[i]
		if !r.StripPrefix || r.Empty() || !r.Matches(host, path) {
			continue
		}
		if s := r.Score(); s > bestScore {
			bestScore, strip = s, r.PathPrefix
		}
	}
	return strip
}

// Matches reports whether the rule matches a normalized host and a path.
func (r *Rule) Matches(host, path string) bool {
	if r.Empty() {
		return false
	}
	if r.Host != "" && r.Host != host {
		return false
	}
	if r.HostSuffix != "" && !suffixMatch(host, r.HostSuffix) {
		return false
	}
	return strings.HasPrefix(path, r.PathPrefix)
}

// Routed reports whether the deployment id has at least one rule in t.
func (t *Table[T]) Routed(id string) bool {
	if t == nil {
		return false
	}
	d := t.deps[id]
	if d == nil {
		return false
	}
	for i := range d.rules {
		if !d.rules[i].Empty() {
			return true
		}
	}
	return false
}

func suffixMatch(host, suffix string) bool {
	if host == "" || suffix == "" || suffix == "." {
		return false
	}
	if host == suffix {
		return true
	}
	return len(host) > len(suffix) && strings.HasSuffix(host, suffix) && host[len(host)-len(suffix)-1] == '.'
}

// NormalizeHost lowercases a Host header value and strips userinfo and port,
// keeping IPv6 brackets. It allocates only when the host has upper-case
// letters.
func NormalizeHost(h string) string {
	if i := strings.LastIndexByte(h, '@'); i >= 0 {
		h = h[i+1:]
	}
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i >= 0 {
			h = h[:i+1]
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

// NormalizeSuffix lowercases a host_suffix and drops a leading dot. A bare "."
// is kept, since it matches nothing.
func NormalizeSuffix(s string) string {
	s = strings.ToLower(s)
	if len(s) > 1 {
		s = strings.TrimPrefix(s, ".")
	}
	return s
}

// StripPath removes prefix from path as app-lb does: /api/x → /x; an empty
// remainder becomes /, and a leading / is ensured.
func StripPath(path, prefix string) string {
	if prefix == "" || !strings.HasPrefix(path, prefix) {
		return path
	}
	rest := path[len(prefix):]
	if rest == "" {
		return "/"
	}
	if rest[0] != '/' {
		return "/" + rest
	}
	return rest
}
