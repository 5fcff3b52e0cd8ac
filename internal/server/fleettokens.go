package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
)

// mirrorFleetTokens makes tokens publish fleet tokens to the fleet and
// follow the fleet's tokens into memory, from before this berth serves
// until it leaves the fleet. Without a fleet it does nothing: `fleet:
// true` is then refused (409 fleet_not_configured).
func (s *Server) mirrorFleetTokens(ctx context.Context, tokens *auth.Tokens) error {
	if s.fleetHost == nil {
		return nil
	}
	m := s.fleetHost.m
	sink := fleetTokenSink{tokens}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	recs, rev, err := m.Tokens(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("server: fleet tokens: %w", err)
	}
	sink.ResetFleetTokens(rev, recs)
	tokens.UseFleet(fleetTokens{m}, m.ID())
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.WatchTokens(wctx, sink)
	}()
	s.fleetHost.stopWatch = func() { stop(); <-done }
	return nil
}

// fleetTokens adapts etcdfleet to auth.FleetTokenStore.
type fleetTokens struct{ m *etcdfleet.Member }

func (f fleetTokens) PutFleetToken(ctx context.Context, t auth.FleetToken) (int64, error) {
	rec := etcdfleet.TokenRecord{
		ID: t.ID, Name: t.Name, Admin: string(t.Admin), Namespace: t.Namespace, Deployments: t.Deployments,
		CreatedAt: t.CreatedAt.Unix(), SecretSHA256: t.SecretSHA256, Host: t.Host, MintedBy: t.MintedBy, OpenAdmin: t.OpenAdmin,
	}
	if !t.ExpiresAt.IsZero() {
		rec.ExpiresAt = t.ExpiresAt.Unix()
	}
	return f.m.PutToken(ctx, rec)
}

func (f fleetTokens) DeleteFleetToken(ctx context.Context, id string) (int64, error) {
	rev, err := f.m.DeleteToken(ctx, id)
	if errors.Is(err, etcdfleet.ErrNoToken) {
		return rev, auth.ErrNoFleetToken
	}
	return rev, err
}

// fleetTokenSink adapts auth.Tokens to etcdfleet.TokenSink.
type fleetTokenSink struct{ ts *auth.Tokens }

func fromRecord(r etcdfleet.TokenRecord) auth.FleetToken {
	t := auth.Token{
		ID: r.ID, Name: r.Name, Admin: apitype.AdminScope(r.Admin), Namespace: r.Namespace, Deployments: r.Deployments,
		CreatedAt: time.Unix(r.CreatedAt, 0), MintedBy: r.MintedBy, OpenAdmin: r.OpenAdmin,
	}
	if r.ExpiresAt != 0 {
		t.ExpiresAt = time.Unix(r.ExpiresAt, 0)
	}
	return auth.FleetToken{Token: t, SecretSHA256: r.SecretSHA256, Host: r.Host}
}

func (s fleetTokenSink) ResetFleetTokens(rev int64, recs []etcdfleet.TokenRecord) {
	all := make([]auth.FleetToken, 0, len(recs))
	for _, r := range recs {
		all = append(all, fromRecord(r))
	}
	s.ts.MirrorReset(rev, all)
}

func (s fleetTokenSink) PutFleetToken(rev int64, rec etcdfleet.TokenRecord) {
	s.ts.MirrorPut(rev, fromRecord(rec))
}

func (s fleetTokenSink) DeleteFleetToken(rev int64, id string) { s.ts.MirrorDelete(rev, id) }
