package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/berth-dev/berth/internal/store"
)

// newStore opens an image store over a real SQLite store in temp dirs.
// users maps image names to the references InUse reports.
func newStore(t *testing.T, users map[string][]Reference) *Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var mu sync.Mutex
	s, err := New(t.Context(), Options{
		Dir: filepath.Join(t.TempDir(), "images"), Catalog: st,
		InUse: func(name string) []Reference { mu.Lock(); defer mu.Unlock(); return users[name] },
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tree writes a small root filesystem into a new directory.
func tree(t *testing.T, greeting string) string {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "bin", "tool"), []byte("#!/bin/sh\necho tool\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "etc", "greeting"), []byte(greeting), 0o644))
	must(os.Symlink("tool", filepath.Join(dir, "bin", "sh")))
	must(os.Chmod(filepath.Join(dir, "etc"), 0o750))
	return dir
}

// tarOf writes dir as a tarball (gzipped when gz) and returns its path.
func tarOf(t *testing.T, dir string, gz bool) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "img.tar")
	args := []string{"-C", dir, "-cf", name, "."}
	if gz {
		name += ".gz"
		args = []string{"-C", dir, "-czf", name, "."}
	}
	if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	return name
}

func TestImportDirAndTarShareADigest(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	dir := tree(t, "hello")
	a, err := s.Import(ctx, "from-dir", dir)
	if err != nil {
		t.Fatalf("Import(dir): %v", err)
	}
	b, err := s.Import(ctx, "from-tar", tarOf(t, dir, false))
	if err != nil {
		t.Fatalf("Import(tar): %v", err)
	}
	c, err := s.Import(ctx, "from-tgz", tarOf(t, dir, true))
	if err != nil {
		t.Fatalf("Import(tar.gz): %v", err)
	}
	if a.Digest != b.Digest || a.Digest != c.Digest || !strings.HasPrefix(a.Digest, DigestPrefix) {
		t.Errorf("digests differ for the same tree: dir %s, tar %s, tar.gz %s", a.Digest, b.Digest, c.Digest)
	}
	if want := int64(len("#!/bin/sh\necho tool\n") + len("hello")); a.Size != want {
		t.Errorf("Size = %d, want %d", a.Size, want)
	}
	other, err := s.Import(ctx, "other", tree(t, "bye"))
	if err != nil {
		t.Fatal(err)
	}
	if other.Digest == a.Digest {
		t.Error("different contents gave the same digest")
	}

	root, err := s.Rootfs("from-tar")
	if err != nil {
		t.Fatalf("Rootfs: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc", "greeting")); err != nil || string(b) != "hello" {
		t.Errorf("etc/greeting in the rootfs = %q, %v", b, err)
	}
	if target, err := os.Readlink(filepath.Join(root, "bin", "sh")); err != nil || target != "tool" {
		t.Errorf("bin/sh links to %q, %v; want tool", target, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "etc")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("etc has mode %v, %v; want 0750", fi.Mode().Perm(), err)
	}
	// One tree for three names.
	ents, err := os.ReadDir(filepath.Join(s.dir, "sha256"))
	if err != nil || len(ents) != 2 {
		t.Errorf("sha256/ holds %d trees (%v), want 2", len(ents), err)
	}
	if !s.Exists("from-dir") || s.Exists("nope") {
		t.Error("Exists is wrong")
	}
	if _, err := s.Rootfs("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Rootfs(nope): %v, want ErrNotFound", err)
	}
}

func TestDigestCoversModesAndLinks(t *testing.T) {
	base := tree(t, "x")
	d0, _, err := Digest(base)
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(dir string) error{
		"mode": func(dir string) error { return os.Chmod(filepath.Join(dir, "bin", "tool"), 0o700) },
		"symlink": func(dir string) error {
			os.Remove(filepath.Join(dir, "bin", "sh"))
			return os.Symlink("other", filepath.Join(dir, "bin", "sh"))
		},
		"path": func(dir string) error {
			return os.Rename(filepath.Join(dir, "etc", "greeting"), filepath.Join(dir, "etc", "greetinG"))
		},
		"content": func(dir string) error { return os.WriteFile(filepath.Join(dir, "etc", "greeting"), []byte("y"), 0o644) },
		"new dir": func(dir string) error { return os.Mkdir(filepath.Join(dir, "var"), 0o755) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := tree(t, "x")
			if err := change(dir); err != nil {
				t.Fatal(err)
			}
			d, _, err := Digest(dir)
			if err != nil {
				t.Fatal(err)
			}
			if d == d0 {
				t.Errorf("changing the %s left the digest %s", name, d)
			}
		})
	}
	again, _, _ := Digest(tree(t, "x"))
	if again != d0 {
		t.Errorf("the same tree digests to %s and %s", d0, again)
	}
}

func TestImportRefusesEscapes(t *testing.T) {
	s := newStore(t, nil)
	for name, entries := range map[string][]tar.Header{
		"hardlink out":   {{Name: "x", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}},
		"through link":   {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"}, {Name: "l/etc/evil", Typeflag: tar.TypeReg, Mode: 0o644}},
		"link to parent": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: ".."}, {Name: "l/evil", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range entries {
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
			}
			tw.Close()
			_, err := s.ImportTar(t.Context(), "evil", &buf, "upload")
			if !errors.Is(err, ErrBadSource) {
				t.Errorf("ImportTar: %v, want ErrBadSource", err)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(s.dir), "evil")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a file escaped the image: %v", err)
			}
		})
	}
	if _, err := s.ImportTar(t.Context(), "junk", strings.NewReader("not a tarball at all, no"), "upload"); !errors.Is(err, ErrBadSource) {
		t.Errorf("ImportTar(junk): %v, want ErrBadSource", err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("garbage"))
	zw.Close()
	if _, err := s.ImportTar(t.Context(), "junk", &gz, "upload"); !errors.Is(err, ErrBadSource) {
		t.Errorf("ImportTar(gzipped junk): %v, want ErrBadSource", err)
	}
	if _, err := s.Import(t.Context(), "missing", "/nonexistent/berth/image"); !errors.Is(err, ErrBadSource) {
		t.Errorf("Import(missing path): %v, want ErrBadSource", err)
	}
	// A leading ".." is resolved against the root, as tar does.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "../../up", Typeflag: tar.TypeReg, Mode: 0o644})
	tw.Close()
	if _, err := s.ImportTar(t.Context(), "up", &buf, "upload"); err != nil {
		t.Fatalf("ImportTar(../../up): %v", err)
	}
	if root, _ := s.Rootfs("up"); !fileExists(filepath.Join(root, "up")) {
		t.Error("../../up did not land at the image's /up")
	}
	if s.Exists("evil") || s.Exists("junk") {
		t.Error("a refused import left a name behind")
	}
	if ents, _ := os.ReadDir(filepath.Join(s.dir, "tmp")); len(ents) != 0 {
		t.Errorf("refused imports left %d entries in tmp/", len(ents))
	}
}

func TestNames(t *testing.T) {
	for name, ok := range map[string]bool{
		"busybox": true, "heyo/alpine:3.24": true, "a.b_c-d": true, "x": true,
		"": false, "-x": false, "../etc": false, "a..b": false, "a b": false, "/abs": false,
		strings.Repeat("a", 129): false,
	} {
		if ValidName(name) != ok {
			t.Errorf("ValidName(%q) = %v, want %v", name, !ok, ok)
		}
	}
	s := newStore(t, nil)
	if _, err := s.Import(t.Context(), "bad name", tree(t, "x")); !errors.Is(err, ErrBadName) {
		t.Errorf("Import(bad name): %v, want ErrBadName", err)
	}
}

func TestDeletePinAndInUse(t *testing.T) {
	users := map[string][]Reference{"used": {{Kind: "deployment", ID: "web"}}}
	s := newStore(t, users)
	ctx := t.Context()
	used, err := s.Import(ctx, "used", tree(t, "u"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx, "free", tree(t, "f")); err != nil {
		t.Fatal(err)
	}

	var inUse *InUseError
	if err := s.Delete(ctx, "used"); !errors.As(err, &inUse) || !errors.Is(err, ErrInUse) || inUse.References[0].ID != "web" {
		t.Errorf("Delete(used): %v, want an InUseError naming web", err)
	}
	// Other content under a used name would change running replicas.
	if _, err := s.Import(ctx, "used", tree(t, "changed")); !errors.Is(err, ErrInUse) {
		t.Errorf("re-import of a used name with other content: %v, want ErrInUse", err)
	}
	// The same content is fine.
	if again, err := s.Import(ctx, "used", tree(t, "u")); err != nil || again.Digest != used.Digest {
		t.Errorf("re-import of the same content: %v, %v", again.Digest, err)
	}

	got, err := s.Pin(ctx, "free", true)
	if err != nil || !got.Pinned {
		t.Fatalf("Pin: %+v, %v", got, err)
	}
	if err := s.Delete(ctx, "free"); !errors.Is(err, ErrPinned) {
		t.Errorf("Delete(pinned): %v, want ErrPinned", err)
	}
	// A re-import keeps the pin.
	if again, err := s.Import(ctx, "free", tree(t, "f2")); err != nil || !again.Pinned {
		t.Errorf("re-import: pinned %v, %v; want the pin kept", again.Pinned, err)
	}
	if _, err := s.Pin(ctx, "free", false); err != nil {
		t.Fatal(err)
	}
	root, _ := s.Rootfs("free")
	if err := s.Delete(ctx, "free"); err != nil {
		t.Fatalf("Delete(free): %v", err)
	}
	if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the unused tree is still there: %v", err)
	}
	if err := s.Delete(ctx, "free"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if _, err := s.Pin(ctx, "free", true); !errors.Is(err, ErrNotFound) {
		t.Errorf("Pin(deleted): %v, want ErrNotFound", err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "used" || len(list[0].References) != 1 {
		t.Errorf("List = %+v, %v; want only used, with its reference", list, err)
	}
}

func TestReopenKeepsNames(t *testing.T) {
	dbDir, dir := t.TempDir(), filepath.Join(t.TempDir(), "images")
	st, err := store.Open(dbDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := New(t.Context(), Options{Dir: dir, Catalog: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(t.Context(), "keep", tree(t, "k")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "tmp", "import-crashed"), 0o700)
	s2, err := New(t.Context(), Options{Dir: dir, Catalog: st})
	if err != nil {
		t.Fatal(err)
	}
	if !s2.Exists("keep") {
		t.Error("a reopened store lost the image")
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Errorf("New left %d half-done imports in tmp/", len(ents))
	}
}

func TestExt4(t *testing.T) {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 (e2fsprogs) is not installed")
	}
	s := newStore(t, nil)
	ctx := t.Context()
	if _, err := s.Import(ctx, "disk", tree(t, "on a disk")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	paths := make([]string, 2)
	errs := make([]error, 2)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = s.Ext4("disk", 0) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || paths[0] != paths[1] {
		t.Fatalf("concurrent Ext4: %v %v, %v %v", paths[0], errs[0], paths[1], errs[1])
	}
	fi, err := os.Stat(paths[0])
	if err != nil || fi.Size() != DefaultDiskGB<<30 {
		t.Fatalf("disk size %d, %v; want %d", fi.Size(), err, DefaultDiskGB<<30)
	}
	clone := filepath.Join(t.TempDir(), "replica.ext4")
	if err := CloneFile(clone, paths[0]); err != nil {
		t.Fatalf("CloneFile: %v", err)
	}
	// debugfs reads the file back out of the disk and of its copy.
	if debugfs, err := exec.LookPath("debugfs"); err == nil {
		for _, p := range []string{paths[0], clone} {
			out, err := exec.Command(debugfs, "-R", "cat /etc/greeting", p).Output()
			if err != nil || !strings.Contains(string(out), "on a disk") {
				t.Errorf("debugfs cat /etc/greeting in %s = %q, %v", p, out, err)
			}
		}
	}
	ci, err := os.Stat(clone)
	if err != nil || ci.Size() != fi.Size() {
		t.Fatalf("clone size %d, %v; want %d", ci.Size(), err, fi.Size())
	}
	if st, ok := ci.Sys().(*syscall.Stat_t); ok && st.Blocks*512 >= ci.Size()/2 {
		t.Errorf("the clone allocates %d of %d bytes; want it sparse", st.Blocks*512, ci.Size())
	}
	if _, err := s.Ext4("nope", 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("Ext4(nope): %v, want ErrNotFound", err)
	}
	if _, err := s.Ext4("disk", -1); err == nil {
		t.Error("Ext4 with a negative size succeeded")
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
