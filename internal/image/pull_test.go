package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/berth-dev/berth/internal/image/registrytest"
	"github.com/berth-dev/berth/internal/store"
)

// newPullStore opens a store that may pull from the test registries on
// loopback (Insecure), with ro's credentials and CA roots.
func newPullStore(t *testing.T, ro RegistryOptions) *Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if ro.Insecure == nil {
		ro.Insecure = []string{"127.0.0.1"}
	}
	s, err := New(t.Context(), Options{Dir: filepath.Join(t.TempDir(), "images"), Catalog: st, Registry: ro})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIsReference(t *testing.T) {
	for name, want := range map[string]bool{
		"alpine": false, "alpine:3.20": false, "team/base": false, "team/base:v1": false,
		"docker.io/library/alpine:3.20": true, "ghcr.io/o/app": true, "localhost/app": true,
		"localhost:5000/app:1": true, "127.0.0.1:5000/x": true,
		"app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": true,
	} {
		if got := IsReference(name); got != want {
			t.Errorf("IsReference(%q) = %v, want %v", name, got, want)
		}
	}
}

// whiteoutImage is a two-layer image: the second deletes a file of the
// first (.wh.) and hides a directory's old content (.wh..wh..opq).
func whiteoutImage(t *testing.T) v1.Image {
	base := registrytest.Layer(t,
		registrytest.File{Name: "etc/", Dir: true},
		registrytest.File{Name: "etc/gone.txt", Body: []byte("deleted above")},
		registrytest.File{Name: "etc/kept.txt", Body: []byte("kept")},
		registrytest.File{Name: "data/old/", Dir: true},
		registrytest.File{Name: "data/old/a.txt", Body: []byte("a")},
		registrytest.File{Name: "data/old/sub/", Dir: true},
		registrytest.File{Name: "data/old/sub/b.txt", Body: []byte("b")},
	)
	top := registrytest.Layer(t,
		registrytest.File{Name: "etc/.wh.gone.txt"},
		registrytest.File{Name: "data/old/", Dir: true},
		registrytest.File{Name: "data/old/.wh..wh..opq"},
		registrytest.File{Name: "data/old/c.txt", Body: []byte("c")},
		registrytest.File{Name: "www/index.html", Body: []byte("hello from a registry\n")},
	)
	return registrytest.Image(t, v1.Config{
		Entrypoint: []string{"/bin/busybox", "httpd"}, Cmd: []string{"-f", "-h", "/www"},
		Env: []string{"GREETING=hi there", "PATH=/bin"}, WorkingDir: "/www", User: "0",
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "9090/tcp": {}},
	}, registrytest.BusyboxLayer(t), base, top)
}

func TestPullWhiteoutsAndConfig(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, "app/web:v1", whiteoutImage(t))
	s := newPullStore(t, RegistryOptions{})
	im, err := s.Pull(t.Context(), ref, "a")
	if err != nil {
		t.Fatal(err)
	}
	if im.Name != ref || !strings.Contains(im.Source, "@sha256:") {
		t.Errorf("image = %+v", im)
	}
	root, err := s.Rootfs(ref)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"etc/kept.txt": "kept", "data/old/c.txt": "c", "www/index.html": "hello from a registry\n"} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"etc/gone.txt", "etc/.wh.gone.txt", "data/old/a.txt", "data/old/sub", "data/old/.wh..wh..opq"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it gone", p, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(root, "bin/sh")); err != nil || l != "busybox" {
		t.Errorf("bin/sh -> %q, %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("tmp: %v %v, want sticky", fi, err)
	}
	c, ok := s.Config(ref)
	if !ok || c.Command() != "/bin/busybox httpd -f -h /www" || c.Env["GREETING"] != "hi there" || c.WorkDir != "/www" || c.Port != 8080 || c.User != "0" {
		t.Errorf("config = %+v, command %q", c, c.Command())
	}
	// The tree is hard links into the layer store: one copy on disk.
	if n := linkCount(t, filepath.Join(root, "bin/busybox")); n < 2 {
		t.Errorf("bin/busybox has %d links, want the layer store's and the tree's", n)
	}
	// An import may not replace what a reference's record says.
	if _, err := s.Import(t.Context(), ref, t.TempDir()); !errors.Is(err, ErrBadName) {
		t.Errorf("import over a pulled image: %v, want ErrBadName", err)
	}
	// The same namespace again: memory only — the registry is gone.
	reg.Stop()
	if _, err := s.Pull(t.Context(), ref, "a"); err != nil {
		t.Errorf("a second pull by the same namespace needed the registry: %v", err)
	}
	if !s.Usable(ref, "a") || s.Usable(ref, "b") {
		t.Errorf("Usable a/b = %v/%v, want true/false", s.Usable(ref, "a"), s.Usable(ref, "b"))
	}
	// Another namespace must prove access: with the registry down it cannot.
	if _, err := s.Pull(t.Context(), ref, "b"); !errors.Is(err, ErrPull) {
		t.Errorf("namespace b used a's cached image without resolving it: %v", err)
	}
}

func linkCount(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(fi.Sys().(*syscall.Stat_t).Nlink)
}

func TestPullSharedLayerStoredOnce(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	bb := registrytest.BusyboxLayer(t)
	one := reg.Push(t, "one:v1", registrytest.Image(t, v1.Config{}, bb, registrytest.Layer(t, registrytest.File{Name: "one.txt", Body: []byte("1")})))
	two := reg.Push(t, "two:v1", registrytest.Image(t, v1.Config{}, bb, registrytest.Layer(t, registrytest.File{Name: "two.txt", Body: []byte("2")})))
	s := newPullStore(t, RegistryOptions{})
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i, ref := range []string{one, two, one, two} { // concurrent callers share pulls
		wg.Go(func() { _, errs[i] = s.Pull(t.Context(), ref, "a") })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	layers, _ := os.ReadDir(filepath.Join(s.Dir(), "layers", "sha256"))
	if len(layers) != 3 {
		t.Errorf("%d layers stored, want 3 (busybox once)", len(layers))
	}
	r1, _ := s.Rootfs(one)
	r2, _ := s.Rootfs(two)
	a, _ := os.Stat(filepath.Join(r1, "bin/busybox"))
	b, _ := os.Stat(filepath.Join(r2, "bin/busybox"))
	if !os.SameFile(a, b) {
		t.Error("the shared layer's busybox is two files")
	}
	// Deleting one image keeps the shared layer; deleting both frees it.
	if err := s.Delete(t.Context(), one); err != nil {
		t.Fatal(err)
	}
	if layers, _ = os.ReadDir(filepath.Join(s.Dir(), "layers", "sha256")); len(layers) != 2 {
		t.Errorf("%d layers after deleting one image, want 2", len(layers))
	}
	if _, err := os.Stat(filepath.Join(r2, "bin/busybox")); err != nil {
		t.Error(err)
	}
	if err := s.Delete(t.Context(), two); err != nil {
		t.Fatal(err)
	}
	if layers, _ = os.ReadDir(filepath.Join(s.Dir(), "layers", "sha256")); len(layers) != 0 {
		t.Errorf("%d layers after deleting both images, want 0", len(layers))
	}
}

func TestPullIndexPicksLinuxAmd64(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	arm := registrytest.Image(t, v1.Config{}, registrytest.Layer(t, registrytest.File{Name: "arch", Body: []byte("arm64")}))
	amd := registrytest.Image(t, v1.Config{}, registrytest.Layer(t, registrytest.File{Name: "arch", Body: []byte("amd64")}))
	ref := reg.Push(t, "multi:v1", registrytest.Index(
		registrytest.ForPlatform{OS: "linux", Arch: "arm64", Image: arm},
		registrytest.ForPlatform{OS: "linux", Arch: "amd64", Image: amd},
	))
	s := newPullStore(t, RegistryOptions{})
	if _, err := s.Pull(t.Context(), ref, ""); err != nil {
		t.Fatal(err)
	}
	root, _ := s.Rootfs(ref)
	if b, err := os.ReadFile(filepath.Join(root, "arch")); err != nil || string(b) != "amd64" {
		t.Errorf("arch = %q, %v; want amd64", b, err)
	}
}

func TestPullBasicAuthPerNamespace(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{User: "alice", Password: "s3cret"})
	ref := reg.Push(t, "private:v1", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, registrytest.File{Name: "secret.txt", Body: []byte("x")})))
	var mu sync.Mutex
	creds := map[string]authn.Authenticator{"a": &authn.Basic{Username: "alice", Password: "s3cret"}}
	s := newPullStore(t, RegistryOptions{Auth: func(_ context.Context, ns, host string) (authn.Authenticator, error) {
		mu.Lock()
		defer mu.Unlock()
		if host != reg.Host {
			t.Errorf("credentials asked for host %q, want %q", host, reg.Host)
		}
		return creds[ns], nil
	}})
	if _, err := s.Pull(t.Context(), ref, "b"); !errors.Is(err, ErrPull) {
		t.Fatalf("anonymous pull of a private image: %v", err)
	}
	if _, err := s.Pull(t.Context(), ref, "a"); err != nil {
		t.Fatal(err)
	}
	// b, still without credentials, may not use a's cached copy.
	if _, err := s.Pull(t.Context(), ref, "b"); !errors.Is(err, ErrPull) {
		t.Fatalf("namespace b reached a's private image: %v", err)
	}
	if s.Usable(ref, "b") {
		t.Fatal("b may use a's private image")
	}
	// Once b has its own credentials a HEAD proves it: no layer again.
	mu.Lock()
	creds["b"] = &authn.Basic{Username: "alice", Password: "s3cret"}
	mu.Unlock()
	layer, _ := os.ReadDir(filepath.Join(s.Dir(), "layers", "sha256"))
	before, _ := os.Stat(filepath.Join(s.Dir(), "layers", "sha256", layer[0].Name()))
	if _, err := s.Pull(t.Context(), ref, "b"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(filepath.Join(s.Dir(), "layers", "sha256", layer[0].Name()))
	if !s.Usable(ref, "b") || !os.SameFile(before, after) {
		t.Error("b's proven pull did not reuse the layer")
	}
}

func TestPullTLS(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{TLS: true})
	ref := reg.Push(t, "tls:v1", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, registrytest.File{Name: "f", Body: []byte("tls")})))
	// Loopback is allowed, plain HTTP is not needed: https with the CA.
	untrusting := newPullStore(t, RegistryOptions{})
	if _, err := untrusting.Pull(t.Context(), ref, ""); !errors.Is(err, ErrPull) {
		t.Fatalf("pull without the registry's CA: %v", err)
	}
	s := newPullStore(t, RegistryOptions{RootCAs: reg.CAs})
	if _, err := s.Pull(t.Context(), ref, ""); err != nil {
		t.Fatal(err)
	}
}

func TestPullRefusesCorruptBlobAndResumes(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	good := registrytest.Layer(t, registrytest.File{Name: "good.txt", Body: []byte("good")})
	bad := registrytest.Layer(t, registrytest.File{Name: "bad.txt", Body: []byte(strings.Repeat("bad", 1000))})
	ref := reg.Push(t, "corrupt:v1", registrytest.Image(t, v1.Config{}, good, bad))
	d, _ := bad.Digest()
	blob := reg.BlobPath(d.String())
	orig, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	garbage := []byte(strings.Repeat("X", len(orig)))
	if err := os.WriteFile(blob, garbage, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newPullStore(t, RegistryOptions{Jobs: 1})
	_, err = s.Pull(t.Context(), ref, "")
	if err == nil || !strings.Contains(err.Error(), d.String()) {
		t.Fatalf("pull of a corrupt blob: %v; want a refusal naming %s", err, d)
	}
	if s.Exists(ref) {
		t.Fatal("a corrupt image was stored")
	}
	gd, _ := good.DiffID()
	kept, err := os.Stat(s.layerDir(gd.String()))
	if err != nil {
		t.Fatalf("the verified layer was not kept for the retry: %v", err)
	}
	bd, _ := bad.DiffID()
	if _, err := os.Stat(s.layerDir(bd.String())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the corrupt layer is in the layer store: %v", err)
	}
	// Repaired: the retry fetches only the missing layer.
	if err := os.WriteFile(blob, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(t.Context(), ref, ""); err != nil {
		t.Fatal(err)
	}
	again, _ := os.Stat(s.layerDir(gd.String()))
	if !os.SameFile(kept, again) {
		t.Error("the retry downloaded the verified layer again")
	}
}

func TestPullRefusesUnlistedAndMetadataHosts(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, "x:v1", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, registrytest.File{Name: "f", Body: []byte("x")})))
	s := newPullStore(t, RegistryOptions{Insecure: []string{}})
	if _, err := s.Pull(t.Context(), ref, "a"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("pull from an unlisted loopback registry: %v", err)
	}
	for _, bad := range []string{"169.254.169.254/x:y", "100.100.100.200/x:y"} {
		if _, err := s.Pull(t.Context(), bad, "a"); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("pull from %s: %v; want refused", bad, err)
		}
	}
	if _, err := s.Pull(t.Context(), "alpine:3", "a"); !errors.Is(err, ErrBadName) {
		t.Errorf("pull of a local name: %v", err)
	}
}

func TestSweep(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	bb := registrytest.BusyboxLayer(t)
	var refs []string
	for _, n := range []string{"old", "mid", "new"} {
		refs = append(refs, reg.Push(t, n+":v1", registrytest.Image(t, v1.Config{}, bb, registrytest.Layer(t, registrytest.File{Name: n, Body: []byte(strings.Repeat(n, 1000))}))))
	}
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	users := map[string][]Reference{refs[0]: {{Kind: "deployment", ID: "web"}}} // "old" is in use
	s, err := New(t.Context(), Options{Dir: filepath.Join(t.TempDir(), "images"), Catalog: st,
		Registry: RegistryOptions{Insecure: []string{"127.0.0.1"}},
		InUse:    func(name string) []Reference { return users[name] }})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if _, err := s.Pull(t.Context(), r, "a"); err != nil {
			t.Fatal(err)
		}
	}
	// Under budget: nothing goes.
	res, err := s.Sweep(t.Context(), 1<<40)
	if err != nil || res.Pressure || len(res.Removed) != 0 {
		t.Fatalf("sweep under budget: %+v, %v", res, err)
	}
	// The busybox layer alone is over a 1 MiB budget: every unused image
	// goes, oldest first, the used one stays, and so does its layer.
	res, err = s.Sweep(t.Context(), 1<<20)
	if err != nil || !res.Pressure || len(res.Removed) != 2 || res.Removed[0] != refs[1] || res.Removed[1] != refs[2] {
		t.Fatalf("sweep over budget: %+v, %v; want %v removed", res, err, refs[1:])
	}
	layers, _ := os.ReadDir(filepath.Join(s.Dir(), "layers", "sha256"))
	if len(layers) != 2 || !s.Exists(refs[0]) {
		t.Errorf("%d layers left (want busybox and old's), old exists: %v", len(layers), s.Exists(refs[0]))
	}
	root, _ := s.Rootfs(refs[0])
	if _, err := os.Stat(filepath.Join(root, "bin/busybox")); err != nil {
		t.Error(err)
	}
}

// TestPullRecordSurvivesRestart: a reopened store knows what was pulled,
// by whom, and the image's config, without the registry.
func TestPullRecordSurvivesRestart(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, "keep:v1", registrytest.Image(t, v1.Config{Cmd: []string{"run", "it"}, WorkingDir: "/srv"},
		registrytest.Layer(t, registrytest.File{Name: "f", Body: []byte("x")})))
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	dir := filepath.Join(t.TempDir(), "images")
	o := Options{Dir: dir, Catalog: st, Registry: RegistryOptions{Insecure: []string{"127.0.0.1"}}}
	s, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(t.Context(), ref, "a"); err != nil {
		t.Fatal(err)
	}
	reg.Stop()
	s2, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := s2.Config(ref)
	if !ok || c.Command() != "run it" || c.WorkDir != "/srv" || !s2.Usable(ref, "a") || s2.Usable(ref, "b") {
		t.Errorf("after a restart: config %+v %v, usable a %v b %v", c, ok, s2.Usable(ref, "a"), s2.Usable(ref, "b"))
	}
	if _, err := s2.Pull(t.Context(), ref, "a"); err != nil {
		t.Errorf("the same namespace after a restart needed the registry: %v", err)
	}
}

// TestPullRefusesUnsafeLayer: a layer is unpacked by the same code as an
// imported tarball (unpackTar): names are resolved inside the image, so a
// hard link to ../../etc/passwd links the image's own etc/passwd (missing
// here: the pull fails) and never the host's, and a "../" file stays
// inside.
func TestPullRefusesUnsafeLayer(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	escape := reg.Push(t, "evil:link", registrytest.Image(t, v1.Config{}, registrytest.Layer(t,
		registrytest.File{Name: "passwd", HardLink: "../../../../etc/passwd"})))
	dotdot := reg.Push(t, "evil:dotdot", registrytest.Image(t, v1.Config{}, registrytest.Layer(t,
		registrytest.File{Name: "../../outside.txt", Body: []byte("inside after all")})))
	s := newPullStore(t, RegistryOptions{})
	before := linkCount(t, "/etc/passwd")
	if _, err := s.Pull(t.Context(), escape, ""); err == nil || !strings.Contains(err.Error(), `tar entry "passwd"`) {
		t.Errorf("a hard link out of the image: %v", err)
	}
	if after := linkCount(t, "/etc/passwd"); after != before {
		t.Errorf("the host's /etc/passwd gained a link (%d → %d)", before, after)
	}
	if _, err := s.Pull(t.Context(), dotdot, ""); err != nil {
		t.Fatal(err)
	}
	root, _ := s.Rootfs(dotdot)
	if b, err := os.ReadFile(filepath.Join(root, "outside.txt")); err != nil || string(b) != "inside after all" {
		t.Errorf("../ entry: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "..", "outside.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a ../ entry left the image: %v", err)
	}
}

// TestPullRefusesReencodedBlob: a blob whose uncompressed tar is the
// layer's (the diff id matches) but whose bytes are not the ones the
// manifest names is refused: the compressed digest is checked too.
func TestPullRefusesReencodedBlob(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	l := registrytest.Layer(t, registrytest.File{Name: "f.txt", Body: []byte(strings.Repeat("same tar, other gzip ", 500))})
	ref := reg.Push(t, "reenc:v1", registrytest.Image(t, v1.Config{}, l))
	d, _ := l.Digest()
	blob := reg.BlobPath(d.String())
	orig, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(orig))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var re bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&re, gzip.NoCompression)
	zw.Write(raw)
	zw.Close()
	if err := os.WriteFile(blob, re.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newPullStore(t, RegistryOptions{})
	_, err = s.Pull(t.Context(), ref, "a")
	if err == nil || !strings.Contains(err.Error(), d.String()) {
		t.Fatalf("pull of a re-encoded blob: %v; want a refusal naming %s", err, d)
	}
	t.Logf("refused: %v", err)
	did, _ := l.DiffID()
	if s.Exists(ref) {
		t.Error("the image was stored")
	}
	if _, err := os.Stat(s.layerDir(did.String())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the layer is in the layer store: %v", err)
	}
}

// TestSecondUseSendsNoRequest counts the requests a registry sees: a
// namespace's second use of an image it pulled sends none, in the same
// process and after a restart; another namespace's first use sends only
// what re-resolving the manifest takes, no blob.
func TestSecondUseSendsNoRequest(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	reg.Push(t, "count/app:v1", whiteoutImage(t))
	proxy := reg.CountingProxy(t)
	ref := proxy.Host + "/count/app:v1"
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	o := Options{Dir: filepath.Join(t.TempDir(), "images"), Catalog: st, Registry: RegistryOptions{Insecure: []string{"127.0.0.1"}}}
	s, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(t.Context(), ref, "a"); err != nil {
		t.Fatal(err)
	}
	first := proxy.Requests()
	if first == 0 {
		t.Fatal("the first pull sent no request through the proxy")
	}
	if _, err := s.Pull(t.Context(), ref, "a"); err != nil {
		t.Fatal(err)
	}
	if got := proxy.Requests() - first; got != 0 {
		t.Errorf("a second use by the same namespace sent %d requests, want 0", got)
	}
	s2, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Pull(t.Context(), ref, "a"); err != nil {
		t.Fatal(err)
	}
	if got := proxy.Requests() - first; got != 0 {
		t.Errorf("a use by the same namespace after a restart sent %d requests, want 0", got)
	}
	before := proxy.Requests()
	if _, err := s2.Pull(t.Context(), ref, "b"); err != nil {
		t.Fatal(err)
	}
	t.Logf("requests: the pull %d, namespace b's re-resolve %d", first, proxy.Requests()-before)
	if got := proxy.Requests() - before; got == 0 || got >= first {
		t.Errorf("another namespace's first use sent %d requests; want a re-resolve (more than 0, fewer than the pull's %d)", got, first)
	}
}

// TestPullZstdLayer: a zstd layer (OCI's tar+zstd) under a gzip one is
// verified and unpacked as a gzip one is.
func TestPullZstdLayer(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	base := registrytest.Layer(t, registrytest.File{Name: "etc/", Dir: true}, registrytest.File{Name: "etc/base.txt", Body: []byte("gzip")})
	top := registrytest.ZstdLayer(t, registrytest.File{Name: "etc/top.txt", Body: []byte(strings.Repeat("zstd ", 1000))})
	if mt, _ := top.MediaType(); mt != types.OCILayerZStd {
		t.Fatalf("the top layer is %s", mt)
	}
	ref := reg.Push(t, "zstd/app:v1", registrytest.Image(t, v1.Config{}, base, top))
	s := newPullStore(t, RegistryOptions{})
	if _, err := s.Pull(t.Context(), ref, "a"); err != nil {
		t.Fatal(err)
	}
	root, err := s.Rootfs(ref)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"etc/base.txt": "gzip", "etc/top.txt": strings.Repeat("zstd ", 1000)} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
			t.Errorf("%s = %.20q, %v", p, b, err)
		}
	}
}
