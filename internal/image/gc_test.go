package image

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// bigTree is tree with a file of n bytes, so each image's size is known.
func bigTree(t *testing.T, greeting string, n int) string {
	t.Helper()
	dir := tree(t, greeting)
	if err := os.WriteFile(filepath.Join(dir, "blob"), []byte(strings.Repeat("x", n)), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSweepBuiltImagesAndOrphanTrees: a sweep removes the trees no image
// names whatever the budget, and over budget the unused built images
// oldest first — never the one a deployment uses, a pinned one, or one
// whose tree a replica's overlay has mounted — and says how many bytes it
// freed.
func TestSweepBuiltImagesAndOrphanTrees(t *testing.T) {
	users := map[string][]Reference{"web-mmmm": {{Kind: "deployment", ID: "web"}}}
	s := newStore(t, users)
	ctx := t.Context()
	sizes := map[string]int64{}
	for i, n := range []string{"web-zzzz", "web-aaaa", "web-mmmm", "pinned", "orphan"} {
		im, err := s.ImportBuilt(ctx, n, bigTree(t, n, 10_000*(i+1)), Config{Cmd: []string{"/bin/tool"}})
		if err != nil {
			t.Fatal(err)
		}
		sizes[n] = im.Size
	}
	if _, err := s.Pin(ctx, "pinned", true); err != nil {
		t.Fatal(err)
	}
	// "orphan": its tree stays, its record goes — as a crash between the
	// tree's move into place and its record leaves it.
	orphanRoot, _ := s.Rootfs("orphan")
	orphanTree := filepath.Dir(orphanRoot)
	if _, _, err := s.cat.DeleteImage(ctx, "orphan"); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	delete(s.digests, "orphan")
	s.mu.Unlock()

	// Under budget: only the orphan goes.
	res, err := s.Sweep(ctx, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pressure || len(res.Removed) != 0 || res.Orphans != 1 || res.Freed != sizes["orphan"] {
		t.Fatalf("sweep under budget: %+v; want the orphan's %d bytes freed", res, sizes["orphan"])
	}
	if _, err := os.Stat(orphanTree); !os.IsNotExist(err) {
		t.Errorf("the orphan tree is still there: %v", err)
	}

	// A replica's overlay over web-aaaa's tree keeps it, as the old
	// replicas of a rollout keep the build they run.
	mounted := false
	if os.Geteuid() == 0 {
		lower, _ := s.Rootfs("web-aaaa")
		rep := filepath.Join(t.TempDir(), "web-0123abcd")
		for _, d := range []string{"rootfs", "upper", "work"} {
			if err := os.MkdirAll(filepath.Join(rep, d), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		opts := "lowerdir=" + lower + ",upperdir=" + filepath.Join(rep, "upper") + ",workdir=" + filepath.Join(rep, "work")
		if err := syscall.Mount("overlay", filepath.Join(rep, "rootfs"), "overlay", 0, opts); err == nil {
			mounted = true
			t.Cleanup(func() { syscall.Unmount(filepath.Join(rep, "rootfs"), syscall.MNT_DETACH) })
			if err := s.Delete(ctx, "web-aaaa"); err == nil || !strings.Contains(err.Error(), "replica web-0123abcd") {
				t.Errorf("deleting a mounted image: %v, want in use by the replica", err)
			}
		} else {
			t.Logf("no overlayfs here (%v): the mounted case is not checked", err)
		}
	}

	// Over budget: the unused built images go, oldest first (zzzz was
	// built before aaaa); the one in use and the pinned one stay.
	res, err = s.Sweep(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want, freed := []string{"web-zzzz", "web-aaaa"}, sizes["web-zzzz"]+sizes["web-aaaa"]
	if mounted {
		want, freed = []string{"web-zzzz"}, sizes["web-zzzz"]
	}
	if !res.Pressure || strings.Join(res.Removed, ",") != strings.Join(want, ",") || res.Freed != freed || len(res.Failed) != 0 || res.Orphans != 0 {
		t.Fatalf("sweep over budget: %+v; want %v removed, %d bytes freed", res, want, freed)
	}
	for _, n := range []string{"web-mmmm", "pinned"} {
		if !s.Exists(n) {
			t.Errorf("%s was removed", n)
		}
		if _, ok := s.Config(n); !ok {
			t.Errorf("%s lost its built config", n)
		}
	}
	if _, ok := s.Config("web-zzzz"); ok || s.Exists("web-zzzz") {
		t.Error("web-zzzz is still there")
	}
	ents, _ := os.ReadDir(filepath.Join(s.Dir(), "sha256"))
	if left := 4 - len(want); len(ents) != left {
		t.Errorf("%d trees left, want %d", len(ents), left)
	}
}
