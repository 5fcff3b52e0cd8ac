package store

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestGuardRules: put (insert and full replace), batched hits that only
// move last_hit forward, delete, and that it all survives reopening.
func TestGuardRules(t *testing.T) {
	s, dir := openTest(t)
	ctx := t.Context()
	t0 := time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)
	a := GuardRule{ID: "aaaaaaaaaaaa", Action: "block", Client: "203.0.113.0/24", Note: "scanner", CreatedAt: t0}
	b := GuardRule{ID: "bbbbbbbbbbbb", Action: "allow", Host: "x.example", Method: "GET", PathPrefix: "/p",
		PathContains: "q", UserAgentContains: "curl", Deployment: "web",
		CreatedAt: t0.Add(time.Second), ExpiresAt: t0.Add(time.Hour), Hits: 3, LastHit: t0.Add(2 * time.Second)}
	for _, r := range []GuardRule{b, a} {
		if err := s.PutGuardRule(ctx, r); err != nil {
			t.Fatalf("PutGuardRule: %v", err)
		}
	}
	if err := s.PutGuardRule(ctx, GuardRule{ID: "x"}); err == nil {
		t.Error("PutGuardRule without a creation time succeeded")
	}
	got, err := s.GuardRules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]GuardRule{a, b}, got); diff != "" {
		t.Errorf("GuardRules, oldest first (-want +got):\n%s", diff)
	}

	// A replace writes every column: a now expires, b is permanent.
	a.ExpiresAt, a.Note = t0.Add(time.Minute), "longer"
	b.ExpiresAt = time.Time{}
	for _, r := range []GuardRule{a, b} {
		if err := s.PutGuardRule(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	late, early := t0.Add(time.Hour), t0.Add(time.Minute)
	if err := s.AddGuardHits(ctx, map[string]GuardHits{a.ID: {Delta: 2, LastHit: late}, b.ID: {Delta: 1, LastHit: early}, "gone": {Delta: 9, LastHit: late}}); err != nil {
		t.Fatalf("AddGuardHits: %v", err)
	}
	a.Hits, a.LastHit = 2, late
	b.Hits = 4 // b's last_hit (t0+2s) is older than early: moves forward
	b.LastHit = early
	if err := s.AddGuardHits(ctx, map[string]GuardHits{b.ID: {Delta: 1, LastHit: t0}}); err != nil {
		t.Fatal(err)
	}
	b.Hits = 5 // an older LastHit does not move last_hit back

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err = s2.GuardRules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]GuardRule{a, b}, got); diff != "" {
		t.Errorf("GuardRules after reopening (-want +got):\n%s", diff)
	}
	if err := s2.DeleteGuardRules(ctx, []string{a.ID, "never-stored"}); err != nil {
		t.Fatalf("DeleteGuardRules: %v", err)
	}
	if got, err = s2.GuardRules(ctx); err != nil || len(got) != 1 || got[0].ID != b.ID {
		t.Errorf("after deleting a: %+v, %v", got, err)
	}
}
