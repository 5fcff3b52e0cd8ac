package metrics

import "sync/atomic"

// StatusCounts counts proxied requests by response class. Its methods are
// safe for concurrent use and lock-free. The zero value is ready to use.
//
// There is no stored total: Snapshot derives it from the classes, which
// saves an atomic add per request on the proxy's hot path.
type StatusCounts struct {
	c2xx, c3xx, c4xx, c5xx atomic.Uint64
	errors                 atomic.Uint64
	other                  atomic.Uint64 // 1xx finals and nonsense codes: in total, in no class
}

// Record counts one request that got an upstream response with the given
// status code. Codes outside 200–599 count towards the total only.
func (c *StatusCounts) Record(status int) {
	switch {
	case status >= 200 && status < 300:
		c.c2xx.Add(1)
	case status >= 300 && status < 400:
		c.c3xx.Add(1)
	case status >= 400 && status < 500:
		c.c4xx.Add(1)
	case status >= 500 && status < 600:
		c.c5xx.Add(1)
	default:
		c.other.Add(1)
	}
}

// RecordError counts one request that got no upstream response at all:
// connect failure, upstream reset before headers, or the client going away
// first. It counts towards the total as well.
func (c *StatusCounts) RecordError() { c.errors.Add(1) }

// StatusCountsSnapshot is a point-in-time copy of StatusCounts, field for
// field the wire type StatusCounts.
type StatusCountsSnapshot struct {
	// Total is every request recorded: the classes, Errors, and any status
	// outside 200–599.
	Total                  uint64
	C2xx, C3xx, C4xx, C5xx uint64
	Errors                 uint64
}

// Snapshot copies the counters. Each is read atomically, but not all at
// the same instant, so under load the classes may describe slightly
// different moments; Total is always their exact sum plus the unclassified.
func (c *StatusCounts) Snapshot() StatusCountsSnapshot {
	s := StatusCountsSnapshot{
		C2xx:   c.c2xx.Load(),
		C3xx:   c.c3xx.Load(),
		C4xx:   c.c4xx.Load(),
		C5xx:   c.c5xx.Load(),
		Errors: c.errors.Load(),
	}
	s.Total = s.C2xx + s.C3xx + s.C4xx + s.C5xx + s.Errors + c.other.Load()
	return s
}

// Add returns the field-wise sum of s and o, for roll-ups.
func (s StatusCountsSnapshot) Add(o StatusCountsSnapshot) StatusCountsSnapshot {
	return StatusCountsSnapshot{
		Total:  s.Total + o.Total,
		C2xx:   s.C2xx + o.C2xx,
		C3xx:   s.C3xx + o.C3xx,
		C4xx:   s.C4xx + o.C4xx,
		C5xx:   s.C5xx + o.C5xx,
		Errors: s.Errors + o.Errors,
	}
}
