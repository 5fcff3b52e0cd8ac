package admin

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/rollout"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/web"
)

// readSpec decodes a deployment spec body. A key inside a declared object
// that no field takes (scaling.min_replica) is a 400 naming it, where the
// decoder would drop it; top-level extra keys are kept (DeploymentSpec.Extra).
func readSpec(w http.ResponseWriter, r *http.Request) (apitype.DeploymentSpec, error) {
	var s apitype.DeploymentSpec
	raw, err := web.ReadBody(w, r)
	if err != nil {
		return s, err
	}
	if err := web.DecodeJSON(raw, &s); err != nil {
		return s, err
	}
	if err := spec.UnknownField(raw); err != nil {
		return s, errorFor(err, s.ID)
	}
	return s, nil
}

// putOptions checks a spec that POST or PUT /deployments writes (the
// caller may write it, its driver defaulted, its upstreams known) and
// returns the registry's options for the caller, with ?dry_run=.
func (a *API) putOptions(r *http.Request, s *apitype.DeploymentSpec) (registry.PutOptions, error) {
	p := caller(r)
	if err := a.mayWrite(p, s); err != nil {
		return registry.PutOptions{}, err
	}
	if err := mayExpose(p, s); err != nil {
		return registry.PutOptions{}, err
	}
	if err := a.defaultDriver(p, s); err != nil {
		return registry.PutOptions{}, err
	}
	if err := a.o.Upstreams.check(r.Context(), s.Upstreams); err != nil {
		return registry.PutOptions{}, err
	}
	o := writeOptions(p)
	o.Admit = a.admit(p)
	var err error
	if o.DryRun, err = web.BoolParam(r, "dry_run"); err != nil {
		return registry.PutOptions{}, err
	}
	return o, nil
}

// put stores s with o and answers its status with the HTTP status given
// (or, for a dry run, what would have been stored), with its ETag.
func (a *API) put(w http.ResponseWriter, r *http.Request, s apitype.DeploymentSpec, o registry.PutOptions, status int) error {
	fresh := a.newNamespace(r.Context(), cmp.Or(s.Namespace, "default"))
	e, op, err := a.write(r, s, o)
	if err != nil {
		return errorFor(err, s.ID)
	}
	w.Header().Set("ETag", e.ETag)
	if op != nil {
		w.Header().Set(RolloutHeader, op.OperationID)
	}
	if o.DryRun {
		writeDryRun(w, e)
		return nil
	}
	if a.o.Written != nil {
		a.o.Written(r.Context(), e)
	}
	if e.Revision == 1 { // a new row: created, not replaced
		a.announce(e, apitype.FeedDeployed)
	} else {
		a.announce(e, apitype.FeedUpdated)
	}
	if fresh {
		a.installPlugins(r.Context(), namespace(e), e.Spec.ID)
	}
	web.WriteJSON(w, status, Status(e))
	return nil
}

// write stores a spec: through the rollout manager, which records a
// rollout operation (with a generated id) when the write changes a vm
// deployment's template, or through the registry alone without one.
func (a *API) write(r *http.Request, s apitype.DeploymentSpec, o registry.PutOptions) (*registry.Entry, *apitype.RolloutOperation, error) {
	if a.o.Rollouts == nil {
		e, _, err := a.o.Registry.Put(r.Context(), s, o)
		return e, nil, err
	}
	return a.o.Rollouts.Write(r.Context(), rollout.Request{Spec: s}, o)
}

// RolloutHeader names, on the reply to a spec write, the rollout
// operation the write started (GET /deployments/{id}/rollouts/{operation}).
const RolloutHeader = "X-Berth-Rollout"

// register is POST /deployments: create or replace, 201 either way (as
// app-lb does); If-None-Match: * makes it create-only.
func (a *API) register(w http.ResponseWriter, r *http.Request) error {
	s, err := readSpec(w, r)
	if err != nil {
		return err
	}
	o, err := a.putOptions(r, &s)
	if err != nil {
		return err
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		if strings.TrimSpace(inm) != "*" {
			return web.Errorf(http.StatusBadRequest, "If-None-Match must be *")
		}
		o.CreateOnly = true
	}
	return a.put(w, r, s, o, http.StatusCreated)
}

// DryRunHeader marks the reply to a write with ?dry_run=true: the spec
// passed every check and was not stored. A server that does not know the
// parameter would store the spec and not send the header, so a client
// checks it (and GET /deployments advertises the capability with it, so
// a client can ask before it sends anything).
const DryRunHeader = "X-Berth-Dry-Run"

// writeDryRun answers a dry-run write: 200 with the status the
// deployment would have, marked with DryRunHeader.
func writeDryRun(w http.ResponseWriter, e *registry.Entry) {
	w.Header().Set(DryRunHeader, "true")
	web.WriteJSON(w, http.StatusOK, Status(e))
}

func (a *API) list(w http.ResponseWriter, r *http.Request) error {
	ns, p := r.URL.Query().Get("namespace"), caller(r)
	out := []apitype.DeploymentStatus{}
	for _, e := range a.o.Registry.List() {
		if ns != "" && namespace(e) != ns || !visible(p, e) {
			continue
		}
		out = append(out, Status(e))
	}
	w.Header().Set("x-app-lb-create-only", "1")
	w.Header().Set(DryRunHeader, "1") // POST and PUT take ?dry_run=true
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) get(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	e, ok := a.o.Registry.Get(id)
	if !ok {
		return errorFor(registry.ErrNotFound, id)
	}
	w.Header().Set("ETag", e.ETag)
	if match := r.Header.Get("If-None-Match"); match != "" && match == e.ETag {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	web.WriteJSON(w, http.StatusOK, Status(e))
	return nil
}

// update is PUT /deployments/{id}: the path id wins over the body's.
func (a *API) update(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	s, err := readSpec(w, r)
	if err != nil {
		return err
	}
	s.ID = id
	o, err := a.putOptions(r, &s)
	if err != nil {
		return err
	}
	o.MustExist = true
	if im := r.Header.Get("If-Match"); im != "" {
		tag, err := spec.ParseIfMatch(im)
		if err != nil {
			return web.Errorf(http.StatusBadRequest, "%v", err)
		}
		o.IfMatch = tag
	}
	return a.put(w, r, s, o, http.StatusOK)
}

func (a *API) delete(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	e, _ := a.o.Registry.Get(id)
	if err := a.o.Registry.Delete(r.Context(), id); err != nil {
		return errorFor(err, id)
	}
	if e != nil {
		a.announce(e, apitype.FeedRemoved)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// scale is PATCH /deployments/{id}/scaling: a partial ScalingPolicy merged
// into the current one.
func (a *API) scale(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	raw, err := web.ReadBody(w, r)
	if err != nil {
		return err
	}
	if !json.Valid(raw) {
		return web.Errorf(http.StatusBadRequest, "malformed JSON in the scaling patch")
	}
	e, ok := a.o.Registry.Get(id)
	if !ok {
		return errorFor(registry.ErrNotFound, id)
	}
	if e.Kind != apitype.KindVM {
		return web.Errorf(http.StatusBadRequest, "deployment %q has no VM pool and cannot be scaled; it is a %s deployment", id, e.Kind)
	}
	pol, err := spec.PatchScaling(e.Spec.Scaling, raw)
	if err != nil {
		var fe *spec.FieldError
		if errors.As(err, &fe) {
			return web.Errorf(http.StatusBadRequest, "invalid scaling policy: %v", fe)
		}
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	s := e.Spec
	s.Scaling = pol
	o := writeOptions(caller(r))
	o.MustExist, o.IfMatch = true, e.ETag
	o.Admit = a.admit(caller(r))
	ne, _, err := a.write(r, s, o)
	if errors.Is(err, registry.ErrPrecondition) {
		return web.Errorf(http.StatusConflict, "deployment %q changed while scaling; retry", id)
	}
	if err != nil {
		return errorFor(err, id)
	}
	w.Header().Set("ETag", ne.ETag)
	web.WriteJSON(w, http.StatusOK, Status(ne))
	return nil
}

func (a *API) drain(w http.ResponseWriter, r *http.Request) error {
	id, up := r.PathValue("id"), r.PathValue("upstream")
	var req apitype.DrainRequest
	if r.ContentLength != 0 {
		if err := web.ReadJSON(w, r, &req); err != nil {
			return err
		}
	}
	if len(req.Reason) > 512 {
		return web.Invalid("reason", "must be at most 512 bytes, got %d", len(req.Reason))
	}
	force := req.Force != nil && *req.Force
	st, err := a.o.Registry.Drain(r.Context(), id, up, force, req.Reason)
	if err != nil {
		return upstreamError(err, id, up)
	}
	code := http.StatusAccepted
	if st.InFlight == 0 {
		code = http.StatusOK
	}
	web.WriteJSON(w, code, st)
	return nil
}

func (a *API) undrain(w http.ResponseWriter, r *http.Request) error {
	id, up := r.PathValue("id"), r.PathValue("upstream")
	st, err := a.o.Registry.Undrain(r.Context(), id, up)
	if err != nil {
		return upstreamError(err, id, up)
	}
	web.WriteJSON(w, http.StatusOK, st)
	return nil
}

func upstreamError(err error, id, up string) error {
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return web.Errorf(http.StatusNotFound, "no deployment %q", id)
	case errors.Is(err, registry.ErrNotStatic):
		return web.Errorf(http.StatusBadRequest, "deployment %q is not a static deployment; only static upstreams can be drained", id)
	case errors.Is(err, registry.ErrNoUpstream):
		return web.Errorf(http.StatusNotFound, "no upstream %q in deployment %q", up, id)
	case errors.Is(err, registry.ErrLastUpstream):
		return web.Errorf(http.StatusConflict, "upstream %q is the last healthy accepting upstream of %q; pass force to drain it anyway", up, id)
	default:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the drain was not saved", Err: err}
	}
}

func namespace(e *registry.Entry) string {
	if e.Spec.Namespace == "" {
		return "default"
	}
	return e.Spec.Namespace
}

// WorkspaceStatuser is a pool's workspace hook (fleet.Config.Workspace)
// that reports a durable workspace's status: DeploymentStatus.workspace.
type WorkspaceStatuser interface {
	WorkspaceStatus() *apitype.WorkspaceStatus
}

// Status builds the DeploymentStatus of an entry.
func Status(e *registry.Entry) apitype.DeploymentStatus {
	st := apitype.DeploymentStatus{RolloutRevision: e.RolloutRevision(), Spec: e.Spec, Kind: e.Kind, VMs: []apitype.VmStatus{}}
	if e.VMPool != nil {
		ps := e.VMPool.Status()
		st.DesiredReplicas, st.Ready, st.Pending, st.TotalInFlight = ps.Desired, ps.Ready, ps.Pending, ps.InFlight
		for _, r := range ps.Replicas {
			if r.Phase != "pending" {
				st.VMs = append(st.VMs, apitype.VmStatus{SandboxID: r.ID, Addr: r.Addr, InFlight: r.InFlight, Healthy: r.Healthy, Draining: r.Draining})
			}
		}
	} else if e.Pool != nil {
		for _, b := range e.Pool.Backends() {
			st.VMs = append(st.VMs, apitype.VmStatus{
				SandboxID: b.ID, Addr: b.Addr, InFlight: int(b.InFlight()),
				Healthy: b.Healthy(), Draining: b.Draining(),
			})
			st.TotalInFlight += int(b.InFlight())
			if b.Healthy() && !b.Draining() {
				st.Ready++
			}
		}
		st.DesiredReplicas = len(e.Upstreams)
	}
	if e.VMPool != nil && e.Spec.VM != nil && e.Spec.VM.Workspace != nil {
		if ws, ok := e.VMPool.Config().Workspace.(WorkspaceStatuser); ok {
			st.Workspace = ws.WorkspaceStatus()
		}
	}
	if e.Site != nil {
		ss := e.Site.Inspect()
		st.Site = &apitype.SiteRootStatus{Root: ss.Root, Status: apitype.SiteRootState(ss.Status), IndexPresent: ss.IndexPresent, Hint: ss.Hint}
	}
	return st
}
