package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/syncbuf"
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

	// The spec drops vm.workspace: the new replica has none, the old one's
	// directory is still captured, and nothing is left on disk.
	h.exec("ws", "echo four > d.txt")
	plain := strings.Replace(wsSpec("ws", "local", ""), `,"workspace":{"store":"local"}`, ``, 1)
	if r := h.json("PUT", "/deployments/ws", plain); r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	r5 := h.replica("ws", r4)
	if out := h.exec("ws", "cat a.txt 2>/dev/null || echo none"); out.Stdout != "none\n" || out.SandboxID != r5 {
		t.Errorf("a replica without a workspace: %+v", out)
	}
	if st := h.status("ws"); st.Workspace != nil {
		t.Errorf("status still has a workspace: %+v", st.Workspace)
	}
	// The new replica, which has no workspace, served as a candidate
	// while the old one drained: the old one is captured once it stops.
	waitFor(t, "the last replica with a workspace to be captured", func() bool {
		rec, ok, err := h.s.store.Workspace(t.Context(), "ws")
		return err == nil && ok && rec.CapturedFrom == r4
	})
	waitFor(t, "the old replica's directory to be removed", func() bool {
		es, _ := os.ReadDir(filepath.Join(h.dir, "workspaces/ws/replicas"))
		return len(es) == 0
	})
	// Put back, the workspace is restored from its last snapshot.
	if r := h.json("PUT", "/deployments/ws", wsSpec("ws", "local", "")); r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	h.replica("ws", r5)
	if out := h.exec("ws", "cat a.txt b.txt c.txt d.txt"); out.Stdout != "one\ntwo\nthree\nfour\n" {
		t.Fatalf("after putting the workspace back: %+v", out)
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
	// A store naming this server's own artifact route of another
	// namespace is refused at the write (as every store field is: mounts,
	// build, artifact), not only when a capture would use it.
	other := h.admin + "/namespaces/other/artifacts"
	for field, doc := range map[string]string{
		"vm.workspace.store": wsSpec("bad", other, ""),
	} {
		r := h.json("POST", "/deployments", doc)
		if msg := errMsg(t, r); r.code != 403 || !strings.HasPrefix(msg, field+": ") || !strings.Contains(msg, `namespace "other"`) {
			t.Errorf("%s naming another namespace's store: %d %q", field, r.code, msg)
		}
	}
	if r := h.json("POST", "/deployments", wsSpec("own", h.admin+"/namespaces/default/artifacts", "")); r.code != 201 {
		t.Errorf("a store naming the deployment's own namespace: %d %s", r.code, r.body)
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

// TestWorkspaceScaleToZero: a replica scaled to zero for idleness is
// captured, destroyed (idle_action destroy) or suspended (retain), and the
// replica the next request wakes has the files.
func TestWorkspaceScaleToZero(t *testing.T) {
	for _, action := range []string{"destroy", "retain"} {
		t.Run(action, func(t *testing.T) {
			h := start(t, "")
			doc := strings.Replace(wsSpec("idle", "local", ""), `"scaling":{"min_replicas":1,"max_replicas":1}`,
				`"scaling":{"min_replicas":0,"max_replicas":1,"scale_to_zero_after_secs":1,"idle_action":"`+action+`"}`, 1)
			if r := h.json("POST", "/deployments", doc); r.code != 201 {
				t.Fatalf("%d %s", r.code, r.body)
			}
			first := h.exec("idle", "echo idle > i.txt").SandboxID
			waitFor(t, "the pool to scale to zero with its workspace captured", func() bool {
				st := h.status("idle")
				return len(st.VMs) == 0 && st.Workspace != nil && st.Workspace.CapturedFrom != nil && *st.Workspace.CapturedFrom == first
			})
			out := h.exec("idle", "cat i.txt")
			if out.Stdout != "idle\n" {
				t.Fatalf("the woken replica read %+v", out)
			}
			if action == "retain" && out.SandboxID != first {
				t.Errorf("retain resumed %s, not %s", out.SandboxID, first)
			}
			if action == "destroy" && out.SandboxID == first {
				t.Errorf("destroy kept replica %s", first)
			}
		})
	}
}

// TestWorkspaceArchiveSeedsEveryReplica: vm.workspace_archive is unpacked
// into /workspace of every replica of a pool of two, from the server's
// archive bucket (a real S3 server on loopback); nothing is captured back.
// The deployment had a durable workspace before: its last replica is
// captured as it stops, and the archive's replicas see none of it.
func TestWorkspaceArchiveSeedsEveryReplica(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("archives"); err != nil {
		t.Fatal(err)
	}
	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(zw)
	body := "from the archive\n"
	tw.WriteHeader(&tar.Header{Name: "seed/hello.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
	tw.Write([]byte(body))
	tw.Close()
	zw.Close()
	s3 := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(s3.Close)
	mc, err := minio.New(strings.TrimPrefix(s3.URL, "http://"), &minio.Options{Creds: credentials.NewStaticV4("AK", "SK", ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mc.PutObject(t.Context(), "archives", "ar-1/ws.tar.gz", bytes.NewReader(tgz.Bytes()), int64(tgz.Len()), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	h := startWith(t, "", func(o *Options) {
		o.S3 = workspace.S3Options{Endpoint: s3.URL, Region: "us-east-1", AccessKey: "AK", SecretKey: "SK"}
		o.WorkspaceArchiveBucket = "archives"
	})
	// First a durable workspace, then the spec switches to the archive:
	// the old replica is still captured as it stops.
	if r := h.json("POST", "/deployments", wsSpec("arc", "local", "")); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	old := h.exec("arc", "echo durable > d.txt").SandboxID
	doc := `{"id":"arc","routes":[{"host":"arc.test"}],"vm":{"driver":"process","port":8080,"start_command":` + jsonString(appCommand()) +
		`,"workspace_archive":{"archive_id":"ar-1","s3_key":"ar-1/ws.tar.gz","size_bytes":` + strconv.Itoa(tgz.Len()) + `}},"scaling":{"min_replicas":2,"max_replicas":2}}`
	if r := h.json("PUT", "/deployments/arc", doc); r.code != 200 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "the durable replica's capture", func() bool {
		rec, ok, _ := h.s.store.Workspace(t.Context(), "arc")
		return ok && rec.CapturedFrom == old
	})
	var ids []string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last create error: %s", h.view("arc").Metrics.Autoscale.LastCreateError)
		}
	})
	waitFor(t, "two ready replicas", func() bool {
		st := h.status("arc")
		ids = ids[:0]
		for _, v := range st.VMs {
			if v.Healthy {
				ids = append(ids, v.SandboxID)
			}
		}
		return len(ids) == 2
	})
	for _, id := range ids {
		r := h.json("POST", "/deployments/arc/exec", `{"command":"cat seed/hello.txt; ls d.txt 2>/dev/null; echo scratch > mine","sandbox_id":"`+id+`"}`)
		var out apitype.ExecOutput
		json.Unmarshal(r.body, &out)
		if r.code != 200 || out.Stdout != body || id == old {
			t.Errorf("replica %s: %d %s", id, r.code, r.body)
		}
	}
	if st := h.status("arc"); st.Workspace != nil {
		t.Errorf("an archive deployment reports a durable workspace: %+v", st.Workspace)
	}
	// Evicted, a replica's writes go with it: the next one has the archive only.
	if r := h.do("DELETE", "/deployments/arc/vms/"+ids[0]+"?force=true", "", ""); r.code != 200 {
		t.Fatalf("evict: %d %s", r.code, r.body)
	}
	waitFor(t, "a replacement", func() bool {
		st := h.status("arc")
		n := 0
		for _, v := range st.VMs {
			if v.Healthy && v.SandboxID != ids[0] && v.SandboxID != ids[1] {
				n++
			}
		}
		return n == 1
	})
	for _, v := range h.status("arc").VMs {
		if v.SandboxID == ids[1] {
			continue
		}
		r := h.json("POST", "/deployments/arc/exec", `{"command":"cat seed/hello.txt; ls mine 2>/dev/null || echo none","sandbox_id":"`+v.SandboxID+`"}`)
		var out apitype.ExecOutput
		json.Unmarshal(r.body, &out)
		if out.Stdout != body+"none\n" {
			t.Errorf("the replacement %s: %s", v.SandboxID, r.body)
		}
	}
}

// TestWorkspaceKillNineDuringCapture: berth is killed (SIGKILL) in the
// middle of capturing an evicted replica's workspace, after the snapshot
// was written and before it was renamed and recorded. Nothing captured
// before is lost (the record still names the first snapshot), and the
// next berth on the data directory captures the interrupted replica's
// directory again before it seeds a new replica, which has every file.
func TestWorkspaceKillNineDuringCapture(t *testing.T) {
	if os.Getenv("BERTH_WS_CHILD") != "" {
		return
	}
	dir := t.TempDir()
	t.Cleanup(func() { stopReplicas(t, dir) })
	child, cmd := startChild(t, "TestWorkspaceServerChild", dir, "BERTH_WS_CHILD="+dir)
	if r := child.json("POST", "/deployments", wsSpec("ws", "local", "")); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	r1 := child.replica("ws", "")
	child.exec("ws", "echo one > a.txt")
	if r := child.do("DELETE", "/deployments/ws/vms/"+r1+"?force=true", "", ""); r.code != 200 {
		t.Fatalf("evict: %d %s", r.code, r.body)
	}
	r2 := child.replica("ws", r1)
	first := *child.status("ws").Workspace.Digest
	child.exec("ws", "echo two > b.txt")

	// The next capture stops before its rename; berth is killed there.
	if err := os.WriteFile(filepath.Join(dir, "block-captures"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	go http.DefaultClient.Do(mustRequest(t, "DELETE", child.admin+"/deployments/ws/vms/"+r2+"?force=true"))
	waitFor(t, "the capture to reach its rename", func() bool {
		_, err := os.Stat(filepath.Join(dir, "capture-renaming"))
		return err == nil
	})
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	st, closeStore := openTestStore(t, dir)
	rec, ok, err := st.Workspace(t.Context(), "ws")
	closeStore()
	if err != nil || !ok || rec.Digest != first || rec.CapturedFrom != r1 {
		t.Fatalf("after the crash the record is %+v %v %v; want the first snapshot %s", rec, ok, err, first)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, "workspaces/ws/snapshots/tmp-*")); len(tmps) != 1 {
		t.Fatalf("half-done captures: %v (the crash was not mid-capture)", tmps)
	}
	if _, err := os.Stat(filepath.Join(dir, "workspaces/ws/replicas", r2, "b.txt")); err != nil {
		t.Fatalf("the interrupted replica's directory is gone: %v", err)
	}

	os.Remove(filepath.Join(dir, "block-captures"))
	h := start(t, dir)
	r3 := h.replica("ws", r2)
	if out := h.exec("ws", "cat a.txt b.txt"); out.Stdout != "one\ntwo\n" || out.SandboxID != r3 {
		t.Fatalf("after the restart: %+v", out)
	}
	if ws := h.status("ws").Workspace; ws.CapturedFrom == nil || *ws.CapturedFrom != r2 || *ws.Digest == first {
		t.Errorf("the interrupted capture was not redone: %+v", ws)
	}
}

// TestWorkspaceServerChild is the child half of
// TestWorkspaceKillNineDuringCapture: a berth whose captures stop before
// their rename while <dir>/block-captures exists.
func TestWorkspaceServerChild(t *testing.T) {
	dir := os.Getenv("BERTH_WS_CHILD")
	if dir == "" {
		t.Skip("helper process for TestWorkspaceKillNineDuringCapture")
	}
	o := Options{ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	testOptions(&o)
	o.beforeSnapshotRename = func(string) {
		if _, err := os.Stat(filepath.Join(dir, "block-captures")); err == nil {
			os.WriteFile(filepath.Join(dir, "capture-renaming"), nil, 0o600)
			select {} // killed here
		}
	}
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ADMIN %s\nPROXY %s\n", s.AdminAddr(), s.ProxyAddr())
	s.Run(context.Background()) // until killed
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestWorkspaceContainer: on the container driver the workspace is
// attached at /workspace, or, with another path, as a writable mount
// there; a file written in it survives an eviction.
func TestWorkspaceContainer(t *testing.T) {
	var logs syncbuf.Buffer
	h := startContainers(t, &logs, nil)
	for id, path := range map[string]string{"cws": "/workspace", "cdata": "/data"} {
		extra := ""
		if path != "/workspace" {
			extra = `,"path":"` + path + `"`
		}
		sp := `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"vm":{"driver":"container","image":"busybox","port":8080,` +
			`"start_command":"exec httpd -f -p $PORT -h /","workspace":{"store":"local"` + extra + `}},"scaling":{"min_replicas":1,"max_replicas":1}}`
		if r := h.json("POST", "/deployments", sp); r.code != 201 {
			t.Fatalf("%s: %d %s", id, r.code, r.body)
		}
		defer h.deleteQuietly(id)
		r1 := h.replica(id, "")
		h.exec(id, "echo kept > "+path+"/f.txt")
		if r := h.do("DELETE", "/deployments/"+id+"/vms/"+r1+"?force=true", "", ""); r.code != 200 {
			t.Fatalf("evict: %d %s", r.code, r.body)
		}
		r2 := h.replica(id, r1)
		if out := h.exec(id, "cat "+path+"/f.txt"); out.Stdout != "kept\n" || out.SandboxID != r2 {
			t.Errorf("%s after the eviction: %+v", id, out)
		}
		if ws := h.status(id).Workspace; ws == nil || ws.Path != path || ws.CapturedFrom == nil || *ws.CapturedFrom != r1 || ws.Files != 1 {
			t.Errorf("%s status %+v", id, ws)
		}
	}
}

// TestWorkspacePushFailure: a store that refuses the push leaves the
// snapshot push_pending with last_error set, and the deployment's record
// cannot be forgotten (DELETE …/record, 409) while its last snapshot is
// only on this host.
func TestWorkspacePushFailure(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("flaky"); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	fake := gofakes3.New(backend).Server()
	s3 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(s3.Close)
	h := startWith(t, "", func(o *Options) {
		o.S3 = workspace.S3Options{Endpoint: s3.URL, Region: "us-east-1", AccessKey: "AK", SecretKey: "SK"}
	})
	doc := strings.Replace(wsSpec("fl", "s3://flaky", ""), `"min_replicas":1`, `"min_replicas":0`, 1)
	if r := h.json("POST", "/deployments", doc); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	out := h.exec("fl", "echo unpushed > u.txt")
	down.Store(true)
	if r := h.do("DELETE", "/deployments/fl/vms/"+out.SandboxID+"?force=true", "", ""); r.code != 200 {
		t.Fatalf("evict: %d %s", r.code, r.body)
	}
	var ws *apitype.WorkspaceStatus
	waitFor(t, "the push to fail", func() bool {
		ws = h.status("fl").Workspace
		return ws != nil && ws.Digest != nil && ws.LastError != ""
	})
	if !ws.PushPending || ws.Pushed != nil || !strings.Contains(ws.LastError, "pushing") {
		t.Errorf("after a failed push: %+v", ws)
	}
	r := h.do("GET", "/deployments/fl", "", "")
	if r := h.do("DELETE", "/deployments/fl/record", "", "", "If-Match", r.header.Get("ETag")); r.code != 409 || !strings.Contains(errMsg(t, r), "workspace is not settled") {
		t.Errorf("forgetting the record: %d %s", r.code, r.body)
	}
}
