package jobs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/berth-dev/berth/apitype"
)

// Limits of runs and workflow files.
const (
	// DefaultKeepRuns is how many runs Workflows keeps (in memory, all
	// workflows together), oldest finished one dropped first.
	DefaultKeepRuns = 100
	// maxWorkflowFile caps one workflow file; maxSteps a whole run.
	maxWorkflowFile = 1 << 20
	maxSteps        = 100
	// runLogLines is how many lines of the fetch's log a run keeps.
	runLogLines = 50
)

// RunOptions let Workflows run workflows; without Jobs and Checkout a run
// is refused with a 501.
type RunOptions struct {
	Jobs *Manager
	// Deployment looks up a step's deployment as it is now.
	Deployment func(id string) (Deployment, bool)
	// Checkout fetches w.Repo at w.Ref (resolving w.Auth), calls fn with
	// the checkout's root and commit and removes the checkout after;
	// logf gets the fetch's log, secrets redacted.
	Checkout func(ctx context.Context, w apitype.WorkflowSpec, logf func(string), fn func(root, commit string) error) error
	Now      func() time.Time
	Keep     int // runs kept (DefaultKeepRuns)
}

// StepStatus is a run step's status: a job's status once it started.
type StepStatus string

const (
	StepPending   StepStatus = "pending"
	StepRunning   StepStatus = "running"
	StepSucceeded StepStatus = "succeeded"
	StepFailed    StepStatus = "failed"
	StepSkipped   StepStatus = "skipped" // an earlier step failed
)

// RunView is berth's own shape of a workflow run (POST
// /workflows/{id}/runs, GET /workflows/{id}/runs/{run}). Steps is empty
// until the workflow's files are read; Status is a JobStatus.
type RunView struct {
	Workflow   string            `json:"workflow"`
	RunID      string            `json:"run_id"`
	Status     apitype.JobStatus `json:"status"`
	Error      *string           `json:"error,omitempty"`
	Repo       string            `json:"repo"`
	Ref        string            `json:"ref"`
	Commit     string            `json:"commit,omitempty"`
	Files      []string          `json:"files,omitempty"`
	StartedAt  int64             `json:"started_at"`
	FinishedAt *int64            `json:"finished_at,omitempty"`
	Steps      []RunStep         `json:"steps"`
	Log        []string          `json:"log"`
	Caller     string            `json:"caller,omitempty"`
}

// RunStep is one step of a run: the job it started, once started.
type RunStep struct {
	Job        apitype.JobKind `json:"job"`
	Deployment string          `json:"deployment"`
	JobID      string          `json:"job_id,omitempty"`
	Status     StepStatus      `json:"status"`
	Error      *string         `json:"error,omitempty"`
	// ref and force, the step's job body.
	body []byte
}

type run struct {
	v    RunView
	done bool
}

// stepSpec is one step of a workflow file.
type stepSpec struct {
	Job        string  `yaml:"job"`
	Deployment string  `yaml:"deployment"`
	Ref        *string `yaml:"ref"`
	Force      *bool   `yaml:"force"`
}

type workflowFile struct {
	Steps []stepSpec `yaml:"steps"`
}

// stepFields are the body fields each kind's step may set.
var stepFields = map[apitype.JobKind][]string{
	apitype.JobImageBuild:   {"ref"},
	apitype.JobArtifactPull: {"ref", "force"},
	apitype.JobMountPull:    {"force"},
	apitype.JobHostUpdate:   {},
}

// Run starts a run of the enabled workflow id and returns its view: the
// steps run in the background, in order, each a job started through the
// manager, the run stopping at the first that fails. One run of a
// workflow at a time (409 while one runs). fleet and caller are the
// starting caller's (Request.Fleet, Request.Caller).
func (ws *Workflows) Run(ctx context.Context, id string, fleet bool, caller string) (RunView, error) {
	if ws.o.Jobs == nil || ws.o.Checkout == nil || ws.o.Deployment == nil {
		return RunView{}, Errorf(http.StatusNotImplemented, "this server does not run workflows")
	}
	w, err := ws.Get(ctx, id)
	if err != nil {
		return RunView{}, err
	}
	if !w.Enabled {
		return RunView{}, Errorf(http.StatusConflict, "workflow %q is disabled: only enabled workflows run (PUT it with enabled:true)", id)
	}
	if err := checkWorkflow(&w); err != nil {
		return RunView{}, Errorf(http.StatusConflict, "workflow %q cannot run as stored: %v", id, err)
	}
	var b [8]byte
	rand.Read(b[:])
	r := &run{v: RunView{
		Workflow: id, RunID: "run-" + hex.EncodeToString(b[:]), Status: apitype.JobRunning,
		Repo: w.Repo, Ref: w.Ref, StartedAt: ws.o.Now().Unix(), Steps: []RunStep{}, Log: []string{}, Caller: caller,
	}}
	ws.mu.Lock()
	if ws.closed {
		ws.mu.Unlock()
		return RunView{}, &Error{Status: http.StatusServiceUnavailable, Msg: "berth is shutting down; start the run again once it is back", Err: ErrClosed}
	}
	for _, o := range ws.runs {
		if o.v.Workflow == id && !o.done {
			ws.mu.Unlock()
			return RunView{}, &Error{Status: http.StatusConflict, Msg: fmt.Sprintf("a run of workflow %q is already running (%s)", id, o.v.RunID), Err: ErrBusy}
		}
	}
	ws.runs = append(ws.runs, r)
	ws.pruneLocked()
	ws.running.Add(1)
	v := r.view()
	ws.mu.Unlock()
	go func() {
		defer ws.running.Done()
		ws.execute(ws.ctx, r, w, fleet, caller)
	}()
	return v, nil
}

// pruneLocked drops the oldest finished runs past o.Keep.
func (ws *Workflows) pruneLocked() {
	for i := 0; len(ws.runs) > ws.o.Keep && i < len(ws.runs); {
		if ws.runs[i].done {
			ws.runs = slices.Delete(ws.runs, i, i+1)
			continue
		}
		i++
	}
}

func (r *run) view() RunView {
	v := r.v
	v.Steps = slices.Clone(r.v.Steps)
	v.Log = slices.Clone(r.v.Log)
	v.Files = slices.Clone(r.v.Files)
	return v
}

// GetRun returns a kept run of workflow id.
func (ws *Workflows) GetRun(id, runID string) (RunView, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, r := range ws.runs {
		if r.v.Workflow == id && r.v.RunID == runID {
			return r.view(), nil
		}
	}
	return RunView{}, Errorf(http.StatusNotFound, "no run %q of workflow %q — berth keeps its last %d runs in memory only, not across restarts (their jobs are in the job history)", runID, id, ws.o.Keep)
}

// Runs returns the kept runs of workflow id, newest first.
func (ws *Workflows) Runs(id string) []RunView {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := []RunView{}
	for i := len(ws.runs) - 1; i >= 0; i-- {
		if ws.runs[i].v.Workflow == id {
			out = append(out, ws.runs[i].view())
		}
	}
	return out
}

// Close stops the running runs (a step's job is left to the manager,
// which its own Close ends) and waits for them. Runs after Close are
// refused.
func (ws *Workflows) Close() {
	ws.mu.Lock()
	ws.closed = true
	ws.mu.Unlock()
	ws.cancel()
	ws.running.Wait()
}

func (ws *Workflows) execute(ctx context.Context, r *run, w apitype.WorkflowSpec, fleet bool, caller string) {
	set := func(fn func(v *RunView)) {
		ws.mu.Lock()
		fn(&r.v)
		ws.mu.Unlock()
	}
	finish := func(err error) {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		end := ws.o.Now().Unix()
		r.v.FinishedAt, r.v.Status, r.done = &end, apitype.JobSucceeded, true
		if err != nil {
			msg := err.Error()
			r.v.Status, r.v.Error = apitype.JobFailed, &msg
			for i := range r.v.Steps {
				if r.v.Steps[i].Status == StepPending {
					r.v.Steps[i].Status = StepSkipped
				}
			}
		}
		ws.pruneLocked()
	}
	logf := func(line string) {
		set(func(v *RunView) { v.Log = appendCapped(v.Log, runLogLines, line) })
	}

	var steps []RunStep
	err := ws.o.Checkout(ctx, w, logf, func(root, commit string) error {
		set(func(v *RunView) { v.Commit = commit })
		files, s, err := readWorkflow(root, w.Path)
		set(func(v *RunView) { v.Files = files })
		steps = s
		return err
	})
	if err == nil {
		err = ws.checkSteps(steps)
	}
	if err != nil {
		finish(err)
		return
	}
	set(func(v *RunView) { v.Steps = steps })

	for i, st := range steps {
		rec, err := ws.runStep(ctx, r, i, st, fleet, caller)
		set(func(v *RunView) {
			s := &v.Steps[i]
			if rec.ID != "" {
				s.JobID = rec.ID
			}
			s.Status = StepSucceeded
			if err != nil {
				msg := err.Error()
				s.Status, s.Error = StepFailed, &msg
			}
		})
		if err != nil {
			finish(fmt.Errorf("step %d (%s on %s): %v", i+1, st.Job, st.Deployment, err))
			return
		}
	}
	finish(nil)
}

// runStep starts one step's job and waits for it to finish.
func (ws *Workflows) runStep(ctx context.Context, r *run, i int, st RunStep, fleet bool, caller string) (apitype.JobRecord, error) {
	if err := ctx.Err(); err != nil {
		return apitype.JobRecord{}, errors.New("berth shut down while the run ran")
	}
	d, ok := ws.o.Deployment(st.Deployment)
	if !ok {
		return apitype.JobRecord{}, fmt.Errorf("deployment %q no longer exists", st.Deployment)
	}
	rec, err := ws.o.Jobs.Start(ctx, st.Job, Request{
		Deployment: d, Body: st.body, Fleet: fleet,
		Caller: fmt.Sprintf("%s (workflow %s run %s)", caller, r.v.Workflow, r.v.RunID),
	})
	if err != nil {
		return rec, err
	}
	ws.mu.Lock()
	r.v.Steps[i].JobID, r.v.Steps[i].Status = rec.ID, StepRunning
	ws.mu.Unlock()
	final, err := ws.o.Jobs.Follow(ctx, rec.ID, true, func(string) error { return nil })
	if err != nil {
		if ctx.Err() != nil {
			return rec, errors.New("berth shut down while the run ran")
		}
		return rec, err
	}
	switch final.Status {
	case apitype.JobSucceeded:
		return final, nil
	case apitype.JobFailed:
		msg := "it failed"
		if final.Error != nil {
			msg = *final.Error
		}
		return final, fmt.Errorf("job %s failed: %s", final.ID, msg)
	}
	return final, fmt.Errorf("job %s ended %s", final.ID, final.Status)
}

// checkSteps refuses a run whose steps name a kind this server does not
// run or a deployment that does not exist, before any step starts.
func (ws *Workflows) checkSteps(steps []RunStep) error {
	for i, s := range steps {
		if !ws.o.Jobs.Registered(s.Job) {
			return fmt.Errorf("step %d: this server does not run %s jobs", i+1, s.Job)
		}
		if _, ok := ws.o.Deployment(s.Deployment); !ok {
			return fmt.Errorf("step %d: no deployment %q", i+1, s.Deployment)
		}
	}
	return nil
}

// readWorkflow reads the workflow files pattern matches in the checkout
// at root (one path or a glob, relative to the repository's root), in
// the order of their names, and returns their steps one after the other.
func readWorkflow(root, pattern string) (files []string, steps []RunStep, err error) {
	rel := filepath.FromSlash(strings.TrimPrefix(pattern, "/"))
	if !filepath.IsLocal(rel) {
		return nil, nil, fmt.Errorf("path %q leaves the repository", pattern)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, nil, err
	}
	matches, err := filepath.Glob(filepath.Join(realRoot, rel))
	if err != nil {
		return nil, nil, fmt.Errorf("path %q: %v", pattern, err)
	}
	if len(matches) == 0 {
		return nil, nil, fmt.Errorf("no workflow file in the repository matches path %q", pattern)
	}
	for _, m := range matches {
		name, _ := filepath.Rel(realRoot, m)
		name = filepath.ToSlash(name)
		files = append(files, name)
		s, err := readWorkflowFile(realRoot, m)
		if err != nil {
			return files, nil, fmt.Errorf("%s: %v", name, err)
		}
		steps = append(steps, s...)
		if len(steps) > maxSteps {
			return files, nil, fmt.Errorf("more than %d steps", maxSteps)
		}
	}
	if len(steps) == 0 {
		return files, nil, fmt.Errorf("%s: no steps", strings.Join(files, ", "))
	}
	return files, steps, nil
}

func readWorkflowFile(realRoot, p string) ([]RunStep, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, err
	}
	if r, err := filepath.Rel(realRoot, real); err != nil || !filepath.IsLocal(r) {
		return nil, errors.New("leads out of the repository")
	}
	f, err := os.Open(real)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, errors.New("not a file")
	} else if fi.Size() > maxWorkflowFile {
		return nil, fmt.Errorf("larger than %d bytes", maxWorkflowFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxWorkflowFile+1))
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var wf workflowFile
	if err := dec.Decode(&wf); errors.Is(err, io.EOF) {
		return nil, errors.New("empty: a workflow file is {steps: [{job, deployment, ref?, force?}, ...]}")
	} else if err != nil {
		return nil, fmt.Errorf("not a workflow file ({steps: [{job, deployment, ref?, force?}, ...]}): %s", yamlErr(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document: a workflow file is one")
	}
	out := make([]RunStep, 0, len(wf.Steps))
	for i, s := range wf.Steps {
		kind := apitype.JobKind(s.Job)
		fields, ok := stepFields[kind]
		switch {
		case s.Job == "":
			return nil, fmt.Errorf("steps[%d].job: required", i)
		case !ok:
			return nil, fmt.Errorf("steps[%d].job: %q is not a job kind (image-build, artifact-pull, mount-pull, host-update)", i, s.Job)
		case s.Deployment == "":
			return nil, fmt.Errorf("steps[%d].deployment: required", i)
		case s.Ref != nil && !slices.Contains(fields, "ref"):
			return nil, fmt.Errorf("steps[%d].ref: %s jobs take no ref", i, kind)
		case s.Force != nil && !slices.Contains(fields, "force"):
			return nil, fmt.Errorf("steps[%d].force: %s jobs take no force", i, kind)
		}
		var body []byte
		if s.Ref != nil || s.Force != nil {
			body, _ = json.Marshal(struct {
				Ref   *string `json:"ref,omitempty"`
				Force *bool   `json:"force,omitempty"`
			}{s.Ref, s.Force})
		}
		out = append(out, RunStep{Job: kind, Deployment: s.Deployment, Status: StepPending, body: body})
	}
	return out, nil
}

// yamlErr words yaml.v3's errors without Go's type names.
func yamlErr(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.ReplaceAll(s, "unmarshal errors:\n  ", "")
	s = strings.ReplaceAll(s, "\n  ", "; ")
	for _, t := range []string{" in type jobs.stepSpec", " in type jobs.workflowFile"} {
		s = strings.ReplaceAll(s, t, "")
	}
	s = strings.NewReplacer("[]jobs.stepSpec", "a list of steps", "jobs.stepSpec", "a step", "jobs.workflowFile", "a workflow file").Replace(s)
	s = strings.ReplaceAll(s, "field ", "unknown key ")
	s = strings.ReplaceAll(s, " not found", "")
	return s
}
