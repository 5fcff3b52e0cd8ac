package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/workspace"
)

// workspaces keeps the workspaces of vm deployments (vm.workspace,
// vm.workspace_archive) under <DataDir>/workspaces/<id>, one per
// deployment for as long as the server runs (spec writes update it).
type workspaces struct {
	s  *Server
	mu sync.Mutex
	ws map[string]*deploymentWorkspace
}

// deploymentWorkspace is one deployment's: a durable workspace or an
// archive seeder, and the guest path replicas see it at.
type deploymentWorkspace struct {
	w       *workspaces
	id      string
	mu      sync.Mutex
	path    string
	durable *workspace.Deployment
	archive *workspace.Archive
	key     string // the archive's s3_key and size it was made for
	// mode is what the spec asks for now: new replicas are seeded from
	// the durable workspace or the archive, or get none. Both stay open
	// after the spec moves on, so the old replicas' directories are still
	// captured (durable) or removed (archive) as they stop.
	mode wsMode
}

type wsMode int

const (
	wsOff wsMode = iota
	wsDurable
	wsArchive
)

// hook is the registry's Workspace: the fleet hook of deployment s.
func (w *workspaces) hook(s *apitype.DeploymentSpec) fleet.Workspace {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ws == nil {
		w.ws = map[string]*deploymentWorkspace{}
	}
	d := w.ws[s.ID]
	if s.VM.Workspace == nil && s.VM.WorkspaceArchive == nil {
		if d == nil {
			return nil
		}
		// The spec dropped its workspace: new replicas get none, and the
		// old ones are still captured (or, for an archive, cleaned up)
		// as they stop.
		d.mu.Lock()
		d.mode = wsOff
		d.mu.Unlock()
		return d
	}
	if d == nil {
		d = &deploymentWorkspace{w: w, id: s.ID}
		w.ws[s.ID] = d
	}
	d.set(s)
	return d
}

// status is deployment id's WorkspaceStatus, when it has a durable one.
func (w *workspaces) status(id string) *apitype.WorkspaceStatus {
	w.mu.Lock()
	d := w.ws[id]
	w.mu.Unlock()
	if d == nil {
		return nil
	}
	d.mu.Lock()
	dw := d.durable
	d.mu.Unlock()
	if dw == nil {
		return nil
	}
	st := dw.Status()
	return &st
}

// forget closes deployment id's workspace and removes it from this host
// (the deployment was deleted; what its store holds stays there).
func (w *workspaces) forget(id string) {
	w.mu.Lock()
	d := w.ws[id]
	delete(w.ws, id)
	w.mu.Unlock()
	if d != nil {
		d.close()
	}
	if err := os.RemoveAll(w.dir(id)); err != nil {
		w.s.log.Warn("could not remove a deleted deployment's workspace", "deployment", id, "err", err)
	}
}

// close closes every workspace (berth stopping).
func (w *workspaces) close() {
	w.mu.Lock()
	ds := w.ws
	w.ws = nil
	w.mu.Unlock()
	for _, d := range ds {
		d.close()
	}
}

func (w *workspaces) dir(id string) string { return filepath.Join(w.s.o.DataDir, "workspaces", id) }

func (d *deploymentWorkspace) close() {
	d.mu.Lock()
	dw := d.durable
	d.durable, d.archive = nil, nil
	d.mu.Unlock()
	if dw != nil {
		dw.Close()
	}
}

// set (re)configures d for spec s.
func (d *deploymentWorkspace) set(s *apitype.DeploymentSpec) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := s.VM
	ns := spec.Namespace(s)
	switch {
	case v.Workspace != nil:
		ws := v.Workspace
		d.mode, d.path = wsDurable, ws.Path
		if d.path == "" {
			d.path = workspace.DefaultPath
		}
		sp := workspace.Spec{Path: ws.Path, Store: ws.Store, Ref: ws.Ref}
		auth := ws.Auth
		d.w.s.setWorkspaceAuth(s.ID, ns, auth)
		if d.durable != nil {
			d.durable.SetSpec(sp)
			return
		}
		dw, err := workspace.Open(workspace.Options{
			ID: s.ID, Dir: d.w.dir(s.ID), Records: workspaceRecords{d.w.s.store},
			Open: func(ctx context.Context, sp workspace.Spec) (workspace.Remote, error) {
				return d.w.s.openWorkspaceStore(ctx, s.ID, sp)
			},
			Alive:        d.w.s.replicaLiveness,
			Log:          d.w.s.log,
			BeforeRename: d.w.s.o.beforeSnapshotRename,
		}, sp)
		if err != nil {
			d.w.s.log.Error("could not open a deployment's workspace", "deployment", s.ID, "err", err)
			return
		}
		d.durable = dw
	case v.WorkspaceArchive != nil:
		wa := v.WorkspaceArchive
		key := wa.S3Key
		var size int64
		if wa.SizeBytes != nil {
			size = *wa.SizeBytes
		}
		d.mode, d.path = wsArchive, workspace.DefaultPath
		if d.archive != nil && d.key == fmt.Sprint(key, size) {
			return
		}
		a, err := workspace.NewArchive(workspace.ArchiveOptions{
			ID: s.ID, Dir: d.w.dir(s.ID), Key: key, Size: size,
			Fetch: d.w.s.fetchArchive, Alive: d.w.s.replicaAlive,
		})
		if err != nil {
			d.w.s.log.Error("could not open a deployment's workspace archive", "deployment", s.ID, "err", err)
			return
		}
		d.archive, d.key = a, fmt.Sprint(key, size)
	}
}

// Seed is fleet.Workspace's: the replica's directory, attached at the
// workspace's path (Spec.Workspace for /workspace, a writable mount
// elsewhere).
func (d *deploymentWorkspace) Seed(ctx context.Context, sp *vm.Spec) error {
	d.mu.Lock()
	dw, a, p, mode := d.durable, d.archive, d.path, d.mode
	d.mu.Unlock()
	var dir string
	var err error
	switch {
	case mode == wsOff:
		return nil
	case mode == wsDurable && dw != nil:
		dir, err = dw.Seed(ctx, sp.Name)
	case mode == wsArchive && a != nil:
		dir, err = a.Seed(ctx, sp.Name)
	default:
		err = errors.New("the deployment's workspace could not be opened on this host (see berth's log)")
	}
	if err != nil {
		return err
	}
	if p == workspace.DefaultPath {
		sp.Workspace = dir
	} else {
		sp.Mounts = append(sp.Mounts, vm.Mount{Source: dir, Target: p})
	}
	return nil
}

// Wait is the registry's workspace waiter: before a create takes a create
// slot, a durable workspace waits until no other replica holds it. A
// failure is left to Seed, which waits again and reports it.
func (d *deploymentWorkspace) Wait(ctx context.Context) {
	d.mu.Lock()
	dw, mode := d.durable, d.mode
	d.mu.Unlock()
	if dw != nil && mode == wsDurable {
		dw.Wait(ctx)
	}
}

// Stopped is fleet.Workspace's: capture (or, for an archive, discard).
func (d *deploymentWorkspace) Stopped(ctx context.Context, id string) {
	d.mu.Lock()
	dw, a := d.durable, d.archive
	d.mu.Unlock()
	// A replica has a directory of one kind at most; each call is a no-op
	// for a replica without one of its kind.
	if a != nil {
		a.Retired(ctx, id)
	}
	if dw != nil {
		if err := dw.Retired(ctx, id); errors.Is(err, store.ErrNotFound) {
			os.RemoveAll(dw.Dir(id)) // the deployment is being deleted
		}
	}
}

// WorkspaceStatus is admin.WorkspaceStatuser's: the durable workspace's
// status (nil for an archive).
func (d *deploymentWorkspace) WorkspaceStatus() *apitype.WorkspaceStatus {
	return d.w.status(d.id)
}

// Suspended is fleet.Workspace's.
func (d *deploymentWorkspace) Suspended(ctx context.Context, id string) {
	d.mu.Lock()
	dw := d.durable
	d.mu.Unlock()
	if dw != nil {
		dw.Suspended(ctx, id)
	}
}

// replicaLiveness is whether replica id still runs, is suspended, or is
// gone, as the drivers say.
func (s *Server) replicaLiveness(ctx context.Context, id string) workspace.Liveness {
	for _, name := range s.fleet.DriverNames() {
		in, err := s.fleet.Driver(name).Inspect(ctx, id)
		switch {
		case errors.Is(err, vm.ErrNotFound):
			continue
		case err != nil:
			return workspace.Running // cannot tell: do not capture under it
		case in.State == vm.StateSuspended:
			return workspace.Suspended
		case in.State.Terminal():
			return workspace.Gone
		}
		return workspace.Running
	}
	return workspace.Gone
}

// replicaAlive reports whether replica id still runs or is suspended.
func (s *Server) replicaAlive(ctx context.Context, id string) bool {
	return s.replicaLiveness(ctx, id) != workspace.Gone
}

// workspaceAuth remembers each deployment's vm.workspace.auth and
// namespace, which openWorkspaceStore resolves at each use.
type workspaceAuth struct {
	ns   string
	auth *apitype.SecretRef
}

func (s *Server) setWorkspaceAuth(id, ns string, auth *apitype.SecretRef) {
	s.wsAuthMu.Lock()
	defer s.wsAuthMu.Unlock()
	if s.wsAuth == nil {
		s.wsAuth = map[string]workspaceAuth{}
	}
	s.wsAuth[id] = workspaceAuth{ns: ns, auth: auth}
}

// openWorkspaceStore opens a workspace's store: s3://… through the S3
// endpoint (credentials from auth, a secret with keys AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, else the server's), any other store as an
// artifact store (auth one key: the store's API key), under the same
// address and root policy as artifact pulls.
func (s *Server) openWorkspaceStore(ctx context.Context, id string, sp workspace.Spec) (workspace.Remote, error) {
	s.wsAuthMu.Lock()
	a := s.wsAuth[id]
	s.wsAuthMu.Unlock()
	vals := map[string]string{}
	if a.auth != nil {
		if s.secrets == nil {
			return nil, errors.New("vm.workspace.auth: secrets are not enabled on this server")
		}
		v, err := s.secrets.ResolveEnv(ctx, a.ns, []apitype.SecretEnv{{Secret: a.auth.Secret, Key: a.auth.Key, Namespace: a.auth.Namespace}})
		if err != nil {
			return nil, fmt.Errorf("vm.workspace.auth: %w", err)
		}
		vals = v
	}
	if _, _, err := workspace.ParseS3(sp.Store); err == nil {
		o := s.o.S3
		if a.auth != nil {
			o.AccessKey, o.SecretKey, o.SessionToken = vals["AWS_ACCESS_KEY_ID"], vals["AWS_SECRET_ACCESS_KEY"], vals["AWS_SESSION_TOKEN"]
			if o.AccessKey == "" || o.SecretKey == "" {
				return nil, fmt.Errorf("vm.workspace.auth: secret %q must hold AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for an s3:// store", a.auth.Secret)
			}
		}
		return workspace.NewS3(sp.Store, o)
	}
	key := ""
	if a.auth != nil {
		if len(vals) != 1 {
			return nil, fmt.Errorf("vm.workspace.auth: secret %q holds %d keys; name one with key", a.auth.Secret, len(vals))
		}
		for _, v := range vals {
			key = v
		}
	}
	ns := a.ns
	src, err := s.ArtifactSource(sp.Store, ns, key)
	if err != nil {
		return nil, err
	}
	sink, err := artifact.OpenSink(sp.Store, ns, key, s.artifactOptions())
	if err != nil {
		return nil, err
	}
	return workspace.ArtifactRemote(src, sink), nil
}

// fetchArchive opens object key of the workspace archive bucket.
func (s *Server) fetchArchive(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	if s.o.WorkspaceArchiveBucket == "" {
		return nil, 0, errors.New("this server has no workspace archive bucket (berth serve --workspace-archive-bucket)")
	}
	b, err := workspace.NewS3("s3://"+s.o.WorkspaceArchiveBucket, s.o.S3)
	if err != nil {
		return nil, 0, err
	}
	return b.Object(ctx, key)
}

// workspaceRecords adapts the store to workspace.Records.
type workspaceRecords struct{ s Store }

func (r workspaceRecords) Workspace(ctx context.Context, id string) (workspace.Record, bool, error) {
	w, ok, err := r.s.Workspace(ctx, id)
	return workspace.Record{Digest: w.Digest, CapturedAt: w.CapturedAt, CapturedFrom: w.CapturedFrom, Files: w.Files, Bytes: w.Bytes,
		Pushed: w.Pushed, PushedStore: w.PushedStore, PushedAt: w.PushedAt}, ok, err
}

func (r workspaceRecords) PutWorkspace(ctx context.Context, id string, w workspace.Record) error {
	return r.s.PutWorkspace(ctx, store.Workspace{Deployment: id, Digest: w.Digest, CapturedAt: w.CapturedAt, CapturedFrom: w.CapturedFrom,
		Files: w.Files, Bytes: w.Bytes, Pushed: w.Pushed, PushedStore: w.PushedStore, PushedAt: w.PushedAt})
}
