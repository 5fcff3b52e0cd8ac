package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWorkspaceRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutWorkspace(ctx, Workspace{Deployment: "nope", Digest: "x"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("workspace of an unknown deployment: %v", err)
	}
	if _, err := s.PutDeployment(ctx, Deployment{ID: "w", Spec: []byte(`{"id":"w"}`)}, false, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Workspace(ctx, "w"); ok || err != nil {
		t.Fatalf("before any capture: %v %v", ok, err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	w := Workspace{Deployment: "w", Digest: "d1", CapturedAt: at, CapturedFrom: "r1", Files: 3, Bytes: 42}
	if err := s.PutWorkspace(ctx, w); err != nil {
		t.Fatal(err)
	}
	w.Pushed, w.PushedStore, w.PushedAt = "d1", "local", at.Add(time.Second)
	if err := s.PutWorkspace(ctx, w); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Durable across a reopen.
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, ok, err := s.Workspace(ctx, "w")
	if err != nil || !ok || got != w {
		t.Fatalf("got %+v %v %v, want %+v", got, ok, err, w)
	}
	if err := s.DeleteDeployment(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Workspace(ctx, "w"); ok {
		t.Error("the workspace outlived its deployment")
	}
}
