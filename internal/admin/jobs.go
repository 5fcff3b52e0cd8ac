package admin

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/web"
)

// The job start routes, each with the kind it starts (app-lb.md §2.3).
// The manager looks the kind up: a kind registered in the composition
// root makes its route work, one not registered answers 501 naming it.
var jobRoutes = []struct {
	pattern string
	kind    apitype.JobKind
}{
	{"POST /deployments/{id}/build", apitype.JobImageBuild},
	{"POST /deployments/{id}/pull", apitype.JobArtifactPull},
	{"POST /deployments/{id}/mounts/pull", apitype.JobMountPull},
	{"POST /deployments/{id}/update", apitype.JobHostUpdate},
}

func (a *API) routeJobs() {
	for _, jr := range jobRoutes {
		a.handle(jr.pattern, tierCRUD, wallDeployment, a.startJob(jr.kind))
	}
	a.handle("GET /deployments/{id}/jobs", tierCRUD, wallDeployment, a.deploymentJobs)
	a.handle("GET /jobs", tierCRUD, wallFleet, a.listJobs)
	a.handle("GET /jobs/{job_id}", tierCRUD, wallNarrow, a.getJob)
	a.handle("GET /jobs/{job_id}/log", tierCRUD, wallNarrow, a.jobLog) // berth's own
	a.handle("POST /workflows", tierCRUD, wallFleet, a.postWorkflow)
	a.handle("GET /workflows", tierCRUD, wallFleet, a.listWorkflows)
	a.handle("GET /workflows/{id}", tierCRUD, wallFleet, a.getWorkflow)
	a.handle("PUT /workflows/{id}", tierCRUD, wallFleet, a.putWorkflow)
	a.handle("DELETE /workflows/{id}", tierCRUD, wallFleet, a.deleteWorkflow)
	a.handle("POST /workflows/{id}/runs", tierCRUD, wallFleet, a.runWorkflow)      // berth's own
	a.handle("GET /workflows/{id}/runs", tierCRUD, wallFleet, a.workflowRuns)      // berth's own
	a.handle("GET /workflows/{id}/runs/{run}", tierCRUD, wallFleet, a.workflowRun) // berth's own
}

// jobError maps the jobs package's errors onto the envelope: its *Error
// carries the status (404, 409, 501, 503, a kind's own); anything else a
// start fails with is a 400 (app-lb's job start error mapping).
func jobError(err error) error {
	var je *jobs.Error
	if errors.As(err, &je) {
		return &web.Error{Status: je.Status, Message: je.Msg}
	}
	var we *web.Error
	if errors.As(err, &we) {
		return we
	}
	return &web.Error{Status: http.StatusBadRequest, Message: err.Error()}
}

func (a *API) startJob(kind apitype.JobKind) web.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if a.o.Jobs == nil {
			return unavailable("jobs")
		}
		id := r.PathValue("id")
		var body []byte
		if r.ContentLength != 0 {
			raw, err := web.ReadBody(w, r)
			if err != nil {
				return err
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
				return web.Errorf(http.StatusBadRequest, "the body of a job start must be a JSON object")
			}
			body = raw
		}
		e, ok := a.o.Registry.Get(id)
		if !ok {
			return errorFor(registry.ErrNotFound, id)
		}
		p := caller(r)
		rec, err := a.o.Jobs.Start(r.Context(), kind, jobs.Request{
			Deployment: jobs.Deployment{ID: id, Namespace: namespace(e), Kind: e.Kind, Spec: e.Spec},
			Body:       body, Fleet: p.Fleet(), Caller: p.Name(),
		})
		if err != nil {
			return jobError(err)
		}
		web.WriteJSON(w, http.StatusAccepted, rec)
		return nil
	}
}

func records(ins []jobs.Info) []apitype.JobRecord {
	out := make([]apitype.JobRecord, len(ins))
	for i, in := range ins {
		out[i] = in.Record
	}
	return out
}

// deploymentJobs is GET /deployments/{id}/jobs, newest first.
func (a *API) deploymentJobs(w http.ResponseWriter, r *http.Request) error {
	if a.o.Jobs == nil {
		return unavailable("jobs")
	}
	id := r.PathValue("id")
	if _, ok := a.o.Registry.Get(id); !ok {
		return errorFor(registry.ErrNotFound, id)
	}
	ins, err := a.o.Jobs.List(r.Context(), id)
	if err != nil {
		return jobError(err)
	}
	web.WriteJSON(w, http.StatusOK, records(ins))
	return nil
}

// listJobs is GET /jobs: every deployment's, newest first (fleet-wide
// callers only).
func (a *API) listJobs(w http.ResponseWriter, r *http.Request) error {
	if a.o.Jobs == nil {
		return unavailable("jobs")
	}
	ins, err := a.o.Jobs.List(r.Context(), "")
	if err != nil {
		return jobError(err)
	}
	web.WriteJSON(w, http.StatusOK, records(ins))
	return nil
}

// visibleJob returns the job for a caller who may see it: a confined
// caller asking about another namespace's job gets the same 404 as for a
// job that does not exist, so job ids are no existence oracle.
func (a *API) visibleJob(r *http.Request) (jobs.Info, error) {
	if a.o.Jobs == nil {
		return jobs.Info{}, unavailable("jobs")
	}
	id := r.PathValue("job_id")
	in, err := a.o.Jobs.Get(r.Context(), id)
	if err != nil {
		return in, jobError(err)
	}
	if !caller(r).Touches(in.Record.Deployment, in.Namespace) {
		return jobs.Info{}, jobError(jobs.NotFound(id))
	}
	return in, nil
}

func (a *API) getJob(w http.ResponseWriter, r *http.Request) error {
	in, err := a.visibleJob(r)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, in.Record)
	return nil
}

// JobLogLine is one line of GET /jobs/{id}/log's NDJSON stream: a log
// line, or (last) the job's status when the stream ends.
type JobLogLine struct {
	Line   *string            `json:"line,omitempty"`
	Status *apitype.JobStatus `json:"status,omitempty"`
	Error  *string            `json:"error,omitempty"`
}

// jobLog is GET /jobs/{job_id}/log, berth's own: the job's log as NDJSON,
// one {"line":…} per line, then {"status":…,"error"?:…}. With ?follow=1 it
// stays open and sends lines as they are logged until the job finishes;
// the last object's status is then the final one.
func (a *API) jobLog(w http.ResponseWriter, r *http.Request) error {
	follow := false
	switch v := r.URL.Query().Get("follow"); v {
	case "", "0", "false":
	case "1", "true":
		follow = true
	default:
		return web.Invalid("follow", "must be 1 or 0 (true or false), got %q", v)
	}
	in, err := a.visibleJob(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	rec, err := a.o.Jobs.Follow(r.Context(), in.Record.ID, follow, func(l string) error {
		if err := enc.Encode(JobLogLine{Line: &l}); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil {
		return nil // the client went away, or the job aged out mid-stream: the status line is all that is missing
	}
	enc.Encode(JobLogLine{Status: &rec.Status, Error: rec.Error})
	rc.Flush()
	return nil
}

// ---- workflows ----

func (a *API) postWorkflow(w http.ResponseWriter, r *http.Request) error {
	if a.o.Workflows == nil {
		return unavailable("workflows")
	}
	var spec apitype.WorkflowSpec
	if err := web.ReadJSON(w, r, &spec); err != nil {
		return err
	}
	out, err := a.o.Workflows.Create(r.Context(), spec)
	if err != nil {
		return jobError(err)
	}
	web.WriteJSON(w, http.StatusCreated, out)
	return nil
}

func (a *API) listWorkflows(w http.ResponseWriter, r *http.Request) error {
	if a.o.Workflows == nil {
		return unavailable("workflows")
	}
	l, err := a.o.Workflows.List(r.Context())
	if err != nil {
		return jobError(err)
	}
	web.WriteJSON(w, http.StatusOK, l)
	return nil
}

func (a *API) getWorkflow(w http.ResponseWriter, r *http.Request) error {
	if a.o.Workflows == nil {
		return unavailable("workflows")
	}
	out, err := a.o.Workflows.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return jobError(err)
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) putWorkflow(w http.ResponseWriter, r *http.Request) error {
	if a.o.Workflows == nil {
		return unavailable("workflows")
	}
	var spec apitype.WorkflowSpec
	if err := web.ReadJSON(w, r, &spec); err != nil {
		return err
	}
	out, err := a.o.Workflows.Replace(r.Context(), r.PathValue("id"), spec)
	if err != nil {
		return jobError(err)
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) deleteWorkflow(w http.ResponseWriter, r *http.Request) error {
	if a.o.Workflows == nil {
		return unavailable("workflows")
	}
	if err := a.o.Workflows.Delete(r.Context(), r.PathValue("id")); err != nil {
		return jobError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// runWorkflow is POST /workflows/{id}/runs, berth's own: it starts a run
// of an enabled workflow and answers 202 with its jobs.RunView.
func (a *API) runWorkflow(w http.ResponseWriter, r *http.Request) error {
	if a.o.Workflows == nil {
		return unavailable("workflows")
	}
	if r.ContentLength != 0 {
		raw, err := web.ReadBody(w, r)
		if err != nil {
			return err
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil || len(obj) != 0 {
			return web.Errorf(http.StatusBadRequest, "a run takes no body (or {})")
		}
	}
	p := caller(r)
	v, err := a.o.Workflows.Run(r.Context(), r.PathValue("id"), p.Fleet(), p.Name())
	if err != nil {
		return jobError(err)
	}
	web.WriteJSON(w, http.StatusAccepted, v)
	return nil
}

// workflowRuns is GET /workflows/{id}/runs, berth's own: the runs kept
// in memory, newest first.
func (a *API) workflowRuns(w http.ResponseWriter, r *http.Request) error {
	if a.o.Workflows == nil {
		return unavailable("workflows")
	}
	id := r.PathValue("id")
	if _, err := a.o.Workflows.Get(r.Context(), id); err != nil {
		return jobError(err)
	}
	web.WriteJSON(w, http.StatusOK, a.o.Workflows.Runs(id))
	return nil
}

// workflowRun is GET /workflows/{id}/runs/{run}, berth's own.
func (a *API) workflowRun(w http.ResponseWriter, r *http.Request) error {
	if a.o.Workflows == nil {
		return unavailable("workflows")
	}
	v, err := a.o.Workflows.GetRun(r.PathValue("id"), r.PathValue("run"))
	if err != nil {
		return jobError(err)
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}
