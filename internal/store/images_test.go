package store

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestImages(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	const d1, d2 = "sha256:aa", "sha256:bb"
	a, err := s.PutImage(ctx, Image{Name: "a", Digest: d1, Size: 10, Source: "upload"}, true)
	if err != nil {
		t.Fatalf("PutImage: %v", err)
	}
	if a.CreatedAt.IsZero() {
		t.Error("PutImage left CreatedAt zero")
	}
	if _, err := s.PutImage(ctx, Image{Name: "b", Digest: d1, Size: 10, Source: "/srv/b"}, true); err != nil {
		t.Fatalf("PutImage: %v", err)
	}
	if err := s.PinImage(ctx, "a", true); err != nil {
		t.Fatalf("PinImage: %v", err)
	}
	if err := s.PinImage(ctx, "nope", true); !errors.Is(err, ErrNotFound) {
		t.Errorf("PinImage(nope): %v, want ErrNotFound", err)
	}
	// A re-import keeps the pin when asked to.
	a2, err := s.PutImage(ctx, Image{Name: "a", Digest: d2, Size: 20, Source: "upload"}, true)
	if err != nil {
		t.Fatalf("PutImage again: %v", err)
	}
	if !a2.Pinned {
		t.Error("re-import with keepPinned lost the pin")
	}
	got, err := s.Image(ctx, "a")
	if err != nil {
		t.Fatalf("Image: %v", err)
	}
	if diff := cmp.Diff(a2, got); diff != "" {
		t.Errorf("Image(a) (-put +got):\n%s", diff)
	}
	if _, err := s.Image(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Image(nope): %v, want ErrNotFound", err)
	}
	list, err := s.Images(ctx)
	if err != nil {
		t.Fatalf("Images: %v", err)
	}
	if len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("Images = %+v, want a and b", list)
	}

	// b shares d1 with nobody now (a moved to d2).
	digest, shared, err := s.DeleteImage(ctx, "b")
	if err != nil || digest != d1 || shared {
		t.Errorf("DeleteImage(b) = %q, %v, %v; want %q, false, nil", digest, shared, err, d1)
	}
	if _, err := s.PutImage(ctx, Image{Name: "c", Digest: d2, Source: "upload"}, false); err != nil {
		t.Fatal(err)
	}
	digest, shared, err = s.DeleteImage(ctx, "a")
	if err != nil || digest != d2 || !shared {
		t.Errorf("DeleteImage(a) = %q, %v, %v; want %q, true (c shares it), nil", digest, shared, err, d2)
	}
	if _, _, err := s.DeleteImage(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second DeleteImage(a): %v, want ErrNotFound", err)
	}
	if _, err := s.PutImage(ctx, Image{Name: "", Digest: d1}, false); err == nil {
		t.Error("PutImage without a name succeeded")
	}
}
