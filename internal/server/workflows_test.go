package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/jobs"
)

// gitRepo makes a git repository on branch main with files committed.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"}, {"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "ci"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// waitRun polls a run until it is no longer running.
func (n *node) waitRun(wf, id string) jobs.RunView {
	n.t.Helper()
	return n.waitRunAs("", wf, id)
}

func (n *node) waitRunAs(authz, wf, id string) jobs.RunView {
	n.t.Helper()
	var v jobs.RunView
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n.must(200, "GET", "/workflows/"+wf+"/runs/"+id, authz, "", &v)
		if v.Status != apitype.JobRunning {
			return v
		}
	}
	n.t.Fatalf("run %s of %s still running: %+v", id, wf, v)
	return v
}

// TestWorkflowRuns runs workflows from a local git repository: the steps
// are host-update jobs recorded in order; a failing step stops the run
// and skips the rest; bad YAML and unknown keys fail the run naming
// them; a disabled workflow's run is a 409.
func TestWorkflowRuns(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer up.Close()
	upstream := strings.TrimPrefix(up.URL, "http://")
	n := startNode(t, Options{HostUpdates: true, AllowLocalRepos: true})
	n.must(201, "POST", "/secrets", "", `{"id":"deploy","data":{"token":"x"}}`, nil)
	dir := t.TempDir()
	n.must(201, "POST", "/deployments", "", updateSpec("web", "default", upstream, dir, "echo web >> order.txt"), nil)
	n.must(201, "POST", "/deployments", "", updateSpec("docs", "default", upstream, dir, "echo docs >> order.txt"), nil)
	n.must(201, "POST", "/deployments", "", updateSpec("bad", "default", upstream, dir, "echo bad >> order.txt; exit 3"), nil)

	repo := gitRepo(t, map[string]string{
		".ci/workflows/1-web.yml":  "steps:\n  - job: host-update\n    deployment: web\n",
		".ci/workflows/2-docs.yml": "steps:\n  - {job: host-update, deployment: docs}\n",
		"ci/fail.yml":              "steps:\n  - {job: host-update, deployment: bad}\n  - {job: host-update, deployment: web}\n",
		"ci/unknown.yml":           "steps:\n  - {job: host-update, deployment: web, colour: red}\n",
		"ci/broken.yml":            "steps: [{job: host-update\n",
		"ci/ref.yml":               "steps:\n  - {job: host-update, deployment: web, ref: main}\n",
	})

	// Disabled: stored, not run.
	n.must(201, "POST", "/workflows", "", fmt.Sprintf(`{"id":"ci","repo":%q}`, repo), nil)
	if r := n.call(nil, "POST", "/workflows/ci/runs", "", ""); r.code != 409 || !strings.Contains(errorOf(t, r), `workflow "ci" is disabled`) {
		t.Fatalf("run of a disabled workflow: %s", r)
	}
	if r := n.call(nil, "POST", "/workflows/nope/runs", "", ""); r.code != 404 {
		t.Fatalf("run of a missing workflow: %s", r)
	}

	// The default path: both files, in name order.
	n.must(200, "PUT", "/workflows/ci", "", fmt.Sprintf(`{"repo":%q,"enabled":true}`, repo), nil)
	var v jobs.RunView
	n.must(202, "POST", "/workflows/ci/runs", "", "", &v)
	if v.Workflow != "ci" || !strings.HasPrefix(v.RunID, "run-") || v.Status != apitype.JobRunning || v.Steps == nil {
		t.Fatalf("202: %+v", v)
	}
	v = n.waitRun("ci", v.RunID)
	if v.Status != apitype.JobSucceeded || v.Error != nil || len(v.Commit) != 40 || len(v.Steps) != 2 ||
		strings.Join(v.Files, ",") != ".ci/workflows/1-web.yml,.ci/workflows/2-docs.yml" {
		t.Fatalf("run: %+v", v)
	}
	for i, want := range []string{"web", "docs"} {
		s := v.Steps[i]
		var rec apitype.JobRecord
		n.must(200, "GET", "/jobs/"+s.JobID, "", "", &rec)
		if s.Job != apitype.JobHostUpdate || s.Deployment != want || s.Status != jobs.StepSucceeded ||
			rec.Status != apitype.JobSucceeded || rec.Deployment != want || rec.Kind != apitype.JobHostUpdate {
			t.Fatalf("step %d: %+v, job %+v", i, s, rec)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "order.txt")); string(b) != "web\ndocs\n" {
		t.Fatalf("order: %q", b)
	}
	var runs []jobs.RunView
	n.must(200, "GET", "/workflows/ci/runs", "", "", &runs)
	if len(runs) != 1 || runs[0].RunID != v.RunID {
		t.Fatalf("runs: %+v", runs)
	}

	// A failing step stops the run.
	os.Remove(filepath.Join(dir, "order.txt"))
	run := func(path string) jobs.RunView {
		t.Helper()
		n.must(200, "PUT", "/workflows/ci", "", fmt.Sprintf(`{"repo":%q,"path":%q,"enabled":true}`, repo, path), nil)
		var v jobs.RunView
		n.must(202, "POST", "/workflows/ci/runs", "", `{}`, &v)
		return n.waitRun("ci", v.RunID)
	}
	v = run("ci/fail.yml")
	if v.Status != apitype.JobFailed || v.Error == nil || !strings.Contains(*v.Error, "step 1 (host-update on bad)") ||
		len(v.Steps) != 2 || v.Steps[0].Status != jobs.StepFailed || v.Steps[0].JobID == "" ||
		v.Steps[1].Status != jobs.StepSkipped || v.Steps[1].JobID != "" {
		t.Fatalf("failing run: %+v", v)
	}
	var rec apitype.JobRecord
	n.must(200, "GET", "/jobs/"+v.Steps[0].JobID, "", "", &rec)
	if rec.Status != apitype.JobFailed {
		t.Fatalf("failed step's job: %+v", rec)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "order.txt")); string(b) != "bad\n" {
		t.Fatalf("after a failed step: %q", b)
	}

	// Files that are not workflows: the run fails saying why, no job runs.
	for path, want := range map[string]string{
		"ci/unknown.yml": `ci/unknown.yml: not a workflow file ({steps: [{job, deployment, ref?, force?}, ...]}): line 2: unknown key colour`,
		"ci/broken.yml":  "ci/broken.yml: not a workflow file",
		"ci/ref.yml":     "ci/ref.yml: steps[0].ref: host-update jobs take no ref",
		"ci/none/*.yml":  `no workflow file in the repository matches path "ci/none/*.yml"`,
	} {
		v := run(path)
		if v.Status != apitype.JobFailed || v.Error == nil || !strings.Contains(*v.Error, want) || len(v.Steps) != 0 {
			t.Errorf("%s: %+v, want an error with %q", path, v, want)
		}
	}
	var js []apitype.JobRecord
	n.must(200, "GET", "/jobs", "", "", &js)
	if len(js) != 3 {
		t.Fatalf("jobs: %d, want 3", len(js))
	}
	if r := n.call(nil, "GET", "/workflows/ci/runs/run-nope", "", ""); r.code != 404 || !strings.Contains(errorOf(t, r), "in memory") {
		t.Fatalf("missing run: %s", r)
	}
}

// TestWorkflowRunsFleetOnly: confined callers may not run or see runs; a
// workflow's auth is resolved from the secrets at run time, and a
// credential is never sent to a local repository.
func TestWorkflowRunsFleetOnly(t *testing.T) {
	w := startTenants(t, Options{AllowLocalRepos: true})
	repo := gitRepo(t, map[string]string{".ci/workflows/w.yml": "steps: [{job: host-update, deployment: web}]\n"})
	w.must(201, "POST", "/workflows", w.op, `{"id":"ci","repo":"https://git.test/app","auth":{"secret":"nope"},"enabled":true}`, nil)
	for _, c := range []struct{ method, path string }{{"POST", "/workflows/ci/runs"}, {"GET", "/workflows/ci/runs"}, {"GET", "/workflows/ci/runs/run-x"}} {
		if r := w.call(nil, c.method, c.path, w.a, ""); r.code != 403 {
			t.Errorf("%s %s by team-a: %s", c.method, c.path, r)
		}
	}
	var v jobs.RunView
	w.must(202, "POST", "/workflows/ci/runs", w.op, "", &v)
	v = w.waitRunAs(w.op, "ci", v.RunID)
	if v.Status != apitype.JobFailed || v.Error == nil || !strings.Contains(*v.Error, `auth: secrets: no such secret: no secret "nope" in namespace "default"`) {
		t.Fatalf("missing auth secret: %+v %s", v, *v.Error)
	}
	w.must(201, "POST", "/secrets", w.op, `{"id":"gh","data":{"token":"tok-123"}}`, nil)
	w.must(200, "PUT", "/workflows/ci", w.op, fmt.Sprintf(`{"repo":%q,"auth":{"secret":"gh"},"enabled":true}`, repo), nil)
	w.must(202, "POST", "/workflows/ci/runs", w.op, "", &v)
	v = w.waitRunAs(w.op, "ci", v.RunID)
	if v.Status != apitype.JobFailed || v.Error == nil || !strings.Contains(*v.Error, "a credential is only for https remotes") || strings.Contains(*v.Error, "tok-123") {
		t.Fatalf("a credential for a local repository: %+v", v)
	}
}
