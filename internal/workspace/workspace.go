// Package workspace keeps a vm deployment's durable workspace
// (vm.workspace): a writable directory owned by the deployment rather than
// by any one replica. Each replica gets a directory of its own, seeded from
// the deployment's newest snapshot before it boots; when the replica
// retires (a rollout, a restart, an eviction, an idle suspend or a scale to
// zero) the directory is captured into a new snapshot, which its
// replacement is seeded from, and the snapshot is pushed to the
// deployment's store (Remote). It also seeds read-only archives
// (vm.workspace_archive: Archive), which nothing is captured back from.
//
// On disk, under Options.Dir (<data>/workspaces/<deployment>):
//
//	replicas/<replica id>/   each replica's workspace, while it has one
//	snapshots/<hex>.tar      the snapshot the pool runs from
//	snapshots/tmp-*          captures in progress (removed at open)
//
// A snapshot is a deterministic tar of the directory (WriteTar), named by
// its sha256. Durability: a capture writes the tar to a temporary file,
// fsyncs it, renames it to <hex>.tar and fsyncs the directory, and only
// then records it (Records, the SQLite store); a replica's directory is
// removed only after that. A crash (kill -9) while capturing therefore
// loses nothing captured before: the record still names the previous,
// complete snapshot, and the replica's directory is still there, to be
// captured again at the next seed. A replica is seeded only from a
// snapshot whose digest has been verified (Restore hashes the whole
// stream), never from a half-written one.
//
// One replica at a time owns the workspace (spec validation requires
// scaling.max_replicas 1 and warm_pool 0): Seed waits until every other
// replica's directory has been captured, so a rollout's new replica starts
// from what the old one left.
//
// The package knows its callers only through the interfaces it declares:
// Records (the store), Remote (the deployment's store), and Options.Alive
// (whether a replica still runs).
package workspace

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
)

// DefaultPath is the guest path of a workspace whose spec names none.
const DefaultPath = "/workspace"

// Record is what the store keeps of a deployment's workspace.
type Record struct {
	Digest       string // the snapshot the pool runs from; "" the empty workspace
	CapturedAt   time.Time
	CapturedFrom string
	Files        int
	Bytes        int64
	Pushed       string // the digest PushedStore is known to hold
	PushedStore  string
	PushedAt     time.Time
}

// Records keeps each deployment's Record (the SQLite store).
type Records interface {
	// Workspace returns the deployment's record; ok false when it has none.
	Workspace(ctx context.Context, deployment string) (Record, bool, error)
	// PutWorkspace replaces it; durable when it returns.
	PutWorkspace(ctx context.Context, deployment string, r Record) error
}

// Spec is what the deployment's vm.workspace says.
type Spec struct {
	Path  string // guest path; "" DefaultPath
	Store string
	Ref   string // "" workspace-<id>
}

// Liveness is whether a replica still uses its workspace directory.
type Liveness int

// The Liveness values.
const (
	Gone      Liveness = iota // stopped for good, or unknown to every driver
	Running                   // running, starting, or its state cannot be read
	Suspended                 // suspended (idle_action: retain), to be resumed
)

// Options configure a Deployment.
type Options struct {
	ID      string // the deployment
	Dir     string // its workspace directory (see the package doc)
	Records Records
	// Open opens the deployment's store as spec names it (its auth
	// resolved by the caller).
	Open func(ctx context.Context, spec Spec) (Remote, error)
	// Alive reports whether replica id of the deployment still runs, is
	// suspended, or is gone (its directory is then no one's).
	Alive func(ctx context.Context, id string) Liveness
	Log   *slog.Logger
	Now   func() time.Time
	// PushRetry is the wait before a failed push is tried again; zero is
	// 30 s.
	PushRetry time.Duration
	// BeforeRename, when set, runs after a capture's temporary file is
	// fsynced and before it is renamed (tests: a crash there).
	BeforeRename func(tmp string)
}

// Deployment is one deployment's durable workspace. Safe for concurrent
// use.
type Deployment struct {
	o      Options
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	capMu  sync.Mutex // one capture or restore at a time

	mu        sync.Mutex // guards the fields below
	spec      Spec
	rec       Record
	loaded    bool
	capturing int
	restoring bool
	pushing   bool
	pushAgain bool
	blocked   string
	lastError string
	pending   []apitype.WorkspacePending
	active    map[string]bool // replicas whose capture is under way
	changed   chan struct{}   // closed (and replaced) when a capture ends
	retry     *time.Timer
	closed    bool
}

// Open returns the workspace of deployment o.ID with spec, removing
// captures a crash cut short, and pushes a snapshot the store lacks.
func Open(o Options, spec Spec) (*Deployment, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.PushRetry <= 0 {
		o.PushRetry = 30 * time.Second
	}
	for _, d := range []string{o.replicas(), o.snapshots()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
	}
	if tmps, err := filepath.Glob(filepath.Join(o.snapshots(), "tmp-*")); err == nil {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	d := &Deployment{o: o, spec: normalize(spec, o.ID), changed: make(chan struct{})}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	if err := d.load(d.ctx); err != nil {
		o.Log.Warn("could not read a deployment's workspace record", "deployment", o.ID, "err", err)
	}
	d.kickPush()
	return d, nil
}

func normalize(s Spec, id string) Spec {
	if s.Path == "" {
		s.Path = DefaultPath
	}
	if s.Ref == "" {
		s.Ref = "workspace-" + id
	}
	return s
}

func (o Options) replicas() string  { return filepath.Join(o.Dir, "replicas") }
func (o Options) snapshots() string { return filepath.Join(o.Dir, "snapshots") }
func (o Options) snapshot(hex string) string {
	return filepath.Join(o.snapshots(), hex+".tar")
}

// Dir is replica id's workspace directory on this host (whether or not it
// exists).
func (d *Deployment) Dir(id string) string { return filepath.Join(d.o.replicas(), id) }

// Spec is the workspace's spec as last set, defaults filled in.
func (d *Deployment) Spec() Spec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.spec
}

// SetSpec updates the spec (a spec write); a new store is pushed to.
func (d *Deployment) SetSpec(s Spec) {
	d.mu.Lock()
	d.spec = normalize(s, d.o.ID)
	d.mu.Unlock()
	d.kickPush()
}

// Close stops pushing. Captures and seeds under way finish.
func (d *Deployment) Close() {
	d.mu.Lock()
	d.closed = true
	if d.retry != nil {
		d.retry.Stop()
	}
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
}

// load reads the record once.
func (d *Deployment) load(ctx context.Context) error {
	d.mu.Lock()
	loaded := d.loaded
	d.mu.Unlock()
	if loaded {
		return nil
	}
	rec, ok, err := d.o.Records.Workspace(ctx, d.o.ID)
	if err != nil {
		return err
	}
	d.mu.Lock()
	if ok {
		d.rec = rec
	}
	d.loaded = ok
	d.mu.Unlock()
	return nil
}

func (d *Deployment) record() Record {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rec
}

// Seed readies the workspace directory of new replica id: it waits until
// no other replica holds the workspace (capturing, on the way, the
// directories of replicas that are gone), then unpacks the newest
// snapshot, verified, into Dir(id), and returns it. A host with no record
// of the workspace first looks for one in the store (the workspace's ref),
// so a fresh data directory restores what was pushed; a store that cannot
// be read then fails the seed rather than boot an empty workspace that
// the next capture would publish over the pushed one.
func (d *Deployment) Seed(ctx context.Context, id string) (string, error) {
	if err := d.waitAlone(ctx, id, false); err != nil {
		return "", err
	}
	d.capMu.Lock()
	defer d.capMu.Unlock()
	d.setRestoring(true)
	defer d.setRestoring(false)
	if err := d.load(ctx); err != nil {
		return "", d.fail(fmt.Errorf("the workspace record could not be read: %w", err))
	}
	d.mu.Lock()
	loaded := d.loaded
	d.mu.Unlock()
	if !loaded {
		if err := d.restoreFromStore(ctx); err != nil {
			return "", d.fail(err)
		}
	}
	dir := d.Dir(id)
	os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", d.fail(err)
	}
	if hex := d.record().Digest; hex != "" {
		if err := d.unpack(ctx, hex, dir); err != nil {
			os.RemoveAll(dir)
			return "", d.fail(fmt.Errorf("snapshot sha256:%s could not be restored: %w", hex, err))
		}
	}
	d.mu.Lock()
	d.blocked = ""
	if !strings.HasPrefix(d.lastError, "pushing ") && !strings.HasPrefix(d.lastError, "capturing ") {
		d.lastError = "" // an earlier seed's failure, now over
	}
	d.mu.Unlock()
	return dir, nil
}

// Wait waits, as Seed does first, until no replica holds the workspace
// (capturing those that are gone): the pool calls it before a create
// takes one of the fleet's create slots, so a rollout waiting for its old
// replica to drain holds up no other deployment's creates.
//
// A suspended replica does not hold it up: the create it precedes resumes
// that replica rather than seeding a new one (and Seed, should the resume
// fail, waits for its capture).
func (d *Deployment) Wait(ctx context.Context) error { return d.waitAlone(ctx, "", true) }

func (d *Deployment) fail(err error) error {
	d.mu.Lock()
	d.lastError = err.Error()
	d.mu.Unlock()
	return err
}

func (d *Deployment) setRestoring(v bool) {
	d.mu.Lock()
	d.restoring = v
	d.mu.Unlock()
}

// unpack restores snapshot hex into dir: from the local file, or, when it
// is missing or corrupt, from the store.
func (d *Deployment) unpack(ctx context.Context, hex, dir string) error {
	f, err := os.Open(d.o.snapshot(hex))
	if err == nil {
		err = Restore(f, hex, dir)
		f.Close()
		if err == nil {
			return nil
		}
		var mm *DigestMismatchError
		if !errors.As(err, &mm) {
			return err
		}
		d.o.Log.Error("a workspace snapshot is corrupt on disk; fetching it from the store", "deployment", d.o.ID, "digest", hex, "err", err)
		os.Remove(d.o.snapshot(hex))
		if err := clearDir(dir); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := d.fetch(ctx, hex); err != nil {
		return fmt.Errorf("not on this host, and the store could not give it: %w", err)
	}
	f, err = os.Open(d.o.snapshot(hex))
	if err != nil {
		return err
	}
	defer f.Close()
	return Restore(f, hex, dir)
}

// fetch downloads snapshot hex from the store into snapshots/, verified
// before it is renamed into place.
func (d *Deployment) fetch(ctx context.Context, hex string) error {
	r, err := d.o.Open(ctx, d.Spec())
	if err != nil {
		return err
	}
	rc, err := r.Fetch(ctx, hex)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = d.writeSnapshot(func(w io.Writer) (Stats, error) {
		n, err := io.Copy(w, rc)
		return Stats{Size: n}, err
	}, hex)
	return err
}

// restoreFromStore looks up the workspace's ref in its store, on a host
// without a record: found, the snapshot is fetched and recorded as the
// current one (and as pushed); not found, the empty workspace is recorded.
func (d *Deployment) restoreFromStore(ctx context.Context) error {
	spec := d.Spec()
	r, err := d.o.Open(ctx, spec)
	if err != nil {
		return fmt.Errorf("the workspace store %s could not be opened: %w", spec.Store, err)
	}
	hex, err := r.Resolve(ctx, spec.Ref)
	rec := Record{}
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return fmt.Errorf("the workspace store %s could not be read (%w); no replica starts until it can, so that the pushed workspace is not replaced by an empty one", spec.Store, err)
	default:
		if err := d.fetch(ctx, hex); err != nil {
			return fmt.Errorf("snapshot sha256:%s (tag %s) could not be fetched from %s: %w", hex, spec.Ref, spec.Store, err)
		}
		// When and from which replica it was captured is the other
		// host's to know: both stay unset (null in the status).
		rec = Record{Digest: hex, Pushed: hex, PushedStore: spec.Store, PushedAt: d.o.Now()}
		if f, err := os.Open(d.o.snapshot(hex)); err == nil {
			rec.Files, rec.Bytes = countTar(f)
			f.Close()
		}
		d.o.Log.Info("restored a workspace from its store", "deployment", d.o.ID, "store", spec.Store, "digest", hex)
	}
	if err := d.o.Records.PutWorkspace(ctx, d.o.ID, rec); err != nil {
		return fmt.Errorf("the workspace record could not be written: %w", err)
	}
	d.mu.Lock()
	d.rec, d.loaded = rec, true
	d.mu.Unlock()
	return nil
}

// waitAlone waits until no replica other than id has a workspace
// directory: a gone replica's directory is captured now; one whose
// replica still runs (a rollout's old replica, draining) is waited for,
// and the workspace's phase is blocked meanwhile.
func (d *Deployment) waitAlone(ctx context.Context, id string, skipSuspended bool) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		d.mu.Lock()
		changed := d.changed
		d.mu.Unlock()
		others, err := d.replicaDirs()
		if err != nil {
			return err
		}
		var waiting string
		for _, o := range others {
			if o == id {
				continue
			}
			if d.isActive(o) {
				waiting = o
				continue
			}
			switch d.o.Alive(ctx, o) {
			case Suspended:
				if !skipSuspended {
					waiting = o
				}
				continue
			case Running:
				waiting = o
				continue
			}
			if err := d.capture(ctx, o, apitype.RetireKill); err != nil {
				return err
			}
		}
		d.mu.Lock()
		if waiting == "" {
			d.blocked = ""
			d.mu.Unlock()
			return nil
		}
		d.blocked = fmt.Sprintf("replica %s still holds the workspace; a new replica starts once it has retired and its workspace has been captured", waiting)
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-t.C:
		}
	}
}

func (d *Deployment) replicaDirs() ([]string, error) {
	es, err := os.ReadDir(d.o.replicas())
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range es {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

func (d *Deployment) isActive(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.active[id]
}

// Retired captures replica id's workspace once the replica has stopped
// for good, then removes its directory. A failed capture keeps the
// directory (and lists the replica as pending) for the next seed to
// capture again.
func (d *Deployment) Retired(ctx context.Context, id string) error {
	return d.capture(ctx, id, apitype.RetireKill)
}

// Suspended captures replica id's workspace while the replica is
// suspended (frozen: nothing writes to it), keeping the directory for its
// resume.
func (d *Deployment) Suspended(ctx context.Context, id string) error {
	return d.capture(ctx, id, apitype.RetireSuspend)
}

func (d *Deployment) capture(ctx context.Context, id string, then apitype.RetireAction) error {
	dir := d.Dir(id)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	d.queue(id, then)
	d.mu.Lock()
	if d.active[id] {
		d.mu.Unlock()
		return nil // captured by another caller right now
	}
	if d.active == nil {
		d.active = map[string]bool{}
	}
	d.active[id] = true
	d.mu.Unlock()
	d.capMu.Lock()
	defer d.capMu.Unlock()
	d.mu.Lock()
	d.capturing++
	d.mu.Unlock()
	err := d.captureLocked(ctx, id, dir, then)
	d.mu.Lock()
	d.capturing--
	delete(d.active, id)
	prefix := fmt.Sprintf("capturing replica %s's workspace: ", id)
	if err != nil {
		d.lastError = prefix + err.Error()
	} else {
		d.dequeueLocked(id)
		if strings.HasPrefix(d.lastError, prefix) {
			d.lastError = ""
		}
	}
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
	if err != nil {
		d.o.Log.Error("could not capture a replica's workspace; its directory is kept", "deployment", d.o.ID, "replica", id, "err", err)
		return err
	}
	d.kickPush()
	return nil
}

func (d *Deployment) queue(id string, then apitype.RetireAction) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.pending {
		if d.pending[i].SandboxID == id {
			d.pending[i].Attempts++
			return
		}
	}
	d.pending = append(d.pending, apitype.WorkspacePending{SandboxID: id, Then: then, QueuedAt: d.o.Now().Unix(), Attempts: 1})
}

func (d *Deployment) dequeueLocked(id string) {
	for i, p := range d.pending {
		if p.SandboxID == id {
			d.pending = append(d.pending[:i], d.pending[i+1:]...)
			return
		}
	}
}

func (d *Deployment) captureLocked(ctx context.Context, id, dir string, then apitype.RetireAction) error {
	if err := d.load(ctx); err != nil {
		return err
	}
	st, err := d.writeSnapshot(func(w io.Writer) (Stats, error) { return WriteTar(w, dir) }, "")
	if err != nil {
		return err
	}
	d.mu.Lock()
	rec, loaded := d.rec, d.loaded
	d.mu.Unlock()
	if loaded && rec.Digest == st.Digest {
		// Unchanged since the snapshot it was seeded from (a replica that
		// never wrote, or never started): nothing new to record.
		d.o.Log.Info("a replica's workspace is unchanged", "deployment", d.o.ID, "replica", id, "digest", st.Digest)
		if then == apitype.RetireKill {
			os.RemoveAll(dir)
		}
		return nil
	}
	rec.Digest, rec.CapturedAt, rec.CapturedFrom, rec.Files, rec.Bytes = st.Digest, d.o.Now(), id, st.Files, st.Bytes
	if err := d.o.Records.PutWorkspace(ctx, d.o.ID, rec); err != nil {
		return fmt.Errorf("the snapshot was written but not recorded: %w", err)
	}
	d.mu.Lock()
	d.rec, d.loaded = rec, true
	d.mu.Unlock()
	d.o.Log.Info("captured a replica's workspace", "deployment", d.o.ID, "replica", id, "digest", st.Digest, "files", st.Files, "bytes", st.Bytes)
	d.prune(st.Digest)
	if then == apitype.RetireKill {
		if err := os.RemoveAll(dir); err != nil {
			d.o.Log.Warn("could not remove a captured workspace directory", "deployment", d.o.ID, "replica", id, "err", err)
		}
	}
	return nil
}

// writeSnapshot writes a snapshot with write to a temporary file, fsyncs
// it, and renames it to <digest>.tar (want, when given, must be the
// digest), fsyncing the directory.
func (d *Deployment) writeSnapshot(write func(io.Writer) (Stats, error), want string) (Stats, error) {
	dir := d.o.snapshots()
	tmp, err := os.CreateTemp(dir, "tmp-*")
	if err != nil {
		return Stats{}, err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	st, err := write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Stats{}, err
	}
	if want != "" {
		got, err := hashFile(tmp.Name())
		if err != nil {
			return Stats{}, err
		}
		if got != want {
			return Stats{}, &DigestMismatchError{Want: want, Got: got}
		}
		st.Digest = want
	}
	if d.o.BeforeRename != nil {
		d.o.BeforeRename(tmp.Name())
	}
	if err := os.Rename(tmp.Name(), d.o.snapshot(st.Digest)); err != nil {
		return Stats{}, err
	}
	return st, syncDir(dir)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// prune removes the snapshots other than keep.
func (d *Deployment) prune(keep string) {
	ms, _ := filepath.Glob(filepath.Join(d.o.snapshots(), "*.tar"))
	for _, m := range ms {
		if filepath.Base(m) != keep+".tar" {
			os.Remove(m)
		}
	}
}

func clearDir(dir string) error {
	es, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range es {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// kickPush starts pushing the current snapshot if the store lacks it.
func (d *Deployment) kickPush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	if d.pushing {
		d.pushAgain = true
		return
	}
	if !d.pushDueLocked() {
		return
	}
	d.pushing = true
	d.wg.Add(1)
	go d.pushLoop()
}

func (d *Deployment) pushDueLocked() bool {
	return d.rec.Digest != "" && (d.rec.Pushed != d.rec.Digest || d.rec.PushedStore != d.spec.Store)
}

func (d *Deployment) pushLoop() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		d.pushAgain = false
		if !d.pushDueLocked() || d.closed {
			d.pushing = false
			d.mu.Unlock()
			return
		}
		hex, spec := d.rec.Digest, d.spec
		d.mu.Unlock()
		err := d.push(d.ctx, hex, spec)
		d.mu.Lock()
		if err != nil {
			d.lastError = fmt.Sprintf("pushing snapshot sha256:%s to %s: %v", hex, spec.Store, err)
			d.pushing = false
			if !d.closed && d.ctx.Err() == nil {
				if d.retry != nil {
					d.retry.Stop()
				}
				d.retry = time.AfterFunc(d.o.PushRetry, d.kickPush)
			}
			d.mu.Unlock()
			d.o.Log.Warn("could not push a workspace snapshot; retrying later", "deployment", d.o.ID, "store", spec.Store, "err", err)
			return
		}
		d.mu.Unlock()
	}
}

// push uploads snapshot hex to spec's store, tags it, and records it as
// pushed (if it is still the current snapshot).
func (d *Deployment) push(ctx context.Context, hex string, spec Spec) error {
	r, err := d.o.Open(ctx, spec)
	if err != nil {
		return err
	}
	f, err := os.Open(d.o.snapshot(hex))
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := r.PutBlob(ctx, hex, fi.Size(), f); err != nil {
		return err
	}
	if err := r.PutTag(ctx, spec.Ref, hex); err != nil {
		return err
	}
	d.capMu.Lock()
	defer d.capMu.Unlock()
	d.mu.Lock()
	rec := d.rec
	d.mu.Unlock()
	if rec.Digest != hex {
		return nil // a newer capture: the loop pushes that one
	}
	rec.Pushed, rec.PushedStore, rec.PushedAt = hex, spec.Store, d.o.Now()
	if err := d.o.Records.PutWorkspace(ctx, d.o.ID, rec); err != nil {
		return fmt.Errorf("pushed, but not recorded: %w", err)
	}
	d.mu.Lock()
	d.rec = rec
	if strings.HasPrefix(d.lastError, "pushing ") {
		d.lastError = ""
	}
	d.mu.Unlock()
	d.o.Log.Info("pushed a workspace snapshot", "deployment", d.o.ID, "store", spec.Store, "digest", hex)
	return nil
}

// Status is the workspace's WorkspaceStatus.
func (d *Deployment) Status() apitype.WorkspaceStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.rec
	st := apitype.WorkspaceStatus{
		Path: d.spec.Path, Store: d.spec.Store, Files: r.Files, Bytes: r.Bytes,
		Blocked: d.blocked, LastError: d.lastError, Pending: append([]apitype.WorkspacePending(nil), d.pending...),
	}
	if r.Digest != "" {
		st.Digest = ptr(r.Digest)
	}
	if r.Digest != "" && !r.CapturedAt.IsZero() {
		st.CapturedAt = ptr(r.CapturedAt.Unix())
	}
	if r.Digest != "" && r.CapturedFrom != "" {
		st.CapturedFrom = ptr(r.CapturedFrom)
	}
	if r.Pushed != "" && r.PushedStore == d.spec.Store {
		st.Pushed, st.PushedAt = ptr(r.Pushed), ptr(r.PushedAt.Unix())
	}
	st.PushPending = d.pushDueLocked()
	switch {
	case d.capturing > 0:
		st.Phase = apitype.WorkspaceCapturing
	case d.restoring:
		st.Phase = apitype.WorkspaceRestoring
	case d.blocked != "":
		st.Phase = apitype.WorkspaceBlocked
	case d.pushing:
		st.Phase = apitype.WorkspacePushing
	default:
		st.Phase = apitype.WorkspaceIdle
	}
	return st
}

func ptr[T any](v T) *T { return &v }

// countTar counts a tar's regular files and their bytes.
func countTar(r io.Reader) (int, int64) {
	var files int
	var bytes int64
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			return files, bytes
		}
		if h.Typeflag == '0' {
			files++
			bytes += h.Size
		}
	}
}
