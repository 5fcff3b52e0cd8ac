package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/vm"
)

// leaveReplica makes a process replica's directory by hand, as a crashed
// berth leaves one: a state file naming its owner and a data file.
func leaveReplica(t *testing.T, data, deployment string, nonce uint64) string {
	t.Helper()
	id := vm.Name(deployment, nonce)
	dir := filepath.Join(data, "replicas", id)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	st := fmt.Sprintf(`{"id":%q,"deployment":%q,"owner":{"kind":"deployment","id":%q},"pid":0}`, id, deployment, deployment)
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(st), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "f"), []byte(strings.Repeat("d", 4000)), 0o600); err != nil {
		t.Fatal(err)
	}
	return id
}

// callH is node.call with extra request headers (name, value, ...).
func (n *node) callH(method, path, authz, body string, hdr ...string) reply {
	n.t.Helper()
	req, err := http.NewRequest(method, n.admin+path, strings.NewReader(body))
	if err != nil {
		n.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

// TestDiskRoutes: /disks end to end on a gated server — the census finds
// a replica directory left by hand as an orphan (also in /metrics'
// host_sandboxes), a confined token gets the same 403 on every disk route
// whether the disk exists or not, bad input is an envelope naming the
// field, a retained orphan survives purge-orphans and goes once released,
// and an archive comes back from the artifact store with its digest.
func TestDiskRoutes(t *testing.T) {
	dir := t.TempDir()
	w := startTenants(t, Options{DataDir: dir})
	c := contracttest.MustLoad(t)
	orphan := leaveReplica(t, dir, "gone", 1)

	inv := w.call(nil, "GET", "/disks", w.op, "")
	if inv.code != 200 {
		t.Fatalf("GET /disks: %s", inv)
	}
	if err := c.CheckJSON("DiskInventory", inv.body); err != nil {
		t.Errorf("DiskInventory: %v\n%s", err, inv.body)
	}
	var di apitype.DiskInventory
	json.Unmarshal(inv.body, &di)
	i := slices.IndexFunc(di.Disks, func(d apitype.DiskInfo) bool { return d.SandboxID == orphan })
	if i < 0 || di.Disks[i].State != apitype.DiskOrphan || di.Disks[i].Claimed || di.Disks[i].Bytes == 0 || di.DataDir != dir {
		t.Fatalf("the orphan in %+v", di)
	}
	if di.TTLSecs != 7*24*3600 || di.OrphanTTLSecs != 24*3600 || di.SweepSecs != 3600 || !di.ArchiveEnabled || di.ArchiveTarget != "local" || di.FreeBytes == nil {
		t.Errorf("inventory settings %+v", di)
	}
	met := w.call(nil, "GET", "/metrics", w.op, "")
	if err := c.CheckJSON("MetricsResponse", met.body); err != nil {
		t.Errorf("MetricsResponse: %v", err)
	}
	var mr apitype.MetricsResponse
	json.Unmarshal(met.body, &mr)
	if !slices.ContainsFunc(mr.HostSandboxes, func(h apitype.HostSandboxView) bool {
		return h.SandboxID == orphan && h.Status == "orphan" && h.Name == "gone"
	}) {
		t.Errorf("host_sandboxes %+v lacks the orphan", mr.HostSandboxes)
	}
	var confined apitype.MetricsResponse
	w.must(200, "GET", "/metrics", w.a, "", &confined)
	if len(confined.HostSandboxes) != 0 {
		t.Errorf("a confined caller's host_sandboxes: %+v", confined.HostSandboxes)
	}

	// A confined token: 403 everywhere, the same for a disk that exists
	// and one that does not.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/disks", ""},
		{"POST", "/disks/sweep", "{}"},
		{"POST", "/disks/purge-orphans", "{}"},
		{"PATCH", "/disks/%s", `{"retain":true}`},
		{"DELETE", "/disks/%s?force=true", ""},
		{"POST", "/disks/%s/archive", "{}"},
	} {
		there := w.call(nil, c.method, strings.Replace(c.path, "%s", orphan, 1), w.a, c.body)
		missing := w.call(nil, c.method, strings.Replace(c.path, "%s", "berth-nope-000000000009", 1), w.a, c.body)
		if there.code != 403 || missing.code != 403 || string(there.body) != string(missing.body) {
			t.Errorf("%s %s as a namespace token: %s / %s, want the same 403", c.method, c.path, there, missing)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "replicas", orphan)); err != nil {
		t.Fatalf("a confined caller's request touched the disk: %v", err)
	}

	// Bad input names the field.
	for _, c := range []struct {
		method, path, body string
		code               int
		field              string
	}{
		{"PATCH", "/disks/" + orphan, `{"retain":true,"notes":"x"}`, 400, "notes"},
		{"PATCH", "/disks/" + orphan, `{"retain":"yes"}`, 422, "retain"},
		{"PATCH", "/disks/" + orphan, `{"note":7}`, 422, "note"},
		{"DELETE", "/disks/" + orphan + "?force=maybe", "", 400, "force"},
		{"DELETE", "/disks/a%20b", "", 400, "id"},
		{"POST", "/disks/" + orphan + "/archive", `{"purge":true,"bucket":"x"}`, 400, "bucket"},
	} {
		r := w.call(nil, c.method, c.path, w.op, c.body)
		if r.code != c.code || !strings.HasPrefix(errorOf(t, r), c.field+":") {
			t.Errorf("%s %s %s: %s, want %d naming %s", c.method, c.path, c.body, r, c.code, c.field)
		}
	}
	if r := w.call(nil, "DELETE", "/disks/berth-nope-000000000009", w.op, ""); r.code != 404 {
		t.Errorf("DELETE a missing disk: %s, want 404", r)
	}

	// Retained, it survives the purge; released, it goes.
	w.must(204, "PATCH", "/disks/"+orphan, w.op, `{"retain":true,"note":"postmortem"}`, nil)
	var out apitype.DiskOutcome
	w.must(200, "POST", "/disks/purge-orphans", w.op, "{}", &out)
	if len(out.Removed) != 0 {
		t.Fatalf("purge took a retained orphan: %+v", out)
	}
	if r := w.call(nil, "DELETE", "/disks/"+orphan, w.op, ""); r.code != 409 {
		t.Errorf("DELETE a retained disk without force: %s, want 409", r)
	}
	w.must(204, "PATCH", "/disks/"+orphan, w.op, `{"retain":false,"note":null}`, nil)
	w.must(200, "POST", "/disks/purge-orphans", w.op, "{}", &out)
	if !slices.Equal(out.Removed, []string{orphan}) {
		t.Fatalf("purge after release: %+v", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "replicas", orphan)); err == nil {
		t.Fatal("the purged disk is still there")
	}

	// An archive, read back from the artifact store.
	arch := leaveReplica(t, dir, "gone", 2)
	r := w.call(nil, "POST", "/disks/"+arch+"/archive", w.op, "")
	if r.code != 202 {
		t.Fatalf("archive: %s", r)
	}
	if err := c.CheckJSON("ArchiveView", r.body); err != nil {
		t.Errorf("ArchiveView: %v", err)
	}
	var started apitype.ArchiveView
	json.Unmarshal(r.body, &started)
	var done apitype.ArchiveView
	waitFor(t, "the archive", func() bool {
		var inv apitype.DiskInventory
		w.must(200, "GET", "/disks", w.op, "", &inv)
		for _, a := range inv.Archives {
			if a.ID == started.ID && a.Status != apitype.ArchiveRunning {
				done = a
				return true
			}
		}
		return false
	})
	if done.Status != apitype.ArchiveSucceeded {
		t.Fatalf("archive %+v", done)
	}
	_, digest, _ := strings.Cut(done.URI, "@sha256:")
	f, _, err := w.s.artifacts.OpenBlob(digest)
	if err != nil {
		t.Fatalf("the archive's blob %q: %v", done.URI, err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	if hex.EncodeToString(h.Sum(nil)) != digest {
		t.Fatalf("the archive's bytes do not hash to its digest %s", digest)
	}
	var after apitype.DiskInventory
	w.must(200, "GET", "/disks", w.op, "", &after)
	j := slices.IndexFunc(after.Disks, func(d apitype.DiskInfo) bool { return d.SandboxID == arch })
	if j < 0 || after.Disks[j].Archived == nil || after.Disks[j].Archived.URI != done.URI {
		t.Errorf("the archived disk's record: %+v", after.Disks)
	}
}

// TestDeploymentRecordDelete: DELETE /deployments/{id}/record needs an
// If-Match checked as PUT's, refuses a deployment with a running replica
// (409), forgets an idle one (204, then 404), and a confined token of
// another namespace gets the same answer as for a missing deployment;
// DELETE …/retired-record is the fleet's and keeps the record under
// <data>/retired/<sha256>.json.
func TestDeploymentRecordDelete(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { stopReplicas(t, dir) })
	o := Options{DataDir: dir, HostUpdates: true}
	testOptions(&o)
	w := startTenants(t, o)
	up := addr(backend(t, "up"))

	w.must(201, "POST", "/deployments", w.op, vmSpec("web", `,"namespace":"team-a","scaling":{"min_replicas":1,"max_replicas":1}`), nil)
	waitFor(t, "a ready replica", func() bool {
		var st apitype.DeploymentStatus
		w.must(200, "GET", "/deployments/web", w.op, "", &st)
		return st.Ready == 1
	})
	etag := w.call(nil, "GET", "/deployments/web", w.op, "").header.Get("ETag")

	// Another namespace's token: as for a deployment that does not exist.
	other := w.callH("DELETE", "/deployments/web/record", w.b, "", "If-Match", etag)
	missing := w.callH("DELETE", "/deployments/nope/record", w.b, "", "If-Match", etag)
	if other.code != missing.code || errorOf(t, other) != strings.ReplaceAll(errorOf(t, missing), "nope", "web") {
		t.Errorf("another namespace's deployment %s, a missing one %s: want the same answer", other, missing)
	}
	for _, c := range []struct {
		ifMatch string
		code    int
		says    string
	}{
		{"", 428, "If-Match"},
		{"xyz", 400, "If-Match"},
		{`"` + strings.Repeat("0", 64) + `"`, 412, "If-Match"},
		{etag, 409, "running"},
	} {
		var hdr []string
		if c.ifMatch != "" {
			hdr = []string{"If-Match", c.ifMatch}
		}
		r := w.callH("DELETE", "/deployments/web/record", w.a, "", hdr...)
		if r.code != c.code || !strings.Contains(errorOf(t, r), c.says) {
			t.Errorf("If-Match %q: %s, want %d saying %q", c.ifMatch, r, c.code, c.says)
		}
	}
	w.must(200, "GET", "/deployments/web", w.a, "", nil)

	// An idle record is forgotten.
	w.must(201, "POST", "/deployments", w.op, staticBody("api", "team-a", `[{"path_prefix":"/api"}]`, up), nil)
	etag = w.call(nil, "GET", "/deployments/api", w.a, "").header.Get("ETag")
	if r := w.callH("DELETE", "/deployments/api/record", w.a, "", "If-Match", etag); r.code != 204 {
		t.Fatalf("forget an idle record: %s", r)
	}
	if r := w.call(nil, "GET", "/deployments/api", w.op, ""); r.code != 404 {
		t.Fatalf("after forgetting: %s, want 404", r)
	}

	// A running job is live too.
	w.must(201, "POST", "/deployments", w.op, fmt.Sprintf(`{"id":"job","routes":[{"host":"job.test"}],"upstreams":[%q],
		"update":{"working_dir":%q,"commands":["sleep 120"]}}`, up, t.TempDir()), nil)
	w.must(202, "POST", "/deployments/job/update", w.op, `{}`, nil)
	etag = w.call(nil, "GET", "/deployments/job", w.op, "").header.Get("ETag")
	if r := w.callH("DELETE", "/deployments/job/record", w.op, "", "If-Match", etag); r.code != 409 || !strings.Contains(errorOf(t, r), "job") {
		t.Errorf("forget with a running job: %s, want 409 naming the job", r)
	}

	// The retired record: fleet-wide only; kept, then forgotten.
	w.must(201, "POST", "/deployments", w.op, staticBody("old", "team-a", `[{"path_prefix":"/old"}]`, up), nil)
	etag = w.call(nil, "GET", "/deployments/old", w.op, "").header.Get("ETag")
	if r := w.callH("DELETE", "/deployments/old/retired-record", w.a, "", "If-Match", etag); r.code != 403 {
		t.Errorf("retired-record as a namespace token: %s, want 403", r)
	}
	if r := w.callH("DELETE", "/deployments/old/retired-record", w.op, ""); r.code != 428 {
		t.Errorf("retired-record without If-Match: %s, want 428", r)
	}
	if r := w.callH("DELETE", "/deployments/old/retired-record", w.op, "", "If-Match", etag); r.code != 204 {
		t.Fatalf("retired-record: %s", r)
	}
	if r := w.call(nil, "GET", "/deployments/old", w.op, ""); r.code != 404 {
		t.Fatalf("after retiring: %s, want 404", r)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "retired"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("retired dir: %v %v", ents, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "retired", ents[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	var rec struct {
		Spec apitype.DeploymentSpec `json:"spec"`
		ETag string                 `json:"etag"`
	}
	if ents[0].Name() != hex.EncodeToString(sum[:])+".json" || json.Unmarshal(b, &rec) != nil || rec.Spec.ID != "old" || rec.ETag != etag {
		t.Errorf("retired record %s: %s", ents[0].Name(), b)
	}
}
