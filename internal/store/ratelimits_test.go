package store

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestRateLimits: a deployment's rate limit is stored, replaced, listed,
// kept across a reopen, deleted, and refused for a deployment that does
// not exist.
func TestRateLimits(t *testing.T) {
	s, dir := openTest(t)
	ctx := t.Context()
	for _, id := range []string{"a", "b"} {
		if _, err := s.PutDeployment(ctx, Deployment{ID: id, Spec: spec(1)}, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PutRateLimit(ctx, RateLimit{Deployment: "nope", RequestsPerSec: 1, Burst: 1, MaxClients: 1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("put for a missing deployment: %v, want ErrNotFound", err)
	}
	a := RateLimit{Deployment: "a", RequestsPerSec: 2.5, Burst: 3, ConcurrentPerClient: 4, MaxClients: 100}
	got, err := s.PutRateLimit(ctx, a)
	if err != nil || got.UpdatedAt.IsZero() {
		t.Fatalf("put: %+v, %v", got, err)
	}
	a.ConcurrentPerClient = 0
	a.UpdatedAt = got.UpdatedAt
	if a, err = s.PutRateLimit(ctx, a); err != nil { // a replace
		t.Fatal(err)
	}
	b, err := s.PutRateLimit(ctx, RateLimit{Deployment: "b", ConcurrentPerClient: 1, MaxClients: 65536})
	if err != nil {
		t.Fatal(err)
	}
	want := []RateLimit{a, b}
	list, err := s.RateLimits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}

	s.Close()
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	list, err = s2.RateLimits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, list, cmpopts.EquateApproxTime(0)); diff != "" {
		t.Errorf("after reopen (-want +got):\n%s", diff)
	}
	if err := s2.DeleteRateLimit(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s2.DeleteRateLimit(ctx, "b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
}

// TestDeleteDeploymentDropsRateLimit: deleting a deployment deletes its
// rate limit in the same transaction (explicitly, and by the foreign key); a
// deployment created again under the same id has none.
func TestDeleteDeploymentDropsRateLimit(t *testing.T) {
	s, dir := openTest(t)
	ctx := t.Context()
	if _, err := s.PutDeployment(ctx, Deployment{ID: "a", Spec: spec(1)}, false, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutRateLimit(ctx, RateLimit{Deployment: "a", RequestsPerSec: 1, Burst: 1, MaxClients: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDeployment(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rawDB(t, dir).QueryRow(`SELECT count(*) FROM rate_limits`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rate limits left after the deployment's delete (%v)", n, err)
	}
	if _, err := s.PutDeployment(ctx, Deployment{ID: "a", Spec: spec(2)}, false, 0); err != nil {
		t.Fatal(err)
	}
	if list, err := s.RateLimits(ctx); err != nil || len(list) != 0 {
		t.Errorf("the re-created deployment has rate limits %+v, %v", list, err)
	}
}
