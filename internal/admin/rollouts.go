package admin

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/rollout"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/web"
)

// Rollout routes (app-lb.md §2, [v2] in app-lb; berth implements them):
//
//	POST /deployments/{id}/rollouts              {operation_id, expected_revision, spec} → 202 RolloutOperation
//	GET  /deployments/{id}/rollouts/{operation}  200 RolloutOperation; 404 "rollout not found"
//	GET  /deployments/{id}/rollouts[?limit=N]    200 [RolloutOperation], newest first (berth's own)
//	POST /deployments/{id}/rollouts/undo         {operation_id?} → 202 RolloutOperation (berth's own):
//	                                             re-applies the spec the current revision replaced
//
// They sit behind the deployment wall like PUT /deployments/{id}: a
// confined caller of another namespace is refused exactly as for a
// deployment that does not exist.
func (a *API) routeRollouts() {
	a.handle("POST /deployments/{id}/rollouts", tierCRUD, wallDeployment, a.startRollout)
	a.handle("GET /deployments/{id}/rollouts", tierCRUD, wallDeployment, a.listRollouts)      // berth's own
	a.handle("POST /deployments/{id}/rollouts/undo", tierCRUD, wallDeployment, a.undoRollout) // berth's own
	a.handle("GET /deployments/{id}/rollouts/{operation}", tierCRUD, wallDeployment, a.getRollout)
}

// rolloutRequest is the body of POST /deployments/{id}/rollouts.
type rolloutRequest struct {
	OperationID      string          `json:"operation_id"`
	ExpectedRevision string          `json:"expected_revision"`
	Spec             json.RawMessage `json:"spec"`
}

func (a *API) rollouts() (*rollout.Manager, error) {
	if a.o.Rollouts == nil {
		return nil, web.Errorf(http.StatusServiceUnavailable, "this server keeps no rollouts")
	}
	return a.o.Rollouts, nil
}

func (a *API) startRollout(w http.ResponseWriter, r *http.Request) error {
	m, err := a.rollouts()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	raw, err := web.ReadBody(w, r)
	if err != nil {
		return err
	}
	var req rolloutRequest
	if err := web.DecodeJSON(raw, &req); err != nil {
		return err
	}
	if err := rollout.ValidOperationID(req.OperationID); err != nil {
		return err
	}
	if !isRevision(req.ExpectedRevision) {
		return web.Invalid("expected_revision", "must be a rollout_revision (64 lowercase hex digits, as GET /deployments/%s returns), got %q", id, req.ExpectedRevision)
	}
	if len(req.Spec) == 0 || string(req.Spec) == "null" {
		return web.Invalid("spec", "is required")
	}
	var s apitype.DeploymentSpec
	if err := web.DecodeJSON(req.Spec, &s); err != nil {
		return web.Invalid("spec", "%s", err.Error())
	}
	if err := spec.UnknownField(req.Spec); err != nil {
		return web.Invalid("spec."+err.(*spec.FieldError).Field, "unknown field")
	}
	if s.ID != id {
		return web.Invalid("spec.id", "spec.id must match deployment (%q, got %q)", id, s.ID)
	}
	if _, ok := a.o.Registry.Get(id); !ok {
		return errorFor(registry.ErrNotFound, id)
	}
	o, err := a.putOptions(r, &s)
	if err != nil {
		return err
	}
	if o.DryRun {
		return web.Invalid("dry_run", "is not taken by rollouts")
	}
	o.MustExist = true
	e, op, err := m.Write(r.Context(), rollout.Request{OperationID: req.OperationID, ExpectedRevision: req.ExpectedRevision, Spec: s, Always: true}, o)
	if err != nil {
		return errorFor(err, id)
	}
	if e != nil && a.o.Written != nil {
		a.o.Written(r.Context(), e)
	}
	if op == nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the spec was written but its rollout could not be recorded"}
	}
	web.WriteJSON(w, http.StatusAccepted, op)
	return nil
}

func isRevision(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (a *API) getRollout(w http.ResponseWriter, r *http.Request) error {
	m, err := a.rollouts()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, ok := a.o.Registry.Get(id); !ok {
		return web.Errorf(http.StatusNotFound, "rollout not found")
	}
	op, err := m.Get(r.Context(), id, r.PathValue("operation"))
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, op)
	return nil
}

func (a *API) listRollouts(w http.ResponseWriter, r *http.Request) error {
	m, err := a.rollouts()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, ok := a.o.Registry.Get(id); !ok {
		return errorFor(registry.ErrNotFound, id)
	}
	limit := rollout.Keep
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > rollout.Keep {
			return web.Invalid("limit", "must be an integer from 1 to %d, got %q", rollout.Keep, v)
		}
		limit = n
	}
	ops, err := m.History(r.Context(), id, limit)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, ops)
	return nil
}

// undoRequest is the optional body of POST /deployments/{id}/rollouts/undo.
type undoRequest struct {
	OperationID string `json:"operation_id"`
}

func (a *API) undoRollout(w http.ResponseWriter, r *http.Request) error {
	m, err := a.rollouts()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	var req undoRequest
	if r.ContentLength != 0 {
		if err := web.ReadJSON(w, r, &req); err != nil {
			return err
		}
	}
	if req.OperationID != "" {
		if err := rollout.ValidOperationID(req.OperationID); err != nil {
			return err
		}
	}
	e, ok := a.o.Registry.Get(id)
	if !ok {
		return errorFor(registry.ErrNotFound, id)
	}
	prev, ok, err := m.Previous(r.Context(), id, e.RolloutRevision())
	if err != nil {
		return err
	}
	if !ok {
		return web.Errorf(http.StatusConflict, "deployment %q has no previous revision to undo to (no succeeded rollout brought it to revision %s)", id, e.RolloutRevision())
	}
	prev.ID = id
	o, err := a.putOptions(r, &prev)
	if err != nil {
		return err
	}
	o.MustExist = true
	ne, op, err := m.Write(r.Context(), rollout.Request{OperationID: req.OperationID, ExpectedRevision: e.RolloutRevision(), Spec: prev, Always: true}, o)
	if err != nil {
		return errorFor(err, id)
	}
	if ne != nil && a.o.Written != nil {
		a.o.Written(r.Context(), ne)
	}
	if op == nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the spec was written but its rollout could not be recorded"}
	}
	web.WriteJSON(w, http.StatusAccepted, op)
	return nil
}
