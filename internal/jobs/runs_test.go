package jobs_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/jobs"
)

// runEnv is a manager and workflows over one store, with a fake checkout
// of files and deployments web and docs.
type runEnv struct {
	t     *testing.T
	m     *jobs.Manager
	ws    *jobs.Workflows
	files map[string]string

	mu     sync.Mutex
	bodies []string // "<kind> <deployment> <body>" per job started
}

func newRunEnv(t *testing.T, files map[string]string) *runEnv {
	st := openStore(t, t.TempDir())
	e := &runEnv{t: t, m: newManager(t, st, jobs.Options{}), files: files}
	for _, k := range []apitype.JobKind{apitype.JobImageBuild, apitype.JobArtifactPull, apitype.JobHostUpdate} {
		e.m.Register(k, func(ctx context.Context, req jobs.Request) (jobs.Run, error) {
			e.mu.Lock()
			e.bodies = append(e.bodies, string(k)+" "+req.Deployment.ID+" "+string(req.Body))
			e.mu.Unlock()
			return func(ctx context.Context, j *jobs.Job) error {
				if req.Deployment.ID == "broken" {
					return os.ErrInvalid
				}
				return nil
			}, nil
		})
	}
	e.ws = jobs.NewWorkflows(st, jobs.RunOptions{
		Jobs: e.m,
		Deployment: func(id string) (jobs.Deployment, bool) {
			switch id {
			case "web", "docs", "broken", "slow":
				return jobs.Deployment{ID: id, Namespace: "default", Kind: apitype.KindStatic}, true
			}
			return jobs.Deployment{}, false
		},
		Checkout: func(ctx context.Context, w apitype.WorkflowSpec, logf func(string), fn func(root, commit string) error) error {
			root := t.TempDir()
			for name, body := range e.files {
				p := filepath.Join(root, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte(body), 0o644)
			}
			logf("fetched " + w.Repo)
			return fn(root, strings.Repeat("a", 40))
		},
	})
	t.Cleanup(func() { e.ws.Close(); e.m.Close(); st.Close() })
	return e
}

func (e *runEnv) run(path string) jobs.RunView {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.ws.Create(ctx, apitype.WorkflowSpec{ID: "ci", Repo: "https://git.test/ci", Path: path, Enabled: true}); err != nil {
		if _, err := e.ws.Replace(ctx, "ci", apitype.WorkflowSpec{Repo: "https://git.test/ci", Path: path, Enabled: true}); err != nil {
			e.t.Fatal(err)
		}
	}
	v, err := e.ws.Run(ctx, "ci", true, "tester")
	if err != nil {
		e.t.Fatal(err)
	}
	return e.wait(v.RunID)
}

func (e *runEnv) wait(id string) jobs.RunView {
	e.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		v, err := e.ws.GetRun("ci", id)
		if err != nil {
			e.t.Fatal(err)
		}
		if v.Status != apitype.JobRunning {
			return v
		}
	}
	e.t.Fatalf("run %s did not finish", id)
	return jobs.RunView{}
}

func TestWorkflowRunStepsInOrder(t *testing.T) {
	e := newRunEnv(t, map[string]string{
		"ci/a.yml": "steps:\n  - {job: image-build, deployment: web, ref: v1}\n  - {job: artifact-pull, deployment: web, force: true}\n",
		"ci/b.yml": "steps:\n  - {job: host-update, deployment: docs}\n",
	})
	v := e.run("ci/*.yml")
	if v.Status != apitype.JobSucceeded || len(v.Steps) != 3 || v.Commit != strings.Repeat("a", 40) || len(v.Log) != 1 || v.FinishedAt == nil {
		t.Fatalf("run: %+v", v)
	}
	want := []string{`image-build web {"ref":"v1"}`, `artifact-pull web {"force":true}`, "host-update docs "}
	if strings.Join(e.bodies, "|") != strings.Join(want, "|") {
		t.Fatalf("jobs started: %q, want %q", e.bodies, want)
	}
	for i, s := range v.Steps {
		in, err := e.m.Get(context.Background(), s.JobID)
		if err != nil || in.Record.Status != apitype.JobSucceeded || s.Status != jobs.StepSucceeded || in.Record.Kind != s.Job {
			t.Fatalf("step %d: %+v %+v %v", i, s, in.Record, err)
		}
	}
}

func TestWorkflowRunStopsAtFailure(t *testing.T) {
	e := newRunEnv(t, map[string]string{
		"w.yml": "steps:\n  - {job: host-update, deployment: web}\n  - {job: host-update, deployment: broken}\n  - {job: host-update, deployment: docs}\n",
	})
	v := e.run("w.yml")
	if v.Status != apitype.JobFailed || v.Error == nil || !strings.Contains(*v.Error, "step 2 (host-update on broken): job ") ||
		v.Steps[0].Status != jobs.StepSucceeded || v.Steps[1].Status != jobs.StepFailed || v.Steps[2].Status != jobs.StepSkipped || v.Steps[2].JobID != "" {
		t.Fatalf("run: %+v", v)
	}
	if len(e.bodies) != 2 {
		t.Fatalf("jobs started: %q", e.bodies)
	}
}

// TestWorkflowFileErrors: a file that is not a workflow fails the run
// naming what is wrong, before any job starts.
func TestWorkflowFileErrors(t *testing.T) {
	e := newRunEnv(t, map[string]string{
		"unknown.yml": "steps:\n  - job: host-update\n    deployment: web\n    when: always\n",
		"top.yml":     "stages: []\n",
		"kind.yml":    "steps: [{job: deploy, deployment: web}]\n",
		"nodep.yml":   "steps: [{job: host-update}]\n",
		"nosuch.yml":  "steps: [{job: host-update, deployment: nope}]\n",
		"notrun.yml":  "steps: [{job: mount-pull, deployment: web}]\n",
		"force.yml":   "steps: [{job: image-build, deployment: web, force: true}]\n",
		"two.yml":     "steps: [{job: host-update, deployment: web}]\n---\nsteps: []\n",
		"empty.yml":   "",
		"nosteps.yml": "steps: []\n",
		"list.yml":    "- job: host-update\n",
	})
	for path, want := range map[string]string{
		"unknown.yml": "unknown.yml: not a workflow file ({steps: [{job, deployment, ref?, force?}, ...]}): line 4: unknown key when",
		"top.yml":     "line 1: unknown key stages",
		"kind.yml":    `steps[0].job: "deploy" is not a job kind`,
		"nodep.yml":   "steps[0].deployment: required",
		"nosuch.yml":  `step 1: no deployment "nope"`,
		"notrun.yml":  "step 1: this server does not run mount-pull jobs",
		"force.yml":   "steps[0].force: image-build jobs take no force",
		"two.yml":     "more than one YAML document",
		"empty.yml":   "empty.yml: empty",
		"nosteps.yml": "nosteps.yml: no steps",
		"list.yml":    "cannot unmarshal !!seq into a workflow file",
		"../x.yml":    `path "../x.yml" leaves the repository`,
	} {
		v := e.run(path)
		if v.Status != apitype.JobFailed || v.Error == nil || !strings.Contains(*v.Error, want) {
			got := "<nil>"
			if v.Error != nil {
				got = *v.Error
			}
			t.Errorf("%s: %s, error %q, want %q", path, v.Status, got, want)
		}
	}
	if len(e.bodies) != 0 {
		t.Fatalf("jobs started: %q", e.bodies)
	}
}

// TestWorkflowRunRefusals: disabled, a second run while one runs, runs
// after Close; Close ends a running run.
func TestWorkflowRunRefusals(t *testing.T) {
	e := newRunEnv(t, map[string]string{"w.yml": "steps: [{job: image-build, deployment: slow}, {job: host-update, deployment: web}]\n"})
	started, release := make(chan string, 1), make(chan error)
	e.m.Register(apitype.JobImageBuild, gated(started, release))
	ctx := context.Background()
	e.ws.Create(ctx, apitype.WorkflowSpec{ID: "ci", Repo: "https://git.test/ci", Path: "w.yml"})
	if _, err := e.ws.Run(ctx, "ci", true, "t"); statusOf(err) != http.StatusConflict || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("disabled: %v", err)
	}
	e.ws.Replace(ctx, "ci", apitype.WorkflowSpec{Repo: "https://git.test/ci", Path: "w.yml", Enabled: true})
	v, err := e.ws.Run(ctx, "ci", true, "t")
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := e.ws.Run(ctx, "ci", true, "t"); statusOf(err) != http.StatusConflict || !strings.Contains(err.Error(), v.RunID) {
		t.Fatalf("second run: %v", err)
	}
	e.ws.Close()
	v, _ = e.ws.GetRun("ci", v.RunID)
	if v.Status != apitype.JobFailed || v.Error == nil || !strings.Contains(*v.Error, "berth shut down while the run ran") || v.Steps[1].Status != jobs.StepSkipped {
		t.Fatalf("after Close: %+v", v)
	}
	if _, err := e.ws.Run(ctx, "ci", true, "t"); statusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("run after Close: %v", err)
	}
	if _, err := e.ws.GetRun("ci", "run-nope"); statusOf(err) != http.StatusNotFound {
		t.Fatalf("missing run: %v", err)
	}
}
