package auth

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/web"
)

// Fleet tokens (`fleet: true`) are app-tokens valid on every host of a
// fleet. They are not kept in this host's store: the host that mints one
// publishes it — its grants and the SHA-256 of its secret, never the
// secret — to the fleet (FleetTokenStore, etcd through the composition
// root), and every host, the minting one included, holds the fleet's
// tokens as the fleet reports them (MirrorReset, MirrorPut, MirrorDelete).
// Verification is the same for both kinds: the hash of the presented
// secret, compared in constant time. A fleet token is changed on the host
// that minted it and revoked on any host; it outlives its host.

// FleetTokenStore is where fleet tokens are published. Each write returns
// the fleet's revision after it, which the mirror reaches once the write
// has come back through it.
type FleetTokenStore interface {
	PutFleetToken(ctx context.Context, t FleetToken) (rev int64, err error)
	// DeleteFleetToken returns ErrNoFleetToken when the fleet does not
	// hold the token.
	DeleteFleetToken(ctx context.Context, id string) (rev int64, err error)
}

// ErrNoFleetToken is FleetTokenStore.DeleteFleetToken's answer for a token
// the fleet does not hold.
var ErrNoFleetToken = errors.New("auth: no such fleet token")

// FleetToken is a fleet token as published: its grants (Token's Fleet and
// MirroredFrom are ignored), the hex SHA-256 of its secret, and the id of
// the host that minted it.
type FleetToken struct {
	Token
	SecretSHA256 string
	Host         string
}

// mirrorWait bounds how long a write waits for the mirror to catch up with
// it: past it the write has happened, and the mirror shows it when its
// watch catches up.
const mirrorWait = 5 * time.Second

// UseFleet makes ts publish fleet tokens to f as host self. Call it once,
// before serving.
func (ts *Tokens) UseFleet(f FleetTokenStore, self string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.fleet, ts.self = f, self
}

func (ts *Tokens) fleetStore() (FleetTokenStore, string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.fleet, ts.self
}

func errNoFleet() error {
	return &web.Error{Status: http.StatusConflict, Code: "fleet_not_configured",
		Message: "fleet tokens are valid on every host of a fleet, and this berth is not part of one: start it with --etcd ENDPOINTS (or --etcd-dev) to join one"}
}

// fleetEntry makes the in-memory entry of a published token.
func (ts *Tokens) fleetEntry(ft FleetToken) *tokenEntry {
	t := clone(ft.Token)
	t.Fleet, t.MirroredFrom = true, ""
	if ft.Host != ts.self {
		t.MirroredFrom = ft.Host
	}
	if t.Deployments == nil {
		t.Deployments = []string{}
	}
	return &tokenEntry{tok: t, hash: ft.SecretSHA256, fleet: true, host: ft.Host}
}

// MirrorReset replaces the fleet tokens held with all of them as of
// revision rev (the start of a watch, or its restart after it fell
// behind).
func (ts *Tokens) MirrorReset(rev int64, all []FleetToken) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	old := map[string]*tokenEntry{}
	for id, e := range ts.byID {
		if e.fleet {
			old[id] = e
			delete(ts.byID, id)
		}
	}
	for _, ft := range all {
		ts.mirrorPutLocked(ft, old[ft.ID])
	}
	ts.advanceLocked(rev)
}

// MirrorPut adds or changes one fleet token, written at revision rev.
func (ts *Tokens) MirrorPut(rev int64, ft FleetToken) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.mirrorPutLocked(ft, ts.byID[ft.ID])
	ts.advanceLocked(rev)
}

func (ts *Tokens) mirrorPutLocked(ft FleetToken, prev *tokenEntry) {
	if prev != nil && !prev.fleet {
		// A local token of the same id (48 random bits make it all but
		// impossible) keeps its place: a fleet write cannot replace it.
		ts.cfg.Log.Warn("a fleet token has the id of a local token; the fleet's is ignored here", "token", ft.ID)
		return
	}
	e := ts.fleetEntry(ft)
	if prev != nil {
		e.tok.LastUsedAt = prev.tok.LastUsedAt
	}
	ts.byID[ft.ID] = e
}

// MirrorDelete removes one fleet token, revoked at revision rev.
func (ts *Tokens) MirrorDelete(rev int64, id string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if e := ts.byID[id]; e != nil && e.fleet {
		delete(ts.byID, id)
	}
	ts.advanceLocked(rev)
}

func (ts *Tokens) advanceLocked(rev int64) {
	if rev <= ts.mirrorRev {
		return
	}
	ts.mirrorRev = rev
	close(ts.mirrored)
	ts.mirrored = make(chan struct{})
}

// awaitMirror waits until the mirror has reached revision rev, at most
// mirrorWait.
func (ts *Tokens) awaitMirror(ctx context.Context, rev int64) {
	timer := time.NewTimer(mirrorWait)
	defer timer.Stop()
	for {
		ts.mu.Lock()
		done, ch := ts.mirrorRev >= rev, ts.mirrored
		ts.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			ts.cfg.Log.Warn("the fleet's tokens have not caught up with a write yet; it shows once they do", "revision", rev)
			return
		case <-ctx.Done():
			return
		}
	}
}

// publish writes t to the fleet and waits for the mirror to show it.
func (ts *Tokens) publish(ctx context.Context, f FleetTokenStore, ft FleetToken) error {
	rev, err := f.PutFleetToken(ctx, ft)
	if err != nil {
		return &web.Error{Status: http.StatusServiceUnavailable, Message: "the fleet token was not saved: etcd could not be written", Err: err, Header: http.Header{"Retry-After": {"5"}}}
	}
	ts.awaitMirror(ctx, rev)
	return nil
}

// FleetTokens exports the fleet's live tokens, hashes and never secrets
// (GET /fleet/tokens). Without a fleet it answers 409
// fleet_not_configured.
func (ts *Tokens) FleetTokens() (apitype.FleetTokens, error) {
	if f, _ := ts.fleetStore(); f == nil {
		return apitype.FleetTokens{}, errNoFleet()
	}
	now := ts.cfg.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := apitype.FleetTokens{Tokens: []apitype.FleetToken{}}
	for _, e := range ts.byID {
		if !e.fleet || e.tok.expired(now) {
			continue
		}
		s := e.tok.Summary()
		out.Tokens = append(out.Tokens, apitype.FleetToken{
			ID: s.ID, Name: s.Name, Admin: s.Admin, Namespace: s.Namespace, Deployments: s.Deployments,
			CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt, SecretSHA256: e.hash, Host: e.host,
		})
	}
	slices.SortFunc(out.Tokens, func(a, b apitype.FleetToken) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
