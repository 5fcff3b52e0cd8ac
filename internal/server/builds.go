package server

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/berth-dev/berth/internal/build"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/jobs/imagebuild"
	"github.com/berth-dev/berth/internal/registry"
)

// imageBuildKind is the image-build job kind, wired to this server's
// stores and the builder berth serve's --build-* flags configure; builds
// run in <data>/builds, which is swept of what a crash left first.
func (s *Server) imageBuildKind() (jobs.Kind, error) {
	b := &build.Builder{
		WorkDir:    filepath.Join(s.o.DataDir, "builds"),
		AllowLocal: s.o.AllowLocalRepos, AllowHTTP: s.o.BuildAllowHTTP,
		Network: s.o.BuildNetwork, Timeout: s.o.BuildTimeout,
		Self: s.self, AllowLinkLocal: s.o.AllowLinkLocalUpstreams,
	}
	if err := b.Sweep(); err != nil {
		return nil, fmt.Errorf("builds: %w", err)
	}
	o := imagebuild.Options{Builder: b, Images: s.images, Open: s.ArtifactSource, SwitchVMImage: s.switchVMImage}
	if s.secrets != nil {
		o.Secrets = s.secrets
	}
	return imagebuild.Kind(o), nil
}

// buildMissing reports whether e is a vm deployment with a build section
// whose image is not in the image store (never built, or deleted).
func (s *Server) buildMissing(e *registry.Entry) bool {
	if e.Spec.Build == nil || e.Spec.VM == nil || s.images == nil {
		return false
	}
	return e.Spec.VM.Image == "" || !s.images.Exists(e.Spec.VM.Image)
}

// buildSeen remembers each built deployment's build section as last
// written, so an edit that changes it (a new ref, another repo) starts a
// build while the last one keeps serving.
type buildSeen struct {
	mu   sync.Mutex
	last map[string]string // deployment id → JSON of its build section
}

// buildChanged reports whether e's build section differs from the one
// seen when it was last written or loaded, and records it. The first
// sight (a register, berth's start-up) is no change: a missing image is
// buildMissing's.
func (s *Server) buildChanged(e *registry.Entry) bool {
	s.builds.mu.Lock()
	defer s.builds.mu.Unlock()
	if s.builds.last == nil {
		s.builds.last = map[string]string{}
	}
	id := e.Spec.ID
	if e.Spec.Build == nil {
		delete(s.builds.last, id)
		return false
	}
	b, _ := json.Marshal(e.Spec.Build)
	prev, seen := s.builds.last[id]
	s.builds.last[id] = string(b)
	return seen && prev != string(b)
}
