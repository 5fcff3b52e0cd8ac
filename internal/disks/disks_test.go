package disks_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/clocktest"
	"github.com/berth-dev/berth/internal/disks"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/drivers"
	"github.com/berth-dev/berth/internal/vm/process"
)

// TestMain lets the test binary be the process driver's agent
// (BERTH_TEST_ROLE=agent), as package server's tests do.
func TestMain(m *testing.M) {
	if os.Getenv("BERTH_TEST_ROLE") == "agent" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		os.Exit(agent.Main(ctx, os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// owners is a set of deployments and Computers that exist.
type owners struct {
	mu          sync.Mutex
	deployments map[string]bool
	computers   map[string]bool
}

func (o *owners) Deployment(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.deployments[id]
}

func (o *owners) Computer(_ context.Context, id string) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.computers[id], nil
}

// fixture is a data dir with the real store, the real process driver and
// the embedded artifact store, and a Manager over them.
type fixture struct {
	t         *testing.T
	data      string
	driver    *process.Driver
	st        *store.Store
	artifacts *artifact.Store
	owners    *owners
	clock     *clocktest.Clock
	m         *disks.Manager
}

var epoch = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, mod func(*disks.Options)) *fixture {
	t.Helper()
	data := t.TempDir()
	f := &fixture{t: t, data: data, owners: &owners{deployments: map[string]bool{}, computers: map[string]bool{}}}
	var err error
	if f.st, err = store.Open(data); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.st.Close() })
	dirs := drivers.StateDirs(data)
	f.driver, err = process.New(process.Options{
		Dir: dirs["process"], AgentCommand: []string{os.Args[0]}, AgentEnv: []string{"BERTH_TEST_ROLE=agent"},
		AllowUnlimited: true, Spares: new(int),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopAll(t, f.driver) })
	if f.artifacts, err = artifact.NewStore(filepath.Join(data, "artifacts"), artifact.StoreOptions{}); err != nil {
		t.Fatal(err)
	}
	f.clock = clocktest.New(epoch)
	o := disks.Options{
		DataDir: data, StateDirs: dirs, Drivers: map[string]vm.Driver{"process": f.driver},
		Owners: f.owners, Records: f.st, Target: disks.Local{Store: f.artifacts},
		TTL: 7 * 24 * time.Hour, OrphanTTL: 24 * time.Hour, StopGrace: time.Second, Now: f.clock.Now,
	}
	if mod != nil {
		mod(&o)
	}
	f.m = disks.New(o)
	t.Cleanup(f.m.Close)
	return f
}

// stopAll stops every replica the driver has (none may outlive a test).
func stopAll(t *testing.T, d *process.Driver) {
	insts, err := d.List(context.Background())
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
	for _, in := range insts {
		if err := d.Stop(context.Background(), in.ID, time.Second); err != nil && !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("cleanup: stopping %s: %v", in.ID, err)
		}
	}
	d.Close()
}

// leave makes a replica directory by hand, as a berth that crashed (or a
// driver that leaked) leaves one: a state file naming its owner, data/ with
// a file of n bytes, everything last modified at mod.
func (f *fixture) leave(owner vm.Owner, nonce uint64, n int, mod time.Time) string {
	f.t.Helper()
	id := owner.Name(nonce)
	dir := filepath.Join(f.data, "replicas", id)
	must(f.t, os.MkdirAll(filepath.Join(dir, "data"), 0o700))
	st := fmt.Sprintf(`{"id":%q,"deployment":%q,"owner":{"kind":%q,"id":%q},"pid":0}`, id, strings.TrimPrefix(owner.ID, ""), owner.Kind, owner.ID)
	must(f.t, os.WriteFile(filepath.Join(dir, "state.json"), []byte(st), 0o600))
	must(f.t, os.WriteFile(filepath.Join(dir, "data", "blob"), bytes.Repeat([]byte("x"), n), 0o600))
	touch(f.t, dir, mod)
	return id
}

// touch sets the modification time of everything under dir to t.
func touch(t *testing.T, dir string, at time.Time) {
	t.Helper()
	var paths []string
	must(t, filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	}))
	slices.Reverse(paths) // children first: touching a child changes nothing of its parent's mtime
	for _, p := range paths {
		must(t, os.Chtimes(p, at, at))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) inventory() apitype.DiskInventory {
	f.t.Helper()
	inv, err := f.m.Inventory(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return inv
}

func find(inv apitype.DiskInventory, id string) *apitype.DiskInfo {
	for i := range inv.Disks {
		if inv.Disks[i].SandboxID == id {
			return &inv.Disks[i]
		}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestDiskOrphanReportedAndPurged: a replica directory left by hand whose
// deployment is gone is an orphan, and purge-orphans removes it; one whose
// deployment exists is stopped and stays, and so does a retained orphan.
func TestDiskOrphanReportedAndPurged(t *testing.T) {
	f := newFixture(t, nil)
	f.owners.deployments["web"] = true
	orphan := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 1, 5000, epoch)
	kept := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 2, 10, epoch)
	claimed := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "web"}, 3, 10, epoch)
	// A Computer's directory whose Computer is gone is an orphan too; a
	// live Computer's workspace is held.
	must(t, os.MkdirAll(filepath.Join(f.data, "computers", "c1", "workspace"), 0o700))
	must(t, os.MkdirAll(filepath.Join(f.data, "computers", "c2", "workspace"), 0o700))
	f.owners.computers["c2"] = true

	inv := f.inventory()
	if !inv.Complete {
		t.Fatalf("incomplete census: %s", inv.IncompleteReason)
	}
	o := find(inv, orphan)
	if o == nil || o.State != apitype.DiskOrphan || o.Claimed || o.Deployment != "gone" {
		t.Fatalf("orphan: %+v", o)
	}
	if want := []string{"replicas/" + orphan}; !slices.Equal(o.Roots, want) {
		t.Errorf("roots %v, want %v", o.Roots, want)
	}
	if c := find(inv, claimed); c == nil || c.State != apitype.DiskStopped || !c.Claimed {
		t.Fatalf("claimed: %+v", c)
	}
	if c := find(inv, "c1"); c == nil || c.State != apitype.DiskOrphan {
		t.Fatalf("computer c1: %+v", c)
	}
	if c := find(inv, "c2"); c == nil || c.State != apitype.DiskStopped || !c.Claimed || c.HeldBy == "" || c.ExpiresAt != nil {
		t.Fatalf("computer c2: %+v", c)
	}
	if inv.Totals.Orphan != 3 || inv.Totals.Stopped != 2 || inv.Totals.Disks != 5 {
		t.Errorf("totals %+v", inv.Totals)
	}
	yes := true
	if _, err := f.m.Patch(context.Background(), kept, &yes, nil); err != nil {
		t.Fatal(err)
	}
	// A live Computer's workspace is never removed by a disk route, not
	// even with force: deleting the Computer removes it.
	if _, err := f.m.Delete(context.Background(), "c2", true); !errors.Is(err, disks.ErrBusy) || !strings.Contains(err.Error(), "delete the Computer") {
		t.Fatalf("delete a live Computer's workspace: %v, want ErrBusy", err)
	}

	out, err := f.m.PurgeOrphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out.Removed)
	if want := []string{orphan, "c1"}; !slices.Equal(out.Removed, slices.Sorted(slices.Values(want))) || len(out.Failed) != 0 {
		t.Fatalf("purge: %+v, want %v removed", out, want)
	}
	if out.FreedBytes < 5000 {
		t.Errorf("freed %d bytes, want at least the orphan's 5000", out.FreedBytes)
	}
	for _, p := range []string{filepath.Join(f.data, "replicas", orphan), filepath.Join(f.data, "computers", "c1")} {
		if exists(p) {
			t.Errorf("%s is still there", p)
		}
	}
	for _, p := range []string{filepath.Join(f.data, "replicas", kept), filepath.Join(f.data, "replicas", claimed), filepath.Join(f.data, "computers", "c2")} {
		if !exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
	inv = f.inventory()
	if find(inv, orphan) != nil || find(inv, kept) == nil || !find(inv, kept).Retain {
		t.Errorf("after the purge: %+v", inv.Disks)
	}
}

// TestDiskExpiryHonoursTTL: an orphan expires orphan_ttl after its last
// change and a stopped disk ttl after it (a fake clock moves); the sweep
// removes what has expired, never a retained disk.
func TestDiskExpiryHonoursTTL(t *testing.T) {
	f := newFixture(t, nil)
	f.owners.deployments["web"] = true
	mod := epoch.Add(-time.Hour)
	orphan := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 1, 100, mod)
	retained := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 2, 100, mod)
	stopped := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "web"}, 3, 100, mod)
	yes, note := true, "keeping for the incident postmortem"
	if _, err := f.m.Patch(context.Background(), retained, &yes, &note); err != nil {
		t.Fatal(err)
	}

	inv := f.inventory()
	if o := find(inv, orphan); o.ExpiresAt == nil || *o.ExpiresAt != mod.Add(24*time.Hour).Unix() {
		t.Fatalf("orphan expires_at %v, want %d", o.ExpiresAt, mod.Add(24*time.Hour).Unix())
	}
	if s := find(inv, stopped); s.ExpiresAt == nil || *s.ExpiresAt != mod.Add(7*24*time.Hour).Unix() {
		t.Fatalf("stopped expires_at %v", s.ExpiresAt)
	}
	if r := find(inv, retained); r.ExpiresAt != nil || !r.Retain || r.Note != note {
		t.Fatalf("retained: %+v", r)
	}
	if inv.Totals.ExpiringNow != 0 || inv.Totals.Retained != 1 {
		t.Fatalf("totals %+v", inv.Totals)
	}
	// Not yet: one second before the orphan's expiry nothing goes.
	f.clock.Set(mod.Add(24*time.Hour - time.Second))
	if out, err := f.m.Sweep(context.Background()); err != nil || len(out.Removed) != 0 {
		t.Fatalf("sweep before the TTL: %+v %v", out, err)
	}
	f.clock.Set(mod.Add(24 * time.Hour))
	if inv := f.inventory(); inv.Totals.ExpiringNow != 1 || inv.Totals.ReclaimableBytes != find(inv, orphan).Bytes {
		t.Fatalf("at the orphan's expiry: totals %+v", inv.Totals)
	}
	out, err := f.m.Sweep(context.Background())
	if err != nil || !slices.Equal(out.Removed, []string{orphan}) {
		t.Fatalf("sweep at the orphan TTL: %+v %v", out, err)
	}
	f.clock.Set(mod.Add(30 * 24 * time.Hour))
	out, err = f.m.Sweep(context.Background())
	if err != nil || !slices.Equal(out.Removed, []string{stopped}) {
		t.Fatalf("sweep past both TTLs: %+v %v", out, err)
	}
	if !exists(filepath.Join(f.data, "replicas", retained)) {
		t.Fatal("the sweep removed a retained disk")
	}
	// Released, it goes at the next sweep.
	no := false
	if _, err := f.m.Patch(context.Background(), retained, &no, nil); err != nil {
		t.Fatal(err)
	}
	if out, err := f.m.Sweep(context.Background()); err != nil || !slices.Equal(out.Removed, []string{retained}) {
		t.Fatalf("sweep after release: %+v %v", out, err)
	}
}

// TestDiskBytesHardLinks: allocated bytes are st_blocks × 512, a sparse
// file costs what it holds, and a file with two names counts once.
func TestDiskBytesHardLinks(t *testing.T) {
	f := newFixture(t, nil)
	id := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 1, 0, epoch)
	dir := filepath.Join(f.data, "replicas", id)
	inv := f.inventory()
	base := *find(inv, id)

	const n = 1 << 20
	must(t, os.WriteFile(filepath.Join(dir, "data", "big"), bytes.Repeat([]byte{1}, n), 0o600))
	must(t, os.Link(filepath.Join(dir, "data", "big"), filepath.Join(dir, "data", "big.link")))
	sparse, err := os.Create(filepath.Join(dir, "rootfs.ext4"))
	must(t, err)
	must(t, sparse.Truncate(1<<30))
	sparse.Close()

	var st syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(dir, "data", "big"), &st))
	var sp syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(dir, "rootfs.ext4"), &sp))
	inv = f.inventory()
	d := find(inv, id)
	if got, want := d.ApparentBytes-base.ApparentBytes, int64(n)+1<<30; got != want {
		t.Errorf("apparent bytes grew by %d, want %d (the link counted once, the sparse file's size)", got, want)
	}
	// Allocated: the data file once, the sparse file's few blocks, and
	// whatever data/ itself grew by for the new names.
	grew := d.Bytes - base.Bytes
	if min := st.Blocks*512 + sp.Blocks*512; grew < min || grew >= min+64<<10 {
		t.Errorf("allocated bytes grew by %d, want about %d (one copy of the data, not two)", grew, min)
	}
	var rootfs *apitype.DiskPart
	for i, p := range d.Parts {
		if p.Path == "replicas/"+id+"/rootfs.ext4" {
			rootfs = &d.Parts[i]
		}
	}
	if rootfs == nil || rootfs.Kind != apitype.PartRootfs || rootfs.ApparentBytes != 1<<30 || rootfs.Bytes != sp.Blocks*512 {
		t.Errorf("rootfs part %+v (blocks %d)", rootfs, sp.Blocks)
	}
	if inv.Totals.Bytes != d.Bytes {
		t.Errorf("totals bytes %d, disk %d", inv.Totals.Bytes, d.Bytes)
	}
}

// TestDiskRunningRefusedWithoutForce: a replica that runs is running and
// held; DELETE refuses it without force and the sweep and the orphan purge
// leave it even when no deployment claims it; with force its driver stops
// it and its directory goes.
func TestDiskRunningRefusedWithoutForce(t *testing.T) {
	f := newFixture(t, nil)
	id := vm.Name("gone", 7)
	if _, err := f.driver.Start(context.Background(), vm.Spec{Name: id, Owner: vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, Command: "sleep 600"}); err != nil {
		t.Fatal(err)
	}
	f.clock.Set(epoch.Add(365 * 24 * time.Hour))
	inv := f.inventory()
	d := find(inv, id)
	if d == nil || d.State != apitype.DiskRunning || d.HeldBy == "" || d.ExpiresAt != nil {
		t.Fatalf("running replica: %+v", d)
	}
	if out, err := f.m.PurgeOrphans(context.Background()); err != nil || len(out.Removed) != 0 {
		t.Fatalf("purge-orphans took a running sandbox: %+v %v", out, err)
	}
	if out, err := f.m.Sweep(context.Background()); err != nil || len(out.Removed) != 0 {
		t.Fatalf("sweep took a running sandbox: %+v %v", out, err)
	}
	if _, err := f.m.Delete(context.Background(), id, false); !errors.Is(err, disks.ErrBusy) || !strings.Contains(err.Error(), "force") {
		t.Fatalf("delete without force: %v, want ErrBusy naming force", err)
	}
	if _, err := f.m.Archive(context.Background(), id, false); !errors.Is(err, disks.ErrBusy) {
		t.Fatalf("archive of a running disk: %v, want ErrBusy", err)
	}
	out, err := f.m.Delete(context.Background(), id, true)
	if err != nil || !slices.Equal(out.Removed, []string{id}) {
		t.Fatalf("delete with force: %+v %v", out, err)
	}
	if exists(filepath.Join(f.data, "replicas", id)) {
		t.Fatal("the directory is still there")
	}
	if _, err := f.driver.Inspect(context.Background(), id); !errors.Is(err, vm.ErrNotFound) {
		t.Fatalf("the driver still knows the replica: %v", err)
	}
	if _, err := f.m.Delete(context.Background(), id, true); !errors.Is(err, disks.ErrNotFound) {
		t.Fatalf("delete again: %v, want ErrNotFound", err)
	}
}

// TestDiskArchive: an archive of a disk is a gzipped tarball in the
// artifact store whose bytes hash to the digest its URI names, holding the
// disk's files; the disk records it as archived, and with purge it goes.
func TestDiskArchive(t *testing.T) {
	f := newFixture(t, nil)
	id := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 1, 3000, epoch)
	must(t, os.WriteFile(filepath.Join(f.data, "replicas", id, "data", "note.txt"), []byte("hello disk"), 0o600))
	must(t, os.Link(filepath.Join(f.data, "replicas", id, "data", "note.txt"), filepath.Join(f.data, "replicas", id, "data", "again.txt")))

	v, err := f.m.Archive(context.Background(), id, true)
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != apitype.ArchiveRunning || v.SandboxID != id || v.ExpectedBytes < 3000 {
		t.Fatalf("started: %+v", v)
	}
	f.m.Wait()
	inv := f.inventory()
	if len(inv.Archives) != 1 {
		t.Fatalf("archives %+v", inv.Archives)
	}
	a := inv.Archives[0]
	if a.ID != v.ID || a.Status != apitype.ArchiveSucceeded || a.Bytes != a.ExpectedBytes || a.FinishedAt == nil || a.Purged == nil || !*a.Purged {
		t.Fatalf("archive %+v", a)
	}
	if exists(filepath.Join(f.data, "replicas", id)) {
		t.Error("purge: the disk is still there")
	}
	_, digest, ok := strings.Cut(a.URI, "@sha256:")
	if !ok || !strings.HasPrefix(a.URI, "local:"+disks.Tag(id, a.ID)+"@") {
		t.Fatalf("uri %q", a.URI)
	}
	tag, err := f.artifacts.Tag(disks.Tag(id, a.ID))
	if err != nil || tag.Digest != digest {
		t.Fatalf("tag %+v %v, want digest %s", tag, err, digest)
	}
	blob, _, err := f.artifacts.OpenBlob(digest)
	if err != nil {
		t.Fatal(err)
	}
	defer blob.Close()
	raw, err := io.ReadAll(blob)
	must(t, err)
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != digest {
		t.Fatalf("the blob hashes to %x, its URI says %s", sum, digest)
	}
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	must(t, err)
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		switch h.Typeflag {
		case tar.TypeReg:
			b, _ := io.ReadAll(tr)
			files[h.Name] = string(b)
		case tar.TypeLink:
			files[h.Name] = "link:" + h.Linkname
		}
	}
	pre := "replicas/" + id + "/data/"
	if files[pre+"note.txt"] != "hello disk" && files[pre+"again.txt"] != "hello disk" {
		t.Errorf("the tarball lacks data/note.txt: %v", keys(files))
	}
	if len(files[pre+"blob"]) != 3000 {
		t.Errorf("data/blob is %d bytes in the tarball", len(files[pre+"blob"]))
	}
	if !strings.HasPrefix(files[pre+"again.txt"], "link:") && !strings.HasPrefix(files[pre+"note.txt"], "link:") {
		t.Errorf("the hard link is not a link in the tarball: %v", files)
	}
	// The record names it (a disk removed by berth forgets its decisions;
	// the archive records stay).
	recs, err := f.st.DiskArchives(context.Background())
	if err != nil || len(recs) != 1 || recs[0].ID != a.ID {
		t.Fatalf("stored archives %+v %v", recs, err)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestDiskArchiveWithoutTarget: no target is ErrNoTarget, and a missing
// disk ErrNotFound.
func TestDiskArchiveWithoutTarget(t *testing.T) {
	f := newFixture(t, func(o *disks.Options) { o.Target = nil })
	if _, err := f.m.Archive(context.Background(), "berth-x-000000000001", false); !errors.Is(err, disks.ErrNoTarget) {
		t.Fatalf("%v, want ErrNoTarget", err)
	}
	if inv := f.inventory(); inv.ArchiveEnabled || inv.ArchiveTarget != "" {
		t.Fatalf("inventory says archiving is on: %+v", inv)
	}
	g := newFixture(t, nil)
	if _, err := g.m.Archive(context.Background(), "berth-x-000000000001", false); !errors.Is(err, disks.ErrNotFound) {
		t.Fatalf("%v, want ErrNotFound", err)
	}
}

// TestDiskSweepPeriodic: Run sweeps every SweepEvery (the bubble's clock),
// and an expired orphan goes at the first tick, not before.
func TestDiskSweepPeriodic(t *testing.T) {
	f := newFixture(t, nil)
	synctest.Test(t, func(t *testing.T) {
		m := disks.New(disks.Options{
			DataDir: f.data, StateDirs: drivers.StateDirs(f.data), Drivers: map[string]vm.Driver{"process": f.driver},
			Owners: f.owners, Records: f.st, OrphanTTL: time.Hour, SweepEvery: 10 * time.Minute,
		})
		defer m.Close()
		id := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 1, 10, time.Now().Add(-2*time.Hour))
		dir := filepath.Join(f.data, "replicas", id)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- m.Run(ctx) }()
		time.Sleep(10*time.Minute - time.Second)
		synctest.Wait()
		if !exists(dir) {
			t.Fatal("removed before the first sweep")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if exists(dir) {
			t.Fatal("the periodic sweep did not remove the expired orphan")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// TestDiskRecordOfAGoneDiskForgotten: a decision about a disk whose
// directory went away (its owner stopped the sandbox) is dropped by the
// next sweep, and a disk that is there keeps its own.
func TestDiskRecordOfAGoneDiskForgotten(t *testing.T) {
	f := newFixture(t, nil)
	gone := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 1, 10, epoch)
	here := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 2, 10, epoch)
	yes, note := true, "n"
	for _, id := range []string{gone, here} {
		if _, err := f.m.Patch(context.Background(), id, &yes, &note); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.RemoveAll(filepath.Join(f.data, "replicas", gone)))
	if _, err := f.m.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, err := f.st.DiskRecords(context.Background())
	if err != nil || len(recs) != 1 || recs[0].SandboxID != here || !recs[0].Retain {
		t.Fatalf("records after the sweep: %+v %v, want only %s's", recs, err, here)
	}
}

// TestDiskArchiveOnExpire: with ArchiveOnExpire the sweep archives an
// expired disk before it removes it, and says so.
func TestDiskArchiveOnExpire(t *testing.T) {
	f := newFixture(t, func(o *disks.Options) { o.ArchiveOnExpire = true })
	id := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 1, 2000, epoch)
	f.clock.Set(epoch.Add(25 * time.Hour))
	out, err := f.m.Sweep(context.Background())
	if err != nil || !slices.Equal(out.Removed, []string{id}) || !slices.Equal(out.Archived, []string{id}) {
		t.Fatalf("sweep: %+v %v", out, err)
	}
	inv := f.inventory()
	if !inv.ArchiveOnExpire || len(inv.Archives) != 1 || inv.Archives[0].Status != apitype.ArchiveSucceeded || inv.Archives[0].SandboxID != id {
		t.Fatalf("archives %+v", inv.Archives)
	}
	_, digest, _ := strings.Cut(inv.Archives[0].URI, "@sha256:")
	if _, err := f.artifacts.Stat(digest); err != nil {
		t.Fatalf("the archive's blob: %v", err)
	}
}

// TestDiskMountNotCrossed: a mount point inside a disk is a part of kind
// mount whose files are not counted, and a tree no driver knows is not
// removed while it holds one (not even with force): what is mounted there
// is not the disk's. The kvm driver is not open here, so the disk is
// unknown.
func TestDiskMountNotCrossed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	f := newFixture(t, nil)
	id := vm.Name("web", 1)
	dir := filepath.Join(f.data, "kvm", id)
	mnt := filepath.Join(dir, "disk")
	must(t, os.MkdirAll(mnt, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "state.json"), []byte(`{"id":"`+id+`"}`), 0o600))
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	must(t, os.WriteFile(filepath.Join(mnt, "inside"), bytes.Repeat([]byte{1}, 1<<20), 0o600))

	d := find(f.inventory(), id)
	if d == nil || d.State != apitype.DiskUnknown || d.HeldBy == "" || d.ExpiresAt != nil {
		t.Fatalf("disk %+v", d)
	}
	if d.ApparentBytes >= 1<<20 {
		t.Errorf("apparent bytes %d count the mounted file", d.ApparentBytes)
	}
	if !slices.ContainsFunc(d.Parts, func(p apitype.DiskPart) bool { return p.Kind == apitype.PartMount && p.Path == "kvm/"+id+"/disk" }) {
		t.Errorf("parts %+v lack the mount", d.Parts)
	}
	if _, err := f.m.Delete(context.Background(), id, false); !errors.Is(err, disks.ErrBusy) {
		t.Fatalf("delete an unknown disk without force: %v, want ErrBusy", err)
	}
	if _, err := f.m.Delete(context.Background(), id, true); err == nil || !strings.Contains(err.Error(), "mount point") {
		t.Fatalf("delete with force: %v, want a refusal naming the mount point", err)
	}
	if !exists(filepath.Join(mnt, "inside")) || !exists(filepath.Join(dir, "state.json")) {
		t.Fatal("the refused removal removed files")
	}
}

// brokenRecords is a store whose disk records cannot be read.
type brokenRecords struct{ *store.Store }

func (brokenRecords) DiskRecords(context.Context) ([]store.DiskRecord, error) {
	return nil, errors.New("database is locked")
}

// TestDiskRecordsUnreadable: when the records cannot be read, berth cannot
// tell which disks are retained: the census says it is incomplete and
// why, nothing expires, and the sweep and the purge remove nothing.
func TestDiskRecordsUnreadable(t *testing.T) {
	f := newFixture(t, func(o *disks.Options) { o.Records = brokenRecords{o.Records.(*store.Store)} })
	id := f.leave(vm.Owner{Kind: vm.OwnerDeployment, ID: "gone"}, 1, 10, epoch)
	f.clock.Set(epoch.Add(365 * 24 * time.Hour))
	inv := f.inventory()
	if inv.Complete || !strings.Contains(inv.IncompleteReason, "database is locked") {
		t.Fatalf("complete %v, reason %q", inv.Complete, inv.IncompleteReason)
	}
	if d := find(inv, id); d == nil || d.ExpiresAt != nil || inv.Totals.ExpiringNow != 0 {
		t.Fatalf("disk %+v expires", d)
	}
	if _, err := f.m.Sweep(context.Background()); !errors.Is(err, disks.ErrRecords) {
		t.Fatalf("sweep: %v, want ErrRecords", err)
	}
	if _, err := f.m.PurgeOrphans(context.Background()); !errors.Is(err, disks.ErrRecords) {
		t.Fatalf("purge: %v, want ErrRecords", err)
	}
	if _, err := f.m.Delete(context.Background(), id, false); !errors.Is(err, disks.ErrBusy) {
		t.Fatalf("delete without force: %v, want ErrBusy", err)
	}
	if !exists(filepath.Join(f.data, "replicas", id)) {
		t.Fatal("a disk was removed while its records were unreadable")
	}
}
