package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
)

// TestTokensReload: two token sets over one store (two hosts sharing it):
// a token one mints verifies on the other after Reload, a patch of it is
// seen there, and its revocation refuses it there.
func TestTokensReload(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	other, err := NewTokens(ctx, TokensConfig{Store: f.st, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	m := f.mint(operator, apitype.NewToken{Name: "ci", Admin: apitype.ScopeView})
	if _, err := other.Verify(ctx, m.Token); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("before Reload: %v, want ErrUnknownToken", err)
	}
	if err := other.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if tok, err := other.Verify(ctx, m.Token); err != nil || tok.Admin != apitype.ScopeView {
		t.Fatalf("after Reload: %+v, %v; want the view token", tok, err)
	}
	if _, err := f.ts.Patch(ctx, operator, m.ID, apitype.TokenPatch{Admin: apitype.ScopeAdmin}); err != nil {
		t.Fatal(err)
	}
	if err := other.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if tok, err := other.Verify(ctx, m.Token); err != nil || tok.Admin != apitype.ScopeAdmin {
		t.Errorf("after the patch and Reload: %+v, %v; want scope admin", tok, err)
	}
	if err := f.ts.Revoke(ctx, operator, m.ID); err != nil {
		t.Fatal(err)
	}
	if err := other.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Verify(ctx, m.Token); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("after the revocation and Reload: %v, want ErrUnknownToken", err)
	}
}
