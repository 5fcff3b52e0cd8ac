// Package clocktest is a clock tests move by hand: code under test is handed
// Clock.Now as its time source, and the test moves it with Add and Set, so
// no test waits for a deadline, an expiry or a backoff to pass.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a time source that stands still until it is moved. It is safe
// for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a Clock that reads t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time; pass the method value (c.Now) as a func() time.Time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d (back when d is negative).
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
