// Package disks is the census of the VM disks on this host: every
// replica's and every Computer's files, found by walking the directories
// the drivers keep them in (package drivers' StateDirs, <data>/computers),
// never by trusting a listing kept in memory — app-lb's disk leak came
// from a daemon whose in-memory listing had forgotten thousands of
// directories that were still on disk. On top of the census it keeps the
// operator's decisions (retain, a note, archives) in the store, sweeps
// what has expired, purges orphans, removes one disk on request and
// archives a disk as a tarball into an artifact store.
//
// # What a disk is
//
// A disk is one replica directory (<data>/<driver dir>/<replica id>/, its
// sandbox_id the replica id) or one Computer directory
// (<data>/computers/<id>/, its sandbox_id the Computer's id, its
// workspace the data part). Image trees (<data>/images), artifact trees
// (<data>/trees) and the drivers' shared files (boot files, agent
// bundles, spares) are not disks; a mount point inside a disk (a
// container's overlay root, its loop-mounted disk) is a part of kind
// mount that the walk does not cross, since what it shows is counted
// where it lives.
//
// Bytes are allocated bytes (st_blocks × 512: a sparse file costs what it
// holds) and apparent bytes (st_size), every inode counted once per
// census however many hard links name it.
//
// # State
//
// running and stopped come from the disk's driver (Inspect): starting and
// running are running; suspended, exited and failed are stopped (a
// suspended replica is held: its sandbox still exists). A disk no
// deployment and no Computer claims, and whose sandbox does not run, is
// an orphan. unknown is a disk whose driver is not open on this host (or
// cannot say): berth cannot tell whether something still uses it, so it
// never expires and is removed only when asked with force.
//
// # Expiry
//
// A retained disk never expires. An orphan expires orphan_ttl after its
// last modification, a stopped disk ttl after it, unless it is held: its
// sandbox runs or is suspended, it is the workspace of a Computer that
// exists, or its census did not finish. The periodic sweep (every
// sweep_secs) removes what has expired; with archive_on_expire it archives
// each first, and keeps a disk whose archive failed.
//
// Removal goes through the disk's driver (Stop), which also undoes what
// the driver set up beside the files (mounts, network, cgroups); without
// a driver that knows the replica, the tree is removed directly, refusing
// one that still holds a mount.
package disks

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
)

// The defaults of Options' durations (berth serve --disk-ttl,
// --disk-orphan-ttl, --disk-sweep).
const (
	// DefaultTTL is app-lb's APP_LB_DISK_TTL_SECS: a week.
	DefaultTTL = 7 * 24 * time.Hour
	// DefaultOrphanTTL is a day: an orphan is nobody's, but a day leaves
	// an operator who notices a mistake (a deployment deleted too soon)
	// the time to retain it.
	DefaultOrphanTTL = 24 * time.Hour
	// DefaultSweepEvery is app-lb's APP_LB_DISK_SWEEP_SECS: an hour.
	DefaultSweepEvery = time.Hour
	// MinSweepEvery is app-lb's floor on the sweep period.
	MinSweepEvery = time.Minute
)

// keepArchives is how many archive records are kept.
const keepArchives = 200

// Errors the Manager returns; the admin API maps them to statuses.
var (
	ErrNotFound = errors.New("disks: no such disk")       // 404
	ErrBusy     = errors.New("disks: the disk is in use") // 409
	ErrNoTarget = errors.New("disks: no archive target")  // 501
	ErrRecords  = errors.New("disks: the disk records could not be read")
)

// Owners says which deployments and Computers exist: what claims a disk.
type Owners interface {
	// Deployment reports whether deployment id exists.
	Deployment(id string) bool
	// Computer reports whether Computer id exists.
	Computer(ctx context.Context, id string) (bool, error)
}

// Records keeps the operator's decisions and the archive records
// (package store implements it).
type Records interface {
	DiskRecords(ctx context.Context) ([]store.DiskRecord, error)
	PutDiskRecord(ctx context.Context, d store.DiskRecord) error
	DeleteDiskRecord(ctx context.Context, id string) error
	PutDiskArchive(ctx context.Context, a store.DiskArchive, keep int) error
	DiskArchives(ctx context.Context) ([]store.DiskArchive, error)
}

// Target is where archives go.
type Target interface {
	// Name is the archive_target the inventory reports ("local").
	Name() string
	// Put stores the tarball r (size bytes, SHA-256 digest hex) as
	// archive archiveID of disk id and returns its URI.
	Put(ctx context.Context, id, archiveID, hex string, r io.Reader, size int64) (uri string, err error)
}

// Options configure a Manager.
type Options struct {
	// DataDir is berth's data directory, absolute: parts and roots are
	// reported relative to it, and its file system's free space is the
	// inventory's.
	DataDir string
	// StateDirs are the drivers' replica directories, by driver name
	// (drivers.StateDirs).
	StateDirs map[string]string
	// ComputersDir holds one directory per Computer; default
	// <DataDir>/computers.
	ComputersDir string
	// TmpDir is where archives are written before they are stored;
	// default <DataDir>/disk-archives.tmp.
	TmpDir string
	// Drivers are the drivers open on this host, by name.
	Drivers map[string]vm.Driver
	Owners  Owners
	Records Records
	// Target stores archives; nil: archiving is off (501).
	Target Target
	// TTL and OrphanTTL are how long after its last modification a
	// stopped disk and an orphan expire; zero: never. SweepEvery is the
	// periodic sweep's period (Run); zero: DefaultSweepEvery, below
	// MinSweepEvery: MinSweepEvery.
	TTL, OrphanTTL, SweepEvery time.Duration
	// ArchiveOnExpire archives an expired disk before the sweep removes
	// it (with a Target).
	ArchiveOnExpire bool
	// StopGrace is what a sandbox removed through its driver gets between
	// the polite signal and the kill; default 5s.
	StopGrace time.Duration
	Now       func() time.Time
	Log       *slog.Logger
}

// Manager runs the census and acts on it. Safe for concurrent use.
type Manager struct {
	o Options

	// rm serializes removals and archive starts, so that a sweep and a
	// DELETE do not remove the same disk twice and no archive starts on
	// a disk being removed.
	rm sync.Mutex

	mu        sync.Mutex
	archiving map[string]*run // by sandbox id, while an archive runs

	ctx    context.Context // archives run under it; Close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Manager. Call Close when done with it (it ends archives
// under way).
func New(o Options) *Manager {
	if o.ComputersDir == "" {
		o.ComputersDir = filepath.Join(o.DataDir, "computers")
	}
	if o.TmpDir == "" {
		o.TmpDir = filepath.Join(o.DataDir, "disk-archives.tmp")
	}
	switch {
	case o.SweepEvery == 0:
		o.SweepEvery = DefaultSweepEvery
	case o.SweepEvery < MinSweepEvery:
		o.SweepEvery = MinSweepEvery
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	// Archives cut short by a crash leave their tarballs there; none
	// runs yet.
	if err := os.RemoveAll(o.TmpDir); err != nil {
		o.Log.Warn("disks: could not empty the archive directory", "dir", o.TmpDir, "err", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{o: o, archiving: map[string]*run{}, ctx: ctx, cancel: cancel}
}

// Close cancels the archives under way and waits for them to end (each
// recorded failed).
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// Wait blocks until the archives under way have ended.
func (m *Manager) Wait() { m.wg.Wait() }

// Run sweeps every SweepEvery until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.o.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		out, err := m.Sweep(ctx)
		switch {
		case err != nil:
			m.o.Log.Warn("disk sweep failed", "err", err)
		case len(out.Removed) > 0 || len(out.Failed) > 0:
			m.o.Log.Info("disk sweep", "removed", out.Removed, "failed", len(out.Failed), "freed_bytes", out.FreedBytes)
			for _, f := range out.Failed {
				m.o.Log.Warn("disk sweep could not remove a disk", "sandbox_id", f.SandboxID, "err", f.Error)
			}
		}
	}
}

// Inventory is GET /disks: the census with what the sweeper will do.
func (m *Manager) Inventory(ctx context.Context) (apitype.DiskInventory, error) {
	c, err := m.census(ctx, true)
	if err != nil {
		return apitype.DiskInventory{}, err
	}
	return c.inv, nil
}

// HostSandboxes are the sandboxes on this host that no deployment owns
// (Computers' and orphans), for GET /metrics' host_sandboxes: the same
// census, without walking the bytes.
func (m *Manager) HostSandboxes(ctx context.Context) ([]apitype.HostSandboxView, error) {
	c, err := m.census(ctx, false)
	if err != nil {
		return nil, err
	}
	now := m.o.Now()
	out := []apitype.HostSandboxView{}
	for _, d := range c.disks {
		if d.driver == "" || d.owner.Kind == vm.OwnerDeployment && d.info.Claimed {
			continue // a Computer's directory, or a deployment's replica
		}
		v := apitype.HostSandboxView{SandboxID: d.info.SandboxID, Name: d.info.Name, Status: string(d.info.State), Image: d.image, GuestIP: d.guestIP}
		if !d.startedAt.IsZero() {
			v.CreatedAt = d.startedAt.UTC().Format(time.RFC3339)
			if d.info.State == apitype.DiskRunning {
				v.UptimeSecs = int(now.Sub(d.startedAt) / time.Second)
			}
		}
		out = append(out, v)
	}
	return out, nil
}
