package etcdfleet_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
)

// TestComputerClaims: a Computer id is claimed by exactly one host of the
// fleet, even when both claim at once; the claim is read by id, survives
// its host's leaving (it is on no lease), is idempotent for its holder,
// and only its holder's release frees it.
func TestComputerClaims(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a := join(t, c, "a", etcdfleet.Options{})
	b := join(t, c, "b", etcdfleet.Options{})
	ctx := ctxT(t)

	for round := range 5 {
		id := "desk" + string(rune('0'+round))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, m := range []*etcdfleet.Member{a, b} {
			wg.Go(func() { errs[i] = m.ClaimComputer(ctx, id, "ns1") })
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, etcdfleet.ErrComputerClaimed):
				t.Fatalf("claim %s: %v", id, err)
			}
		}
		if wins != 1 {
			t.Fatalf("claim %s: %d winners (%v), want 1", id, wins, errs)
		}
		h, ok, err := a.ComputerHost(ctx, id)
		winner := "a"
		if errs[0] != nil {
			winner = "b"
		}
		if err != nil || !ok || h.Host != winner || h.Namespace != "ns1" {
			t.Fatalf("ComputerHost(%s) = %+v, %v, %v; want host %s", id, h, ok, err, winner)
		}
	}

	if err := a.ClaimComputer(ctx, "mine", ""); err != nil {
		t.Fatal(err)
	}
	if err := a.ClaimComputer(ctx, "mine", ""); err != nil {
		t.Errorf("a claim its holder makes again: %v", err)
	}
	if err := b.ReleaseComputer(ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	if h, ok, _ := b.ComputerHost(ctx, "mine"); !ok || h.Host != "a" {
		t.Fatalf("after another host's release: %+v, %v; want a's claim kept", h, ok)
	}
	if err := b.ClaimComputer(ctx, "mine", ""); !errors.Is(err, etcdfleet.ErrComputerClaimed) {
		t.Fatalf("b claims a's id: %v", err)
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if h, ok, _ := b.ComputerHost(ctx, "mine"); !ok || h.Host != "a" {
		t.Fatalf("after a left: %+v, %v; want the claim to outlive the lease", h, ok)
	}
	a2 := join(t, c, "a", etcdfleet.Options{})
	if err := a2.ReleaseComputer(ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.ComputerHost(ctx, "mine"); ok || err != nil {
		t.Fatalf("after a's release: ok %v, %v", ok, err)
	}
	if err := b.ClaimComputer(ctx, "mine", ""); err != nil {
		t.Fatalf("b claims the freed id: %v", err)
	}
}
