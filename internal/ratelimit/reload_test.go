package ratelimit

import (
	"slices"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

// TestReload: two Managers over one store (two hosts sharing it): the
// limits one puts and deletes reach the other on Reload, which tells
// Changed of exactly those, and keeps the Limiter of a limit that did not
// change.
func TestReload(t *testing.T) {
	ctx := t.Context()
	st := openStore(t, t.TempDir(), "a", "b")
	a, err := NewManager(ctx, st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var changed []string
	b, err := NewManager(ctx, st, Options{Changed: func(id string) {
		mu.Lock()
		changed = append(changed, id)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	took := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(changed)
		changed = nil
		slices.Sort(out)
		return out
	}
	for _, id := range []string{"a", "b"} {
		if _, err := a.Put(ctx, id, apitype.RateLimit{RequestsPerSec: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := took(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Changed heard %v, want [a b]", got)
	}
	la, lb := b.Limiter("a"), b.Limiter("b")
	if la == nil || lb == nil || la.Spec().RequestsPerSec != 2 {
		t.Fatalf("after Reload: limiters %v %v", la, lb)
	}
	// a's limit changes, b's goes.
	if _, err := a.Put(ctx, "a", apitype.RateLimit{RequestsPerSec: 5}); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := took(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Changed heard %v, want [a b]", got)
	}
	if l := b.Limiter("a"); l == nil || l == la || l.Spec().RequestsPerSec != 5 {
		t.Errorf("a's limiter after the change: %v", l)
	}
	if b.Limiter("b") != nil {
		t.Error("b's deleted limit is still held")
	}
	// Nothing changed: the Limiter (and its clients' counts) stays.
	kept := b.Limiter("a")
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := took(); len(got) != 0 || b.Limiter("a") != kept {
		t.Errorf("an unchanged Reload: Changed heard %v, limiter replaced %v", got, b.Limiter("a") != kept)
	}
}
