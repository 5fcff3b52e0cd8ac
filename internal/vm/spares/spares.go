// Package spares is the skeleton the drivers' spare sandboxes share: idle
// sandboxes (a process driver's agents, a container driver's created
// containers) kept ready per kind, made in the background, handed to a
// Start that would otherwise make one, and ended at Close. What a spare is,
// how it is made, assigned and removed stays with its driver.
package spares

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"
)

// MaxFailures is how many spares in a row may fail to be made before the
// pool stops making them (replicas then start cold).
const MaxFailures = 3

// Config is what a driver tells its Pool.
type Config[K comparable, S any] struct {
	// N is how many spares of a kind the pool keeps ready or being made.
	N int
	// Drop ends a spare and removes everything of it.
	Drop func(s S)
	// Failed is told of a spare that could not be made, and how many
	// failed in a row (MaxFailures ends the making). Nil ignores them.
	Failed func(k K, err error, failures int)
}

// Pool keeps spares of kinds K. It is safe for concurrent use.
type Pool[K comparable, S any] struct {
	c Config[K, S]

	mu       sync.Mutex
	ready    map[K][]S // oldest first
	filling  map[K]int // being made
	failures int       // in a row
	closed   bool
	changed  chan struct{}  // closed and replaced when a fill ends
	wg       sync.WaitGroup // fills and drops under way
}

// New returns an empty pool.
func New[K comparable, S any](c Config[K, S]) *Pool[K, S] {
	return &Pool[K, S]{c: c, ready: map[K][]S{}, filling: map[K]int{}, changed: make(chan struct{})}
}

// N is how many spares of a kind the pool keeps.
func (p *Pool[K, S]) N() int { return p.c.N }

// Take returns a ready spare of kind k for which usable holds, oldest
// first; those for which it does not (dead, made for something else) are
// dropped in the background. With wait > 0 it waits up to wait (and while
// ctx lasts) for a spare being made.
func (p *Pool[K, S]) Take(ctx context.Context, k K, wait time.Duration, usable func(S) bool) (S, bool) {
	var zero S
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		p.mu.Lock()
		for len(p.ready[k]) > 0 {
			s := p.ready[k][0]
			p.ready[k] = p.ready[k][1:]
			if usable(s) {
				p.mu.Unlock()
				return s, true
			}
			p.dropLocked(s)
		}
		if wait <= 0 || p.filling[k] == 0 || p.closed {
			p.mu.Unlock()
			return zero, false
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return zero, false
		case <-deadline:
			return zero, false
		}
	}
}

// dropLocked drops s in the background; Close waits for it.
func (p *Pool[K, S]) dropLocked(s S) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.c.Drop(s)
	}()
}

// Fill makes spares of kind k with mk, in the background, until N are
// ready or being made, unless the pool is closed or failing. wanted (nil:
// always), asked with the pool's lock held, says whether k is still
// wanted: a spare of a kind no longer wanted is dropped once made.
func (p *Pool[K, S]) Fill(k K, wanted func(K) bool, mk func() (S, error)) {
	want := func() bool { return wanted == nil || wanted(k) }
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && p.failures < MaxFailures && want() && len(p.ready[k])+p.filling[k] < p.c.N {
		p.filling[k]++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			s, err := mk()
			p.mu.Lock()
			p.filling[k]--
			drop := false
			switch {
			case err != nil:
				p.failures++
			case p.closed || !want():
				drop = true
			default:
				p.failures = 0
				p.ready[k] = append(p.ready[k], s)
			}
			failures := p.failures
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
			if err != nil && p.c.Failed != nil {
				p.c.Failed(k, err, failures)
			}
			if drop {
				p.c.Drop(s)
			}
		}()
	}
}

// Evict drops the ready spares of kind k.
func (p *Pool[K, S]) Evict(k K) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.ready[k] {
		p.dropLocked(s)
	}
	delete(p.ready, k)
}

// Ready returns the ready spares of kind k, oldest first.
func (p *Pool[K, S]) Ready(k K) []S {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]S(nil), p.ready[k]...)
}

// Close stops making spares, waits for those being made (and dropped),
// and drops every ready one.
func (p *Pool[K, S]) Close() {
	p.mu.Lock()
	p.closed = true
	var all []S
	for _, ss := range p.ready {
		all = append(all, ss...)
	}
	p.ready = map[K][]S{}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.wg.Wait()
	for _, s := range all {
		p.c.Drop(s)
	}
}

// Left lists the names of the spare directories under root, those whose
// names start with prefix, for a driver to reap what a Pool (perhaps of a
// previous berth) left. An unreadable root has none.
func Left(root, prefix string) []string {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names
}
