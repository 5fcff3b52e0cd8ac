package auth

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// loopFleet is a fleet of Tokens in one process: each write is reported
// to every member's mirror, as the etcd watch does, before it returns.
type loopFleet struct {
	mu      sync.Mutex
	rev     int64
	held    map[string]FleetToken
	members []*Tokens
	fail    error
}

func (l *loopFleet) PutFleetToken(_ context.Context, t FleetToken) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return 0, l.fail
	}
	l.rev++
	l.held[t.ID] = t
	for _, m := range l.members {
		m.MirrorPut(l.rev, t)
	}
	return l.rev, nil
}

func (l *loopFleet) DeleteFleetToken(_ context.Context, id string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rev++
	if _, ok := l.held[id]; !ok {
		return l.rev, ErrNoFleetToken
	}
	delete(l.held, id)
	for _, m := range l.members {
		m.MirrorDelete(l.rev, id)
	}
	return l.rev, nil
}

func (l *loopFleet) join(t *testing.T, host string, open bool, now func() time.Time) (*Tokens, *store.Store) {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ts, err := NewTokens(context.Background(), TokensConfig{Store: st, Open: open, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	all := make([]FleetToken, 0, len(l.held))
	for _, ft := range l.held {
		all = append(all, ft)
	}
	ts.MirrorReset(l.rev, all)
	l.members = append(l.members, ts)
	l.mu.Unlock()
	ts.UseFleet(l, host)
	return ts, st
}

// TestFleetTokenMirror: a fleet token minted on one host verifies on
// another with its grants, as mirrored from its host, is kept in neither
// host's store, expires and is revoked everywhere; only a fleet-wide
// admin mints one; a token minted while its host had no password is
// refused by a host with one; a failed publish mints nothing.
func TestFleetTokenMirror(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	l := &loopFleet{held: map[string]FleetToken{}}
	a, sa := l.join(t, "alpha", false, clock)
	b, sb := l.join(t, "beta", false, clock)
	ctx := context.Background()

	m, err := a.Mint(ctx, operator, apitype.NewToken{Name: "team", Admin: apitype.ScopeView, Namespace: "team-a", ExpiresInSecs: ptr(int64(3600)), Fleet: ptr(true)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Verify(ctx, m.Token)
	if err != nil {
		t.Fatal(err)
	}
	if got.Namespace != "team-a" || got.Admin != apitype.ScopeView || !got.Fleet || got.MirroredFrom != "alpha" {
		t.Fatalf("on beta: %+v", got)
	}
	if got, err := a.Verify(ctx, m.Token); err != nil || got.MirroredFrom != "" || !got.Fleet {
		t.Fatalf("on alpha: %+v %v", got, err)
	}
	for _, st := range []*store.Store{sa, sb} {
		if rows, err := st.Tokens(ctx); err != nil || len(rows) != 0 {
			t.Fatalf("a host's store holds %+v (%v)", rows, err)
		}
	}
	if _, err := b.Verify(ctx, m.Token[:len(m.Token)-1]+"A"); err == nil && m.Token[len(m.Token)-1] != 'A' {
		t.Fatal("a wrong secret verified")
	}

	// Only fleet-wide admins mint fleet tokens.
	confined := &Principal{Kind: AppToken, Token: got}
	nsAdmin := &Principal{Kind: AppToken, Token: &Token{ID: "x", Admin: apitype.ScopeAdmin, Namespace: "team-a"}}
	scoped := &Principal{Kind: AppToken, Token: &Token{ID: "y", Admin: apitype.ScopeAdmin, Deployments: []string{"d1"}}}
	for _, by := range []*Principal{confined, nsAdmin, scoped} {
		_, err := b.Mint(ctx, by, apitype.NewToken{Name: "f", Admin: apitype.ScopeNone, Namespace: "team-a", Deployments: []string{"d1"}, ExpiresInSecs: ptr(int64(60)), Fleet: ptr(true)})
		if status(err) != http.StatusForbidden {
			t.Fatalf("a fleet mint by %+v: %v", by.Token, err)
		}
	}

	// Revoked on beta: gone on alpha; revoking it again is a 404.
	if err := b.Revoke(ctx, operator, m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Verify(ctx, m.Token); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("revoked, on alpha: %v", err)
	}
	if err := a.Revoke(ctx, operator, m.ID); status(err) != http.StatusNotFound {
		t.Fatalf("second revoke: %v", err)
	}

	// Expiry holds on every host.
	m2, err := a.Mint(ctx, operator, apitype.NewToken{Name: "short", Admin: apitype.ScopeAdmin, Deployments: []string{"*"}, ExpiresInSecs: ptr(int64(60)), Fleet: ptr(true)})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if _, err := b.Verify(ctx, m2.Token); !errors.Is(err, ErrExpiredToken) {
		t.Fatalf("expired, on beta: %v", err)
	}
	if ft, err := b.FleetTokens(); err != nil || len(ft.Tokens) != 0 {
		t.Fatalf("the export lists an expired token: %+v %v", ft, err)
	}

	// Minted on a host with no password: refused where there is one.
	o, _ := l.join(t, "open", true, clock)
	m3, err := o.Mint(ctx, &Principal{Kind: Ungated}, apitype.NewToken{Name: "open", Admin: apitype.ScopeAdmin, Deployments: []string{"*"}, Fleet: ptr(true)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verify(ctx, m3.Token); !errors.Is(err, ErrOpenAdminToken) {
		t.Fatalf("an open-admin fleet token on a gated host: %v", err)
	}

	// A publish that fails mints nothing.
	l.fail = errors.New("etcd down")
	if _, err := a.Mint(ctx, operator, apitype.NewToken{Name: "f", Admin: apitype.ScopeAdmin, Deployments: []string{"*"}, Fleet: ptr(true)}); status(err) != http.StatusServiceUnavailable {
		t.Fatalf("mint with etcd down: %v", err)
	}
	if ft, _ := a.FleetTokens(); len(ft.Tokens) != 1 || ft.Tokens[0].ID != m3.ID {
		t.Fatalf("fleet tokens after the failed mint: %+v", ft)
	}
}
