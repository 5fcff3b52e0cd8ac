package store

import (
	"errors"
	"testing"
)

func TestMountPulls(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	if err := s.PutMountPulls(ctx, "web", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no deployment: %v", err)
	}
	if _, err := s.PutDeployment(ctx, Deployment{ID: "web", Spec: []byte(`{"id":"web"}`)}, true, 0); err != nil {
		t.Fatal(err)
	}
	ps := []MountPull{
		{Deployment: "web", Path: "/data", Store: "local", Ref: "v1", Digest: "aa", Tree: "/t/aa"},
		{Deployment: "web", Path: "/cfg", Store: "local", Ref: "c", StripComponents: 1, Digest: "bb", Tree: "/t/bb-strip1"},
	}
	if err := s.PutMountPulls(ctx, "web", ps); err != nil {
		t.Fatal(err)
	}
	got, err := s.MountPulls(ctx, "web")
	if err != nil || len(got) != 2 || got[0].Path != "/cfg" || got[0].StripComponents != 1 || got[1].Digest != "aa" || got[1].PulledAt.IsZero() {
		t.Fatalf("got %+v, %v", got, err)
	}
	if err := s.PutMountPulls(ctx, "web", ps[:1]); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.MountPulls(ctx, "web"); len(got) != 1 || got[0].Path != "/data" {
		t.Fatalf("replaced: %+v", got)
	}
	if _, ok, err := s.ArtifactPull(ctx, "web"); ok || err != nil {
		t.Fatalf("no artifact pull yet: %v %v", ok, err)
	}
	if err := s.PutArtifactPull(ctx, MountPull{Deployment: "web", Store: "local", Ref: "site", Digest: "cc", Tree: "/t/cc"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMountPulls(ctx, "web", ps); err != nil { // leaves the artifact's row
		t.Fatal(err)
	}
	if a, ok, err := s.ArtifactPull(ctx, "web"); !ok || err != nil || a.Digest != "cc" || a.Tree != "/t/cc" {
		t.Fatalf("artifact pull: %+v %v %v", a, ok, err)
	}
	if got, _ := s.MountPulls(ctx, "web"); len(got) != 2 {
		t.Fatalf("mount pulls beside the artifact's: %+v", got)
	}
	if err := s.DeleteDeployment(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.MountPulls(ctx, "web"); len(got) != 0 {
		t.Fatalf("after delete: %+v", got)
	}
	if _, ok, _ := s.ArtifactPull(ctx, "web"); ok {
		t.Fatal("the artifact pull outlived its deployment")
	}
}
