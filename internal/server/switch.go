package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/rollout"
)

// rewriteSpec changes the stored spec of deployment id the way a client's
// PUT would, for a job that switches a deployment to what it produced:
// edit gets a deep copy of the current spec (so edit may change anything
// in place) and reports whether it changed
// anything; if so, the spec is put back through registry.Put (MustExist,
// IfMatch the ETag it was read with), so the write is validated,
// persisted and published as any other, and a vm section that changed
// is a rollout (the old replicas serve until new ones are ready).
// A write that raced another (a precondition failure) is retried once on
// the newer spec. It reports whether it wrote.
//
// The put is the server's own, not the tenant's: the spec was accepted
// from its writer already, and only what edit changes is new, so it runs
// without the writer's restrictions (no Admit, no Restricted).
func (s *Server) rewriteSpec(ctx context.Context, id, op string, edit func(*apitype.DeploymentSpec) bool) (bool, error) {
	for attempt := 0; ; attempt++ {
		e, ok := s.registry.Get(id)
		if !ok {
			return false, fmt.Errorf("deployment %q no longer exists", id)
		}
		// A deep copy: registry.Put normalizes the spec it is given in
		// place (routes, sections behind pointers), and the entry's spec
		// is read concurrently (GET /deployments/{id}, the data plane).
		raw, err := json.Marshal(&e.Spec)
		if err != nil {
			return false, err
		}
		var sp apitype.DeploymentSpec
		if err := json.Unmarshal(raw, &sp); err != nil {
			return false, err
		}
		if !edit(&sp) {
			return false, nil
		}
		// Through the rollout manager: a changed vm section is a
		// rollout with an operation of its own, reverted if it fails.
		_, _, err = s.rollouts.Write(ctx, rollout.Request{Spec: sp, OperationID: op}, registry.PutOptions{MustExist: true, IfMatch: e.ETag})
		if errors.Is(err, registry.ErrPrecondition) && attempt == 0 {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("writing deployment %q: %w", id, err)
		}
		return true, nil
	}
}

// switchVMImage points vm deployment id at image (an image in berth's
// image store), replacing its pool as an edit of vm.image does: the
// replicas of the old image drain while new ones boot. It reports whether
// the deployment was switched (false: it already ran image). For jobs
// that produce an image (artifact-pull, image-build); op, when not "",
// is the rollout's operation id (POST /deployments/{id}/pull's
// operation_id).
func (s *Server) switchVMImage(ctx context.Context, id, image, op string) (rolledOut bool, err error) {
	return s.rewriteSpec(ctx, id, op, func(sp *apitype.DeploymentSpec) bool {
		if sp.VM == nil || sp.VM.Image == image {
			return false
		}
		sp.VM.Image = image
		return true
	})
}

// checkOperation is artifact-pull's CheckOperation: op's form, and no
// rollout of deployment id named op yet.
func (s *Server) checkOperation(ctx context.Context, id, op string) error {
	if err := rollout.ValidOperationID(op); err != nil {
		return jobs.Errorf(http.StatusBadRequest, "%v", err)
	}
	if _, err := s.rollouts.Get(ctx, id, op); err == nil {
		return jobs.Errorf(http.StatusConflict, "operation_id: deployment %q has a rollout %q already", id, op)
	}
	return nil
}
