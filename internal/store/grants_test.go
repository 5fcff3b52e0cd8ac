package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestGrants(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, g := range []Grant{
		{ID: "g1", ComputerID: "c1", Payload: []byte(`{"gid":"g1"}`), ExpiresAt: 1000, IssuedAt: at},
		{ID: "g2", ComputerID: "c1", Payload: []byte(`{"gid":"g2"}`), ExpiresAt: 3000, IssuedAt: at},
		{ID: "g3", ComputerID: "c2", Payload: []byte(`{"gid":"g3"}`), ExpiresAt: 3000, IssuedAt: at},
	} {
		if err := s.PutGrant(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutGrant(ctx, Grant{ID: "g1", ComputerID: "c1", Payload: []byte(`{}`), ExpiresAt: 5}); !errors.Is(err, ErrConflict) {
		t.Errorf("reusing a grant id = %v, want ErrConflict", err)
	}
	if err := s.PutGrant(ctx, Grant{ID: "g9", ComputerID: "c1", Payload: []byte(`{`)}); err == nil {
		t.Error("a grant with a payload that is not JSON was stored")
	}
	ids := func(gs []Grant) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.ID)
		}
		return out
	}
	gs, err := s.Grants(ctx, 2000)
	if err != nil || !cmp.Equal(ids(gs), []string{"g2", "g3"}) {
		t.Errorf("Grants(notBefore 2000) = %v, %v; want g2, g3", ids(gs), err)
	}

	// By id: only the Computer's own grants, and the first revocation time
	// is kept.
	if _, err := s.RevokeGrants(ctx, "c2", at, "g1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking c1's grant under c2 = %v, want ErrNotFound", err)
	}
	if got, err := s.RevokeGrants(ctx, "c1", at, "g2"); err != nil || !cmp.Equal(got, []string{"g2"}) {
		t.Errorf("RevokeGrants(g2) = %v, %v", got, err)
	}
	if _, err := s.RevokeGrants(ctx, "c1", at.Add(time.Hour), "g2"); err != nil {
		t.Errorf("revoking again: %v", err)
	}
	// All of a Computer's: the ones still standing.
	if got, err := s.RevokeGrants(ctx, "c1", at); err != nil || !cmp.Equal(got, []string{"g1"}) {
		t.Errorf("RevokeGrants(c1) = %v, %v; want g1", got, err)
	}
	gs, _ = s.Grants(ctx, 0)
	for _, g := range gs {
		switch g.ID {
		case "g1", "g2":
			if !g.RevokedAt.Equal(at) {
				t.Errorf("%s revoked at %v, want %v", g.ID, g.RevokedAt, at)
			}
		case "g3":
			if !g.RevokedAt.IsZero() {
				t.Errorf("g3 of another Computer was revoked")
			}
		}
		if !g.IssuedAt.Equal(at) || len(g.Payload) == 0 {
			t.Errorf("grant %+v did not round-trip", g)
		}
	}
	if n, err := s.PruneGrants(ctx, 2000); err != nil || n != 1 {
		t.Errorf("PruneGrants = %d, %v; want 1", n, err)
	}
	if gs, _ := s.Grants(ctx, 0); !cmp.Equal(ids(gs), []string{"g2", "g3"}) {
		t.Errorf("after prune: %v", ids(gs))
	}
}
