package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/cli"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/syncbuf"
	"github.com/berth-dev/berth/internal/vm/process"
)

// revSpec is a two-replica process deployment whose app answers with
// x-heyo-revision: rev, probed for header want; vmExtra goes into vm.
func revSpec(id, rev, want, vmExtra string) string {
	return `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"vm":{"driver":"process","port":8080,"start_command":` +
		jsonString(appCommand()) + `,"env_vars":{"GREETING":"` + rev + `","APP_REVISION":"` + rev + `"}` + vmExtra + `}` +
		`,"health":{"path":"/","expected_header":{"name":"x-heyo-revision","value":"` + want + `"}}` +
		`,"scaling":{"min_replicas":2,"max_replicas":2,"boot_timeout_secs":4,"drain_timeout_secs":5}}`
}

// load is a bounded load generator on loopback: clients send requests to
// the deployment until stopped or each has sent max; it counts non-2xx
// answers and the revisions that answered, and, after markAfter, which
// revisions answered requests started after it.
type load struct {
	non2xx   atomic.Int64
	ok       atomic.Int64
	mu       sync.Mutex
	revs     map[string]int
	after    map[string]int
	marked   atomic.Bool
	stop     chan struct{}
	wg       sync.WaitGroup
	firstErr atomic.Value
}

func startLoad(t *testing.T, proxy, host string, clients, max int) *load {
	return startLoadPath(t, proxy, "/", host, clients, max)
}

func startLoadPath(t *testing.T, proxy, path, host string, clients, max int) *load {
	l := &load{revs: map[string]int{}, after: map[string]int{}, stop: make(chan struct{})}
	// A kept-alive connection per client (http.DefaultTransport keeps 2).
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for range clients {
		l.wg.Go(func() {
			for range max {
				select {
				case <-l.stop:
					return
				default:
				}
				after := l.marked.Load()
				req, _ := http.NewRequest("GET", proxy+path, nil)
				req.Host = host
				resp, err := client.Do(req)
				if err != nil {
					l.non2xx.Add(1)
					l.firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					l.non2xx.Add(1)
					l.firstErr.CompareAndSwap(nil, resp.Status)
					continue
				}
				l.ok.Add(1)
				rev := resp.Header.Get("X-Heyo-Revision")
				l.mu.Lock()
				l.revs[rev]++
				if after {
					l.after[rev]++
				}
				l.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	t.Cleanup(l.end)
	return l
}

func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *load) check(t *testing.T) {
	t.Helper()
	l.end()
	if n := l.non2xx.Load(); n != 0 {
		t.Errorf("%d non-2xx answers (of %d); first: %v", n, n+l.ok.Load(), l.firstErr.Load())
	}
	if l.ok.Load() == 0 {
		t.Error("the load got no answer at all")
	}
}

func (h *harness) rollout(id, op string) (apitype.RolloutOperation, resp) {
	h.t.Helper()
	r := h.do("GET", "/deployments/"+id+"/rollouts/"+op, "", "")
	var o apitype.RolloutOperation
	if r.code == 200 {
		if err := json.Unmarshal(r.body, &o); err != nil {
			h.t.Fatalf("rollout: %s", r.body)
		}
	}
	return o, r
}

func (h *harness) settled(id, op string) apitype.RolloutOperation {
	h.t.Helper()
	var o apitype.RolloutOperation
	waitFor(h.t, "rollout "+op+" to settle", func() bool {
		var r resp
		o, r = h.rollout(id, op)
		if r.code != 200 {
			h.t.Fatalf("GET rollout: %d %s", r.code, r.body)
		}
		return o.Status != "running"
	})
	return o
}

func startRollout(id, op, expected, spec string) string {
	return `{"operation_id":"` + op + `","expected_revision":"` + expected + `","spec":` + spec + `}`
}

// TestRolloutUnderLoad: a rollout to a good revision under continuous load
// answers every request with a 2xx, and once the operation has succeeded
// every new request is answered by the new revision; the operation is
// idempotent on its id, a stale expected_revision and a foreign spec.id are
// refused, and a plain PUT that changes the template records an operation
// too.
func TestRolloutUnderLoad(t *testing.T) {
	h := start(t, "")
	if r := h.json("POST", "/deployments", revSpec("web", "a", "a", "")); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "two ready replicas", func() bool { return h.status("web").Ready == 2 })
	st := h.status("web")
	src := st.RolloutRevision
	if len(src) != 64 {
		t.Fatalf("rollout_revision %q", src)
	}
	if r := h.do("GET", "/deployments/web", "", ""); r.header.Get("ETag") != `"`+src+`"` {
		t.Errorf("ETag %q does not carry rollout_revision %s", r.header.Get("ETag"), src)
	}
	before := ids(st)

	l := startLoad(t, h.proxy, "web.test", 4, 20000)
	waitFor(t, "load", func() bool { return l.ok.Load() >= 50 })
	body := startRollout("web", "op-1", src, revSpec("web", "b", "b", ""))
	r := h.json("POST", "/deployments/web/rollouts", body)
	if r.code != 202 {
		t.Fatalf("start: %d %s", r.code, r.body)
	}
	c := contracttest.MustLoad(t)
	if err := c.CheckJSON("RolloutOperation", r.body); err != nil {
		t.Errorf("202 body against the contract: %v", err)
	}
	var op apitype.RolloutOperation
	json.Unmarshal(r.body, &op)
	if op.OperationID != "op-1" || op.SourceRevision != src || op.Status != "running" || len(op.TargetSpecSHA256) != 64 {
		t.Errorf("accepted operation %s", r.body)
	}
	// The same request again is the same operation; the same id with
	// another spec is a conflict.
	if r := h.json("POST", "/deployments/web/rollouts", body); r.code != 202 || !strings.Contains(string(r.body), `"operation_id":"op-1"`) {
		t.Errorf("retry: %d %s", r.code, r.body)
	}
	if r := h.json("POST", "/deployments/web/rollouts", startRollout("web", "op-1", src, revSpec("web", "c", "c", ""))); r.code != 409 || !strings.Contains(errMsg(t, r), "operation_id") {
		t.Errorf("same id, other spec: %d %s", r.code, r.body)
	}
	done := h.settled("web", "op-1")
	l.marked.Store(true)
	if done.Status != "succeeded" || !done.ReadinessVerified || !done.PreviousStopped || done.Error != nil {
		t.Fatalf("settled: %+v", done)
	}
	waitFor(t, "load after the rollout", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.after["b"] >= 100
	})
	l.check(t)
	if l.after["a"] != 0 || len(l.after) != 1 {
		t.Errorf("after the rollout succeeded, answered by revisions %v, want only b", l.after)
	}
	t.Logf("load: %v overall, %v after success", l.revs, l.after)
	st = h.status("web")
	if r := h.do("GET", "/deployments/web", "", ""); c.CheckJSON("DeploymentStatus", r.body) != nil {
		t.Errorf("status against the contract: %v", c.CheckJSON("DeploymentStatus", r.body))
	}
	if st.RolloutRevision != done.TargetSpecSHA256 || st.Ready != 2 {
		t.Errorf("after: revision %s ready %d, want %s and 2", st.RolloutRevision, st.Ready, done.TargetSpecSHA256)
	}
	for _, id := range ids(st) {
		if slices.Contains(before, id) {
			t.Errorf("previous replica %s still listed", id)
		}
	}

	// Stale revision, foreign id, missing operation.
	if r := h.json("POST", "/deployments/web/rollouts", startRollout("web", "op-2", src, revSpec("web", "c", "c", ""))); r.code != 409 || !strings.Contains(errMsg(t, r), "expected_revision") {
		t.Errorf("stale expected_revision: %d %s", r.code, r.body)
	}
	if r := h.json("POST", "/deployments/web/rollouts", startRollout("web", "op-2", st.RolloutRevision, revSpec("other", "c", "c", ""))); r.code != 400 || !strings.Contains(errMsg(t, r), "spec.id must match deployment") {
		t.Errorf("foreign spec.id: %d %s", r.code, r.body)
	}
	if _, r := h.rollout("web", "nope"); r.code != 404 || errMsg(t, r) != "rollout not found" {
		t.Errorf("missing operation: %d %s", r.code, r.body)
	}

	// A plain PUT that changes the template is a rollout with an id of
	// its own, listed first in the history.
	put := h.json("PUT", "/deployments/web", revSpec("web", "c", "c", ""))
	if put.code != 200 {
		t.Fatalf("PUT: %d %s", put.code, put.body)
	}
	r = h.do("GET", "/deployments/web/rollouts", "", "")
	var hist []apitype.RolloutOperation
	if err := json.Unmarshal(r.body, &hist); err != nil || len(hist) != 2 || hist[1].OperationID != "op-1" || hist[0].OperationID == "" {
		t.Fatalf("history: %d %s", r.code, r.body)
	}
	if got := put.header.Get("X-Berth-Rollout"); got != hist[0].OperationID {
		t.Errorf("the PUT named rollout %q, want %q", got, hist[0].OperationID)
	}
	if o := h.settled("web", hist[0].OperationID); o.Status != "succeeded" {
		t.Errorf("PUT's rollout: %+v", o)
	}

	// The CLI: history lists both, undo rolls back to revision b (what
	// the PUT replaced) as a new rollout, and status shows it.
	if out := runCLI(t, h, "rollout", "history", "web"); !strings.Contains(out, "op-1") || !strings.Contains(out, hist[0].OperationID) {
		t.Errorf("rollout history:\n%s", out)
	}
	if out := runCLI(t, h, "rollout", "undo", "web", "--operation-id", "undo-1"); !strings.Contains(out, "undo-1") {
		t.Errorf("rollout undo:\n%s", out)
	}
	if o := h.settled("web", "undo-1"); o.Status != "succeeded" || o.TargetSpecSHA256 != done.TargetSpecSHA256 {
		t.Errorf("undo: %+v, want a rollout back to %s", o, done.TargetSpecSHA256)
	}
	if st := h.status("web"); st.RolloutRevision != done.TargetSpecSHA256 || st.Spec.VM.EnvVars["APP_REVISION"] != "b" {
		t.Errorf("after undo: revision %s", st.RolloutRevision)
	}
	if out := runCLI(t, h, "rollout", "status", "web"); !strings.Contains(out, "undo-1") || !strings.Contains(out, "succeeded") {
		t.Errorf("rollout status:\n%s", out)
	}
}

// runCLI runs one berth command against h's admin API.
func runCLI(t *testing.T, h *harness, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := cli.Run(t.Context(), append([]string{"--server", h.admin}, args...), strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("berth %v: exit %d: %s%s", args, code, out.String(), errb.String())
	}
	return out.String()
}

// TestRolloutBadCandidates: a rollout whose candidates never become ready
// (an app that never listens; one answering the wrong expected_header)
// fails with every request still answered by the previous revision: the
// operation reports failed with an error and a settlement, the candidates
// are gone, and the stored spec is back at the source revision.
func TestRolloutBadCandidates(t *testing.T) {
	for _, c := range []struct{ name, spec string }{
		{"never ready", `{"id":"web","routes":[{"host":"web.test"}],"vm":{"driver":"process","port":8080,"start_command":"exec sleep 600"},` +
			`"health":{"path":"/"},"scaling":{"min_replicas":2,"max_replicas":2,"boot_timeout_secs":3}}`},
		{"wrong header", revSpec("web", "b", "not-b", "")},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := start(t, "")
			if r := h.json("POST", "/deployments", revSpec("web", "a", "a", "")); r.code != 201 {
				t.Fatalf("%d %s", r.code, r.body)
			}
			waitFor(t, "two ready replicas", func() bool { return h.status("web").Ready == 2 })
			st := h.status("web")
			before := ids(st)
			l := startLoad(t, h.proxy, "web.test", 4, 20000)
			waitFor(t, "load", func() bool { return l.ok.Load() >= 50 })
			if r := h.json("POST", "/deployments/web/rollouts", startRollout("web", "bad", st.RolloutRevision, c.spec)); r.code != 202 {
				t.Fatalf("start: %d %s", r.code, r.body)
			}
			if c.name == "never ready" {
				// Its candidates cannot be ready before boot_timeout_secs,
				// so the rollout is still running here.
				if out := runCLI(t, h, "describe", "deployment", "web"); !strings.Contains(out, "Rollout in progress: bad") {
					t.Errorf("describe during the rollout:\n%s", out)
				}
			}
			op := h.settled("web", "bad")
			if _, r := h.rollout("web", "bad"); contracttest.MustLoad(t).CheckJSON("RolloutOperation", r.body) != nil {
				t.Errorf("failed operation against the contract: %s", r.body)
			}
			if op.Status != "failed" || op.Error == nil || *op.Error == "" || len(op.FailureSettlement) == 0 || op.ReadinessVerified {
				t.Fatalf("settled: %+v", op)
			}
			// The reason names why the candidate never became ready.
			if why := map[string]string{"never ready": "connect", "wrong header": "x-heyo-revision"}[c.name]; !strings.Contains(*op.Error, why) {
				t.Errorf("error %q does not say why (%q)", *op.Error, why)
			}
			var settle struct {
				Stopped  []string `json:"candidates_stopped"`
				Reverted string   `json:"spec_reverted_to"`
			}
			json.Unmarshal(op.FailureSettlement, &settle)
			if len(settle.Stopped) == 0 || settle.Reverted != st.RolloutRevision {
				t.Errorf("settlement %s", op.FailureSettlement)
			}
			l.marked.Store(true)
			waitFor(t, "load after the failure", func() bool { return l.ok.Load() >= 200 })
			l.check(t)
			if len(l.revs) != 1 || l.revs["a"] == 0 {
				t.Errorf("answered by revisions %v, want only a", l.revs)
			}
			after := h.status("web")
			if after.RolloutRevision != st.RolloutRevision || after.Spec.VM.EnvVars["APP_REVISION"] != "a" {
				t.Errorf("the spec is at %s, want the source %s", after.RolloutRevision, st.RolloutRevision)
			}
			if got := ids(after); !slices.Equal(got, before) || after.Ready != 2 {
				t.Errorf("replicas %v (ready %d), want the previous %v", got, after.Ready, before)
			}
			insts, err := h.s.fleet.Driver("process").List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, in := range insts {
				listed = append(listed, in.ID)
			}
			slices.Sort(listed)
			if !slices.Equal(listed, before) {
				t.Errorf("the driver runs %v, want only the previous replicas %v", listed, before)
			}
		})
	}
}

// TestRolloutKillNine: berth killed with SIGKILL while a rollout's
// candidates boot, under load, settles the operation at the next start: it
// fails, the spec is back at the source revision, the previous replicas are
// adopted and the candidates stopped, and only the previous revision
// serves. Until the kill, and from the restart on (the settling included),
// every request is a 2xx from the previous revision: only the requests in
// flight at the kill itself may fail.
func TestRolloutKillNine(t *testing.T) {
	if os.Getenv("BERTH_VM_CHILD") == "1" {
		return
	}
	dir := t.TempDir()
	t.Cleanup(func() { stopReplicas(t, dir) })
	child, cmd := startChild(t, "TestVMServerChild", dir, "BERTH_VM_CHILD=1", "BERTH_CHILD_DIR="+dir)
	if r := child.json("POST", "/deployments", revSpec("web", "a", "a", "")); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "two ready replicas", func() bool { return child.status("web").Ready == 2 })
	st := child.status("web")
	before := ids(st)
	// Candidates that pass their probe only after a minute: the rollout
	// is surely mid-way when berth is killed.
	slow := strings.Replace(revSpec("web", "b", "b", ""), `"boot_timeout_secs":4`, `"boot_timeout_secs":120`, 1)
	slow = strings.Replace(slow, jsonString(appCommand()), jsonString("sleep 60; "+appCommand()), 1)
	if r := child.json("POST", "/deployments/web/rollouts", startRollout("web", "op-k", st.RolloutRevision, slow)); r.code != 202 {
		t.Fatalf("start: %d %s", r.code, r.body)
	}
	waitFor(t, "a candidate", func() bool {
		insts, _ := listReplicas(dir)
		return len(insts) > len(before)
	})
	pre := startLoad(t, child.proxy, "web.test", 4, 200)
	waitFor(t, "the load under way", func() bool { return pre.ok.Load() >= 20 })
	pre.check(t)
	if pre.revs["b"] != 0 {
		t.Errorf("a candidate that never passed its probe served %d requests", pre.revs["b"])
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	h := start(t, dir)
	post := startLoad(t, h.proxy, "web.test", 4, 1_000_000)
	op, r := h.rollout("web", "op-k")
	t.Logf("previous replicas %v; after the restart: %s", before, r.body)
	if r.code != 200 || op.Status != "failed" || op.Error == nil || !strings.Contains(*op.Error, "berth stopped") {
		t.Fatalf("after the restart: %d %s", r.code, r.body)
	}
	after := h.status("web")
	if after.RolloutRevision != st.RolloutRevision {
		t.Errorf("spec at %s after the restart, want the source %s", after.RolloutRevision, st.RolloutRevision)
	}
	waitFor(t, "the previous replicas adopted", func() bool { return h.status("web").Ready == 2 })
	if got := ids(h.status("web")); !slices.Equal(got, before) {
		t.Errorf("serving %v, want the adopted previous replicas %v", got, before)
	}
	waitFor(t, "the candidates stopped", func() bool {
		insts, _ := listReplicas(dir)
		return len(insts) == len(before)
	})
	if stray := replicaProcesses(t, dir, before); len(stray) != 0 {
		t.Errorf("orphaned candidate processes: %v", stray)
	}
	waitFor(t, "the load served after the restart", func() bool { return post.ok.Load() >= 40 })
	post.check(t)
	if len(post.revs) != 1 || post.revs["a"] == 0 {
		t.Errorf("after the restart the load was answered by revisions %v, want only a", post.revs)
	}
	for range 40 {
		r := get(t, h.proxy+"/", "web.test")
		if r.code != 200 || r.header.Get("X-Heyo-Revision") != "a" {
			t.Fatalf("after the restart: %d revision %q", r.code, r.header.Get("X-Heyo-Revision"))
		}
	}
}

// listReplicas lists the process driver's replicas under dir.
func listReplicas(dir string) ([]string, error) {
	d, err := process.New(process.Options{Dir: filepath.Join(dir, "replicas")})
	if err != nil {
		return nil, err
	}
	insts, err := d.List(context.Background())
	var out []string
	for _, in := range insts {
		if !in.State.Terminal() {
			out = append(out, in.ID)
		}
	}
	return out, err
}

// TestRolloutWalls: a namespace token gets the same answer for another
// namespace's deployment's rollouts as for a missing deployment's (no
// existence oracle); malformed requests are 400s naming the field; a
// rollout of a static deployment is in effect at once.
func TestRolloutWalls(t *testing.T) {
	n, op, nsA := limitsWorld(t, Options{})
	n.must(201, "POST", "/deployments", op, staticSpec("theirs", "team-b"), nil)
	var st apitype.DeploymentStatus
	n.must(200, "GET", "/deployments/theirs", op, "", &st)
	var started apitype.RolloutOperation
	n.must(202, "POST", "/deployments/theirs/rollouts", op, startRollout("theirs", "op-1", st.RolloutRevision, staticSpec("theirs", "team-b")), &started)
	if started.Status != "succeeded" || started.SourceRevision != st.RolloutRevision {
		t.Errorf("a static deployment's rollout: %+v", started)
	}
	n.must(200, "GET", "/deployments/theirs/rollouts/op-1", op, "", nil)
	for _, path := range []string{"/rollouts/op-1", "/rollouts"} {
		foreign := n.call(nil, "GET", "/deployments/theirs"+path, nsA, "")
		missing := n.call(nil, "GET", "/deployments/nope"+path, nsA, "")
		if foreign.code != missing.code || string(foreign.body) != strings.ReplaceAll(string(missing.body), "nope", "theirs") {
			t.Errorf("%s: foreign %s, missing %s", path, foreign, missing)
		}
	}
	foreign := n.call(nil, "POST", "/deployments/theirs/rollouts", nsA, startRollout("theirs", "op-2", st.RolloutRevision, staticSpec("theirs", "team-b")))
	missing := n.call(nil, "POST", "/deployments/nope/rollouts", nsA, startRollout("nope", "op-2", st.RolloutRevision, staticSpec("nope", "team-b")))
	if foreign.code != missing.code || foreign.code/100 != 4 {
		t.Errorf("start: foreign %s, missing %s", foreign, missing)
	}
	for body, field := range map[string]string{
		`{"expected_revision":"` + st.RolloutRevision + `","spec":` + staticSpec("theirs", "team-b") + `}`:                                                     "operation_id",
		`{"operation_id":"x y","expected_revision":"` + st.RolloutRevision + `","spec":` + staticSpec("theirs", "team-b") + `}`:                                "operation_id",
		`{"operation_id":"o","expected_revision":"abc","spec":` + staticSpec("theirs", "team-b") + `}`:                                                         "expected_revision",
		`{"operation_id":"o","expected_revision":"` + st.RolloutRevision + `"}`:                                                                                "spec",
		`{"operation_id":"o","expected_revision":"` + st.RolloutRevision + `","spec":{"id":"theirs","upstreams":["127.0.0.1:1"],"scaling":{"min_replica":1}}}`: "spec.scaling.min_replica",
	} {
		refused(t, n.call(nil, "POST", "/deployments/theirs/rollouts", op, body), 400, field)
	}
	if r := n.call(nil, "GET", "/deployments/theirs/rollouts?limit=0", op, ""); r.code != 400 || !strings.Contains(string(r.body), "limit") {
		t.Errorf("limit=0: %s", r)
	}
}

// containerRevSpec is a two-replica container deployment (busybox httpd,
// a CGI answering x-heyo-revision: $REV) probed for header want.
func containerRevSpec(id, rev, want string) string {
	app := `mkdir -p /w/cgi-bin && printf '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\nX-Heyo-Revision: %%s\\r\\n\\r\\nrev %%s\\n" "$REV" "$REV"\n' > /w/cgi-bin/rev && chmod +x /w/cgi-bin/rev && exec httpd -f -p $PORT -h /w`
	return `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"vm":{"driver":"container","image":"busybox","port":8080,"start_command":` +
		jsonString(app) + `,"env_vars":{"REV":"` + rev + `"}},` +
		`"health":{"path":"/cgi-bin/rev","expected_header":{"name":"x-heyo-revision","value":"` + want + `"}},` +
		`"scaling":{"min_replicas":2,"max_replicas":2,"boot_timeout_secs":10,"drain_timeout_secs":5}}`
}

// TestRolloutContainer is TestRolloutUnderLoad and the wrong-header case
// of TestRolloutBadCandidates on the container driver: a good rollout
// under load answers every request, then only the new revision; a rollout
// whose candidates answer the wrong header fails with the good revision
// serving throughout, the candidates gone and the spec reverted.
func TestRolloutContainer(t *testing.T) {
	var logs syncbuf.Buffer
	h := startContainers(t, &logs, nil)
	defer h.deleteQuietly("ctr")
	if r := h.json("POST", "/deployments", containerRevSpec("ctr", "a", "a")); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "two ready replicas", func() bool { return h.status("ctr").Ready == 2 })
	st := h.status("ctr")
	l := startLoadPath(t, h.proxy, "/cgi-bin/rev", "ctr.test", 2, 20000)
	waitFor(t, "load", func() bool { return l.ok.Load() >= 20 })
	if r := h.json("POST", "/deployments/ctr/rollouts", startRollout("ctr", "good", st.RolloutRevision, containerRevSpec("ctr", "b", "b"))); r.code != 202 {
		t.Fatalf("start: %d %s", r.code, r.body)
	}
	if op := h.settled("ctr", "good"); op.Status != "succeeded" {
		t.Fatalf("good rollout: %+v", op)
	}
	l.marked.Store(true)
	waitFor(t, "load after the rollout", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.after["b"] >= 50
	})
	l.check(t)
	if len(l.after) != 1 {
		t.Errorf("after the rollout succeeded, answered by %v, want only b", l.after)
	}
	t.Logf("good rollout: %v overall", l.revs)

	st = h.status("ctr")
	before := ids(st)
	l = startLoadPath(t, h.proxy, "/cgi-bin/rev", "ctr.test", 2, 20000)
	waitFor(t, "load", func() bool { return l.ok.Load() >= 20 })
	if r := h.json("POST", "/deployments/ctr/rollouts", startRollout("ctr", "bad", st.RolloutRevision, containerRevSpec("ctr", "c", "not-c"))); r.code != 202 {
		t.Fatalf("start: %d %s", r.code, r.body)
	}
	op := h.settled("ctr", "bad")
	if op.Status != "failed" || op.Error == nil || len(op.FailureSettlement) == 0 {
		t.Fatalf("bad rollout: %+v", op)
	}
	waitFor(t, "load after the failure", func() bool { return l.ok.Load() >= 100 })
	l.check(t)
	if len(l.revs) != 1 || l.revs["b"] == 0 {
		t.Errorf("answered by %v, want only b", l.revs)
	}
	after := h.status("ctr")
	if after.RolloutRevision != st.RolloutRevision || !slices.Equal(ids(after), before) {
		t.Errorf("after the failure: revision %s replicas %v, want %s %v", after.RolloutRevision, ids(after), st.RolloutRevision, before)
	}
	insts, err := h.s.fleet.Driver("container").List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var running []string
	for _, in := range insts {
		if !in.State.Terminal() {
			running = append(running, in.ID)
		}
	}
	slices.Sort(running)
	if !slices.Equal(running, before) {
		t.Errorf("the container driver runs %v, want only %v", running, before)
	}
}

// TestRolloutKeepsWebsockets: a websocket open on a previous replica keeps
// working while the rollout drains that replica — it is answered by the
// previous revision while new requests go to the new one — and the
// previous replica stops only when drain_timeout_secs ends it; only then
// does the operation report the previous replicas stopped.
func TestRolloutKeepsWebsockets(t *testing.T) {
	h := start(t, "")
	one := func(rev, want string) string {
		return strings.Replace(strings.Replace(revSpec("web", rev, want, ""), `"min_replicas":2,"max_replicas":2`, `"min_replicas":1,"max_replicas":1`, 1),
			`"drain_timeout_secs":5`, `"drain_timeout_secs":10`, 1)
	}
	if r := h.json("POST", "/deployments", one("a", "a")); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "a ready replica", func() bool { return h.status("web").Ready == 1 })
	st := h.status("web")
	ctx := t.Context()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.proxy, "http")+"/ws", &websocket.DialOptions{Host: "web.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	echo := func(msg string) (string, error) {
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			return "", err
		}
		_, b, err := ws.Read(ctx)
		return string(b), err
	}
	if got, err := echo("hello"); err != nil || got != "a:hello" {
		t.Fatalf("before the rollout: %q %v", got, err)
	}
	if r := h.json("POST", "/deployments/web/rollouts", startRollout("web", "ws-op", st.RolloutRevision, one("b", "b"))); r.code != 202 {
		t.Fatalf("start: %d %s", r.code, r.body)
	}
	waitFor(t, "the candidate to take new requests", func() bool {
		r := get(t, h.proxy+"/", "web.test")
		return r.code == 200 && r.header.Get("X-Heyo-Revision") == "b"
	})
	// The previous replica drains: the websocket it holds still works,
	// answered by revision a, and the operation has not stopped it.
	if got, err := echo("during"); err != nil || got != "a:during" {
		t.Errorf("the websocket during the drain: %q %v", got, err)
	}
	if op, _ := h.rollout("web", "ws-op"); op.PreviousStopped {
		t.Errorf("the previous replica was stopped with a websocket open: %+v", op)
	}
	op := h.settled("web", "ws-op")
	if op.Status != "succeeded" || !op.PreviousStopped {
		t.Errorf("settled: %+v", op)
	}
	// drain_timeout_secs ended the previous replica, and its websocket.
	if _, err := echo("after"); err == nil {
		t.Error("the websocket to the stopped replica still answers")
	}
}
