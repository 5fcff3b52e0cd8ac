package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/health"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/jobs/hostupdate"
	"github.com/berth-dev/berth/internal/spec"
)

// openJobs makes the job manager (marking jobs a crash interrupted as
// failed) and registers the job kinds this server runs. A new kind is
// one more Register here: its start route (admin's jobRoutes) then works.
func (s *Server) openJobs(ctx context.Context) error {
	m, err := jobs.New(ctx, jobs.Options{Store: s.store, Log: s.log, OnLog: s.jobLine})
	if err != nil {
		return err
	}
	m.Register(apitype.JobHostUpdate, hostupdate.Kind(hostupdate.Options{
		Enabled: s.o.HostUpdates, Secrets: s.secrets, Verify: s.verifyDeployment,
	}))
	m.Register(apitype.JobMountPull, s.mountPullKind())
	ak, err := s.artifactPullKind()
	if err != nil {
		return err
	}
	m.Register(apitype.JobArtifactPull, ak)
	bk, err := s.imageBuildKind()
	if err != nil {
		return err
	}
	m.Register(apitype.JobImageBuild, bk)
	s.jobs = m
	s.workflows = jobs.NewWorkflows(s.store, s.workflowRuns())
	return nil
}

// verifyDeployment probes a deployment once, as a host update's re-probe:
// a static deployment is healthy when every upstream passes its health
// check (probed now, not the prober's last word, which may predate the
// update); a site when its root is a readable directory.
func (s *Server) verifyDeployment(ctx context.Context, d jobs.Deployment) error {
	e, ok := s.registry.Get(d.ID)
	if !ok {
		return fmt.Errorf("deployment %q no longer exists", d.ID)
	}
	switch {
	case e.Site != nil:
		fi, err := os.Stat(e.Site.Root)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("site root %s is not a directory", e.Site.Root)
		}
		return nil
	case e.Pool != nil:
		hc := spec.Health(&e.Spec)
		bs := e.Pool.Backends()
		if len(bs) == 0 {
			return errors.New("it has no upstreams")
		}
		for _, b := range bs {
			c := health.Check{Addr: b.Addr, TLS: b.TLS, Path: hc.Path, Timeout: hc.Timeout}
			if hc.Port != 0 {
				if host, _, err := net.SplitHostPort(b.Addr); err == nil {
					c.Addr = net.JoinHostPort(host, strconv.Itoa(hc.Port))
				}
			}
			if err := health.Probe(ctx, c); err != nil {
				return fmt.Errorf("upstream %s: %w", b.Addr, err)
			}
		}
		return nil
	}
	return fmt.Errorf("deployment %q has nothing to probe", d.ID)
}
