package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/jobs/artifactpull"
	"github.com/berth-dev/berth/internal/jobs/mountpull"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
)

// mountPullKind is the mount-pull job kind, wired to this server's stores.
func (s *Server) mountPullKind() jobs.Kind {
	o := mountpull.Options{
		Open:    s.ArtifactSource,
		Trees:   s.trees,
		Records: s.store,
		Apply:   s.applyMountPulls,
	}
	if s.secrets != nil {
		o.Secrets = s.secrets
	}
	return mountpull.Kind(o)
}

// mountPull is the recorded pull of deployment id's mount m as the spec
// names it now, if there is one whose tree is still on disk.
func (s *Server) mountPull(ctx context.Context, id string, m apitype.MountSpec) (store.MountPull, bool) {
	ps, err := s.store.MountPulls(ctx, id)
	if err != nil {
		s.log.Warn("could not read a deployment's mount pulls", "deployment", id, "err", err)
		return store.MountPull{}, false
	}
	for _, p := range ps {
		if mountpull.Matches(p, m) {
			if _, err := os.Stat(p.Tree); err != nil {
				return store.MountPull{}, false
			}
			return p, true
		}
	}
	return store.MountPull{}, false
}

// mountDigest is the registry's MountDigest: the digest stamped into the
// spec's vm.mounts[i].digest.
func (s *Server) mountDigest(ctx context.Context, id string, m apitype.MountSpec) string {
	p, _ := s.mountPull(ctx, id, m)
	return p.Digest
}

// resolveMounts is the registry's MountResolver: each mount's recorded
// tree, when it is the tree of the digest the pool's spec names.
func (s *Server) resolveMounts(ctx context.Context, id string, ms []apitype.MountSpec) ([]vm.Mount, error) {
	return registry.MountTargets(ms, func(m apitype.MountSpec) (string, error) {
		p, ok := s.mountPull(ctx, id, m)
		if !ok || p.Digest != m.Digest {
			return "", errors.New("not pulled yet (POST /deployments/" + id + "/mounts/pull)")
		}
		return p.Tree, nil
	})
}

// applyMountPulls stamps the digests now recorded into deployment id's
// spec (rewriteSpec), when one differs from the spec's: the pool's
// template changes with them, so replicas boot with the new trees (and a
// deployment that had no pool because a mount was unpulled gets one).
func (s *Server) applyMountPulls(ctx context.Context, id string) error {
	_, err := s.rewriteSpec(ctx, id, "", func(sp *apitype.DeploymentSpec) bool {
		if sp.VM == nil {
			return false
		}
		changed := false
		for _, m := range sp.VM.Mounts {
			if s.mountDigest(ctx, id, m) != m.Digest {
				changed = true // Put stamps them
			}
		}
		return changed
	})
	return err
}

// Why berth starts a deployment's pull or build by itself (the job's
// caller).
const (
	whyArtifact     = "berth (its artifact is not on this host)"
	whyBuildChanged = "berth (its build section changed)"
	whyBuildMissing = "berth (its image is not built on this host)"
	whyMounts       = "berth (its mounts are not pulled on this host)"
)

// autoPull starts what a written (or loaded) deployment needs before it
// can serve: an artifact pull when it has an artifact whose image or
// bundle is not on this host, a build when its build section changed or
// its image is not built here, else a mount pull when one of its mounts
// has no digest here (one job at a time per deployment: the artifact's
// or the build's first, then, once it succeeded, the mounts'). A start
// that a running job of the deployment refuses is queued and made when
// that job ends (queuePull); one that fails otherwise (a missing secret)
// is logged, and the deployment answers 503 until a pull succeeds.
func (s *Server) autoPull(ctx context.Context, e *registry.Entry) {
	if s.jobs == nil {
		return
	}
	var kind apitype.JobKind
	var why string
	switch {
	case s.artifactMissing(e):
		kind, why = apitype.JobArtifactPull, whyArtifact
	case s.buildChanged(e):
		kind, why = apitype.JobImageBuild, whyBuildChanged
	case s.buildMissing(e):
		kind, why = apitype.JobImageBuild, whyBuildMissing
	case s.mountsUnpulled(e):
		kind, why = apitype.JobMountPull, whyMounts
	default:
		return
	}
	s.startPull(ctx, e, kind, why)
}

// mountsUnpulled reports whether one of e's mounts has no digest here.
func (s *Server) mountsUnpulled(e *registry.Entry) bool {
	return e.Kind == apitype.KindVM && registry.Unpulled(e.Spec.VM) >= 0
}

// startPull starts autoPull's job of kind for e.
func (s *Server) startPull(ctx context.Context, e *registry.Entry, kind apitype.JobKind, why string) {
	ns := e.Spec.Namespace
	if ns == "" {
		ns = "default"
	}
	rec, err := s.jobs.Start(ctx, kind, jobs.Request{
		Deployment: jobs.Deployment{ID: e.Spec.ID, Namespace: ns, Kind: e.Kind, Spec: e.Spec},
		Caller:     why,
		// berth's own start for a spec its writer's checks accepted (a
		// local build.repo only from a fleet-wide writer).
		Fleet: kind == apitype.JobImageBuild,
	})
	if errors.Is(err, jobs.ErrBusy) {
		s.queuePull(ctx, e.Spec.ID, kind, why)
		return
	}
	if err != nil {
		s.log.Warn("could not start a pull", "deployment", e.Spec.ID, "kind", kind, "err", err)
		return
	}
	s.log.Info("started a pull", "deployment", e.Spec.ID, "kind", kind, "job", rec.ID)
	if (kind == apitype.JobArtifactPull || kind == apitype.JobImageBuild) && e.Kind == apitype.KindVM && len(e.Spec.VM.Mounts) > 0 {
		// Its mounts' pull follows once the image is there (only then:
		// a failed pull is not retried in a loop).
		go func() {
			end, err := s.jobs.Follow(context.WithoutCancel(ctx), rec.ID, true, func(string) error { return nil })
			if err != nil || end.Status != apitype.JobSucceeded {
				return
			}
			if cur, ok := s.registry.Get(e.Spec.ID); ok && !s.artifactMissing(cur) && !s.buildMissing(cur) {
				s.autoPull(context.WithoutCancel(ctx), cur)
			}
		}()
	}
}

// pullQueue is the pulls and builds wanted while their deployment's job
// ran: at most one per deployment and kind.
type pullQueue struct {
	mu     sync.Mutex
	wanted map[pullKey]bool
}

type pullKey struct {
	deployment string
	kind       apitype.JobKind
}

// queued reports whether a job of kind is queued for deployment.
func (q *pullQueue) queued(deployment string, kind apitype.JobKind) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wanted[pullKey{deployment, kind}]
}

// queuePull remembers that deployment id wants a job of kind, refused
// while its running job runs (an edit during a pull or build), and
// starts it once that job ended, for the deployment as it is then — if
// it still needs it: a queued pull whose artifact or mounts the ended job
// brought is dropped, and a build queued because the build section
// changed always runs (the running build was of the old one). Edits that
// want the same kind meanwhile are one queued start.
func (s *Server) queuePull(ctx context.Context, id string, kind apitype.JobKind, why string) {
	key := pullKey{id, kind}
	q := &s.queued
	q.mu.Lock()
	if q.wanted[key] {
		q.mu.Unlock()
		s.log.Info("a job of the deployment is running; the pull it wants is queued already", "deployment", id, "kind", kind)
		return
	}
	if q.wanted == nil {
		q.wanted = map[pullKey]bool{}
	}
	q.wanted[key] = true
	q.mu.Unlock()
	s.log.Info("a job of the deployment is running; the pull it wants starts when it ends", "deployment", id, "kind", kind)
	idle := s.jobs.Idle(id)
	go func() {
		<-idle
		q.mu.Lock()
		delete(q.wanted, key)
		q.mu.Unlock()
		cur, ok := s.registry.Get(id)
		if !ok {
			return // deleted meanwhile
		}
		if !s.stillWanted(cur, kind, why) {
			s.log.Info("a queued pull is no longer needed", "deployment", id, "kind", kind)
			return
		}
		s.startPull(context.WithoutCancel(ctx), cur, kind, why)
	}()
}

// stillWanted reports whether e still needs the queued job of kind.
func (s *Server) stillWanted(e *registry.Entry, kind apitype.JobKind, why string) bool {
	switch kind {
	case apitype.JobArtifactPull:
		return s.artifactMissing(e)
	case apitype.JobImageBuild:
		return e.Spec.Build != nil && (why == whyBuildChanged || s.buildMissing(e))
	case apitype.JobMountPull:
		return !s.artifactMissing(e) && !s.buildMissing(e) && s.mountsUnpulled(e)
	}
	return false
}

// artifactPullKind is the artifact-pull job kind, wired to this server's
// stores; rootfs tarballs are verified in <data>/artifact-tmp.
func (s *Server) artifactPullKind() (jobs.Kind, error) {
	tmp := filepath.Join(s.o.DataDir, "artifact-tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, err
	}
	o := artifactpull.Options{
		Open: s.ArtifactSource, Trees: s.trees, Images: s.images, Records: s.store, TempDir: tmp,
		SwitchVMImage: s.switchVMImage, CheckOperation: s.checkOperation,
		SwitchSite: func(_ context.Context, id string) error {
			if !s.registry.Refresh(id) {
				return fmt.Errorf("deployment %q no longer exists", id)
			}
			return nil
		},
	}
	if s.secrets != nil {
		o.Secrets = s.secrets
	}
	return artifactpull.Kind(o), nil
}

// siteRoot is the registry's SiteRoot: the tree of the last artifact pull
// of site deployment id, while it is on disk.
func (s *Server) siteRoot(id string) (string, bool) {
	p, ok, err := s.store.ArtifactPull(context.Background(), id)
	if err != nil {
		s.log.Warn("could not read a site's artifact pull", "deployment", id, "err", err)
		return "", false
	}
	if !ok {
		return "", false
	}
	if fi, err := os.Stat(p.Tree); err != nil || !fi.IsDir() {
		return "", false
	}
	return p.Tree, true
}

// artifactMissing reports whether e has an artifact section whose image
// (vm) or bundle (site) is not on this host.
func (s *Server) artifactMissing(e *registry.Entry) bool {
	if e.Spec.Artifact == nil {
		return false
	}
	switch e.Kind {
	case apitype.KindVM:
		return e.Spec.VM.Image == "" || !s.images.Exists(e.Spec.VM.Image)
	case apitype.KindSite:
		_, ok := s.siteRoot(e.Spec.ID)
		return !ok
	}
	return false
}
