package guard

import (
	"net/netip"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// TestReload: two guards over one store (two hosts sharing it): a rule
// one adds is in force on the other after Reload, with the hits the first
// saved added to its count, and its deletion takes it out of force there.
func TestReload(t *testing.T) {
	ctx := t.Context()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := New(ctx, Options{Store: st, Enforce: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(ctx, Options{Store: st, Enforce: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	client := netip.MustParseAddr("192.0.2.7")
	v, err := a.Add(ctx, apitype.RuleSpec{Action: apitype.RuleBlock, Match: apitype.RuleMatch{Client: "192.0.2.7"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Check(client, "h", "", "GET", "/", ""); got != Pass {
		t.Fatalf("before Reload: %v, want pass", got)
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.Check(client, "h", "", "GET", "/", ""); got != Block {
		t.Fatalf("after Reload: %v, want block", got)
	}
	// a counts two hits and saves them; b has counted one of its own.
	a.Check(client, "h", "", "GET", "/", "")
	a.Check(client, "h", "", "GET", "/", "")
	a.Sweep(ctx)
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := b.Get(v.ID); !ok || got.Hits != 3 {
		t.Errorf("b's hits after Reload: %d (ok %v), want 3 (one here, two on a)", got.Hits, ok)
	}
	// Unchanged: a second Reload counts nothing twice.
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Get(v.ID); got.Hits != 3 {
		t.Errorf("b's hits after a second Reload: %d, want 3", got.Hits)
	}
	if err := a.Delete(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.Check(client, "h", "", "GET", "/", ""); got != Pass || b.Len() != 0 {
		t.Errorf("after the delete and Reload: %v with %d rules, want pass with none", got, b.Len())
	}
}
