package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// WorkflowStore is where workflows are kept (*store.Store).
type WorkflowStore interface {
	Workflows(ctx context.Context) ([]store.Workflow, error)
	PutWorkflow(ctx context.Context, w store.Workflow, create bool) error
	DeleteWorkflow(ctx context.Context, id string) error
}

// Workflows keeps the registered CI workflows (/workflows) and runs the
// enabled ones (Run; see runs.go).
type Workflows struct {
	st WorkflowStore
	o  RunOptions

	mu      sync.Mutex
	runs    []*run // newest last, at most o.Keep
	closed  bool
	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
}

// NewWorkflows returns the workflows kept in st, run with o (a zero
// RunOptions stores workflows but refuses runs with a 501).
func NewWorkflows(st WorkflowStore, o RunOptions) *Workflows {
	if o.Keep <= 0 {
		o.Keep = DefaultKeepRuns
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	ws := &Workflows{st: st, o: o}
	ws.ctx, ws.cancel = context.WithCancel(context.Background())
	return ws
}

// The defaults app-lb fills in (app-lb.md §9.2 workflow-minimal).
const (
	defaultWorkflowRef  = "main"
	defaultWorkflowPath = ".ci/workflows/*.yml"
	// defaultWorkflowNetwork is what an empty network means: berth has no
	// runner networks, so it is the only value accepted.
	defaultWorkflowNetwork = "default"
)

var workflowID = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$`)

// fieldErr is a 400 naming the field.
func fieldErr(field, format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, "%s: %s", field, fmt.Sprintf(format, args...))
}

// checkWorkflow fills in defaults and validates w.
func checkWorkflow(w *apitype.WorkflowSpec) error {
	if w.Ref == "" {
		w.Ref = defaultWorkflowRef
	}
	if w.Path == "" {
		w.Path = defaultWorkflowPath
	}
	switch {
	case w.ID == "":
		return fieldErr("id", "required")
	case !workflowID.MatchString(w.ID):
		return fieldErr("id", "%q must be 1-64 of a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit", w.ID)
	case w.Repo == "":
		return fieldErr("repo", "required")
	case w.Network != "" && w.Network != defaultWorkflowNetwork:
		return fieldErr("network", "berth runs a workflow's steps as its own jobs, on no runner network: %q cannot be honoured (leave it out)", w.Network)
	case w.SecretsPrefix != "":
		return fieldErr("secrets_prefix", "berth's workflow steps are jobs that read their deployments' own secrets, so a secrets prefix would be unused (leave it out)")
	}
	if a := w.Auth; a != nil {
		if a.Secret == "" {
			return fieldErr("auth.secret", "required: auth names a stored secret, never a credential value")
		}
		if a.Namespace == "" {
			a.Namespace = "default"
		}
	}
	return nil
}

// List returns every workflow, by id.
func (ws *Workflows) List(ctx context.Context) (apitype.WorkflowList, error) {
	rows, err := ws.st.Workflows(ctx)
	if err != nil {
		return apitype.WorkflowList{}, Errorf(http.StatusServiceUnavailable, "the workflows could not be read: %v", err)
	}
	out := apitype.WorkflowList{Workflows: []apitype.WorkflowSpec{}}
	for _, r := range rows {
		var w apitype.WorkflowSpec
		if err := json.Unmarshal(r.Spec, &w); err != nil {
			continue
		}
		out.Workflows = append(out.Workflows, w)
	}
	return out, nil
}

// Get returns one workflow.
func (ws *Workflows) Get(ctx context.Context, id string) (apitype.WorkflowSpec, error) {
	l, err := ws.List(ctx)
	if err != nil {
		return apitype.WorkflowSpec{}, err
	}
	for _, w := range l.Workflows {
		if w.ID == id {
			return w, nil
		}
	}
	return apitype.WorkflowSpec{}, noWorkflow(id)
}

func noWorkflow(id string) *Error { return Errorf(http.StatusNotFound, "no workflow %q", id) }

// Create stores a new workflow (an existing id is a 409).
func (ws *Workflows) Create(ctx context.Context, w apitype.WorkflowSpec) (apitype.WorkflowSpec, error) {
	return ws.put(ctx, w, true)
}

// Replace replaces the workflow id with w; w.ID, when set, must be id.
func (ws *Workflows) Replace(ctx context.Context, id string, w apitype.WorkflowSpec) (apitype.WorkflowSpec, error) {
	if w.ID == "" {
		w.ID = id
	}
	if w.ID != id {
		return w, fieldErr("id", "%q does not match the workflow in the path, %q", w.ID, id)
	}
	return ws.put(ctx, w, false)
}

func (ws *Workflows) put(ctx context.Context, w apitype.WorkflowSpec, create bool) (apitype.WorkflowSpec, error) {
	if err := checkWorkflow(&w); err != nil {
		return w, err
	}
	b, _ := json.Marshal(w)
	err := ws.st.PutWorkflow(ctx, store.Workflow{ID: w.ID, Spec: b}, create)
	switch {
	case errors.Is(err, store.ErrConflict):
		return w, Errorf(http.StatusConflict, "workflow %q already exists (PUT /workflows/%s replaces it)", w.ID, w.ID)
	case errors.Is(err, store.ErrNotFound):
		return w, noWorkflow(w.ID)
	case err != nil:
		return w, Errorf(http.StatusInternalServerError, "the workflow was not saved: %v", err)
	}
	return w, nil
}

// Delete removes a workflow.
func (ws *Workflows) Delete(ctx context.Context, id string) error {
	err := ws.st.DeleteWorkflow(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return noWorkflow(id)
	case err != nil:
		return Errorf(http.StatusInternalServerError, "the workflow was not deleted: %v", err)
	}
	return nil
}
