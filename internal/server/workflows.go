package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/build"
	"github.com/berth-dev/berth/internal/jobs"
)

// workflowRuns is what runs workflows (jobs.Workflows.Run): steps are
// jobs of s.jobs, the workflow's repository is fetched with the image
// builder's git fetch (its transport and address policy).
func (s *Server) workflowRuns() jobs.RunOptions {
	// Checkouts live only while a run reads them; what a stopped berth
	// left is removed (no run is in progress before this).
	wd := filepath.Join(s.o.DataDir, "workflows")
	if err := os.RemoveAll(wd); err != nil {
		s.log.Warn("could not remove old workflow checkouts", "dir", wd, "err", err)
	}
	b := &build.Builder{
		WorkDir:    wd,
		AllowLocal: s.o.AllowLocalRepos, AllowHTTP: s.o.WorkflowAllowHTTP,
		Self: s.self, AllowLinkLocal: s.o.AllowLinkLocalUpstreams,
	}
	return jobs.RunOptions{
		Jobs: s.jobs,
		Deployment: func(id string) (jobs.Deployment, bool) {
			e, ok := s.registry.Get(id)
			if !ok {
				return jobs.Deployment{}, false
			}
			ns := e.Spec.Namespace
			if ns == "" {
				ns = "default"
			}
			return jobs.Deployment{ID: e.Spec.ID, Namespace: ns, Kind: e.Kind, Spec: e.Spec}, true
		},
		Checkout: func(ctx context.Context, w apitype.WorkflowSpec, logf func(string), fn func(root, commit string) error) error {
			var cred *build.Credential
			if a := w.Auth; a != nil {
				v, err := s.secrets.ResolveEnv(ctx, a.Namespace, []apitype.SecretEnv{{Secret: a.Secret, Key: a.Key}})
				if err != nil {
					// ResolveEnv names the entry as env_from[0]; here it is auth.
					return fmt.Errorf("auth: %s", strings.TrimPrefix(err.Error(), "env_from[0]: "))
				}
				if len(v) != 1 {
					return fmt.Errorf("auth: secret %q holds %d keys: name the token's as auth.key", a.Secret, len(v))
				}
				for _, t := range v {
					cred = &build.Credential{Username: a.Username, Token: t}
				}
			}
			return b.Checkout(ctx, w.Repo, w.Ref, cred, logf, fn)
		},
	}
}
