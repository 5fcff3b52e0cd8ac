package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/internal/store"
)

// MountPullsBackend is the slice of a store that records mount and
// artifact pulls, with the deployments they belong to.
type MountPullsBackend interface {
	PutDeployment(ctx context.Context, d store.Deployment, createOnly bool, ifRevision int64) (store.Deployment, error)
	MountPulls(ctx context.Context, deployment string) ([]store.MountPull, error)
	PutMountPulls(ctx context.Context, deployment string, ps []store.MountPull) error
	ArtifactPull(ctx context.Context, deployment string) (store.MountPull, bool, error)
	PutArtifactPull(ctx context.Context, p store.MountPull) error
}

// RunMountPulls runs the mount pulls suite; open returns a fresh, empty
// backend for each subtest.
func RunMountPulls(t *testing.T, open func(t *testing.T) MountPullsBackend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, MountPullsBackend)
	}{
		{"MountPulls", testMountPulls},
		{"Invalid", testMountPullsInvalid},
		{"ArtifactPathInMounts", testMountPullsArtifactPath},
		{"Concurrent", testMountPullsConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func ensureDeployment(t *testing.T, s interface {
	PutDeployment(ctx context.Context, d store.Deployment, createOnly bool, ifRevision int64) (store.Deployment, error)
}, id string) {
	t.Helper()
	if _, err := s.PutDeployment(t.Context(), store.Deployment{ID: id, Spec: fmt.Appendf(nil, `{"id":%q}`, id)}, false, 0); err != nil {
		t.Fatal(err)
	}
}

// testMountPulls is store's TestMountPulls but for the deployment's delete
// (RunDeploymentCascade).
func testMountPulls(t *testing.T, s MountPullsBackend) {
	ctx := t.Context()
	if err := s.PutMountPulls(ctx, "web", nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no deployment: %v", err)
	}
	if err := s.PutArtifactPull(ctx, store.MountPull{Deployment: "web", Ref: "x"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("artifact pull, no deployment: %v", err)
	}
	ensureDeployment(t, s, "web")
	ensureDeployment(t, s, "web2")
	ps := []store.MountPull{
		{Deployment: "web", Path: "/data", Store: "local", Ref: "v1", Digest: "aa", Tree: "/t/aa"},
		{Deployment: "web", Path: "/cfg", Store: "local", Ref: "c", StripComponents: 1, Digest: "bb", Tree: "/t/bb-strip1"},
	}
	lo := time.Now()
	if err := s.PutMountPulls(ctx, "web", ps); err != nil {
		t.Fatal(err)
	}
	hi := time.Now()
	got, err := s.MountPulls(ctx, "web")
	if err != nil || len(got) != 2 {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, p := range got {
		within(t, "PulledAt", p.PulledAt, lo.Add(-time.Hour), hi.Add(time.Hour))
	}
	want := []store.MountPull{ps[1], ps[0]}
	want[0].PulledAt, want[1].PulledAt = got[0].PulledAt, got[1].PulledAt
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("MountPulls, by path (-want +got):\n%s", d)
	}
	if got, err := s.MountPulls(ctx, "web2"); err != nil || len(got) != 0 {
		t.Errorf("another deployment's: %+v, %v", got, err)
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
	if err := s.PutArtifactPull(ctx, store.MountPull{Deployment: "web", Store: "local", Ref: "site", Digest: "cc", Tree: "/t/cc"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMountPulls(ctx, "web", ps); err != nil { // leaves the artifact's row
		t.Fatal(err)
	}
	if a, ok, err := s.ArtifactPull(ctx, "web"); !ok || err != nil || a.Digest != "cc" || a.Tree != "/t/cc" || a.Ref != "site" || a.Deployment != "web" || a.Path != "" || a.PulledAt.IsZero() {
		t.Fatalf("artifact pull: %+v %v %v", a, ok, err)
	}
	if got, _ := s.MountPulls(ctx, "web"); len(got) != 2 {
		t.Fatalf("mount pulls beside the artifact's: %+v", got)
	}
	if err := s.PutArtifactPull(ctx, store.MountPull{Deployment: "web", Store: "local", Ref: "site2", Digest: "dd", Tree: "/t/dd"}); err != nil {
		t.Fatal(err)
	}
	if a, ok, err := s.ArtifactPull(ctx, "web"); !ok || err != nil || a.Digest != "dd" || a.Ref != "site2" {
		t.Errorf("replaced artifact pull: %+v %v %v", a, ok, err)
	}
	if err := s.PutMountPulls(ctx, "web", nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.MountPulls(ctx, "web"); len(got) != 0 {
		t.Errorf("after an empty replace: %+v", got)
	}
	if _, ok, _ := s.ArtifactPull(ctx, "web"); !ok {
		t.Error("an empty replace of mount pulls forgot the artifact pull")
	}
}

func testMountPullsInvalid(t *testing.T, s MountPullsBackend) {
	ctx := t.Context()
	ensureDeployment(t, s, "web")
	good := store.MountPull{Deployment: "web", Path: "/data", Ref: "v1"}
	if err := s.PutMountPulls(ctx, "web", []store.MountPull{good}); err != nil {
		t.Fatal(err)
	}
	for name, ps := range map[string][]store.MountPull{
		"other deployment": {{Deployment: "api", Path: "/x"}},
		"negative strip":   {{Deployment: "web", Path: "/x", StripComponents: -1}},
		"path twice":       {{Deployment: "web", Path: "/x"}, {Deployment: "web", Path: "/x"}},
	} {
		if err := s.PutMountPulls(ctx, "web", ps); err == nil {
			t.Errorf("%s: PutMountPulls took %+v", name, ps)
		}
	}
	if got, _ := s.MountPulls(ctx, "web"); len(got) != 1 || got[0].Path != "/data" {
		t.Errorf("a refused replace changed the pulls: %+v", got)
	}
	if err := s.PutArtifactPull(ctx, store.MountPull{Deployment: "web", Path: "/x"}); err == nil {
		t.Error("PutArtifactPull took a path")
	}
	if err := s.PutArtifactPull(ctx, store.MountPull{Deployment: "web", StripComponents: -1}); err == nil {
		t.Error("PutArtifactPull took a negative strip_components")
	}
	if _, ok, _ := s.ArtifactPull(ctx, "web"); ok {
		t.Error("a refused artifact pull was recorded")
	}
}

// testMountPullsArtifactPath: a mount pull of path "" is the artifact
// pull's row: recorded as it when there is none, refused when there is.
func testMountPullsArtifactPath(t *testing.T, s MountPullsBackend) {
	ctx := t.Context()
	ensureDeployment(t, s, "web")
	if err := s.PutMountPulls(ctx, "web", []store.MountPull{{Deployment: "web", Ref: "as-artifact"}}); err != nil {
		t.Fatal(err)
	}
	if a, ok, err := s.ArtifactPull(ctx, "web"); !ok || err != nil || a.Ref != "as-artifact" {
		t.Errorf("artifact pull: %+v %v %v", a, ok, err)
	}
	if got, _ := s.MountPulls(ctx, "web"); len(got) != 0 {
		t.Errorf("mount pulls %+v, want none (path \"\" is the artifact's)", got)
	}
	if err := s.PutMountPulls(ctx, "web", []store.MountPull{{Deployment: "web", Ref: "again"}}); err == nil {
		t.Error("PutMountPulls of path \"\" over the artifact pull took it")
	}
}

// testMountPullsConcurrent: concurrent replaces leave exactly one
// writer's set, never a mix.
func testMountPullsConcurrent(t *testing.T, s MountPullsBackend) {
	ctx := t.Context()
	ensureDeployment(t, s, "web")
	set := func(i int) []store.MountPull {
		var ps []store.MountPull
		for k := range 1 + i%3 {
			ps = append(ps, store.MountPull{Deployment: "web", Path: fmt.Sprintf("/m%d", k+i), Ref: fmt.Sprint("w", i)})
		}
		return ps
	}
	const writers = 8
	errs := race(writers, func(i int) error { return s.PutMountPulls(ctx, "web", set(i)) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	got, err := s.MountPulls(ctx, "web")
	if err != nil || len(got) == 0 {
		t.Fatalf("MountPulls: %+v, %v", got, err)
	}
	var paths []string
	for _, p := range got {
		paths = append(paths, p.Path+"="+p.Ref)
	}
	for i := range writers {
		var want []string
		for _, p := range set(i) {
			want = append(want, p.Path+"="+p.Ref)
		}
		slices.Sort(want)
		if slices.Equal(paths, want) {
			return
		}
	}
	t.Errorf("pulls %v are no single writer's set", paths)
}
