package ratelimit

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/clocktest"
	"github.com/berth-dev/berth/internal/web"
)

// newClock is a clock the tests move by hand, at a fixed start.
func newClock() *clocktest.Clock {
	return clocktest.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
}

func mustLimiter(t testing.TB, rl apitype.RateLimit, c *clocktest.Clock) *Limiter {
	t.Helper()
	var now func() time.Time
	if c != nil {
		now = c.Now
	}
	l, err := NewLimiter(rl, now)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var (
	addrA = netip.MustParseAddr("192.0.2.1")
	addrB = netip.MustParseAddr("192.0.2.2")
	addrC = netip.MustParseAddr("192.0.2.3")
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    apitype.RateLimit
		want  apitype.RateLimit
		field string // the field an error names; "" for none
	}{
		{"rate alone", apitype.RateLimit{RequestsPerSec: 10}, apitype.RateLimit{RequestsPerSec: 10, Burst: 10, MaxClients: DefaultMaxClients}, ""},
		{"fractional rate", apitype.RateLimit{RequestsPerSec: 0.5}, apitype.RateLimit{RequestsPerSec: 0.5, Burst: 1, MaxClients: DefaultMaxClients}, ""},
		{"ceil", apitype.RateLimit{RequestsPerSec: 2.1, MaxClients: 7}, apitype.RateLimit{RequestsPerSec: 2.1, Burst: 3, MaxClients: 7}, ""},
		{"burst kept", apitype.RateLimit{RequestsPerSec: 2, Burst: 50}, apitype.RateLimit{RequestsPerSec: 2, Burst: 50, MaxClients: DefaultMaxClients}, ""},
		{"concurrency alone", apitype.RateLimit{ConcurrentPerClient: 3}, apitype.RateLimit{ConcurrentPerClient: 3, MaxClients: DefaultMaxClients}, ""},
		{"at the bounds", apitype.RateLimit{RequestsPerSec: 1e6, Burst: 1e6, ConcurrentPerClient: 1e5, MaxClients: 1e6}, apitype.RateLimit{RequestsPerSec: 1e6, Burst: 1e6, ConcurrentPerClient: 1e5, MaxClients: 1e6}, ""},
		{"neither", apitype.RateLimit{MaxClients: 5}, apitype.RateLimit{}, "requests_per_sec"},
		{"negative rate", apitype.RateLimit{RequestsPerSec: -1}, apitype.RateLimit{}, "requests_per_sec"},
		{"rate too high", apitype.RateLimit{RequestsPerSec: 1e6 + 1}, apitype.RateLimit{}, "requests_per_sec"},
		{"negative burst", apitype.RateLimit{RequestsPerSec: 1, Burst: -1}, apitype.RateLimit{}, "burst"},
		{"burst too high", apitype.RateLimit{RequestsPerSec: 1, Burst: 1e6 + 1}, apitype.RateLimit{}, "burst"},
		{"burst without rate", apitype.RateLimit{Burst: 3, ConcurrentPerClient: 1}, apitype.RateLimit{}, "burst"},
		{"negative concurrency", apitype.RateLimit{RequestsPerSec: 1, ConcurrentPerClient: -1}, apitype.RateLimit{}, "concurrent_per_client"},
		{"concurrency too high", apitype.RateLimit{ConcurrentPerClient: 1e5 + 1}, apitype.RateLimit{}, "concurrent_per_client"},
		{"negative max_clients", apitype.RateLimit{RequestsPerSec: 1, MaxClients: -1}, apitype.RateLimit{}, "max_clients"},
		{"max_clients too high", apitype.RateLimit{RequestsPerSec: 1, MaxClients: 1e6 + 1}, apitype.RateLimit{}, "max_clients"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Normalize(tc.in)
			if tc.field == "" {
				if err != nil || got != tc.want {
					t.Fatalf("Normalize(%+v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
				}
				return
			}
			var fe *web.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Fatalf("Normalize(%+v): err = %v, want a FieldError naming %s", tc.in, err, tc.field)
			}
			if _, err := NewLimiter(tc.in, nil); err == nil {
				t.Error("NewLimiter accepts what Normalize refuses")
			}
		})
	}
}

func TestKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::"},
		{"fe80::1%eth0", "fe80::"},
	} {
		if got := Key(netip.MustParseAddr(tc.in)); got != netip.MustParseAddr(tc.want) {
			t.Errorf("Key(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := Key(netip.Addr{}); got.IsValid() {
		t.Errorf("Key(invalid) = %s", got)
	}
}

func TestRate(t *testing.T) {
	c := newClock()
	l := mustLimiter(t, apitype.RateLimit{RequestsPerSec: 2, Burst: 3}, c)
	for i := range 3 {
		if ok, _ := l.Enter(addrA); !ok {
			t.Fatalf("request %d within the burst refused", i+1)
		}
	}
	// The bucket is empty: the next token is due in 500ms, said as 1s.
	if ok, after := l.Enter(addrA); ok || after != time.Second {
		t.Fatalf("past the burst: %v, Retry-After %v; want refused, 1s", ok, after)
	}
	if ok, _ := l.Enter(addrB); !ok {
		t.Fatal("another client is refused: buckets are per client")
	}
	// A refusal takes no token: after 500ms exactly one is due.
	c.Add(500 * time.Millisecond)
	if ok, _ := l.Enter(addrA); !ok {
		t.Fatal("refused with a token due")
	}
	if ok, _ := l.Enter(addrA); ok {
		t.Fatal("admitted with no token left")
	}
	// v4-mapped is the same client.
	if ok, _ := l.Enter(netip.MustParseAddr("::ffff:192.0.2.1")); ok {
		t.Fatal("the v4-mapped address of a limited client is admitted")
	}
}

// TestRetryAfterRoundsUp: the delay of a slow bucket's reservation, in
// whole seconds rounded up.
func TestRetryAfterRoundsUp(t *testing.T) {
	c := newClock()
	l := mustLimiter(t, apitype.RateLimit{RequestsPerSec: 0.25}, c) // a token every 4s
	if ok, _ := l.Enter(addrA); !ok {
		t.Fatal("first request refused")
	}
	if _, after := l.Enter(addrA); after != 4*time.Second {
		t.Errorf("Retry-After %v, want 4s", after)
	}
	c.Add(2500 * time.Millisecond)
	if _, after := l.Enter(addrA); after != 2*time.Second { // 1.5s left
		t.Errorf("Retry-After %v, want 2s", after)
	}
}

func TestConcurrency(t *testing.T) {
	l := mustLimiter(t, apitype.RateLimit{ConcurrentPerClient: 2}, nil)
	for range 2 {
		if ok, _ := l.Enter(addrA); !ok {
			t.Fatal("refused below the concurrency limit")
		}
	}
	if ok, after := l.Enter(addrA); ok || after != ConcurrencyRetryAfter {
		t.Fatalf("third in flight: %v, %v; want refused, %v", ok, after, ConcurrencyRetryAfter)
	}
	if ok, _ := l.Enter(addrB); !ok {
		t.Fatal("another client is refused")
	}
	l.Leave(addrA)
	if ok, _ := l.Enter(addrA); !ok {
		t.Fatal("refused after a request left")
	}
	// A Leave without an Enter undoes nothing it should not.
	l.Leave(addrC)
	l.Leave(addrB)
	l.Leave(addrB)
	if ok, _ := l.Enter(addrB); !ok {
		t.Fatal("a surplus Leave broke the count")
	}
	if ok, _ := l.Enter(addrB); !ok {
		t.Fatal("refused below the concurrency limit after surplus Leaves")
	}
	if ok, _ := l.Enter(addrB); ok {
		t.Fatal("a surplus Leave let a client past its limit")
	}
}

// TestConcurrencyRefusalTakesNoToken: a request refused for concurrency
// leaves the bucket as it was.
func TestConcurrencyRefusalTakesNoToken(t *testing.T) {
	l := mustLimiter(t, apitype.RateLimit{RequestsPerSec: 1, Burst: 2, ConcurrentPerClient: 1}, newClock())
	if ok, _ := l.Enter(addrA); !ok {
		t.Fatal("refused")
	}
	for range 5 {
		if ok, after := l.Enter(addrA); ok || after != ConcurrencyRetryAfter {
			t.Fatal("admitted past the concurrency limit")
		}
	}
	l.Leave(addrA)
	if ok, _ := l.Enter(addrA); !ok {
		t.Fatal("the refusals took the second token")
	}
}

// TestEviction: a client the LRU forgot starts with a full bucket.
func TestEviction(t *testing.T) {
	l := mustLimiter(t, apitype.RateLimit{RequestsPerSec: 1, MaxClients: 2}, newClock())
	l.Enter(addrA)
	if ok, _ := l.Enter(addrA); ok {
		t.Fatal("admitted past the burst")
	}
	l.Enter(addrB)
	l.Enter(addrC) // evicts A
	if n, busy := l.clientCount(); n != 2 || busy != 0 {
		t.Fatalf("%d clients (%d busy), want 2 (0)", n, busy)
	}
	if ok, _ := l.Enter(addrA); !ok {
		t.Fatal("a forgotten client does not start afresh")
	}
}

// TestEvictionKeepsInFlight: a client evicted with requests in flight is
// set aside with its count, so eviction never lets it past
// concurrent_per_client; it is forgotten once its last request left.
func TestEvictionKeepsInFlight(t *testing.T) {
	l := mustLimiter(t, apitype.RateLimit{ConcurrentPerClient: 1, MaxClients: 1}, nil)
	if ok, _ := l.Enter(addrA); !ok {
		t.Fatal("refused")
	}
	if ok, _ := l.Enter(addrB); !ok { // evicts A, in flight
		t.Fatal("refused")
	}
	if n, busy := l.clientCount(); n != 1 || busy != 1 {
		t.Fatalf("%d clients (%d busy), want 1 (1)", n, busy)
	}
	if ok, _ := l.Enter(addrA); ok { // A back (B set aside), still at its limit
		t.Fatal("an evicted client with a request in flight was admitted past its limit")
	}
	if ok, _ := l.Enter(addrB); ok {
		t.Fatal("B, set aside in flight, was admitted past its limit")
	}
	l.Leave(addrA)
	l.Leave(addrB)
	if n, busy := l.clientCount(); n != 1 || busy != 0 {
		t.Fatalf("after the leaves: %d clients (%d busy), want 1 (0)", n, busy)
	}
	for _, a := range []netip.Addr{addrA, addrB} {
		if ok, _ := l.Enter(a); !ok {
			t.Fatalf("%s refused once idle", a)
		}
		l.Leave(a)
	}
}

// TestConcurrentClients hammers a small LRU from many goroutines: no client
// ever has more than concurrent_per_client requests admitted at once, and
// every count returns to zero.
func TestConcurrentClients(t *testing.T) {
	const conc = 2
	l := mustLimiter(t, apitype.RateLimit{ConcurrentPerClient: conc, MaxClients: 3}, nil)
	addrs := make([]netip.Addr, 8)
	var inflight [8]atomic.Int32
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
	}
	var wg sync.WaitGroup
	var over atomic.Int32
	for g := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				k := (g + i) % len(addrs)
				if ok, _ := l.Enter(addrs[k]); !ok {
					continue
				}
				if inflight[k].Add(1) > conc {
					over.Add(1)
				}
				inflight[k].Add(-1)
				l.Leave(addrs[k])
			}
		})
	}
	wg.Wait()
	if n := over.Load(); n > 0 {
		t.Errorf("%d times a client had more than %d requests admitted", n, conc)
	}
	if _, busy := l.clientCount(); busy != 0 {
		t.Errorf("%d clients still set aside with nothing in flight", busy)
	}
	for _, a := range addrs {
		for range conc {
			if ok, _ := l.Enter(a); !ok {
				t.Fatalf("%s: a count did not return to zero", a)
			}
		}
	}
}

// TestEnterAllocs pins the hot path: a known client's Enter and Leave
// allocate nothing, refused or admitted.
func TestEnterAllocs(t *testing.T) {
	for _, rl := range []apitype.RateLimit{
		{RequestsPerSec: 1e6, Burst: 1e6, ConcurrentPerClient: 10},
		{ConcurrentPerClient: 10},
		{RequestsPerSec: 1e6},
	} {
		l := mustLimiter(t, rl, nil)
		v6 := netip.MustParseAddr("2001:db8::1")
		l.Enter(addrA)
		l.Leave(addrA)
		l.Enter(v6)
		l.Leave(v6)
		if n := testing.AllocsPerRun(1000, func() {
			if ok, _ := l.Enter(addrA); ok {
				l.Leave(addrA)
			}
			if ok, _ := l.Enter(v6); ok {
				l.Leave(v6)
			}
		}); n != 0 {
			t.Errorf("%+v: %v allocations per Enter+Leave of a known client, want 0", rl, n)
		}
	}
	// Refused by concurrency.
	l := mustLimiter(t, apitype.RateLimit{ConcurrentPerClient: 1}, nil)
	l.Enter(addrA)
	if n := testing.AllocsPerRun(1000, func() { l.Enter(addrA) }); n != 0 {
		t.Errorf("%v allocations per refusal, want 0", n)
	}
}

// BenchmarkEnter: Enter+Leave of one known client (alone, and from every
// P), and of a stream of distinct clients through a full LRU (each one
// new: an eviction and three allocations, its state, bucket and LRU
// entry).
func BenchmarkEnter(b *testing.B) {
	rl := apitype.RateLimit{RequestsPerSec: 1e6, Burst: 1e6, ConcurrentPerClient: 1e5}
	// A clock a microsecond on at every read: at 1e6 per second each
	// Enter finds the token it takes, so the admitted path is measured
	// (on the wall clock a fast loop empties even this bucket and
	// measures refusals).
	var ticks atomic.Int64
	base := time.Now()
	tick := func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * time.Microsecond) }
	limiter := func(b *testing.B, rl apitype.RateLimit) *Limiter {
		l, err := NewLimiter(rl, tick)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	b.Run("known", func(b *testing.B) {
		l := limiter(b, rl)
		b.ReportAllocs()
		for b.Loop() {
			if ok, _ := l.Enter(addrA); ok {
				l.Leave(addrA)
			}
		}
	})
	b.Run("known-parallel", func(b *testing.B) {
		l := limiter(b, rl)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if ok, _ := l.Enter(addrA); ok {
					l.Leave(addrA)
				}
			}
		})
	})
	b.Run("distinct", func(b *testing.B) {
		rl := rl
		rl.MaxClients = 1024
		l := limiter(b, rl)
		b.ReportAllocs()
		var a [4]byte
		i := uint32(0)
		for b.Loop() {
			i++
			a[0], a[1], a[2], a[3] = 10, byte(i>>16), byte(i>>8), byte(i)
			ip := netip.AddrFrom4(a)
			if ok, _ := l.Enter(ip); ok {
				l.Leave(ip)
			}
		}
	})
	b.Run("distinct-parallel", func(b *testing.B) {
		l := limiter(b, rl)
		var next atomic.Uint32
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := next.Add(1)
				ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
				if ok, _ := l.Enter(ip); ok {
					l.Leave(ip)
				}
			}
		})
	})
}
