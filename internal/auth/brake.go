package auth

import (
	"container/list"
	"context"
	"net"
	"net/netip"
	"sync"
	"time"
)

// BrakeConfig tunes the Brake. Zero fields take the defaults shown.
type BrakeConfig struct {
	// SlowAfter is how many failures an address may make before each
	// further failure is answered late (default 3).
	SlowAfter int
	// SlowStep is the delay added per failure past SlowAfter (default
	// 250ms), up to MaxSlow (default 2s).
	SlowStep time.Duration
	MaxSlow  time.Duration
	// Threshold is the failure count that locks an address out (default 10).
	Threshold int
	// Lockout is how long the first lockout lasts (default 1m); each
	// lockout after it within Window doubles, up to MaxLockout (default 15m).
	Lockout    time.Duration
	MaxLockout time.Duration
	// Window is how long an address's failures are remembered after its
	// last one (default 15m).
	Window time.Duration
	// MaxClients bounds the number of addresses tracked (default 16384);
	// beyond it the least recently seen address is forgotten.
	MaxClients int

	// TargetThreshold is the failure count, from all addresses together,
	// that locks a target (the operator account, one token id) out for
	// Lockout, doubling like an address's (default 20).
	TargetThreshold int
	// Pace is how often a locked-out address or target may have a
	// credential evaluated by the admin gate: each failure holds the next
	// evaluation back this long (default 2s). A success holds nothing.
	Pace time.Duration
	// MaxWait bounds how long a request waits for its turn (default 3 ×
	// Pace), and MaxWaiters how many may wait per address or target
	// (default 4); past either, the answer is 429 without evaluation.
	MaxWait    time.Duration
	MaxWaiters int
	// MaxTargets bounds the number of targets tracked (default 4096), and
	// MaxKnown the addresses remembered per target as having proven its
	// credential (default 16), each for KnownFor (default 7 days).
	MaxTargets int
	MaxKnown   int
	KnownFor   time.Duration
}

func (c *BrakeConfig) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	seti := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	seti(&c.SlowAfter, 3)
	set(&c.SlowStep, 250*time.Millisecond)
	set(&c.MaxSlow, 2*time.Second)
	seti(&c.Threshold, 10)
	set(&c.Lockout, time.Minute)
	set(&c.MaxLockout, 15*time.Minute)
	set(&c.Window, 15*time.Minute)
	seti(&c.MaxClients, 16384)
	seti(&c.TargetThreshold, 20)
	set(&c.Pace, 2*time.Second)
	set(&c.MaxWait, 3*c.Pace)
	seti(&c.MaxWaiters, 4)
	seti(&c.MaxTargets, 4096)
	seti(&c.MaxKnown, 16)
	set(&c.KnownFor, 7*24*time.Hour)
}

// Brake counts failed credentials per client address and per target, and
// decides when to slow them down and when to lock them out. Its counting
// methods take the time as an argument, so its decisions are plain
// functions of the history. Safe for concurrent use.
//
// Blocked and Fail are the address-only brake (the Computer API's grants
// use it: a locked-out address is refused unevaluated). The admin gate uses
// Admit, Failed and Succeeded, which add targets and pacing; see the
// package documentation.
type Brake struct {
	cfg BrakeConfig

	mu      sync.Mutex // guards everything below
	m       map[netip.Prefix]*list.Element
	lru     *list.List // of *brakeEntry, most recently seen first
	targets map[string]*list.Element
	tlru    *list.List // of *targetEntry, most recently seen first
}

// counter is the failure history of an address or a target.
type counter struct {
	failures    int
	lockouts    int
	lockedUntil time.Time
	last        time.Time
	turn        *turn // while locked out: whose turn it is to be evaluated
}

type brakeEntry struct {
	key netip.Prefix
	counter
}

type targetEntry struct {
	key string
	counter
	known map[netip.Prefix]time.Time // addresses that proved the credential, and when
}

// NewBrake returns a Brake with cfg (zero fields defaulted).
func NewBrake(cfg BrakeConfig) *Brake {
	cfg.defaults()
	return &Brake{cfg: cfg, m: map[netip.Prefix]*list.Element{}, lru: list.New(), targets: map[string]*list.Element{}, tlru: list.New()}
}

// ClientKey returns the brake key of a request's socket peer (its
// RemoteAddr): the address itself for IPv4, its /64 for IPv6, since one
// IPv6 client usually holds a whole /64.
func ClientKey(remoteAddr string) (netip.Prefix, bool) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}, false
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32), true
	}
	p, _ := a.Prefix(64)
	return p, true
}

// Blocked reports whether key is locked out at now, and for how much
// longer.
func (b *Brake) Blocked(key netip.Prefix, now time.Time) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	el := b.m[key]
	if el == nil {
		return 0, false
	}
	e := el.Value.(*brakeEntry)
	if now.Before(e.lockedUntil) {
		return e.lockedUntil.Sub(now), true
	}
	return 0, false
}

// Fail records a failed credential from key at now. It returns how long
// the answer to this failure should be held back (zero for the first few),
// and whether this failure locked the address out.
func (b *Brake) Fail(key netip.Prefix, now time.Time) (delay time.Duration, locked bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.source(key, true)
	if b.count(&e.counter, b.cfg.Threshold, now) {
		return 0, true
	}
	if over := e.failures - b.cfg.SlowAfter; over > 0 {
		delay = min(time.Duration(over)*b.cfg.SlowStep, b.cfg.MaxSlow)
	}
	return delay, false
}

// source returns the entry of an address, creating it (and forgetting the
// least recently seen one past MaxClients) when create is set.
func (b *Brake) source(key netip.Prefix, create bool) *brakeEntry {
	if el := b.m[key]; el != nil {
		b.lru.MoveToFront(el)
		return el.Value.(*brakeEntry)
	}
	if !create {
		return nil
	}
	for b.lru.Len() >= b.cfg.MaxClients {
		old := b.lru.Back()
		b.lru.Remove(old)
		delete(b.m, old.Value.(*brakeEntry).key)
	}
	e := &brakeEntry{key: key}
	b.m[key] = b.lru.PushFront(e)
	return e
}

// target is source for targets, bounded by MaxTargets.
func (b *Brake) target(key string, create bool) *targetEntry {
	if el := b.targets[key]; el != nil {
		b.tlru.MoveToFront(el)
		return el.Value.(*targetEntry)
	}
	if !create {
		return nil
	}
	for b.tlru.Len() >= b.cfg.MaxTargets {
		old := b.tlru.Back()
		b.tlru.Remove(old)
		delete(b.targets, old.Value.(*targetEntry).key)
	}
	e := &targetEntry{key: key}
	b.targets[key] = b.tlru.PushFront(e)
	return e
}

// count records one failure at now and reports whether it locked the
// counter out: at threshold failures it is locked for Lockout, doubling
// with each lockout within Window, up to MaxLockout.
func (b *Brake) count(c *counter, threshold int, now time.Time) bool {
	if now.Sub(c.last) > b.cfg.Window {
		c.failures, c.lockouts = 0, 0
	}
	c.last = now
	c.failures++
	if c.failures < threshold {
		return false
	}
	d := b.cfg.Lockout << min(c.lockouts, 30)
	if d <= 0 || d > b.cfg.MaxLockout {
		d = b.cfg.MaxLockout
	}
	c.lockedUntil = now.Add(d)
	c.lockouts++
	c.failures = 0
	return true
}

// Len is the number of addresses tracked.
func (b *Brake) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lru.Len()
}

// turn serialises the evaluations of one locked-out address or target:
// holding its token is being evaluated (and, after a failure, waiting out
// Pace).
type turn struct {
	ch      chan struct{} // capacity 1
	waiters int           // guarded by Brake.mu
}

func (c *counter) turnOf() *turn {
	if c.turn == nil {
		c.turn = &turn{ch: make(chan struct{}, 1)}
	}
	return c.turn
}

// A Ticket is a request's admission to have its credential evaluated: the
// turns it holds of locked-out counters. Release it when the answer is
// decided (after a failure's delay, so the next evaluation waits Pace).
type Ticket struct {
	held []*turn
}

// Release gives the turns back. Nil-safe; idempotent.
func (t *Ticket) Release() {
	if t == nil {
		return
	}
	for _, h := range t.held {
		<-h.ch
	}
	t.held = nil
}

// Admit decides whether a credential presented by src (keyed: src is a
// known address) for target ("" when the credential names none) may be
// evaluated now. Nothing locked out: at once. A locked-out address, or a
// locked-out target the address has not proven itself on, admits one
// evaluation at a time, each failure holding the next back for Pace; a
// request waits up to MaxWait for its turn behind at most MaxWaiters
// others. ok false means no turn came: answer 429 without evaluating.
func (b *Brake) Admit(ctx context.Context, src netip.Prefix, keyed bool, target string, now time.Time) (t *Ticket, ok bool) {
	var need []*turn
	b.mu.Lock()
	if keyed {
		if e := b.source(src, false); e != nil && now.Before(e.lockedUntil) {
			need = append(need, e.turnOf())
		}
	}
	if target != "" {
		if e := b.target(target, false); e != nil && now.Before(e.lockedUntil) && !(keyed && b.known(e, src, now)) {
			need = append(need, e.turnOf())
		}
	}
	for _, h := range need {
		if h.waiters >= b.cfg.MaxWaiters {
			b.mu.Unlock()
			return nil, false
		}
	}
	for _, h := range need {
		h.waiters++
	}
	b.mu.Unlock()
	t = &Ticket{}
	if len(need) > 0 {
		timer := time.NewTimer(b.cfg.MaxWait)
		defer timer.Stop()
	wait:
		for _, h := range need { // addresses before targets, so no two requests wait on each other
			select {
			case h.ch <- struct{}{}:
				t.held = append(t.held, h)
			case <-timer.C:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		b.mu.Lock()
		for _, h := range need {
			h.waiters--
		}
		b.mu.Unlock()
		if len(t.held) < len(need) {
			t.Release()
			return nil, false
		}
	}
	return t, true
}

// Failed records a credential from src for target that did not verify.
// It returns how long to hold the answer back: the address's slowdown,
// and at least Pace while the address or target is locked out (so a
// locked-out counter sees one evaluated failure per Pace); and whether it
// is locked out, which the gate answers 429 instead of 401.
func (b *Brake) Failed(src netip.Prefix, keyed bool, target string, now time.Time) (delay time.Duration, locked bool) {
	if keyed {
		delay, _ = b.Fail(src, now)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if keyed {
		if e := b.source(src, false); e != nil && now.Before(e.lockedUntil) {
			locked = true
		}
	}
	if target != "" {
		e := b.target(target, true)
		b.count(&e.counter, b.cfg.TargetThreshold, now)
		if now.Before(e.lockedUntil) && !(keyed && b.known(e, src, now)) {
			locked = true
		}
	}
	if locked {
		delay = max(delay, b.cfg.Pace)
	}
	return delay, locked
}

// Succeeded records that src proved target's credential: from now on (for
// KnownFor) src is not held back by target's lockout, only by its own.
func (b *Brake) Succeeded(src netip.Prefix, keyed bool, target string, now time.Time) {
	if !keyed || target == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.target(target, true)
	if e.known == nil {
		e.known = map[netip.Prefix]time.Time{}
	}
	e.known[src] = now
	for len(e.known) > b.cfg.MaxKnown {
		var oldest netip.Prefix
		var at time.Time
		for k, t := range e.known {
			if at.IsZero() || t.Before(at) {
				oldest, at = k, t
			}
		}
		delete(e.known, oldest)
	}
}

func (b *Brake) known(e *targetEntry, src netip.Prefix, now time.Time) bool {
	at, ok := e.known[src]
	return ok && now.Sub(at) <= b.cfg.KnownFor
}
