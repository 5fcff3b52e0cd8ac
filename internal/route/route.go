// Package route matches requests to deployments: the data plane's routing
// table.
//
// A Table is immutable once built. The gateway derives a new one on every
// deployment change (Table.Edit, which shares what the change leaves alone,
// so a write costs the size of the change, not of the table) and swaps it in
// atomically, so lookups take no lock and a request always sees one
// consistent set of routes.
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
	"hash/maphash"
	"maps"
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
//
// Its maps are split into shards by a hash of the key, so that Edit can
// derive a new table from an old one by copying only the shards a change
// touches: a write costs the size of the change plus a shard (about
// 1/nShards of the table), not the whole table.
type Table[T any] struct {
	exact  shardMap[*bucket[T]]
	suffix shardMap[*bucket[T]]
	any    *bucket[T]
	deps   shardMap[*dep[T]]
	built  bool // set by Build and Edit; the zero Table matches nothing
	n      int
}

// nShards is the number of shards of each of a table's maps.
const nShards = 64

type shardMap[V any] [nShards]map[string]V

var seed = maphash.MakeSeed()

func shardOf(k string) int { return int(maphash.String(seed, k) % nShards) }

func (m *shardMap[V]) get(k string) (V, bool) {
	v, ok := m[shardOf(k)][k]
	return v, ok
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
	t := &Table[T]{any: &bucket[T]{}, built: true}
	for i := range nShards {
		t.exact[i] = map[string]*bucket[T]{}
		t.suffix[i] = map[string]*bucket[T]{}
		t.deps[i] = map[string]*dep[T]{}
	}
	get := func(m *shardMap[*bucket[T]], k string) *bucket[T] {
		sh := m[shardOf(k)]
		bk := sh[k]
		if bk == nil {
			bk = &bucket[T]{}
			sh[k] = bk
		}
		return bk
	}
	for _, d := range b.deps {
		t.deps[shardOf(d.id)][d.id] = d
		for i := range d.rules {
			r := &d.rules[i]
			switch k, key := placement(r); k {
			case inExact:
				bk := get(&t.exact, key)
				bk.cands = append(bk.cands, newCand(d, r))
			case inSuffix:
				bk := get(&t.suffix, key)
				bk.cands = append(bk.cands, newCand(d, r))
			case inAny:
				t.any.cands = append(t.any.cands, newCand(d, r))
			default:
				continue
			}
			t.n++
		}
	}
	for i := range nShards {
		for _, bk := range t.exact[i] {
			bk.finish()
		}
		for _, bk := range t.suffix[i] {
			bk.finish()
		}
	}
	t.any.finish()
	return t
}

type where int

const (
	nowhere where = iota
	inExact
	inSuffix
	inAny
)

// placement is the bucket a rule goes into, and its key.
func placement(r *Rule) (where, string) {
	switch {
	case r.Empty():
		return nowhere, ""
	case r.Host != "":
		return inExact, r.Host
	case r.HostSuffix == ".":
		return nowhere, "" // matches nothing
	case r.HostSuffix != "":
		return inSuffix, r.HostSuffix
	}
	return inAny, ""
}

func newCand[T any](d *dep[T], r *Rule) cand[T] {
	c := cand[T]{score: r.Score(), id: d.id, prefix: r.PathPrefix, rule: r, dep: d}
	if r.Host != "" && r.HostSuffix != "" {
		c.suffix = r.HostSuffix
	}
	return c
}

// Edit derives a new table from t. The returned Editor changes its own
// copy: t stays as it is (readers keep using it), and Table returns the
// result. Edit on a nil or zero Table starts from an empty one.
func (t *Table[T]) Edit() *Editor[T] {
	e := &Editor[T]{dirty: map[bkey]*bucket[T]{}}
	if t != nil && t.built {
		e.t = *t
	} else {
		e.t.any = &bucket[T]{}
		e.t.built = true
	}
	return e
}

// Editor applies changes to a copy of a Table. Not safe for concurrent use;
// it must not be used after Table.
type Editor[T any] struct {
	t     Table[T]
	owned [3][nShards]bool // shards of exact, suffix, deps already copied
	dirty map[bkey]*bucket[T]
}

type bkey struct {
	w   where
	key string
}

// Put adds deployment id, or replaces its target and rules, as Builder.Add
// would have.
func (e *Editor[T]) Put(id string, target T, rules []Rule) {
	e.Remove(id)
	d := &dep[T]{id: id, target: target, rules: slices.Clone(rules)}
	e.depsShard(id)[id] = d
	for i := range d.rules {
		r := &d.rules[i]
		w, key := placement(r)
		if w == nowhere {
			continue
		}
		bk := e.bucket(w, key)
		bk.cands = append(bk.cands, newCand(d, r))
		e.t.n++
	}
}

// Remove drops deployment id and its rules; absent, it does nothing.
func (e *Editor[T]) Remove(id string) {
	d, ok := e.t.deps.get(id)
	if !ok {
		return
	}
	delete(e.depsShard(id), id)
	for i := range d.rules {
		w, key := placement(&d.rules[i])
		if w == nowhere {
			continue
		}
		bk := e.bucket(w, key)
		// Every candidate of d in this bucket goes at once; a later rule
		// of d with the same key finds none left.
		bk.cands = slices.DeleteFunc(bk.cands, func(c cand[T]) bool {
			if c.dep == d {
				e.t.n--
				return true
			}
			return false
		})
	}
}

func (e *Editor[T]) depsShard(id string) map[string]*dep[T] {
	i := shardOf(id)
	if !e.owned[2][i] {
		e.t.deps[i] = maps.Clone(e.t.deps[i])
		if e.t.deps[i] == nil {
			e.t.deps[i] = map[string]*dep[T]{}
		}
		e.owned[2][i] = true
	}
	return e.t.deps[i]
}

// bucket returns a private, unsorted copy of the bucket w/key, made once
// per edit.
func (e *Editor[T]) bucket(w where, key string) *bucket[T] {
	k := bkey{w, key}
	if bk := e.dirty[k]; bk != nil {
		return bk
	}
	var old *bucket[T]
	switch w {
	case inExact:
		old, _ = e.t.exact.get(key)
	case inSuffix:
		old, _ = e.t.suffix.get(key)
	case inAny:
		old = e.t.any
	}
	bk := &bucket[T]{}
	if old != nil {
		bk.cands = slices.Clone(old.cands)
	}
	e.dirty[k] = bk
	return bk
}

// Table returns the edited table.
func (e *Editor[T]) Table() *Table[T] {
	for k, bk := range e.dirty {
		if k.w == inAny {
			bk.finish()
			e.t.any = bk
			continue
		}
		which, m := 0, &e.t.exact
		if k.w == inSuffix {
			which, m = 1, &e.t.suffix
		}
		i := shardOf(k.key)
		if !e.owned[which][i] {
			m[i] = maps.Clone(m[i])
			if m[i] == nil {
				m[i] = map[string]*bucket[T]{}
			}
			e.owned[which][i] = true
		}
		if len(bk.cands) == 0 {
			delete(m[i], k.key)
			continue
		}
		bk.finish()
		m[i][k.key] = bk
	}
	t := e.t
	e.dirty = nil
	return &t
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
	if t == nil || !t.built {
		return Match[T]{}, false
	}
	if host != "" {
		bk, _ := t.exact.get(host)
		best = bk.first(host, path)
		if best == nil {
			for h := host; ; {
				bk, _ := t.suffix.get(h)
				if c := bk.first(host, path); c != nil && better(c, best) {
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
	d, _ := t.deps.get(id)
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
