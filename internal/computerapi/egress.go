package computerapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/egress"
	"github.com/berth-dev/berth/internal/web"
)

// Egress points the processes the API starts at the egress proxy (package
// egress's *Proxy).
type Egress interface {
	Env(computerID string, s egress.Subject) map[string]string
}

// withEgress returns env plus the proxy variables of c's subject: the
// grant the call works under, or the admin caller's provenance (whose
// work the proxy denies all egress: only grants carry a policy). The
// proxy variables override the caller's own; NO_PROXY is the caller's
// when given.
func (a *API) withEgress(c *call, env map[string]string) map[string]string {
	if a.o.Egress == nil {
		return env
	}
	s := egress.Subject{Provenance: egress.Provenance{Actor: c.prov.Actor, Via: c.prov.Via}}
	if c.grant != nil {
		s = egress.Subject{GrantID: c.grant.ID}
	}
	out := make(map[string]string, len(env)+6)
	for k, v := range env {
		out[k] = v
	}
	for k, v := range a.o.Egress.Env(c.id, s) {
		if _, given := env[k]; given && (k == "NO_PROXY" || k == "no_proxy") {
			continue
		}
		out[k] = v
	}
	return out
}

// blocked answers 429 with Retry-After when the client's address is
// locked out by the brake; it is asked only about grants that did not
// verify, so a locked-out address learns nothing from its guesses and a
// valid grant is never refused.
func (a *API) blocked(w http.ResponseWriter, r *http.Request) bool {
	key, ok := auth.ClientKey(r.RemoteAddr)
	if !ok || a.o.Brake == nil {
		return false
	}
	left, locked := a.o.Brake.Blocked(key, a.o.Now())
	if !locked {
		return false
	}
	secs := int64((left + time.Second - 1) / time.Second)
	web.WriteError(a.o.Log, w, r, &web.Error{
		Status:  http.StatusTooManyRequests,
		Message: fmt.Sprintf("too many failed credentials from this address; try again in %d seconds", secs),
		Header:  http.Header{"Retry-After": {strconv.FormatInt(secs, 10)}},
	})
	return true
}

// fail counts a grant that did not verify (malformed, forged, unknown,
// expired, revoked, or older than its Computer) as a failed credential of
// the client's address, in the brake the admin gate shares, and holds the
// answer back as long as the brake says. A valid grant used beyond its
// reach (another Computer, an action it lacks) is a 403 and does not
// count: its holder proved a credential, not guessed one.
func (a *API) fail(r *http.Request) {
	key, ok := auth.ClientKey(r.RemoteAddr)
	if !ok || a.o.Brake == nil {
		return
	}
	delay, locked := a.o.Brake.Fail(key, a.o.Now())
	if locked {
		a.o.Log.Info("grant failures locked an address out", "peer", key)
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
	}
}
