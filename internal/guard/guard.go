// Package guard keeps the guard rules (app-lb §6.3): literal conditions on
// data-plane requests — client address or CIDR, host, deployment, method,
// path prefix, path substring, user-agent substring, AND'd — each of which
// blocks what it matches, or exempts it from the blocks (allow).
//
// The rules are durable in the store (package store, table guard_rules);
// every live rule is also in memory, compiled into an immutable snapshot
// that each change replaces atomically. The request path, Check, reads that
// snapshot with one atomic load, takes no lock, runs no regular expression
// and allocates nothing; with no block rule it is a load and a length test.
//
// Evaluation: expired rules are skipped; the first block rule (oldest
// first) that matches decides, unless any allow rule matches too, in which
// case the request passes as exempted, whatever the rules' order. An allow
// rule on its own never changes a verdict, so it is only evaluated once a
// block has matched, and "exempted" counts requests an allow rule saved
// from a block (the contract's GuardStats.exempted), not every request
// an allow rule matches. With Options.Enforce off a block is reported as
// WouldBlock: counted, logged by the caller, not refused.
//
// A rule's id is a hash of its action and conditions (ID), so posting the
// same conditions again replaces the rule — its note and expiry — and
// keeps its hits and creation time. At most MaxRules rules are live.
//
// Writes (Add, SetExpiry, Delete) are in force and durable before they
// return. If the store fails, the change stays in force anyway, as app-lb
// keeps a rule it could not save: a block posted during an attack should
// not wait on a disk. The write returns an error wrapping ErrNotSaved, and
// the guard retries it every sweep (10 s) until it lands; until then a
// restart would lose it.
//
// Hits are counted in memory with atomics (a total and last-hit time per
// rule, and per-minute counts over the last hour that are approximate at
// minute boundaries: the request path takes no lock to make them exact)
// and written to the store in batches, every 10 s (Sweep) and on Close.
// A kill -9 loses at most the hits of the last 10 s; rules and expiries
// whose write returned nil are never lost. The per-minute series are
// memory-only and start empty after a restart. Expired rules are dropped
// from the store by the same sweep, and before every write.
package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// Store is what the guard needs of package store.
type Store interface {
	GuardRules(ctx context.Context) ([]store.GuardRule, error)
	PutGuardRule(ctx context.Context, r store.GuardRule) error
	DeleteGuardRules(ctx context.Context, ids []string) error
	AddGuardHits(ctx context.Context, hits map[string]store.GuardHits) error
}

// Errors.
var (
	// ErrFull refuses a new rule at MaxRules (app-lb: 409).
	ErrFull = fmt.Errorf("at the %d-rule limit; remove one first", MaxRules)
	// ErrNotFound is a rule that does not exist (or has expired).
	ErrNotFound = errors.New("no such rule")
	// ErrNotSaved wraps a store failure after a change was put in force:
	// it holds until a restart, and the guard retries the write.
	ErrNotSaved = errors.New("in force, but not saved: berth retries the write every 10 s, and until then a restart undoes it")
)

// Series of recent counts: per-minute buckets over the last hour.
const (
	BucketSecs = 60
	WindowSecs = 3600
	buckets    = WindowSecs / BucketSecs
	sweepEvery = 10 * time.Second
)

// Verdict is Check's answer.
type Verdict uint8

// Verdicts.
const (
	// Pass: no rule matched (or the only matches were expired).
	Pass Verdict = iota
	// Exempt: an allow rule matched: pass, whatever block rules match,
	// and exempt from detection (the SIEM) too.
	Exempt
	// Block: refuse the request (403 "blocked\n").
	Block
	// WouldBlock: a block rule matched with enforcement off: pass, and log.
	WouldBlock
)

func (v Verdict) String() string {
	switch v {
	case Pass:
		return "pass"
	case Exempt:
		return "exempt"
	case Block:
		return "block"
	case WouldBlock:
		return "would-block"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Options configure a Guard.
type Options struct {
	Store Store
	// Enforce refuses what block rules match; false only counts them and
	// answers WouldBlock (app-lb's APP_LB_GUARD_ENFORCE=0).
	Enforce bool
	Now     func() time.Time
	Log     *slog.Logger
}

// series counts events per minute over the last hour, without a lock:
// bucket i counts minute min[i]; the first event of a newer minute claims
// the bucket and zeroes it, and an event racing that claim may be lost or
// land in the neighbouring minute.
type series struct {
	n   [buckets]atomic.Int64
	min [buckets]atomic.Int64
}

func (s *series) add(minute int64) {
	i := minute % buckets
	if m := s.min[i].Load(); m < minute && s.min[i].CompareAndSwap(m, minute) {
		s.n[i].Store(0)
	}
	s.n[i].Add(1)
}

// read returns the counts of the hour ending with minute, oldest first.
func (s *series) read(minute int64) []int {
	out := make([]int, buckets)
	for k := range out {
		m := minute - buckets + 1 + int64(k)
		if i := m % buckets; m >= 0 && s.min[i].Load() == m {
			out[k] = int(s.n[i].Load())
		}
	}
	return out
}

// counters are a rule's hits, shared by the versions of the rule a
// re-post or an expiry change make.
type counters struct {
	hits    atomic.Int64
	lastHit atomic.Int64 // Unix nanoseconds; 0: never
	recent  series
	saved   int64 // hits the store has; guarded by Guard.mu
}

// rule is one rule in force; immutable once published, but for counters.
type rule struct {
	id      string
	action  apitype.RuleAction
	match   apitype.RuleMatch
	note    string
	created time.Time
	expires int64 // Unix nanoseconds; 0: permanent
	m       matcher
	c       *counters
}

func (r *rule) live(now int64) bool { return r.expires == 0 || now < r.expires }

// snapshot is what Check evaluates: the rules oldest first, split by action.
//
// The block rules are also split for speed: those whose client is one
// address (the most common rule, and what an alert's block-client
// action posts) are found by a map lookup of the request's address;
// the rest (CIDRs, rules without a client) are scanned. Both keep the
// oldest-first order (blockOrder), so the first matching block is the
// same as a scan of every rule would find.
type snapshot struct {
	all, block, allow []*rule
	byAddr            map[netip.Addr][]ordered // block rules of one client address each
	// The other block rules, by the family of client they can match: a
	// rule with an IPv6 CIDR is never tried on an IPv4 client, nor the
	// reverse; a rule without a client condition is in both.
	scan4, scan6 []ordered
}

// ordered is a block rule with its place among the snapshot's.
type ordered struct {
	*rule
	order int
}

// Guard is the rule set. Safe for concurrent use.
type Guard struct {
	st Store
	o  Options

	snap     atomic.Pointer[snapshot]
	blocked  atomic.Int64
	exempted atomic.Int64
	// blockedRecent and exemptedRecent are the global per-minute series.
	blockedRecent, exemptedRecent series

	mu      sync.Mutex // writers, Sweep and Close
	rules   map[string]*rule
	unsaved map[string]bool // ids whose put (true) or delete (false) failed
	timer   *time.Timer
	closed  bool
}

// New loads the stored rules, drops the ones that expired while berth was
// down, and starts the sweep.
func New(ctx context.Context, o Options) (*Guard, error) {
	if o.Store == nil {
		return nil, errors.New("guard: no store")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	g := &Guard{st: o.Store, o: o, rules: map[string]*rule{}, unsaved: map[string]bool{}}
	rows, err := o.Store.GuardRules(ctx)
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		r, err := fromRow(row)
		if err != nil {
			return nil, fmt.Errorf("guard: stored rule %s: %w", row.ID, err)
		}
		g.rules[r.id] = r
	}
	g.publishLocked()
	g.sweepLocked(ctx, o.Now())
	g.mu.Lock() // tick reads the timer under mu
	g.timer = time.AfterFunc(sweepEvery, g.tick)
	g.mu.Unlock()
	return g, nil
}

func fromRow(row store.GuardRule) (*rule, error) {
	m := apitype.RuleMatch{Client: row.Client, Host: row.Host, Deployment: row.Deployment, PathPrefix: row.PathPrefix,
		PathContains: row.PathContains, Method: row.Method, UserAgentContains: row.UserAgentContains}
	n, err := Normalize(apitype.RuleSpec{Action: apitype.RuleAction(row.Action), Match: m, Note: row.Note})
	if err != nil {
		return nil, err
	}
	if n.Match != m || string(n.Action) != row.Action {
		return nil, errors.New("not in normalized form")
	}
	mt, err := compile(n.Match)
	if err != nil {
		return nil, err
	}
	r := &rule{id: row.ID, action: n.Action, match: n.Match, note: n.Note, created: row.CreatedAt, m: mt, c: &counters{}}
	if !row.ExpiresAt.IsZero() {
		r.expires = row.ExpiresAt.UnixNano()
	}
	r.c.hits.Store(row.Hits)
	r.c.saved = row.Hits
	if !row.LastHit.IsZero() {
		r.c.lastHit.Store(row.LastHit.UnixNano())
	}
	return r, nil
}

// row is r as stored, with the hits counted so far; the caller records
// them as saved once the put succeeds.
func row(r *rule) (store.GuardRule, int64) {
	hits := r.c.hits.Load()
	x := store.GuardRule{ID: r.id, Action: string(r.action), Client: r.match.Client, Host: r.match.Host,
		Deployment: r.match.Deployment, PathPrefix: r.match.PathPrefix, PathContains: r.match.PathContains,
		Method: r.match.Method, UserAgentContains: r.match.UserAgentContains, Note: r.note,
		CreatedAt: r.created, Hits: hits}
	if r.expires != 0 {
		x.ExpiresAt = time.Unix(0, r.expires)
	}
	if t := r.c.lastHit.Load(); t != 0 {
		x.LastHit = time.Unix(0, t)
	}
	return x, hits
}

// publishLocked compiles the rules into a new snapshot and swaps it in.
func (g *Guard) publishLocked() {
	s := &snapshot{all: make([]*rule, 0, len(g.rules))}
	for _, r := range g.rules {
		s.all = append(s.all, r)
	}
	slices.SortFunc(s.all, func(a, b *rule) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		if a.id < b.id {
			return -1
		}
		return 1
	})
	s.byAddr = map[netip.Addr][]ordered{}
	for _, r := range s.all {
		if r.action == apitype.RuleAllow {
			s.allow = append(s.allow, r)
			continue
		}
		o := ordered{r, len(s.block)}
		s.block = append(s.block, r)
		switch p := r.m.client; {
		case p.IsValid() && p.IsSingleIP():
			s.byAddr[p.Addr()] = append(s.byAddr[p.Addr()], o)
		case p.IsValid() && p.Addr().Is4():
			s.scan4 = append(s.scan4, o)
		case p.IsValid():
			s.scan6 = append(s.scan6, o)
		default:
			s.scan4, s.scan6 = append(s.scan4, o), append(s.scan6, o)
		}
	}
	g.snap.Store(s)
}

// Check evaluates a data-plane request: client its address (an IPv4-mapped
// one is compared as IPv4; an invalid one matches no client condition),
// host lowercase without port, deployment the routed one ("" when none),
// method as sent, path the request's path, userAgent its User-Agent. It
// takes no lock and allocates nothing.
func (g *Guard) Check(client netip.Addr, host, deployment, method, path, userAgent string) Verdict {
	s := g.snap.Load()
	if len(s.block) == 0 && len(s.allow) == 0 {
		return Pass
	}
	client = client.Unmap()
	var now int64
	// Any matching allow wins, whatever the order (app-lb §6.3): the
	// request is served and exempt from detection too, block or no block.
	for _, a := range s.allow {
		if a.m.match(client, host, deployment, method, path, userAgent) && g.liveAt(a, &now) {
			minute := now / int64(time.Second) / BucketSecs
			a.c.hit(now, minute)
			g.exempted.Add(1)
			g.exemptedRecent.add(minute)
			return Exempt
		}
	}
	var b *rule
	order := len(s.block)
	for _, r := range s.byAddr[client] {
		if r.m.match(client, host, deployment, method, path, userAgent) && g.liveAt(r.rule, &now) {
			b, order = r.rule, r.order
			break
		}
	}
	scan := s.scan6
	if client.Is4() {
		scan = s.scan4
	}
	for _, r := range scan {
		if r.order > order {
			break // an older rule already matched
		}
		if r.m.match(client, host, deployment, method, path, userAgent) && g.liveAt(r.rule, &now) {
			b = r.rule
			break
		}
	}
	if b != nil {
		minute := now / int64(time.Second) / BucketSecs
		b.c.hit(now, minute)
		g.blocked.Add(1)
		g.blockedRecent.add(minute)
		if g.o.Enforce {
			return Block
		}
		return WouldBlock
	}
	return Pass
}

// liveAt reports whether r is in force, reading the clock into *now the
// first time a rule matched (a request that matches none never reads it).
func (g *Guard) liveAt(r *rule, now *int64) bool {
	if *now == 0 {
		*now = g.o.Now().UnixNano()
	}
	return r.live(*now)
}

func (c *counters) hit(now, minute int64) {
	c.hits.Add(1)
	c.lastHit.Store(now)
	c.recent.add(minute)
}

// Enforcing reports whether block rules refuse (Options.Enforce).
func (g *Guard) Enforcing() bool { return g.o.Enforce }

// Add puts the rule spec describes in force, or replaces the one with the
// same conditions (its note and expiry; hits and creation time are kept).
// A refused spec is a *web.FieldError or ErrEmptyMatch; a new rule beyond
// MaxRules is ErrFull.
func (g *Guard) Add(ctx context.Context, spec apitype.RuleSpec) (apitype.RuleView, error) {
	n, err := Normalize(spec)
	if err != nil {
		return apitype.RuleView{}, err
	}
	mt, err := compile(n.Match)
	if err != nil {
		return apitype.RuleView{}, err
	}
	now := g.o.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweepLocked(ctx, now)
	id := ID(n.Action, n.Match)
	old := g.rules[id]
	if old == nil && len(g.rules) >= MaxRules {
		return apitype.RuleView{}, ErrFull
	}
	r := &rule{id: id, action: n.Action, match: n.Match, note: n.Note, created: now, m: mt, c: &counters{}}
	if old != nil {
		r.created, r.c = old.created, old.c
	}
	if n.ExpiresInSecs != nil {
		r.expires = now.Add(time.Duration(*n.ExpiresInSecs) * time.Second).UnixNano()
	}
	return g.putLocked(ctx, r, now)
}

// SetExpiry sets when rule id expires: secs from now, or never (nil).
func (g *Guard) SetExpiry(ctx context.Context, id string, secs *int64) (apitype.RuleView, error) {
	if err := checkExpiry(secs); err != nil {
		return apitype.RuleView{}, err
	}
	now := g.o.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweepLocked(ctx, now)
	old := g.rules[id]
	if old == nil || !old.live(now.UnixNano()) {
		return apitype.RuleView{}, ErrNotFound
	}
	r := *old
	r.expires = 0
	if secs != nil {
		r.expires = now.Add(time.Duration(*secs) * time.Second).UnixNano()
	}
	return g.putLocked(ctx, &r, now)
}

// putLocked puts r in force, then in the store.
func (g *Guard) putLocked(ctx context.Context, r *rule, now time.Time) (apitype.RuleView, error) {
	g.rules[r.id] = r
	g.publishLocked()
	v := g.view(r, now, false)
	x, hits := row(r)
	if err := g.st.PutGuardRule(ctx, x); err != nil {
		g.unsaved[r.id] = true
		g.o.Log.Error("guard: a rule is in force but not saved", "rule", r.id, "err", err)
		return v, fmt.Errorf("guard: rule %s %w: %w", r.id, ErrNotSaved, err)
	}
	delete(g.unsaved, r.id)
	r.c.saved = hits
	return v, nil
}

// Delete takes rule id out of force and out of the store.
func (g *Guard) Delete(ctx context.Context, id string) error {
	now := g.o.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweepLocked(ctx, now)
	r := g.rules[id]
	if r == nil || !r.live(now.UnixNano()) {
		return ErrNotFound
	}
	delete(g.rules, id)
	g.publishLocked()
	if err := g.st.DeleteGuardRules(ctx, []string{id}); err != nil {
		g.unsaved[id] = false
		g.o.Log.Error("guard: a rule is out of force but still stored", "rule", id, "err", err)
		return fmt.Errorf("guard: deleting rule %s: %w: %w", id, ErrNotSaved, err)
	}
	delete(g.unsaved, id)
	return nil
}

// sweepLocked drops the expired rules from memory and the store; a failed
// delete is retried by the next Sweep.
func (g *Guard) sweepLocked(ctx context.Context, now time.Time) {
	var dead []string
	for id, r := range g.rules {
		if !r.live(now.UnixNano()) {
			dead = append(dead, id)
		}
	}
	if len(dead) == 0 {
		return
	}
	for _, id := range dead {
		delete(g.rules, id)
	}
	g.publishLocked()
	if err := g.st.DeleteGuardRules(ctx, dead); err != nil {
		for _, id := range dead {
			g.unsaved[id] = false
		}
		g.o.Log.Warn("guard: could not drop expired rules from the store", "rules", dead, "err", err)
		return
	}
	for _, id := range dead {
		delete(g.unsaved, id)
	}
}

// Sweep drops expired rules, retries the writes that failed, and writes
// the hits counted since the last batch. The Guard runs it every 10 s.
func (g *Guard) Sweep(ctx context.Context) {
	now := g.o.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweepLocked(ctx, now)
	for id, put := range g.unsaved {
		var err error
		if r := g.rules[id]; put && r != nil {
			x, hits := row(r)
			if err = g.st.PutGuardRule(ctx, x); err == nil {
				r.c.saved = hits
			}
		} else if !put {
			err = g.st.DeleteGuardRules(ctx, []string{id})
		}
		if err != nil {
			g.o.Log.Warn("guard: retrying a rule's write", "rule", id, "err", err)
			continue
		}
		delete(g.unsaved, id)
	}
	batch := map[string]store.GuardHits{}
	counts := map[string]int64{}
	for id, r := range g.rules {
		if h := r.c.hits.Load(); h != r.c.saved && !g.unsaved[id] {
			x := store.GuardHits{Delta: h - r.c.saved}
			if t := r.c.lastHit.Load(); t != 0 {
				x.LastHit = time.Unix(0, t)
			}
			batch[id] = x
			counts[id] = h
		}
	}
	if err := g.st.AddGuardHits(ctx, batch); err != nil {
		g.o.Log.Warn("guard: could not record rules' hits", "err", err)
		return
	}
	for id, h := range counts {
		g.rules[id].c.saved = h
	}
}

func (g *Guard) tick() {
	g.Sweep(context.Background())
	g.mu.Lock()
	if !g.closed {
		g.timer.Reset(sweepEvery)
	}
	g.mu.Unlock()
}

// Close writes the pending hits and stops the sweep.
func (g *Guard) Close() {
	g.mu.Lock()
	g.closed = true
	g.timer.Stop()
	g.mu.Unlock()
	g.Sweep(context.Background())
}

func (g *Guard) view(r *rule, now time.Time, withRecent bool) apitype.RuleView {
	v := apitype.RuleView{ID: r.id, Action: r.action, Match: r.match, Summary: Summary(r.match), Note: r.note,
		CreatedAt: r.created.Unix(), Hits: int(r.c.hits.Load()), Enforcing: g.o.Enforce}
	if r.expires != 0 {
		e := time.Unix(0, r.expires).Unix()
		v.ExpiresAt = &e
	}
	if t := r.c.lastHit.Load(); t != 0 {
		l := time.Unix(0, t).Unix()
		v.LastHit = &l
	}
	if withRecent {
		v.HitsRecent = r.c.recent.read(now.Unix() / BucketSecs)
	}
	return v
}

// Views returns the rules in force, oldest first; withRecent adds each
// one's per-minute hits over the last hour (GET /security).
func (g *Guard) Views(withRecent bool) []apitype.RuleView {
	now := g.o.Now()
	out := []apitype.RuleView{}
	for _, r := range g.snap.Load().all {
		if r.live(now.UnixNano()) {
			out = append(out, g.view(r, now, withRecent))
		}
	}
	return out
}

// Get returns the rule id in force.
func (g *Guard) Get(id string) (apitype.RuleView, bool) {
	now := g.o.Now()
	for _, r := range g.snap.Load().all {
		if r.id == id && r.live(now.UnixNano()) {
			return g.view(r, now, false), true
		}
	}
	return apitype.RuleView{}, false
}

// Len is the number of rules in force.
func (g *Guard) Len() int {
	now := g.o.Now().UnixNano()
	n := 0
	for _, r := range g.snap.Load().all {
		if r.live(now) {
			n++
		}
	}
	return n
}

// Stats reports the rules and what they refused and exempted since berth
// started, with the per-minute series of the last hour.
func (g *Guard) Stats() apitype.GuardStats {
	minute := g.o.Now().Unix() / BucketSecs
	return apitype.GuardStats{
		Rules: g.Len(), Blocked: int(g.blocked.Load()), Exempted: int(g.exempted.Load()), Enforcing: g.o.Enforce,
		BlockedRecent: g.blockedRecent.read(minute), ExemptedRecent: g.exemptedRecent.read(minute),
		HitsBucketSecs: BucketSecs, HitsWindowSecs: WindowSecs,
	}
}

// Reload brings the rules in force in line with the store, without
// writing it: on a store several hosts share, the rules another host
// added, changed or deleted, and the hits it counted. A rule that stays
// keeps its counters, moved on by the hits the store has beyond those
// this host saved; a rule whose write failed here (retried by Sweep) keeps
// this host's version. A stored rule that does not load is logged and
// skipped. It serialises with this host's writes.
func (g *Guard) Reload(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	rows, err := g.st.GuardRules(ctx)
	if err != nil {
		return fmt.Errorf("guard: reload rules: %w", err)
	}
	next := make(map[string]*rule, len(rows))
	republish := false
	for _, row := range rows {
		if _, pending := g.unsaved[row.ID]; pending {
			continue
		}
		old := g.rules[row.ID]
		r, err := fromRow(row)
		if err != nil {
			g.o.Log.Error("guard: skipping a stored rule that does not load", "rule", row.ID, "err", err)
			if old != nil {
				next[row.ID] = old
			}
			continue
		}
		if old == nil {
			next[r.id], republish = r, true
			continue
		}
		// Another host's hits (or its version of the count).
		if d := row.Hits - old.c.saved; d != 0 {
			old.c.hits.Add(d)
			old.c.saved = row.Hits
		}
		if t := r.c.lastHit.Load(); t > old.c.lastHit.Load() {
			old.c.lastHit.Store(t)
		}
		if r.note == old.note && r.expires == old.expires && r.created.Equal(old.created) {
			next[r.id] = old
			continue
		}
		r.c = old.c
		next[r.id], republish = r, true
	}
	for id, put := range g.unsaved {
		if r := g.rules[id]; put && r != nil {
			next[id] = r
		}
	}
	if len(next) != len(g.rules) {
		republish = true
	}
	g.rules = next
	if republish {
		g.publishLocked()
	}
	return nil
}
