package server

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/workspace"
)

// wsSpec is a process deployment of the test app with a durable
// workspace in store (extra: more vm.workspace fields).
func wsSpec(id, store, extra string) string {
	return `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"vm":{"driver":"process","port":8080,"start_command":` +
		jsonString("echo $$ > app.pid; "+appCommand()) + `,"env_vars":{"GREETING":"hi"},"workspace":{"store":` + jsonString(store) + extra + `}` +
		`},"scaling":{"min_replicas":1,"max_replicas":1}}`
}

// exec runs command in deployment id's replica and returns its output.
func (h *harness) exec(id, command string) apitype.ExecOutput {
	h.t.Helper()
	r := h.json("POST", "/deployments/"+id+"/exec", `{"command":`+jsonString(command)+`}`)
	var out apitype.ExecOutput
	if err := json.Unmarshal(r.body, &out); err != nil || r.code != 200 {
		h.t.Fatalf("exec %q: %d %s", command, r.code, r.body)
	}
	return out
}

// replica waits for deployment id to have a ready replica other than not
// and returns its id.
func (h *harness) replica(id, not string) string {
	h.t.Helper()
	var got string
	waitFor(h.t, "a ready replica of "+id, func() bool {
		for _, v := range h.status(id).VMs {
			if v.SandboxID != not && v.Healthy && !v.Draining {
				got = v.SandboxID
				return true
			}
		}
		return false
	})
	return got
}

func (h *harness) waitPushed(id string) apitype.WorkspaceStatus {
	h.t.Helper()
	var ws apitype.WorkspaceStatus
	waitFor(h.t, id+"'s workspace to be pushed", func() bool {
		st := h.status(id).Workspace
		if st == nil {
			return false
		}
		ws = *st
		return st.Digest != nil && st.Pushed != nil && *st.Pushed == *st.Digest && !st.PushPending
	})
	return ws
}

// TestWorkspaceOutlivesItsReplicas: a file written in a replica's
// workspace is in the replica that replaces it after an eviction, a spec
// change (rollout) and a kill -9 of the app; each snapshot is pushed to
// berth's own artifact store and tagged workspace-<id>.
func TestWorkspaceOutlivesItsReplicas(t *testing.T) {
	c := contracttest.MustLoad(t)
	h := start(t, "")
	if r := h.json("POST", "/deployments", wsSpec("ws", "local", "")); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	r1 := h.replica("ws", "")
	raw := h.do("GET", "/deployments/ws", "", "")
	if err := c.CheckJSON("DeploymentStatus", raw.body); err != nil {
		t.Errorf("status not in the contract: %v", err)
	}
	if st := h.status("ws").Workspace; st == nil || st.Path != "/workspace" || st.Store != "local" || st.Digest != nil {
		t.Fatalf("a new workspace: %+v", st)
	}
	h.exec("ws", "echo one > a.txt")

	// Evicted: captured, and its replacement seeded with it.
	if r := h.do("DELETE", "/deployments/ws/vms/"+r1+"?force=true", "", ""); r.code != 200 {
		t.Fatalf("evict: %d %s", r.code, r.body)
	}
	r2 := h.replica("ws", r1)
	if out := h.exec("ws", "cat a.txt"); out.Stdout != "one\n" || out.SandboxID != r2 {
		t.Fatalf("after the eviction: %+v", out)
	}
	st := h.status("ws").Workspace
	if st.Digest == nil || st.CapturedFrom == nil || *st.CapturedFrom != r1 || st.CapturedAt == nil {
		t.Errorf("after the eviction: %+v", st)
	}

	// A spec change rolls the pool: the old replica drains, is captured,
	// and only then does the new one start.
	h.exec("ws", "echo two > b.txt")
	changed := strings.Replace(wsSpec("ws", "local", ""), `"GREETING":"hi"`, `"GREETING":"hey"`, 1)
	if r := h.json("PUT", "/deployments/ws", changed); r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	r3 := h.replica("ws", r2)
	if out := h.exec("ws", "cat a.txt b.txt; echo $GREETING"); out.Stdout != "one\ntwo\nhey\n" {
		t.Fatalf("after the rollout: %+v", out)
	}
	if st := h.status("ws").Workspace; st.CapturedFrom == nil || *st.CapturedFrom != r2 || st.Files < 2 {
		t.Errorf("after the rollout: %+v", st)
	}

	// The app killed with SIGKILL: the replica ends, its workspace is
	// captured all the same, and nothing written is lost.
	h.exec("ws", "echo three > c.txt; kill -9 $(cat app.pid)")
	r4 := h.replica("ws", r3)
	if out := h.exec("ws", "cat a.txt b.txt c.txt"); out.Stdout != "one\ntwo\nthree\n" || out.SandboxID != r4 {
		t.Fatalf("after the kill: %+v", out)
	}

	// Every snapshot is pushed to berth's artifact store under the ref.
	ws := h.waitPushed("ws")
	var tag struct{ Digest string }
	if r := h.do("GET", "/namespaces/default/artifacts/tags/workspace-ws", "", ""); r.code != 200 || json.Unmarshal(r.body, &tag) != nil || tag.Digest != *ws.Digest {
		t.Errorf("tag: %d %s, want digest %s", r.code, r.body, *ws.Digest)
	}
	if ws.Phase != "idle" || ws.LastError != "" || ws.PushedAt == nil || len(ws.Pending) != 0 {
		t.Errorf("settled status %+v", ws)
	}
}

// TestWorkspaceRestoresOnAFreshHost: a workspace pushed to an S3 bucket
// (a real S3 server on loopback) and to another berth's artifact store is
// restored by a berth with a fresh data directory.
func TestWorkspaceRestoresOnAFreshHost(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("berth-ws"); err != nil {
		t.Fatal(err)
	}
	s3 := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(s3.Close)
	withS3 := func(o *Options) {
		o.S3 = workspace.S3Options{Endpoint: s3.URL, Region: "us-east-1"}
		o.ArtifactAllowPrivate = true
	}

	h1 := startWith(t, "", withS3)
	if r := h1.json("POST", "/secrets", `{"id":"aws","data":{"AWS_ACCESS_KEY_ID":"AK","AWS_SECRET_ACCESS_KEY":"SK"}}`); r.code != 201 {
		t.Fatalf("secret: %d %s", r.code, r.body)
	}
	if r := h1.json("POST", "/deployments", wsSpec("s3ws", "s3://berth-ws/team", `,"auth":{"secret":"aws"}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	if r := h1.json("POST", "/deployments", wsSpec("artws", "local", "")); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	for _, id := range []string{"s3ws", "artws"} {
		r := h1.replica(id, "")
		h1.exec(id, "mkdir -p d && echo kept-"+id+" > d/f")
		// A plain eviction drains the replica, then reaps it.
		if r := h1.do("DELETE", "/deployments/"+id+"/vms/"+r, "", ""); r.code != 202 {
			t.Fatalf("evict: %d %s", r.code, r.body)
		}
		h1.replica(id, r)
		h1.waitPushed(id)
	}
	if _, err := backend.HeadObject("berth-ws", "team/tags/workspace-s3ws"); err != nil {
		t.Errorf("the bucket has no tag object: %v", err)
	}
	artStore := h1.admin + "/namespaces/default/artifacts"

	// A fresh data directory: no record, so each workspace is looked up in
	// its store by ref and restored.
	h2 := startWith(t, "", withS3)
	if r := h2.json("POST", "/secrets", `{"id":"aws","data":{"AWS_ACCESS_KEY_ID":"AK","AWS_SECRET_ACCESS_KEY":"SK"}}`); r.code != 201 {
		t.Fatalf("secret: %d %s", r.code, r.body)
	}
	if r := h2.json("POST", "/deployments", wsSpec("s3ws", "s3://berth-ws/team", `,"auth":{"secret":"aws"}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	// The same deployment, its store now the first berth's artifact store
	// by URL (ref named, as the first berth tagged it).
	if r := h2.json("POST", "/deployments", wsSpec("artws", artStore, `,"ref":"workspace-artws"`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	for _, id := range []string{"s3ws", "artws"} {
		h2.replica(id, "")
		if out := h2.exec(id, "cat d/f"); out.Stdout != "kept-"+id+"\n" {
			t.Errorf("%s on the fresh host: %+v", id, out)
		}
		if st := h2.status(id).Workspace; st == nil || st.Digest == nil || st.Pushed == nil || *st.Pushed != *st.Digest {
			t.Errorf("%s restored status %+v", id, st)
		}
	}
}

// TestWorkspaceBadSpecs: specs the workspace cannot honour are refused
// with the error envelope naming the field.
func TestWorkspaceBadSpecs(t *testing.T) {
	h := start(t, "")
	base := wsSpec("bad", "local", "")
	for field, doc := range map[string]string{
		"scaling.max_replicas":     strings.Replace(base, `"max_replicas":1`, `"max_replicas":2`, 1),
		"scaling.warm_pool":        strings.Replace(base, `"max_replicas":1`, `"max_replicas":1,"warm_pool":1`, 1),
		"vm.workspace_archive":     strings.Replace(base, `"workspace":{`, `"workspace_archive":{"s3_key":"k"},"workspace":{`, 1),
		"vm.workspace.store":       wsSpec("bad", "ftp://x", ""),
		"vm.workspace.path":        wsSpec("bad", "local", `,"path":"/data"`),
		"vm.workspace.ref":         wsSpec("bad", "local", `,"ref":"../x"`),
		"vm.workspace.auth.secret": wsSpec("bad", "local", `,"auth":{}`),
	} {
		r := h.json("POST", "/deployments", doc)
		if msg := errMsg(t, r); r.code != 400 || !strings.HasPrefix(msg, field+": ") {
			t.Errorf("%s: %d %q", field, r.code, msg)
		}
	}
	// workspace_archive without an archive bucket on this server.
	arch := `{"id":"arch","routes":[],"vm":{"driver":"process","port":8080,"start_command":"true","workspace_archive":{"s3_key":"a.tgz"}}}`
	if r := h.json("POST", "/deployments", arch); r.code != 400 || !strings.HasPrefix(errMsg(t, r), "vm.workspace_archive: this server has no archive bucket") {
		t.Errorf("archive without a bucket: %d %s", r.code, r.body)
	}
	if r := h.do("GET", "/deployments/bad", "", ""); r.code != 404 {
		t.Errorf("a refused spec was stored: %d", r.code)
	}
}
