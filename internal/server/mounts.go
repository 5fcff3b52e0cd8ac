package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
	_, err := s.rewriteSpec(ctx, id, func(sp *apitype.DeploymentSpec) bool {
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

// autoPull starts what a written (or loaded) deployment needs before it
// can serve: an artifact pull when it has an artifact whose image or
// bundle is not on this host, else a mount pull when one of its mounts
// has no digest here (one job at a time per deployment: the artifact's
// first, then, once it succeeded, the mounts'). A start that fails
// (a pull already running, a missing secret) is logged; the deployment
// answers 503 until a pull succeeds.
func (s *Server) autoPull(ctx context.Context, e *registry.Entry) {
	if s.jobs == nil {
		return
	}
	var kind apitype.JobKind
	var why string
	switch {
	case s.artifactMissing(e):
		kind, why = apitype.JobArtifactPull, "berth (its artifact is not on this host)"
	case s.buildChanged(e):
		kind, why = apitype.JobImageBuild, "berth (its build section changed)"
	case s.buildMissing(e):
		kind, why = apitype.JobImageBuild, "berth (its image is not built on this host)"
	case e.Kind == apitype.KindVM && registry.Unpulled(e.Spec.VM) >= 0:
		kind, why = apitype.JobMountPull, "berth (its mounts are not pulled on this host)"
	default:
		return
	}
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
		SwitchVMImage: s.switchVMImage,
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
