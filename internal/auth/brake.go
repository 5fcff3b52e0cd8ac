package auth

import (
	"container/list"
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
}

// Brake counts failed credentials per client address and decides when to
// slow an address down and when to refuse it outright. Its methods take the
// time as an argument, so its decisions are plain functions of the history.
// Safe for concurrent use.
type Brake struct {
	cfg BrakeConfig

	mu  sync.Mutex // guards m and lru
	m   map[netip.Prefix]*list.Element
	lru *list.List // of *brakeEntry, most recently seen first
}

type brakeEntry struct {
	key         netip.Prefix
	failures    int
	lockouts    int
	lockedUntil time.Time
	last        time.Time
}

// NewBrake returns a Brake with cfg (zero fields defaulted).
func NewBrake(cfg BrakeConfig) *Brake {
	cfg.defaults()
	return &Brake{cfg: cfg, m: map[netip.Prefix]*list.Element{}, lru: list.New()}
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
	var e *brakeEntry
	if el := b.m[key]; el != nil {
		e = el.Value.(*brakeEntry)
		b.lru.MoveToFront(el)
		if now.Sub(e.last) > b.cfg.Window {
			e.failures, e.lockouts = 0, 0
		}
	} else {
		for b.lru.Len() >= b.cfg.MaxClients {
			old := b.lru.Back()
			b.lru.Remove(old)
			delete(b.m, old.Value.(*brakeEntry).key)
		}
		e = &brakeEntry{key: key}
		b.m[key] = b.lru.PushFront(e)
	}
	e.last = now
	e.failures++
	if e.failures >= b.cfg.Threshold {
		d := b.cfg.Lockout << min(e.lockouts, 30)
		if d <= 0 || d > b.cfg.MaxLockout {
			d = b.cfg.MaxLockout
		}
		e.lockedUntil = now.Add(d)
		e.lockouts++
		e.failures = 0
		return 0, true
	}
	if over := e.failures - b.cfg.SlowAfter; over > 0 {
		delay = min(time.Duration(over)*b.cfg.SlowStep, b.cfg.MaxSlow)
	}
	return delay, false
}

// Len is the number of addresses tracked.
func (b *Brake) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lru.Len()
}
