package siem

import (
	"encoding/json"
	"math/bits"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// bucket is one twelfth of a source's window.
type bucket struct {
	epoch                         int64 // time / bucket length; 0: never used
	requests, authFail, clientErr uint32
	errPaths, deps, subjects      uint64 // sketches: bit = hash mod 64
}

// source is the windowed state of one address (IPv4) or /64 (IPv6).
type source struct {
	b    [buckets]bucket
	last int64 // newest epoch counted
}

// at returns the bucket for epoch ep, resetting it if it held an older one.
// An observation older than the window is counted nowhere (nil).
func (s *source) at(ep int64) *bucket {
	b := &s.b[ep%buckets]
	switch {
	case b.epoch == ep:
	case b.epoch < ep:
		*b = bucket{epoch: ep}
	default:
		return nil
	}
	s.last = max(s.last, ep)
	return b
}

// sum is the window ending at epoch ep.
func (s *source) sum(ep int64) (t bucket) {
	for i := range s.b {
		b := &s.b[i]
		if b.epoch > ep-buckets && b.epoch <= ep {
			t.requests += b.requests
			t.authFail += b.authFail
			t.clientErr += b.clientErr
			t.errPaths |= b.errPaths
			t.deps |= b.deps
			t.subjects |= b.subjects
		}
	}
	return t
}

type foldKey struct {
	rule string
	src  netip.Prefix
	dep  string
}

// entry is one held alert.
type entry struct {
	a         apitype.SecurityAlert
	namespace string
	key       foldKey
}

type ruleSev struct{ rule, sev string }

// state is the analyser's; Engine.mu guards it.
type state struct {
	o       *Options
	hashKey uint64
	bucket  time.Duration
	sources map[netip.Prefix]*source
	// lastKey and lastSrc are the source looked up last (a source's
	// requests come in runs: one map lookup saved a request).
	lastKey netip.Prefix
	lastSrc *source
	// gatePaths caches Options.GatePath for the batch under analysis.
	gatePaths map[string]string

	clock     time.Time // the latest of the analyser's clock and event times
	lastPrune time.Time
	pruned    bool // a capacity prune ran in this batch

	ring  []*entry // by id, oldest first
	folds map[foldKey]*entry
	next  int64 // the last id handed out

	minute      int64
	minuteCount int

	analyzed, raised, suppressed, clientDrops uint64
	byRule                                    map[ruleSev]uint64

	dirty map[int64]bool
	fresh []apitype.SecurityAlert

	scratch []byte
}

func (st *state) init(o *Options) {
	st.o = o
	st.bucket = o.Window / buckets
	st.sources = map[netip.Prefix]*source{}
	st.folds = map[foldKey]*entry{}
	st.byRule = map[ruleSev]uint64{}
	st.dirty = map[int64]bool{}
}

// sourceKey is the source an address belongs to: the address itself for
// IPv4 (IPv4-mapped IPv6 included), its /64 for IPv6.
func sourceKey(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// ruleClient is a guard rule's match.client for a source: a bare IPv4
// address, or the /64.
func ruleClient(p netip.Prefix) string {
	if p.Addr().Is4() {
		return p.Addr().String()
	}
	return p.String()
}

func (st *state) atCapacity() bool { return len(st.sources) >= st.o.MaxClients }

// hash is a keyed FNV-1a with a final mix; the key is random per engine,
// so nobody can pick identities or paths that collide in the sketches.
func (st *state) hash(s string) uint64 {
	h := st.hashKey ^ 14695981039346656037
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func (st *state) bit(s string) uint64 { return 1 << (st.hash(s) % 64) }

func distinct(sketch uint64) int { return bits.OnesCount64(sketch) }

// lookup returns the source of p, adding it if there is room (after
// pruning expired sources, once per batch); nil when the table is full.
func (st *state) lookup(p netip.Prefix) *source {
	if !p.IsValid() {
		return nil
	}
	if p == st.lastKey && st.lastSrc != nil {
		return st.lastSrc // a source's requests come in runs
	}
	if s := st.sources[p]; s != nil {
		st.lastKey, st.lastSrc = p, s
		return s
	}
	if st.atCapacity() && !st.pruned {
		st.prune()
		st.pruned = true
	}
	if st.atCapacity() {
		st.clientDrops++
		return nil
	}
	s := &source{}
	st.sources[p] = s
	return s
}

func (st *state) epoch(t time.Time) int64 { return t.UnixNano() / int64(st.bucket) }

// prune forgets sources with nothing in the window.
func (st *state) prune() {
	ep := st.epoch(st.clock)
	for k, s := range st.sources {
		if s.last <= ep-buckets {
			delete(st.sources, k)
		}
	}
	st.lastKey, st.lastSrc = netip.Prefix{}, nil
	st.lastPrune = st.clock
}

// analyse runs the rules over a batch, in time order.
func (st *state) analyse(reqs []Request, auths []Auth, now time.Time) {
	st.pruned = false
	clear(st.gatePaths) // a deployment's base path is asked once a batch
	if now.After(st.clock) {
		st.clock = now
	}
	i, j := 0, 0
	for i < len(reqs) || j < len(auths) {
		if j == len(auths) || i < len(reqs) && !reqs[i].Time.After(auths[j].Time) {
			st.request(&reqs[i])
			i++
		} else {
			st.auth(&auths[j])
			j++
		}
	}
	if every := max(st.o.Window/2, 5*time.Second); st.clock.Sub(st.lastPrune) >= every {
		st.prune()
	}
}

func (st *state) tick(t time.Time) {
	st.analyzed++
	if t.After(st.clock) {
		st.clock = t
	}
}

// ignoredPath: paths that are never flagged — ACME and other well-known
// URIs, and the sign-in gates' own endpoints — unless they try to climb out.
func (st *state) ignoredPath(path, deployment string) bool {
	base := DefaultGatePath
	if st.o.GatePath != nil && deployment != "" {
		b, ok := st.gatePaths[deployment]
		if !ok {
			b = strings.TrimSuffix(st.o.GatePath(deployment), "/")
			if st.gatePaths == nil {
				st.gatePaths = map[string]string{}
			}
			st.gatePaths[strings.Clone(deployment)] = b
		}
		if b != "" {
			base = b
		}
	}
	under := strings.HasPrefix(path, "/.well-known/") ||
		underDir(path, DefaultGatePath) || underDir(path, base) || path == base
	return under && !strings.Contains(path, "..")
}

// underDir reports whether path lies below dir (dir + "/" + more), without
// building dir+"/" for every request analysed.
func underDir(path, dir string) bool {
	return len(path) > len(dir) && path[len(dir)] == '/' && path[:len(dir)] == dir
}

func isClientError(status int) bool { return status == 401 || status == 403 || status == 404 }

func (st *state) request(r *Request) {
	st.tick(r.Time)
	if r.Exempted {
		return
	}
	src := sourceKey(r.Client)
	s := st.lookup(src)
	ep := st.epoch(r.Time)
	path := r.Path
	if len(path) > maxScan {
		path = path[:maxScan]
	}
	ignored := st.ignoredPath(path, r.Deployment)
	f := finding{st: st, src: src, client: r.Client, at: r.Time, req: r}
	if !r.Unrouted {
		f.deployment, f.namespace = r.Deployment, r.Namespace
	}

	if s != nil {
		if b := s.at(ep); b != nil {
			if !r.Unrouted {
				b.requests++
			}
			countsAsProbe := isClientError(r.Status) && !r.Credentialed && !ignored
			if countsAsProbe {
				b.clientErr++
				b.errPaths |= st.bit(path)
			}
			w := s.sum(ep)
			if !r.Unrouted && int(w.requests) >= st.o.RateThreshold {
				st.raise(&f, RuleRateSpike, "", "")
			}
			if countsAsProbe && int(w.clientErr) >= st.o.ScanThreshold && distinct(w.errPaths) >= st.o.ScanDistinctPaths {
				st.raise(&f, RuleScanner, "", "")
			}
		}
	}
	if ignored {
		return
	}

	// Web signatures: the path, then each query value; the strongest wins,
	// the path on a tie.
	var kind webKind
	var lit string
	if mayInject(path) {
		kind, lit = scanPath(lowerASCII(&st.scratch, path), path)
	} else {
		kind, lit = secretProbe(path)
	}
	where := ""
	if r.Unrouted && kind != webSecretProbe {
		kind, lit = webNone, ""
	}
	if !st.o.NoQueryScan && r.RawQuery != "" && !r.Unrouted {
		q := r.RawQuery
		if len(q) > 2*maxScan {
			q = q[:2*maxScan]
		}
		for q != "" {
			var pair string
			pair, q, _ = strings.Cut(q, "&")
			name, val, _ := strings.Cut(pair, "=")
			if val == "" {
				continue
			}
			if v, err := url.QueryUnescape(val); err == nil {
				val = v
			}
			if len(val) > maxScan {
				val = val[:maxScan]
			}
			if !mayInject(val) {
				continue
			}
			k, _, _ := scanValue(lowerASCII(&st.scratch, val))
			if k != webNone && (kind == webNone || severityRank(webRules[k].sev) > severityRank(webRules[kind].sev)) {
				if n, err := url.QueryUnescape(name); err == nil {
					name = n
				}
				kind, lit, where = k, "", truncate(name, 64)
			}
		}
	}
	if kind != webNone {
		st.raise(&f, webRules[kind].rule, where, lit)
	}
}

func (st *state) auth(a *Auth) {
	st.tick(a.Time)
	if a.Action == ActionSigninExchange {
		return
	}
	src := sourceKey(a.Client)
	f := finding{st: st, src: src, client: a.Client, at: a.Time, auth: a,
		deployment: a.Deployment, namespace: a.Namespace}
	if a.Action == ActionSigninState {
		st.raise(&f, RuleSigninState, "", "")
	}
	s := st.lookup(src)
	if s == nil {
		return
	}
	ep := st.epoch(a.Time)
	b := s.at(ep)
	if b == nil {
		return
	}
	b.authFail++
	if a.Deployment != "" {
		b.deps |= st.bit(a.Deployment)
	}
	if a.Subject != "" && !strings.HasPrefix(a.Action, "admin-") {
		b.subjects |= st.bit(a.Subject)
	}
	w := s.sum(ep)
	if int(w.authFail) < st.o.AuthThreshold {
		return
	}
	switch {
	case distinct(w.subjects) >= st.o.SpreadDistinct:
		st.raise(&f, RuleEnumeration, "", "")
	case distinct(w.deps) >= st.o.SpreadDistinct:
		f.deployment, f.namespace = "", ""
		st.raise(&f, RuleSpray, "", "")
	case a.Action == ActionAdminScope:
		st.raise(&f, RuleScopeDenied, "", "")
	default:
		st.raise(&f, RuleBruteForce, "", "")
	}
}

// raise folds the finding into a recent alert of the same rule, source
// and deployment, or raises a new one within the per-minute cap.
func (st *state) raise(f *finding, rule, param, literal string) {
	t := f.at.UnixMilli()
	k := foldKey{rule, f.src, f.deployment}
	if e := st.folds[k]; e != nil && t-e.a.LastTs <= st.o.Suppress.Milliseconds() {
		e.a.Count++
		e.a.LastTs = max(e.a.LastTs, t)
		st.suppressed++
		st.dirty[e.a.ID] = true
		return
	}
	if m := f.at.Unix() / 60; m != st.minute {
		st.minute, st.minuteCount = m, 0
	}
	if st.minuteCount >= st.o.MaxAlertsPerMinute {
		st.suppressed++
		return
	}
	st.minuteCount++
	st.next++
	// The finding's strings point into the queue's arena (Engine.keep);
	// an alert outlives the batch, so it keeps copies.
	k.dep = strings.Clone(k.dep)
	a := f.alert(st.next, rule, param, literal)
	a.Client, a.Deployment, a.Path, a.Title = strings.Clone(a.Client), strings.Clone(a.Deployment), strings.Clone(a.Path), strings.Clone(a.Title)
	e := &entry{a: a, namespace: strings.Clone(f.namespace), key: k}
	st.ring = append(st.ring, e)
	if over := len(st.ring) - st.o.AlertCapacity; over > 0 {
		for _, old := range st.ring[:over] {
			if st.folds[old.key] == old {
				delete(st.folds, old.key)
			}
			delete(st.dirty, old.a.ID)
		}
		st.ring = append(st.ring[:0], st.ring[over:]...)
	}
	st.folds[k] = e
	st.raised++
	st.byRule[ruleSev{rule, string(e.a.Severity)}]++
	st.dirty[e.a.ID] = true
	st.fresh = append(st.fresh, e.a)
}

// takeDirty returns the store rows of the alerts changed since the last
// call, and the alerts raised since.
func (st *state) takeDirty() ([]store.SecurityAlert, []apitype.SecurityAlert) {
	fresh := st.fresh
	st.fresh = nil
	if len(st.dirty) == 0 {
		return nil, fresh
	}
	var rows []store.SecurityAlert
	for _, e := range st.ring {
		if !st.dirty[e.a.ID] {
			continue
		}
		b, err := json.Marshal(e.a)
		if err != nil {
			st.o.Log.Error("siem: encode alert", "id", e.a.ID, "err", err)
			continue
		}
		rows = append(rows, store.SecurityAlert{ID: e.a.ID, Rule: e.a.Rule, Severity: string(e.a.Severity),
			Deployment: e.a.Deployment, Namespace: e.namespace, LastTs: e.a.LastTs, JSON: b})
	}
	clear(st.dirty)
	return rows, fresh
}

// redirty marks rows not stored for the next attempt.
func (st *state) redirty(rows []store.SecurityAlert) {
	for _, r := range rows {
		for _, e := range st.ring {
			if e.a.ID == r.ID {
				st.dirty[r.ID] = true
				break
			}
		}
	}
}

// load restores stored alerts (oldest first) and the id sequence.
func (st *state) load(rows []store.SecurityAlert, last int64) error {
	st.next = last
	if over := len(rows) - st.o.AlertCapacity; over > 0 {
		rows = rows[over:]
	}
	for _, r := range rows {
		var a apitype.SecurityAlert
		if err := json.Unmarshal(r.JSON, &a); err != nil {
			st.o.Log.Error("siem: skipping a stored alert that does not decode", "id", r.ID, "err", err)
			continue
		}
		a.ID = r.ID
		st.next = max(st.next, a.ID)
		var src netip.Prefix
		if c, err := netip.ParseAddr(a.Client); err == nil {
			src = sourceKey(c)
		}
		e := &entry{a: a, namespace: r.Namespace, key: foldKey{a.Rule, src, a.Deployment}}
		st.ring = append(st.ring, e)
		st.folds[e.key] = e
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
