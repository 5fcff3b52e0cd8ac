package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTokensRoundTrip(t *testing.T) {
	s, dir := openTest(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tok := Token{ID: "0123456789ab", Name: "ci", Admin: "view", Namespace: "team-a", Deployments: []string{"web"},
		SecretSHA256: "ff", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), MintedBy: "user:admin"}
	if err := s.PutToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchToken(ctx, tok.ID, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok.LastUsedAt = t0.Add(time.Minute)
	if diff := cmp.Diff([]Token{tok}, got); diff != "" {
		t.Errorf("tokens after reopen (-want +got):\n%s", diff)
	}
	if err := s.DeleteToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteToken(ctx, tok.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
}

func TestSecretsAndKeyCheck(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	if _, err := s.SecretKeyCheck(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fresh key check: %v", err)
	}
	if err := s.PutSecretKeyCheck(ctx, []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSecretKeyCheck(ctx, []byte{3}); !errors.Is(err, ErrConflict) {
		t.Errorf("second key check: %v, want ErrConflict (the first key is kept)", err)
	}
	if b, _ := s.SecretKeyCheck(ctx); string(b) != "\x01\x02" {
		t.Errorf("key check = %x", b)
	}
	sec := SealedSecret{Namespace: "default", ID: "db", Sealed: []byte{9, 9}, UpdatedAt: time.Unix(5, 0).UTC()}
	if created, err := s.PutSealedSecret(ctx, sec); err != nil || !created {
		t.Fatalf("put: %v created %v", err, created)
	}
	if created, _ := s.PutSealedSecret(ctx, sec); created {
		t.Error("replace reported created")
	}
	got, err := s.SealedSecret(ctx, "default", "db")
	if err != nil || string(got.Sealed) != "\x09\x09" {
		t.Errorf("get: %+v %v", got, err)
	}
	if _, err := s.SealedSecret(ctx, "other", "db"); !errors.Is(err, ErrNotFound) {
		t.Errorf("other namespace: %v", err)
	}
	if err := s.DeleteSealedSecret(ctx, "default", "db"); err != nil {
		t.Fatal(err)
	}
}

func TestNamespacesAndProvidersKeepCreatedAt(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	n, created, err := s.PutNamespace(ctx, Namespace{Name: "team-a", Description: "one"})
	if err != nil || !created || !n.CreatedAt.Equal(now) {
		t.Fatalf("declare: %+v %v %v", n, created, err)
	}
	now = now.Add(time.Hour)
	n, created, err = s.PutNamespace(ctx, Namespace{Name: "team-a", Description: "two"})
	if err != nil || created || !n.CreatedAt.Equal(now.Add(-time.Hour)) || n.Description != "two" {
		t.Errorf("redeclare: %+v %v %v", n, created, err)
	}
	p, created, err := s.PutAuthProvider(ctx, AuthProvider{Namespace: "team-a", Name: "corp", Spec: []byte(`{"provider":"jwt"}`)})
	if err != nil || !created {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	p2, created, _ := s.PutAuthProvider(ctx, AuthProvider{Namespace: "team-a", Name: "corp", Spec: []byte(`{"provider":"google"}`)})
	if created || !p2.CreatedAt.Equal(p.CreatedAt) {
		t.Errorf("replace: created %v, created_at %v want %v", created, p2.CreatedAt, p.CreatedAt)
	}
	if _, _, err := s.PutAuthProvider(ctx, AuthProvider{Namespace: "team-a", Name: "x", Spec: []byte(`{`)}); err == nil {
		t.Error("invalid JSON accepted")
	}
	if err := s.DeleteNamespace(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete unknown namespace: %v", err)
	}
}
