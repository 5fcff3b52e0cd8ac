package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/store"
)

// followLog reads GET /jobs/{id}/log?follow=1 to its end and returns the
// lines and the final status object.
func (n *node) followLog(authz, id string) ([]string, map[string]any) {
	n.t.Helper()
	req, _ := http.NewRequest("GET", n.admin+"/jobs/"+id+"/log?follow=1", nil)
	req.Header.Set("Authorization", authz)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		n.t.Fatalf("log stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var lines []string
	var end map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			n.t.Fatalf("log stream line %q: %v", sc.Text(), err)
		}
		if l, ok := m["line"].(string); ok {
			lines = append(lines, l)
			continue
		}
		end = m
	}
	if end == nil {
		n.t.Fatalf("log stream ended without a status; lines %q", lines)
	}
	return lines, end
}

func updateSpec(id, ns, upstream, dir string, commands ...string) string {
	cs, _ := json.Marshal(commands)
	return fmt.Sprintf(`{"id":%q,"namespace":%q,"routes":[{"host":"%s.test"}],"upstreams":[%q],
		"update":{"working_dir":%q,"commands":%s,"env":{"GREETING":"hi"},
		"env_from":[{"secret":"deploy","key":"token","as":"DEPLOY_TOKEN"}],"verify_timeout_secs":20}}`, id, ns, id, upstream, dir, cs)
}

// TestHostUpdateJobs runs host updates against a real server: real
// commands stream into the log and the deployment is re-probed; a second
// start is a 409; the secret the commands get is in no log line and not
// in the database file; confined callers see no other namespace's job
// and may not start host updates; records survive a restart, and one
// left running by a crash comes back failed.
func TestHostUpdateJobs(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer up.Close()
	upstream := strings.TrimPrefix(up.URL, "http://")
	w := startTenants(t, Options{HostUpdates: true})
	const secret = "s3cr3t-VALUE-xyz"
	w.must(201, "POST", "/secrets", w.op, `{"id":"deploy","data":{"token":"`+secret+`"}}`, nil)
	dir := t.TempDir()
	w.must(201, "POST", "/deployments", w.op, updateSpec("web", "default", upstream, dir,
		"echo hello $GREETING", "echo token=$DEPLOY_TOKEN >&2", "echo $DEPLOY_TOKEN > out.txt"), nil)

	c := contracttest.MustLoad(t)
	started := w.call(nil, "POST", "/deployments/web/update", w.op, `{}`)
	if started.code != 202 {
		t.Fatalf("start: %s", started)
	}
	if err := c.CheckJSON("JobRecord", started.body); err != nil {
		t.Errorf("202 JobRecord: %v\n%s", err, started.body)
	}
	var rec apitype.JobRecord
	json.Unmarshal(started.body, &rec)
	if rec.Status != apitype.JobRunning || rec.Kind != apitype.JobHostUpdate || rec.Deployment != "web" {
		t.Fatalf("start: %+v", rec)
	}
	lines, end := w.followLog(w.op, rec.ID)
	log := strings.Join(lines, "\n")
	if end["status"] != "succeeded" || !strings.Contains(log, "hello hi") || !strings.Contains(log, "token=[redacted]") || strings.Contains(log, secret) {
		t.Fatalf("log %q, end %v", lines, end)
	}
	done := w.call(nil, "GET", "/jobs/"+rec.ID, w.op, "")
	if err := c.CheckJSON("JobRecord", done.body); err != nil {
		t.Errorf("finished JobRecord: %v\n%s", err, done.body)
	}
	json.Unmarshal(done.body, &rec)
	if rec.Status != apitype.JobSucceeded || *rec.CommandsTotal != 3 || *rec.CommandsRun != 3 || rec.Verified == nil || !*rec.Verified || rec.WorkingDir != dir || rec.FinishedAt == nil {
		t.Fatalf("record: %+v", rec)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != secret+"\n" {
		t.Fatalf("the commands did not get the secret: %q", b)
	}

	var mr apitype.MetricsResponse
	w.must(200, "GET", "/metrics?deployment=web", w.op, "", &mr)
	if len(mr.Deployments) != 1 || mr.Deployments[0].JobKind != apitype.JobActionUpdate {
		t.Errorf("job_kind in /metrics: %+v", mr.Deployments)
	}

	// A second start while one runs.
	w.must(201, "POST", "/deployments", w.op, updateSpec("slow", "default", upstream, dir, "echo waiting; sleep 60"), nil)
	var slow apitype.JobRecord
	w.must(202, "POST", "/deployments/slow/update", w.op, "", &slow)
	if r := w.call(nil, "POST", "/deployments/slow/update", w.op, `{}`); r.code != 409 || errorOf(t, r) != `a job for deployment "slow" is already running` {
		t.Fatalf("second start: %s", r)
	}

	// Confined callers: no fleet-wide list, another namespace's job is a
	// 404 word for word like a missing one, no host updates at all.
	if r := w.call(nil, "GET", "/jobs", w.a, ""); r.code != 403 {
		t.Fatalf("GET /jobs by team-a: %s", r)
	}
	other, missing := w.call(nil, "GET", "/jobs/"+rec.ID, w.a, ""), w.call(nil, "GET", "/jobs/job-0000000000000000", w.a, "")
	if other.code != 404 || missing.code != 404 || strings.ReplaceAll(string(other.body), rec.ID, "X") != strings.ReplaceAll(string(missing.body), "job-0000000000000000", "X") {
		t.Fatalf("another namespace's job: %s; a missing one: %s", other, missing)
	}
	if r := w.call(nil, "GET", "/jobs/"+rec.ID+"/log", w.a, ""); r.code != 404 {
		t.Fatalf("another namespace's job log: %s", r)
	}
	if r := w.call(nil, "GET", "/deployments/web/jobs", w.a, ""); r.code != 403 {
		t.Fatalf("another namespace's deployment jobs: %s", r)
	}
	w.must(201, "POST", "/namespaces", w.op, `{"name":"team-a","domains":["a.test"]}`, nil)
	w.must(201, "POST", "/secrets", w.a, `{"id":"deploy","data":{"token":"a"}}`, nil)
	w.must(201, "POST", "/deployments", w.a, strings.Replace(updateSpec("a-web", "team-a", upstream, dir, "id"), `"a-web.test"`, `"web.a.test"`, 1), nil)
	if r := w.call(nil, "POST", "/deployments/a-web/update", w.a, `{}`); r.code != 403 || !strings.Contains(errorOf(t, r), "fleet-wide") {
		t.Fatalf("a confined host update: %s", r)
	}
	var js []apitype.JobRecord
	w.must(200, "GET", "/deployments/a-web/jobs", w.a, "", &js)
	if len(js) != 0 {
		t.Fatalf("a-web jobs: %+v", js)
	}

	// Deleting the deployment cancels its job.
	w.must(204, "DELETE", "/deployments/slow", w.op, "", nil)
	lines, end = w.followLog(w.op, slow.ID)
	if end["status"] != "failed" || !strings.Contains(fmt.Sprint(end["error"]), "deleted") || len(lines) == 0 || lines[0] != "$ echo waiting; sleep 60" {
		t.Fatalf("cancelled job: %q %v", lines, end)
	}
	w.must(200, "GET", "/jobs", w.op, "", &js)
	if len(js) != 2 || js[0].ID != slow.ID || js[1].ID != rec.ID {
		t.Fatalf("GET /jobs: %+v", js)
	}

	// A crash while a job runs: the record stays "running" in the store.
	w.stop()
	st, closeStore := openTestStore(t, w.o.DataDir)
	if err := st.InsertJob(context.Background(), store.Job{ID: "job-crashed", Deployment: "web", Namespace: "default", Kind: "host-update", Status: "running", StartedAt: 1,
		Record: []byte(`{"id":"job-crashed","deployment":"web","kind":"host-update","status":"running","started_at":1,"log":["$ make"]}`)}, 20, 2000); err != nil {
		t.Fatal(err)
	}
	closeStore()
	for _, f := range []string{"berth.db", "berth.db-wal"} {
		if b, _ := os.ReadFile(filepath.Join(w.o.DataDir, f)); bytes.Contains(b, []byte(secret)) {
			t.Fatalf("%s holds the secret", f)
		}
	}
	n := startNode(t, w.o)
	var again apitype.JobRecord
	n.must(200, "GET", "/jobs/"+rec.ID, w.op, "", &again)
	if again.Status != apitype.JobSucceeded || len(again.Log) != len(rec.Log) {
		t.Fatalf("after restart: %+v", again)
	}
	n.must(200, "GET", "/jobs/job-crashed", w.op, "", &again)
	if again.Status != apitype.JobFailed || again.Error == nil || !strings.Contains(*again.Error, "berth restarted while the job ran") {
		t.Fatalf("crashed job after restart: %+v", again)
	}
	n.must(200, "GET", "/deployments/web/jobs", w.op, "", &js)
	if len(js) != 2 || js[0].ID != "job-crashed" {
		t.Fatalf("web's jobs after restart: %+v", js)
	}
}

// TestJobRoutesRefusals: host updates off by default, kinds not built in
// yet, and a missing deployment.
func TestJobRoutesRefusals(t *testing.T) {
	n := startNode(t, Options{})
	n.must(201, "POST", "/deployments", "", `{"id":"web","routes":[{"host":"web.test"}],"upstreams":["127.0.0.1:1"],"update":{"working_dir":"/","commands":["true"]}}`, nil)
	n.must(201, "POST", "/deployments", "", `{"id":"plain","routes":[{"host":"plain.test"}],"upstreams":["127.0.0.1:1"]}`, nil)
	for _, c := range []struct {
		path, body string
		code       int
		msg        string
	}{
		{"/deployments/web/update", `{}`, 403, "berth serve --host-updates"},
		{"/deployments/nope/update", `{}`, 404, `no deployment "nope"`},
		{"/deployments/web/build", ``, 400, `deployment "web" has no build section`},
		{"/deployments/web/pull", `{"ref":"x"}`, 400, `deployment "web" has no artifact section to pull`},
		{"/deployments/web/mounts/pull", `{}`, 400, `deployment "web" has no vm.mounts to pull`},
		{"/deployments/web/update", `[]`, 400, "JSON object"},
	} {
		r := n.call(nil, "POST", c.path, "", c.body)
		if r.code != c.code || !strings.Contains(errorOf(t, r), c.msg) {
			t.Errorf("POST %s: %s, want %d with %q", c.path, r, c.code, c.msg)
		}
	}
	if r := n.call(nil, "GET", "/deployments/nope/jobs", "", ""); r.code != 404 {
		t.Errorf("jobs of a missing deployment: %s", r)
	}
	if r := n.call(nil, "GET", "/jobs/nope", "", ""); r.code != 404 || !strings.Contains(errorOf(t, r), `no job "nope"`) {
		t.Errorf("missing job: %s", r)
	}
	var js []apitype.JobRecord
	n.must(200, "GET", "/deployments/plain/jobs", "", "", &js)
	if js == nil || len(js) != 0 {
		t.Errorf("no jobs: %v", js)
	}
}

func TestWorkflowsCRUD(t *testing.T) {
	n := startNode(t, Options{})
	c := contracttest.MustLoad(t)
	var w apitype.WorkflowSpec
	r := n.call(nil, "POST", "/workflows", "", `{"id":"build","repo":"https://git.test/app","network":"default","auth":{"secret":"gh"},"enabled":true}`)
	if r.code != 201 {
		t.Fatalf("create: %s", r)
	}
	if err := c.CheckJSON("WorkflowSpec", r.body); err != nil {
		t.Errorf("WorkflowSpec: %v\n%s", err, r.body)
	}
	json.Unmarshal(r.body, &w)
	if w.Ref != "main" || w.Path != ".ci/workflows/*.yml" || !w.Enabled || w.Auth.Secret != "gh" || w.Auth.Namespace != "default" {
		t.Fatalf("created: %+v", w)
	}
	for _, c := range []struct {
		method, path, body string
		code               int
		msg                string
	}{
		{"POST", "/workflows", `{"id":"build","repo":"x"}`, 409, "already exists"},
		{"POST", "/workflows", `{"id":"ci","repo":"x","network":"prod-runners"}`, 400, `network: berth runs a workflow's steps as its own jobs, on no runner network: "prod-runners" cannot be honoured`},
		{"POST", "/workflows", `{"id":"ci","repo":"x","secrets_prefix":"ci/app"}`, 400, "secrets_prefix: berth's workflow steps are jobs"},
		{"POST", "/workflows", `{"id":"ci"}`, 400, "repo: required"},
		{"POST", "/workflows", `{"id":"ci","repo":"x","auth":{}}`, 400, "auth.secret: required"},
		{"PUT", "/workflows/build", `{"id":"other","repo":"x"}`, 400, "id: \"other\" does not match"},
		{"PUT", "/workflows/nope", `{"repo":"x"}`, 404, `no workflow "nope"`},
		{"GET", "/workflows/nope", ``, 404, `no workflow "nope"`},
		{"DELETE", "/workflows/nope", ``, 404, `no workflow "nope"`},
	} {
		r := n.call(nil, c.method, c.path, "", c.body)
		if r.code != c.code || !strings.Contains(errorOf(t, r), c.msg) {
			t.Errorf("%s %s: %s, want %d with %q", c.method, c.path, r, c.code, c.msg)
		}
	}
	n.must(200, "PUT", "/workflows/build", "", `{"repo":"https://git.test/app2","ref":"dev"}`, &w)
	n.must(200, "GET", "/workflows/build", "", "", &w)
	if w.Repo != "https://git.test/app2" || w.Ref != "dev" || w.ID != "build" || w.Enabled {
		t.Fatalf("replaced: %+v", w)
	}
	var l apitype.WorkflowList
	r = n.call(nil, "GET", "/workflows", "", "")
	if err := c.CheckJSON("WorkflowList", r.body); err != nil {
		t.Errorf("WorkflowList: %v\n%s", err, r.body)
	}
	json.Unmarshal(r.body, &l)
	if len(l.Workflows) != 1 {
		t.Fatalf("list: %+v", l)
	}
	n.must(204, "DELETE", "/workflows/build", "", "", nil)
	n.must(200, "GET", "/workflows", "", "", &l)
	if l.Workflows == nil || len(l.Workflows) != 0 {
		t.Fatalf("list after delete: %+v", l)
	}
}
