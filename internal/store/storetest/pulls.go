package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/internal/store"
)

// PullsBackend is the slice of a store that records pulled registry
// images, registry credential mappings and built images' run defaults.
type PullsBackend interface {
	PulledImages(ctx context.Context) ([]store.PulledImage, error)
	PutPulledImage(ctx context.Context, p store.PulledImage) error
	AddPulledNamespace(ctx context.Context, name, namespace string) error
	DeletePulledImage(ctx context.Context, name string) error
	RegistryCredentials(ctx context.Context, namespace string) ([]store.RegistryCredential, error)
	RegistryCredential(ctx context.Context, namespace, host string) (store.RegistryCredential, error)
	PutRegistryCredential(ctx context.Context, c store.RegistryCredential) error
	DeleteRegistryCredential(ctx context.Context, namespace, host string) error
	ImageConfigs(ctx context.Context) (map[string]string, error)
	PutImageConfig(ctx context.Context, name, config string) error
}

// RunPulls runs the pulls suite; open returns a fresh, empty backend for
// each subtest, and putImage stores the images row of name in it (pulled
// images and image configs belong to one).
func RunPulls(t *testing.T, open func(t *testing.T) PullsBackend, putImage func(t *testing.T, b PullsBackend, name string)) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, PullsBackend, func(t *testing.T, b PullsBackend, name string))
	}{
		{"PulledImages", testPulledImages},
		{"PulledImageConcurrent", testPulledImageConcurrent},
		{"RegistryCredentials", testRegistryCredentials},
		{"ImageConfigs", testImageConfigs},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t), putImage) })
	}
}

func testPulledImages(t *testing.T, s PullsBackend, putImage func(*testing.T, PullsBackend, string)) {
	ctx := t.Context()
	if got, err := s.PulledImages(ctx); err != nil || len(got) != 0 {
		t.Fatalf("PulledImages on an empty store: %+v, %v", got, err)
	}
	p := store.PulledImage{Name: "ghcr.io/o/app:v1", ManifestDigest: "sha256:aa", Layers: []string{"sha256:l1", "sha256:l2"},
		Config: `{"cmd":["app"]}`, Namespaces: []string{"team-b", "team-a", "team-b"}}
	if err := s.PutPulledImage(ctx, p); err == nil {
		t.Error("PutPulledImage without its images row took it")
	}
	if err := s.AddPulledNamespace(ctx, p.Name, "team-a"); err == nil {
		t.Error("AddPulledNamespace of an image not pulled took it")
	}
	putImage(t, s, p.Name)
	putImage(t, s, "docker.io/library/alpine:3")
	if err := s.PutPulledImage(ctx, p); err != nil {
		t.Fatal(err)
	}
	q := store.PulledImage{Name: "docker.io/library/alpine:3", ManifestDigest: "sha256:bb", Config: `{}`}
	if err := s.PutPulledImage(ctx, q); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPulledNamespace(ctx, p.Name, "team-0"); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPulledNamespace(ctx, p.Name, "team-0"); err != nil {
		t.Errorf("AddPulledNamespace again: %v", err)
	}
	got, err := s.PulledImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantP := p
	wantP.Namespaces = []string{"team-0", "team-a", "team-b"}
	if d := cmp.Diff([]store.PulledImage{q, wantP}, got); d != "" {
		t.Errorf("PulledImages, by name, namespaces sorted (-want +got):\n%s", d)
	}
	// A replace re-proves the namespaces.
	p2 := store.PulledImage{Name: p.Name, ManifestDigest: "sha256:cc", Layers: []string{"sha256:l3"}, Config: `{}`, Namespaces: []string{"team-c"}}
	if err := s.PutPulledImage(ctx, p2); err != nil {
		t.Fatal(err)
	}
	got, err = s.PulledImages(ctx)
	if err != nil || len(got) != 2 {
		t.Fatalf("PulledImages: %+v, %v", got, err)
	}
	if d := cmp.Diff(p2, got[1]); d != "" {
		t.Errorf("replaced pulled image (-want +got):\n%s", d)
	}
	if err := s.DeletePulledImage(ctx, p.Name); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePulledImage(ctx, p.Name); err != nil {
		t.Errorf("deleting a pulled image again: %v", err)
	}
	if got, err := s.PulledImages(ctx); err != nil || len(got) != 1 || got[0].Name != q.Name {
		t.Errorf("after delete: %+v, %v", got, err)
	}
	// Its namespaces went with it.
	if err := s.PutPulledImage(ctx, store.PulledImage{Name: p.Name, ManifestDigest: "sha256:dd"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.PulledImages(ctx); len(got) != 2 || got[1].Namespaces != nil {
		t.Errorf("re-pulled after delete: %+v, want no namespaces", got)
	}
}

// testPulledImageConcurrent: concurrent replaces leave one writer's
// namespaces, never a mix.
func testPulledImageConcurrent(t *testing.T, s PullsBackend, putImage func(*testing.T, PullsBackend, string)) {
	ctx := t.Context()
	const name = "r/app:1"
	putImage(t, s, name)
	nss := func(i int) []string {
		var out []string
		for k := range 1 + i%3 {
			out = append(out, fmt.Sprintf("ns%d", i+k))
		}
		return out
	}
	const writers = 8
	errs := race(writers, func(i int) error {
		return s.PutPulledImage(ctx, store.PulledImage{Name: name, ManifestDigest: fmt.Sprint(i), Namespaces: nss(i)})
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	got, err := s.PulledImages(ctx)
	if err != nil || len(got) != 1 {
		t.Fatalf("PulledImages: %+v, %v", got, err)
	}
	var i int
	if _, err := fmt.Sscan(got[0].ManifestDigest, &i); err != nil || !slices.Equal(got[0].Namespaces, nss(i)) {
		t.Errorf("stored %+v: namespaces are not writer %s's", got[0], got[0].ManifestDigest)
	}
}

func testRegistryCredentials(t *testing.T, s PullsBackend, _ func(*testing.T, PullsBackend, string)) {
	ctx := t.Context()
	if got, err := s.RegistryCredentials(ctx, "a"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("RegistryCredentials on an empty store: %#v, %v; want an empty list", got, err)
	}
	c, err := s.RegistryCredential(ctx, "a", "ghcr.io")
	if !errors.Is(err, store.ErrNotFound) || c.Namespace != "a" || c.Host != "ghcr.io" {
		t.Errorf("missing mapping: %+v, %v", c, err)
	}
	for _, x := range []store.RegistryCredential{
		{Namespace: "a", Host: "registry.local:5000", Secret: "s1"},
		{Namespace: "a", Host: "ghcr.io", Secret: "s2"},
		{Namespace: "a/b", Host: "ghcr.io", Secret: "s3"},
		{Namespace: "a", Host: "ghcr.io", Secret: "s4"},
	} {
		if err := s.PutRegistryCredential(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.RegistryCredentials(ctx, "a")
	want := []store.RegistryCredential{{Namespace: "a", Host: "ghcr.io", Secret: "s4"}, {Namespace: "a", Host: "registry.local:5000", Secret: "s1"}}
	if d := cmp.Diff(want, got); err != nil || d != "" {
		t.Errorf("RegistryCredentials(a), by host, replaced: %v (-want +got):\n%s", err, d)
	}
	if c, err := s.RegistryCredential(ctx, "a/b", "ghcr.io"); err != nil || c.Secret != "s3" {
		t.Errorf("RegistryCredential(a/b): %+v, %v", c, err)
	}
	if err := s.DeleteRegistryCredential(ctx, "a", "ghcr.io"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRegistryCredential(ctx, "a", "ghcr.io"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting a missing mapping: %v", err)
	}
	if got, err := s.RegistryCredentials(ctx, "a"); err != nil || len(got) != 1 || got[0].Host != "registry.local:5000" {
		t.Errorf("after delete: %+v, %v", got, err)
	}
}

func testImageConfigs(t *testing.T, s PullsBackend, putImage func(*testing.T, PullsBackend, string)) {
	ctx := t.Context()
	if got, err := s.ImageConfigs(ctx); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ImageConfigs on an empty store: %#v, %v; want an empty map", got, err)
	}
	if err := s.PutImageConfig(ctx, "built", `{"cmd":["x"]}`); err == nil {
		t.Error("PutImageConfig without its images row took it")
	}
	if err := s.PutImageConfig(ctx, "built", ""); err != nil {
		t.Errorf("forgetting a config never recorded: %v", err)
	}
	putImage(t, s, "built")
	putImage(t, s, "other")
	for _, x := range [][2]string{{"built", `{"cmd":["x"]}`}, {"other", `{}`}, {"built", `{"cmd":["y"]}`}} {
		if err := s.PutImageConfig(ctx, x[0], x[1]); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.ImageConfigs(ctx); err != nil || !cmp.Equal(got, map[string]string{"built": `{"cmd":["y"]}`, "other": `{}`}) {
		t.Errorf("ImageConfigs = %v, %v", got, err)
	}
	if err := s.PutImageConfig(ctx, "built", ""); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ImageConfigs(ctx); err != nil || !cmp.Equal(got, map[string]string{"other": `{}`}) {
		t.Errorf("after forgetting built's: %v, %v", got, err)
	}
}
