package workspace_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/workspace"
)

// records adapts the real SQLite store to workspace.Records.
type records struct{ s *store.Store }

func (r records) Workspace(ctx context.Context, id string) (workspace.Record, bool, error) {
	w, ok, err := r.s.Workspace(ctx, id)
	return workspace.Record{Digest: w.Digest, CapturedAt: w.CapturedAt, CapturedFrom: w.CapturedFrom, Files: w.Files, Bytes: w.Bytes,
		Pushed: w.Pushed, PushedStore: w.PushedStore, PushedAt: w.PushedAt}, ok, err
}

func (r records) PutWorkspace(ctx context.Context, id string, w workspace.Record) error {
	return r.s.PutWorkspace(ctx, store.Workspace{Deployment: id, Digest: w.Digest, CapturedAt: w.CapturedAt, CapturedFrom: w.CapturedFrom,
		Files: w.Files, Bytes: w.Bytes, Pushed: w.Pushed, PushedStore: w.PushedStore, PushedAt: w.PushedAt})
}

// host is one berth data directory: a real store with deployment "app".
type host struct {
	dir string
	st  *store.Store
}

func newHost(t *testing.T, dir string) *host {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.PutDeployment(context.Background(), store.Deployment{ID: "app", Spec: []byte(`{"id":"app"}`)}, false, 0); err != nil {
		t.Fatal(err)
	}
	return &host{dir: dir, st: st}
}

// open opens deployment app's workspace on h with remote (nil: none).
func (h *host) open(t *testing.T, remote workspace.Remote, mod func(*workspace.Options)) *workspace.Deployment {
	t.Helper()
	o := workspace.Options{
		ID: "app", Dir: filepath.Join(h.dir, "workspaces", "app"), Records: records{h.st},
		Open: func(context.Context, workspace.Spec) (workspace.Remote, error) {
			if remote == nil {
				return nil, errors.New("no store")
			}
			return remote, nil
		},
		Alive: func(context.Context, string) workspace.Liveness { return workspace.Gone },
	}
	if mod != nil {
		mod(&o)
	}
	d, err := workspace.Open(o, workspace.Spec{Store: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWorkspaceTarIsDeterministicAndRestores(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		write(t, filepath.Join(d, "x/y.txt"), "hello")
		write(t, filepath.Join(d, "z"), "zz")
		os.Symlink("x/y.txt", filepath.Join(d, "link"))
	}
	mt := time.Unix(1700000000, 0)
	for _, d := range []string{a, b} {
		for _, p := range []string{"x/y.txt", "z", "x", "."} {
			os.Chtimes(filepath.Join(d, p), mt, mt)
		}
	}
	var ta, tb bytes.Buffer
	sa, err := workspace.WriteTar(&ta, a)
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := workspace.WriteTar(&tb, b)
	if sa.Digest != sb.Digest || !bytes.Equal(ta.Bytes(), tb.Bytes()) {
		t.Fatalf("equal trees gave different tars: %s %s", sa.Digest, sb.Digest)
	}
	if sa.Files != 2 || sa.Bytes != 7 {
		t.Errorf("stats %+v", sa)
	}
	write(t, filepath.Join(b, "z"), "zZ")
	os.Chtimes(filepath.Join(b, "z"), mt, mt)
	if sc, _ := workspace.WriteTar(&bytes.Buffer{}, b); sc.Digest == sa.Digest {
		t.Error("a changed file kept the digest")
	}
	out := t.TempDir()
	if err := workspace.Restore(bytes.NewReader(ta.Bytes()), sa.Digest, out); err != nil {
		t.Fatal(err)
	}
	if read(t, filepath.Join(out, "link")) != "hello" || read(t, filepath.Join(out, "z")) != "zz" {
		t.Error("restored tree differs")
	}
	if fi, _ := os.Stat(filepath.Join(out, "z")); !fi.ModTime().Equal(mt) {
		t.Errorf("mtime %v", fi.ModTime())
	}
	// A tampered snapshot is refused.
	bad := bytes.Clone(ta.Bytes())
	bad[len(bad)/3] ^= 1
	var mm *workspace.DigestMismatchError
	if err := workspace.Restore(bytes.NewReader(bad), sa.Digest, t.TempDir()); !errors.As(err, &mm) && err == nil {
		t.Errorf("tampered snapshot: %v", err)
	}
}

func TestWorkspaceExtractStaysInside(t *testing.T) {
	for name, entries := range map[string][]tar.Header{
		"dotdot":  {{Name: "../evil", Typeflag: tar.TypeReg}},
		"symlink": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "l/evil", Typeflag: tar.TypeReg}},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			tw.WriteHeader(&h)
		}
		tw.Close()
		dir := t.TempDir()
		if err := workspace.Extract(&buf, filepath.Join(dir)); err == nil {
			t.Errorf("%s: extracted", name)
		}
		if _, err := os.Stat("/tmp/evil"); err == nil {
			t.Fatalf("%s: wrote outside", name)
		}
	}
}

// localRemote is berth's own artifact store, namespace "default".
func localRemote(t *testing.T, root string) workspace.Remote {
	t.Helper()
	st, err := artifact.NewStore(root, artifact.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := artifact.OpenOptions{Local: st}
	src, err := artifact.Open("local", "default", "", o)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := artifact.OpenSink("local", "default", "", o)
	if err != nil {
		t.Fatal(err)
	}
	return workspace.ArtifactRemote(src, sink)
}

func waitPushed(t *testing.T, d *workspace.Deployment) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st := d.Status()
		if st.Digest != nil && st.Pushed != nil && *st.Pushed == *st.Digest && !st.PushPending {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never pushed: %+v", st)
		}
	}
}

// testRetireAndRestore: a file written in replica 1's workspace is in
// replica 2's after 1 retired, and in a fresh host's replica once pushed.
func testRetireAndRestore(t *testing.T, remote workspace.Remote) {
	ctx := context.Background()
	d := newHost(t, t.TempDir()).open(t, remote, nil)
	dir1, err := d.Seed(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if st := d.Status(); st.Digest != nil || st.Phase != "idle" {
		t.Fatalf("a new workspace: %+v", st)
	}
	write(t, filepath.Join(dir1, "notes/a.txt"), "one")
	if err := d.Retired(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir1); !os.IsNotExist(err) {
		t.Errorf("a captured replica's directory stayed: %v", err)
	}
	st := d.Status()
	if st.Digest == nil || *st.CapturedFrom != "r1" || st.Files != 1 || st.Bytes != 3 {
		t.Fatalf("after the capture: %+v", st)
	}
	dir2, err := d.Seed(ctx, "r2")
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(dir2, "notes/a.txt")); got != "one" {
		t.Fatalf("replica 2 read %q", got)
	}
	write(t, filepath.Join(dir2, "notes/b.txt"), "two")
	if err := d.Retired(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	waitPushed(t, d)
	want := *d.Status().Digest

	// A fresh data directory has no record: it restores from the store.
	f := newHost(t, t.TempDir()).open(t, remote, nil)
	dir3, err := f.Seed(ctx, "r3")
	if err != nil {
		t.Fatal(err)
	}
	if read(t, filepath.Join(dir3, "notes/a.txt")) != "one" || read(t, filepath.Join(dir3, "notes/b.txt")) != "two" {
		t.Error("the fresh host's replica lacks the files")
	}
	if st := f.Status(); st.Digest == nil || *st.Digest != want || st.Pushed == nil || st.PushPending || st.Files != 2 {
		t.Errorf("restored status %+v", st)
	}
}

func TestWorkspaceArtifactStore(t *testing.T) {
	testRetireAndRestore(t, localRemote(t, t.TempDir()))
}

func TestWorkspaceS3(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("snaps"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	s3, err := workspace.NewS3("s3://snaps/team/ws", workspace.S3Options{Endpoint: srv.URL, AccessKey: "AK", SecretKey: "SK", Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	testRetireAndRestore(t, s3)
	// The layout: the tag object names the digest, the blob is there.
	ctx := context.Background()
	hex, err := s3.Resolve(ctx, "workspace-app")
	if err != nil {
		t.Fatal(err)
	}
	rc, size, err := s3.Object(ctx, "team/ws/blobs/sha256/"+hex)
	if err != nil || size <= 0 {
		t.Fatalf("blob object: %v %d", err, size)
	}
	rc.Close()
	if _, err := s3.Resolve(ctx, "workspace-other"); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("a missing tag: %v", err)
	}
}

// TestWorkspaceUnreadableStoreBlocksFreshHost: a host without a record
// whose store cannot be read starts no replica (an empty one would be
// captured and pushed over the store's workspace).
func TestWorkspaceUnreadableStoreBlocksFreshHost(t *testing.T) {
	d := newHost(t, t.TempDir()).open(t, nil, nil)
	if _, err := d.Seed(context.Background(), "r1"); err == nil || !strings.Contains(err.Error(), "could not be opened") {
		t.Fatalf("seed with no store: %v", err)
	}
	if st := d.Status(); st.LastError == "" {
		t.Error("no last_error")
	}
}

// TestWorkspaceSeedWaitsForTheOldReplica: while another replica still
// runs (a rollout's old one), a seed waits, blocked, and proceeds with
// what that replica left once it retired.
func TestWorkspaceSeedWaitsForTheOldReplica(t *testing.T) {
	ctx := context.Background()
	alive := map[string]bool{}
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	d := newHost(t, t.TempDir()).open(t, localRemote(t, t.TempDir()), func(o *workspace.Options) {
		o.Alive = func(_ context.Context, id string) workspace.Liveness {
			<-mu
			defer func() { mu <- struct{}{} }()
			if alive[id] {
				return workspace.Running
			}
			return workspace.Gone
		}
	})
	dir1, err := d.Seed(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	<-mu
	alive["old"] = true
	mu <- struct{}{}
	got := make(chan string, 1)
	go func() {
		dir, err := d.Seed(ctx, "new")
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		b, _ := os.ReadFile(filepath.Join(dir, "late"))
		got <- string(b)
	}()
	for d.Status().Phase != "blocked" {
		time.Sleep(time.Millisecond)
	}
	if st := d.Status(); !strings.Contains(st.Blocked, "old") {
		t.Errorf("blocked %q", st.Blocked)
	}
	write(t, filepath.Join(dir1, "late"), "written while draining")
	<-mu
	alive["old"] = false
	mu <- struct{}{}
	if err := d.Retired(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "written while draining" {
		t.Fatalf("the new replica read %q", s)
	}
}

// TestWorkspaceCorruptSnapshotIsNotBooted: a local snapshot whose bytes no
// longer match its digest is never unpacked for a replica; it is fetched
// again from the store.
func TestWorkspaceCorruptSnapshotIsNotBooted(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, t.TempDir())
	d := h.open(t, localRemote(t, t.TempDir()), nil)
	dir, err := d.Seed(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "f"), strings.Repeat("good ", 1000))
	if err := d.Retired(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	waitPushed(t, d)
	snap := filepath.Join(h.dir, "workspaces/app/snapshots", *d.Status().Digest+".tar")
	b := []byte(read(t, snap))
	copy(b[bytes.Index(b, []byte("good")):], "evil")
	os.WriteFile(snap, b, 0o600)
	dir2, err := d.Seed(ctx, "r2")
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(dir2, "f")); strings.Contains(got, "evil") {
		t.Fatal("a replica was seeded from a corrupt snapshot")
	}
}

// TestWorkspaceKillNineDuringCapture: berth is killed (SIGKILL) in the
// middle of a capture, its snapshot written but not yet renamed and
// recorded. Nothing captured before is lost: the record still names the
// previous snapshot, which verifies, and the replica's directory is still
// there; the next seed captures it and the new replica has every file.
func TestWorkspaceKillNineDuringCapture(t *testing.T) {
	if os.Getenv("WS_CRASH_CHILD") != "" {
		crashChild(t)
		return
	}
	ctx := context.Background()
	dir := t.TempDir()
	h := newHost(t, dir)
	d := h.open(t, localRemote(t, t.TempDir()), nil)
	wd, err := d.Seed(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(wd, "before"), "captured before the crash")
	if err := d.Retired(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	prev := *d.Status().Digest
	wd, err = d.Seed(ctx, "r2")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(wd, "after"), strings.Repeat("written after ", 1<<16))
	d.Close()
	h.st.Close()

	marker := filepath.Join(dir, "renaming")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkspaceKillNineDuringCapture$")
	cmd.Env = append(os.Environ(), "WS_CRASH_CHILD="+dir, "WS_MARKER="+marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the child never reached the rename")
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	h = newHost(t, dir)
	rec, ok, err := h.st.Workspace(ctx, "app")
	if err != nil || !ok || rec.Digest != prev {
		t.Fatalf("after the crash the record is %+v %v %v, want digest %s", rec, ok, err, prev)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, "workspaces/app/snapshots/tmp-*")); len(tmps) == 0 {
		t.Fatal("the crash left no half-done capture (the test did not crash mid-capture)")
	}
	d = h.open(t, nil, nil)
	if tmps, _ := filepath.Glob(filepath.Join(dir, "workspaces/app/snapshots/tmp-*")); len(tmps) != 0 {
		t.Errorf("open kept %v", tmps)
	}
	wd, err = d.Seed(ctx, "r3")
	if err != nil {
		t.Fatal(err)
	}
	if read(t, filepath.Join(wd, "before")) != "captured before the crash" || !strings.HasPrefix(read(t, filepath.Join(wd, "after")), "written after") {
		t.Error("files were lost in the crash")
	}
	if st := d.Status(); *st.Digest == prev || *st.CapturedFrom != "r2" {
		t.Errorf("the interrupted capture was not redone: %+v", st)
	}
}

func crashChild(t *testing.T) {
	dir := os.Getenv("WS_CRASH_CHILD")
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := workspace.Open(workspace.Options{
		ID: "app", Dir: filepath.Join(dir, "workspaces", "app"), Records: records{st},
		Open:  func(context.Context, workspace.Spec) (workspace.Remote, error) { return nil, errors.New("none") },
		Alive: func(context.Context, string) workspace.Liveness { return workspace.Gone },
		BeforeRename: func(string) {
			os.WriteFile(os.Getenv("WS_MARKER"), nil, 0o600)
			select {} // killed here
		},
	}, workspace.Spec{Store: "test"})
	if err != nil {
		t.Fatal(err)
	}
	d.Retired(context.Background(), "r2")
	t.Fatal("the capture returned")
}

// TestTarDropsSetIDBits: a snapshot keeps no file's set-user-ID or
// set-group-ID bit, nor does Extract restore one from a tar that has them;
// a directory keeps its set-group-ID bit, a file its other mode bits.
func TestTarDropsSetIDBits(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "s"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "g"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]fs.FileMode{"s": 0o755 | fs.ModeSetuid | fs.ModeSetgid, "g": 0o775 | fs.ModeDir | fs.ModeSetgid} {
		if err := os.Chmod(filepath.Join(src, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if _, err := workspace.WriteTar(&snap, src); err != nil {
		t.Fatal(err)
	}
	// The same entries with every set-ID bit, as another tar may have them.
	var crafted bytes.Buffer
	tw := tar.NewWriter(&crafted)
	tw.WriteHeader(&tar.Header{Name: "g/", Typeflag: tar.TypeDir, Mode: 0o6775})
	tw.WriteHeader(&tar.Header{Name: "s", Typeflag: tar.TypeReg, Mode: 0o6755, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	for what, tarball := range map[string][]byte{"a snapshot": snap.Bytes(), "a tar with set-ID bits": crafted.Bytes()} {
		dst := t.TempDir()
		if err := workspace.Extract(bytes.NewReader(tarball), dst); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for name, want := range map[string]fs.FileMode{"s": 0o755, "g": 0o775 | fs.ModeDir | fs.ModeSetgid} {
			if fi, err := os.Lstat(filepath.Join(dst, name)); err != nil || fi.Mode() != want {
				t.Errorf("%s: %s extracted with mode %v (%v), want %v", what, name, fi.Mode(), err, want)
			}
		}
	}
}
