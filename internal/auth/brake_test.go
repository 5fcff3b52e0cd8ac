package auth

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// gateFixture is a gated Gate with the default brake in front of a handler
// that answers 200.
type gateFixture struct {
	g *Gate
	h http.Handler
}

func newGateFixture(cfg BrakeConfig) *gateFixture {
	g := New(Config{Password: "right", Brake: NewBrake(cfg)})
	return &gateFixture{g: g, h: g.Wrap(View, NoWall, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))}
}

func (f *gateFixture) try(addr, pass string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/whoami", nil)
	r.RemoteAddr = addr + ":40000"
	r.SetBasicAuth("admin", pass)
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// TestBrakeCorrectCredentialAlwaysPasses: an address that made 50 wrong
// guesses is locked out — its wrong guesses get 429 — yet the operator's
// right password from it still passes, at once and every time.
func TestBrakeCorrectCredentialAlwaysPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newGateFixture(BrakeConfig{})
		codes := map[int]int{}
		for i := range 50 {
			codes[f.try("192.0.2.1", fmt.Sprint("guess", i)).Code]++
		}
		if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusUnauthorized] == 0 || len(codes) != 2 {
			t.Fatalf("50 wrong guesses answered %v; want 401s, then 429s once locked out", codes)
		}
		for i := range 3 {
			start := time.Now()
			if w := f.try("192.0.2.1", "right"); w.Code != http.StatusOK {
				t.Fatalf("right password #%d from the locked-out address: %d %s", i+1, w.Code, w.Body)
			}
			if waited := time.Since(start); waited > f.g.cfg.Brake.cfg.Pace {
				t.Errorf("right password #%d waited %v, more than one pace", i+1, waited)
			}
		}
		if w := f.try("192.0.2.1", "wrong again"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Errorf("a wrong guess after the right one: %d %q, want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
		}
	})
}

// TestBrakeBoundsGuessesAcrossAddresses: 200 guesses at the operator
// account from 20 addresses (10 each, under every address's own
// threshold) are bounded by the per-target brake: a burst up to the
// target's threshold, then one evaluation per pace. The operator, from an
// address that proved the password before, is not held back by it.
func TestBrakeBoundsGuessesAcrossAddresses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := BrakeConfig{}
		cfg.defaults()
		f := newGateFixture(BrakeConfig{})
		if w := f.try("198.51.100.7", "right"); w.Code != http.StatusOK {
			t.Fatalf("operator: %d", w.Code)
		}
		start := time.Now()
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		for a := range 20 {
			wg.Go(func() {
				for i := range 10 {
					c := f.try(fmt.Sprintf("192.0.2.%d", a+1), fmt.Sprintf("guess-%d-%d", a, i)).Code
					mu.Lock()
					codes[c]++
					mu.Unlock()
				}
			})
		}
		// Midway, the operator logs in from its usual address.
		time.Sleep(3 * cfg.Pace)
		if w := f.try("198.51.100.7", "right"); w.Code != http.StatusOK {
			t.Errorf("operator during the attack: %d %s", w.Code, w.Body)
		}
		wg.Wait()
		elapsed := time.Since(start)
		evaluated := int(f.g.evaluated.Load()) - 2 // the operator's two
		if codes[http.StatusOK] != 0 || codes[http.StatusUnauthorized]+codes[http.StatusTooManyRequests] != 200 {
			t.Fatalf("answers %v", codes)
		}
		// At most the threshold, plus the 20 requests in flight when it
		// was reached, plus one per pace after.
		if bound := cfg.TargetThreshold + 20 + int(elapsed/cfg.Pace) + 1; evaluated > bound {
			t.Errorf("%d of 200 guesses evaluated over %v; want at most %d", evaluated, elapsed, bound)
		}
		if n := codes[http.StatusUnauthorized]; n > cfg.TargetThreshold+20 {
			t.Errorf("%d guesses answered 401 (evaluated before the lockout); want at most %d", n, cfg.TargetThreshold+20)
		}
		// An address that never proved the password gets its turn once
		// the attack is over.
		time.Sleep(cfg.Pace)
		if w := f.try("203.0.113.9", "right"); w.Code != http.StatusOK {
			t.Errorf("operator from a new address after the attack: %d %s", w.Code, w.Body)
		}
	})
}
