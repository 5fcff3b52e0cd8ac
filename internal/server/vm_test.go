package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
)

// waitFor polls cond every 10ms until it holds, failing after a generous
// hang guard. It asserts an outcome, not a duration.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func vmSpec(id string, extra string) string {
	return `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"vm":{"driver":"process","port":8080,"start_command":` +
		jsonString(appCommand()) + `,"env_vars":{"GREETING":"hi"}}` + extra + `}`
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

func (h *harness) status(id string) apitype.DeploymentStatus {
	h.t.Helper()
	var st apitype.DeploymentStatus
	r := h.do("GET", "/deployments/"+id, "", "")
	if err := json.Unmarshal(r.body, &st); err != nil {
		h.t.Fatalf("status: %d %s", r.code, r.body)
	}
	return st
}

func (h *harness) view(id string) apitype.DeploymentView {
	h.t.Helper()
	var m apitype.MetricsResponse
	r := h.do("GET", "/metrics?deployment="+id, "", "")
	if err := json.Unmarshal(r.body, &m); err != nil || len(m.Deployments) != 1 {
		h.t.Fatalf("metrics: %d %s", r.code, r.body)
	}
	return m.Deployments[0]
}

func TestVMScaleFromZero(t *testing.T) {
	c := contracttest.MustLoad(t)
	h := start(t, "")
	if r := h.json("POST", "/deployments", vmSpec("web", `,"scaling":{"min_replicas":0,"max_replicas":2}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	if st := h.status("web"); st.Ready != 0 || len(st.VMs) != 0 {
		t.Fatalf("min_replicas 0 started replicas: %+v", st)
	}
	// The first request is held while a replica starts, then served by it.
	r := get(t, h.proxy+"/hello", "web.test")
	// As root a replica has a UTS namespace of its own, named for it; the
	// unprivileged process driver leaves the host's name.
	wantHost := "app "
	if os.Geteuid() == 0 {
		wantHost = "app berth-web-"
	}
	if r.code != 200 || !strings.HasPrefix(string(r.body), wantHost) || !strings.HasSuffix(string(r.body), "/hello hi") {
		t.Fatalf("cold request: %d %q", r.code, r.body)
	}
	if !strings.HasPrefix(r.header.Get("X-Berth-Cold-Start"), "held=") {
		t.Errorf("held request without X-Berth-Cold-Start: %v", r.header)
	}
	vmID := r.header.Get("X-Vm-Id")
	if !strings.HasPrefix(vmID, "berth-web-") {
		t.Errorf("x-vm-id %q", vmID)
	}
	st := h.status("web")
	if st.Ready != 1 || len(st.VMs) != 1 || st.VMs[0].SandboxID != vmID {
		t.Errorf("after the cold start: %+v", st)
	}
	// A warm request is not held.
	if r := get(t, h.proxy+"/", "web.test"); r.code != 200 || r.header.Get("X-Berth-Cold-Start") != "" {
		t.Errorf("warm request: %d %v", r.code, r.header)
	}
	raw := h.do("GET", "/metrics?deployment=web", "", "")
	if err := c.CheckJSON("MetricsResponse", raw.body); err != nil {
		t.Errorf("metrics not in the contract: %v", err)
	}
	v := h.view("web")
	a := v.Metrics.Autoscale
	if a.ColdStartWaits != 1 || a.ColdStartHits != 1 || a.VMsCreated != 1 || v.Metrics.ColdStartS.Count != 1 {
		t.Errorf("autoscale counters %+v, cold starts %d", a, v.Metrics.ColdStartS.Count)
	}
	if v.Pool.MaxReplicas != 2 || v.Pool.TargetConcurrency != 10 || len(v.VMs) != 1 || v.VMs[0].MemoryBytes == nil || *v.VMs[0].MemoryBytes <= 0 {
		t.Errorf("pool view %+v vms %+v", v.Pool, v.VMs)
	}
	var cs struct {
		Deployments []struct {
			ID     string
			Phases map[string]apitype.Histogram
		}
	}
	json.Unmarshal(h.do("GET", "/metrics/cold-start", "", "").body, &cs)
	if len(cs.Deployments) != 1 || cs.Deployments[0].Phases["total"].Count != 1 || cs.Deployments[0].Phases["boot"].Count != 1 {
		t.Errorf("cold-start phases: %+v", cs)
	}
	prom := h.do("GET", "/metrics/prometheus", "", "")
	if !strings.Contains(string(prom.body), `berth_cold_start_phase_seconds_count{deployment="web",phase="boot"} 1`) {
		t.Errorf("phases missing from the Prometheus output")
	}
}

func TestVMExecEvictAndLogs(t *testing.T) {
	c := contracttest.MustLoad(t)
	h := start(t, "")
	if r := h.json("POST", "/deployments", vmSpec("job", `,"scaling":{"min_replicas":0,"max_replicas":1}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	// wake=false with nothing running is a 409, as in app-lb.
	if r := h.json("POST", "/deployments/job/exec", `{"command":"true","wake":false}`); r.code != 409 || !strings.Contains(errMsg(t, r), "no running VM") {
		t.Errorf("exec without wake: %d %s", r.code, r.body)
	}
	if r := h.json("POST", "/deployments/job/exec", `{"command":"  "}`); r.code != 400 || !strings.Contains(errMsg(t, r), "command") {
		t.Errorf("empty command: %d %s", r.code, r.body)
	}
	r := h.json("POST", "/deployments/job/exec", `{"command":"echo out; echo err >&2; echo $GREETING $X; exit 3","env":{"X":"y"}}`)
	if r.code != 200 {
		t.Fatalf("exec: %d %s", r.code, r.body)
	}
	if err := c.CheckJSON("ExecOutput", r.body); err != nil {
		t.Error(err)
	}
	var out apitype.ExecOutput
	json.Unmarshal(r.body, &out)
	if out.ExitCode != 3 || out.Stdout != "out\nhi y\n" || out.Stderr != "err\n" || !strings.HasPrefix(out.SandboxID, "berth-job-") {
		t.Errorf("exec output %+v", out)
	}
	if r := h.json("POST", "/deployments/job/exec", `{"command":"true","sandbox_id":"berth-job-000000000000"}`); r.code != 404 {
		t.Errorf("exec in an unknown VM: %d %s", r.code, r.body)
	}
	// Logs carry the app's output.
	waitFor(t, "the app's output in the logs", func() bool {
		return strings.Contains(string(h.do("GET", "/deployments/job/logs", "", "").body), "test app listening")
	})
	if r := h.do("DELETE", "/deployments/job/vms/"+out.SandboxID+"?force=yes", "", ""); r.code != 400 {
		t.Errorf("force=yes: %d", r.code)
	}
	r = h.do("DELETE", "/deployments/job/vms/"+out.SandboxID+"?force=true", "", "")
	if r.code != 200 || c.CheckJSON("EvictOutcome", r.body) != nil || !strings.Contains(string(r.body), `"killed"`) {
		t.Errorf("evict: %d %s", r.code, r.body)
	}
	if r := h.do("DELETE", "/deployments/job/vms/"+out.SandboxID, "", ""); r.code != 404 {
		t.Errorf("evicting a gone VM: %d", r.code)
	}
	// Static deployments have no VMs.
	h.json("POST", "/deployments", `{"id":"st","routes":[{"path_prefix":"/"}],"upstreams":["127.0.0.1:1"]}`)
	if r := h.json("POST", "/deployments/st/exec", `{"command":"true"}`); r.code != 400 {
		t.Errorf("exec on static: %d", r.code)
	}
}

func TestVMBootFailureBacksOff(t *testing.T) {
	h := start(t, "")
	spec := `{"id":"bad","routes":[{"host":"bad.test"}],"vm":{"driver":"process","port":8080,"start_command":"echo cannot start >&2; exit 1"},"scaling":{"min_replicas":1,"cold_start_timeout_secs":1}}`
	if r := h.json("POST", "/deployments", spec); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	var v apitype.DeploymentView
	waitFor(t, "a boot failure", func() bool { v = h.view("bad"); return v.Pool.BootFailures > 0 })
	if v.Pool.BootBackoffSecs == nil || *v.Pool.BootBackoffSecs <= 0 || *v.Pool.BootBackoffSecs > 30 {
		t.Errorf("boot_backoff_secs %v", v.Pool.BootBackoffSecs)
	}
	if !strings.Contains(v.Metrics.Autoscale.LastCreateError, "cannot start") {
		t.Errorf("last_create_error %q does not carry the app's output", v.Metrics.Autoscale.LastCreateError)
	}
	// While backing off, a request is refused at once with Retry-After, not
	// held and not retried in a loop. The public answer names the kind of
	// failure, not the app's output.
	r := get(t, h.proxy+"/", "bad.test")
	if r.code != 503 || r.header.Get("Retry-After") == "" ||
		!strings.Contains(string(r.body), `deployment "bad" cannot start: its replica stopped before it became ready`) ||
		strings.Contains(string(r.body), "cannot start >&2") || strings.Contains(string(r.body), "cannot start\n") {
		t.Errorf("request during backoff: %d %v %q", r.code, r.header, r.body)
	}
	if v := h.view("bad"); v.Metrics.Autoscale.VMsCreated != 1 {
		t.Errorf("created %d replicas while backing off", v.Metrics.Autoscale.VMsCreated)
	}
	// A spec write clears the backoff.
	h.json("PUT", "/deployments/bad", strings.Replace(spec, `"min_replicas":1`, `"min_replicas":1,"max_replicas":4`, 1))
	waitFor(t, "a second attempt after the spec write", func() bool { return h.view("bad").Metrics.Autoscale.VMsCreated >= 2 })
}

// TestVMNoErrorsWhileScaling keeps a steady stream of requests going while
// the pool scales up, scales down, and loses replicas to eviction, and
// requires every response to be a 200.
func TestVMNoErrorsWhileScaling(t *testing.T) {
	h := start(t, "")
	if r := h.json("POST", "/deployments", vmSpec("load", `,"scaling":{"min_replicas":1,"max_replicas":4,"drain_timeout_secs":5}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "one ready replica", func() bool { return h.status("load").Ready == 1 })
	var bad atomic.Int64
	var total atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", h.proxy+"/", nil)
				req.Host = "load.test"
				resp, err := client.Do(req)
				total.Add(1)
				if err != nil {
					bad.Add(1)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					bad.Add(1)
				}
			}
		}()
	}
	h.json("PATCH", "/deployments/load/scaling", `{"min_replicas":3}`)
	waitFor(t, "three ready replicas", func() bool { return h.status("load").Ready == 3 })
	st := h.status("load")
	h.do("DELETE", "/deployments/load/vms/"+st.VMs[0].SandboxID, "", "") // drain one
	waitFor(t, "the evicted replica to be replaced", func() bool {
		st := h.status("load")
		if st.Ready != 3 {
			return false
		}
		for _, v := range st.VMs {
			if v.Draining {
				return false
			}
		}
		return true
	})
	h.json("PATCH", "/deployments/load/scaling", `{"min_replicas":1,"max_replicas":1}`)
	waitFor(t, "the pool to shrink to one", func() bool { st := h.status("load"); return st.Ready == 1 && len(st.VMs) == 1 })
	close(stop)
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d of %d requests failed while the pool changed", bad.Load(), total.Load())
	}
	if total.Load() == 0 {
		t.Error("no requests were sent")
	}
}

// TestVMReadoptAfterRestart stops berth (replicas keep running) and starts
// it again on the same data directory: the same replicas serve, none is
// duplicated or orphaned.
func TestVMReadoptAfterRestart(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	if r := h.json("POST", "/deployments", vmSpec("keep", `,"scaling":{"min_replicas":2,"max_replicas":2}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "two ready replicas", func() bool { return h.status("keep").Ready == 2 })
	before := ids(h.status("keep"))
	h.stop()

	h2 := start(t, dir)
	waitFor(t, "the replicas to be adopted", func() bool { return h2.status("keep").Ready == 2 })
	after := ids(h2.status("keep"))
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("replicas before restart %v, after %v", before, after)
	}
	if v := h2.view("keep"); v.Metrics.Autoscale.VMsCreated != 0 {
		t.Errorf("the restarted berth created %d replicas instead of adopting", v.Metrics.Autoscale.VMsCreated)
	}
	if r := get(t, h2.proxy+"/", "keep.test"); r.code != 200 {
		t.Errorf("traffic after restart: %d", r.code)
	}
	// Deleting the deployment stops its replicas.
	h2.do("DELETE", "/deployments/keep", "", "")
	insts, err := h2.s.fleet.Driver("process").List(t.Context())
	if err != nil || len(insts) != 0 {
		t.Errorf("replicas left after delete: %v %v", insts, err)
	}
}

func ids(st apitype.DeploymentStatus) []string {
	var out []string
	for _, v := range st.VMs {
		out = append(out, v.SandboxID)
	}
	slices.Sort(out)
	return out
}

// TestVMEnvFromSecrets: env_from resolves sealed secrets at replica creation
// (a secret wins over a literal env var); a missing secret fails the create
// with a reason that names it.
func TestVMEnvFromSecrets(t *testing.T) {
	h := start(t, "")
	if r := h.json("POST", "/secrets", `{"id":"db","data":{"password":"s3cret"}}`); r.code != 201 {
		t.Fatalf("secret: %d %s", r.code, r.body)
	}
	spec := `{"id":"sec","routes":[],"vm":{"driver":"process","port":8080,"start_command":` + jsonString(appCommand()) +
		`,"env_vars":{"DB_PASSWORD":"literal"},"env_from":[{"secret":"db","key":"password","as":"DB_PASSWORD"}]},"scaling":{"min_replicas":0}}`
	if r := h.json("POST", "/deployments", spec); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	r := h.json("POST", "/deployments/sec/exec", `{"command":"echo $DB_PASSWORD"}`)
	var out apitype.ExecOutput
	json.Unmarshal(r.body, &out)
	if r.code != 200 || out.Stdout != "s3cret\n" {
		t.Errorf("exec: %d %s", r.code, r.body)
	}
	missing := strings.Replace(strings.Replace(spec, `"id":"sec"`, `"id":"nosec"`, 1), `"secret":"db"`, `"secret":"nope"`, 1)
	missing = strings.Replace(missing, `"min_replicas":0`, `"min_replicas":1`, 1)
	if r := h.json("POST", "/deployments", missing); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "the create to fail", func() bool { return h.view("nosec").Metrics.Autoscale.CreateFailures > 0 })
	if msg := h.view("nosec").Metrics.Autoscale.LastCreateError; !strings.Contains(msg, "nope") {
		t.Errorf("last_create_error %q does not name the missing secret", msg)
	}
}

// TestVMCannotStartFailsFast: a deployment whose creates fail (here an
// env_from secret that does not exist yet) answers a request at once with a
// 503 that says so and a Retry-After from the boot backoff, instead of
// holding it for cold_start_timeout_secs (600 s here: without the fast
// failure the request outlives the client's timeout). Once the secret
// exists and the backoff is over, the next request starts a replica and is
// served.
func TestVMCannotStartFailsFast(t *testing.T) {
	skipShort(t, "waits out a 30 s boot backoff; fleet.TestCreateFailureReleasesHeldRequests covers it under synctest")
	h := start(t, "")
	spec := `{"id":"late","routes":[{"host":"late.test"}],"vm":{"driver":"process","port":8080,"start_command":` + jsonString(appCommand()) +
		`,"env_from":[{"secret":"later","key":"password","as":"DB_PASSWORD"}]},"scaling":{"min_replicas":0,"cold_start_timeout_secs":600}}`
	// Accepted although the secret is missing: it may be created after the
	// deployment (apply order); the failure shows at create time.
	if r := h.json("POST", "/deployments", spec); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	request := func() resp {
		t.Helper()
		req, _ := http.NewRequest("GET", h.proxy+"/", nil)
		req.Host = "late.test"
		r, err := client.Do(req)
		if err != nil {
			t.Fatalf("the request was held (cold_start_timeout_secs is 600) instead of failing fast: %v", err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return resp{r.StatusCode, r.Header, b}
	}
	check := func(what string, r resp) {
		t.Helper()
		body := string(r.body)
		if r.code != 503 || !strings.Contains(body, `deployment "late" cannot start: the secrets named in vm.env_from could not be read`) {
			t.Errorf("%s: %d %q", what, r.code, body)
		}
		if strings.Contains(body, "later") || strings.Contains(body, h.dir) {
			t.Errorf("%s: the public answer carries the secret's name or a host path: %q", what, body)
		}
		if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 || n > 30 {
			t.Errorf("%s: Retry-After %q, want 1..30 (the backoff)", what, r.header.Get("Retry-After"))
		}
	}
	// The first request is held, and released when the create fails.
	check("held request", request())
	// The next one is refused at once, while the backoff lasts.
	check("request during the backoff", request())
	v := h.view("late")
	if !strings.Contains(v.Metrics.Autoscale.LastCreateError, `"later"`) || v.Metrics.Autoscale.CreateFailures != 1 {
		t.Errorf("last_create_error %q, create_failures %d", v.Metrics.Autoscale.LastCreateError, v.Metrics.Autoscale.CreateFailures)
	}
	// exec goes through the admin API, whose caller sees the whole error.
	if r := h.json("POST", "/deployments/late/exec", `{"command":"true"}`); r.code != 503 || !strings.Contains(errMsg(t, r), `"later"`) || r.header.Get("Retry-After") == "" {
		t.Errorf("exec: %d %v %s", r.code, r.header, r.body)
	}

	// Fixed: the secret exists. After the backoff a request is served.
	if r := h.json("POST", "/secrets", `{"id":"later","data":{"password":"s3cret"}}`); r.code != 201 {
		t.Fatalf("secret: %d %s", r.code, r.body)
	}
	waitFor(t, "the boot backoff to end", func() bool { return h.view("late").Pool.BootBackoffSecs == nil })
	if r := request(); r.code != 200 {
		t.Errorf("after the fix: %d %q", r.code, r.body)
	}
	if v := h.view("late"); v.Pool.BootFailures != 0 || v.Metrics.Autoscale.LastCreateError == "" {
		t.Errorf("after a success: boot_failures %d, last_create_error %q (kept: it is the last failed create's)", v.Pool.BootFailures, v.Metrics.Autoscale.LastCreateError)
	}
}

// TestVMBootFailureReleasesHeldRequest: a request held for a cold start
// whose replica exits during boot is answered as soon as the boot fails,
// with a 503 that says so (not the app's output) and a Retry-After, not
// after cold_start_timeout_secs (600 s: without the release the request
// outlives the client's timeout).
func TestVMBootFailureReleasesHeldRequest(t *testing.T) {
	h := start(t, "")
	spec := `{"id":"crash","routes":[{"host":"crash.test"}],"vm":{"driver":"process","start_command":"echo the-apps-own-output >&2; exit 1"},` +
		`"scaling":{"min_replicas":0,"cold_start_timeout_secs":600}}`
	if r := h.json("POST", "/deployments", spec); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	req, _ := http.NewRequest("GET", h.proxy+"/", nil)
	req.Host = "crash.test"
	r, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("the request was held (cold_start_timeout_secs is 600) instead of released when the boot failed: %v", err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 503 || !strings.Contains(string(b), `deployment "crash" cannot start: its replica stopped before it became ready`) ||
		strings.Contains(string(b), "the-apps-own-output") {
		t.Errorf("held request: %d %q", r.StatusCode, b)
	}
	if n, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || n < 1 {
		t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	if msg := h.view("crash").Metrics.Autoscale.LastCreateError; !strings.Contains(msg, "the-apps-own-output") {
		t.Errorf("last_create_error %q does not carry the app's output", msg)
	}
}
