package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/berth-dev/berth/internal/syncbuf"
	"github.com/berth-dev/berth/internal/vm/container"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// tarball is a gzipped tar of files (name → content), each under top/
// when top is set.
func tarball(t testing.TB, top string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, rel := range slices.Sorted(maps.Keys(files)) {
		name, body := rel, files[rel]
		if top != "" {
			name = top + "/" + rel
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// push stores blob in berth's own artifact store in namespace ns and tags
// it; it returns the digest (hex).
func (h *harness) push(ns, tag string, blob []byte) string {
	h.t.Helper()
	d := fmt.Sprintf("%x", sha256.Sum256(blob))
	if r := h.do("PUT", "/namespaces/"+ns+"/artifacts/blobs/"+d, "application/octet-stream", string(blob)); r.code/100 != 2 {
		h.t.Fatalf("pushing a blob: %d %s", r.code, r.body)
	}
	if r := h.do("PUT", "/namespaces/"+ns+"/artifacts/tags/"+tag, "text/plain", d); r.code/100 != 2 {
		h.t.Fatalf("tagging %s: %d %s", tag, r.code, r.body)
	}
	return d
}

// awaitJob waits for the newest job of deployment id of kind to end,
// other than those in skip, and returns its record.
func (h *harness) awaitJob(id string, kind apitype.JobKind, skip ...string) apitype.JobRecord {
	h.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var recs []apitype.JobRecord
		r := h.do("GET", "/deployments/"+id+"/jobs", "", "")
		if err := json.Unmarshal(r.body, &recs); err != nil {
			h.t.Fatalf("jobs: %d %s", r.code, r.body)
		}
		for _, rec := range recs {
			if rec.Kind == kind && !slices.Contains(skip, rec.ID) && rec.Status != apitype.JobRunning {
				return rec
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatalf("no %s job of %s ended", kind, id)
	return apitype.JobRecord{}
}

// checkJob checks a job's record against the contract, by its id.
func (h *harness) checkJob(c *contracttest.Contract, id string) {
	h.t.Helper()
	r := h.do("GET", "/jobs/"+id, "", "")
	if err := c.CheckJSON("JobRecord", r.body); err != nil {
		h.t.Errorf("JobRecord %s: %v\n%s", id, err, r.body)
	}
}

// containerSkip says why this host cannot run container replicas, or "".
func containerSkip() string {
	if os.Geteuid() != 0 {
		return "the container driver needs root"
	}
	if netnstest.Inside() == "" {
		return "no network namespace of the tests' own (netnstest)"
	}
	if _, err := container.FindRuntime(""); err != nil {
		return fmt.Sprintf("no OCI runtime: %v", err)
	}
	if _, err := exec.LookPath("busybox"); err != nil {
		return "busybox is missing (Debian package busybox-static)"
	}
	return ""
}

// startContainers starts a server with the container driver (its guest
// network set up in the tests' namespace) and a busybox image.
func startContainers(t *testing.T, logs *syncbuf.Buffer, mod func(*Options)) *harness {
	h, _ := startContainersRestartable(t, logs, mod)
	return h
}

// startContainersRestartable is startContainers, with a function that
// stops the server and starts another on the same data directory.
func startContainersRestartable(t *testing.T, logs *syncbuf.Buffer, mod func(*Options)) (*harness, func(*harness) *harness) {
	t.Helper()
	skipShort(t, "boots containers")
	if why := containerSkip(); why != "" {
		t.Skip(why)
	}
	netnstest.Require(t)
	dir, err := os.MkdirTemp("", "bp") // short: agent sockets live below
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	agent := filepath.Join(dir, "agent")
	if err := vmtest.BuildAgent(agent, false); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	cfg := hostnet.Config{Subnet: netip.MustParsePrefix(hostnet.DefaultSubnet), StateDir: filepath.Join(data, "net")}
	if err := hostnet.Setup(context.Background(), cfg); err != nil {
		t.Fatalf("guest network: %v", err)
	}
	t.Cleanup(func() { hostnet.Teardown(context.Background(), cfg) })
	opts := func(o *Options) {
		o.GuestNetwork = cfg
		o.Drivers.ContainerAgent = agent
		o.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		if mod != nil {
			mod(o)
		}
	}
	h := startWith(t, data, opts)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	if !slices.Contains(h.s.fleet.DriverNames(), "container") {
		t.Fatalf("no container driver (drivers %v)", h.s.fleet.DriverNames())
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := vmtest.BusyboxRoot(rootfs); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.images.Import(context.Background(), "busybox", rootfs); err != nil {
		t.Fatal(err)
	}
	return h, func(old *harness) *harness {
		old.stop()
		return startWith(t, data, opts)
	}
}

// getEventually GETs path on host through the proxy until it answers 200.
func (h *harness) getEventually(host, path string) resp {
	h.t.Helper()
	var r resp
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if r = get(h.t, h.proxy+path, host); r.code == 200 {
			return r
		}
	}
	h.t.Fatalf("GET %s%s: %d %s", host, path, r.code, r.body)
	return r
}

// TestMountPullsContainer: a container deployment with a mount of a
// tarball in berth's own store has no pool (503 saying so) until the
// mount pull its registration starts finishes; then a replica reads the
// file at the mount path, which it cannot write. A new version and
// mounts/pull change the digest in the status and recycle the pool; a
// second pull of the same digest reuses the tree; the records validate.
func TestMountPullsContainer(t *testing.T) {
	var logs syncbuf.Buffer
	h, restart := startContainersRestartable(t, &logs, nil)
	c := contracttest.MustLoad(t)
	v1 := h.push("default", "site-data", tarball(t, "pkg", map[string]string{"index.html": "version one\n"}))

	// The app serves / with busybox httpd and reports whether /data is
	// writable.
	app := `(touch /data/probe 2>/dev/null && echo rw || echo ro) > /ro; exec httpd -f -p $PORT -h /`
	sp := fmt.Sprintf(`{"id":"mnt","routes":[{"host":"mnt.test"}],`+
		`"vm":{"driver":"container","image":"busybox","port":8080,"start_command":%s,`+
		`"mounts":[{"path":"/data","store":"local","ref":"site-data","strip_components":1,"digest":"forged"}]},`+
		`"scaling":{"min_replicas":0,"max_replicas":1,"cold_start_timeout_secs":60}}`, jsonString(app))
	if r := h.json("POST", "/deployments", sp); r.code != 201 {
		t.Fatalf("register: %d %s", r.code, r.body)
	}
	// The replicas (containers) outlive berth: the last server deletes
	// them, before the harness's cleanups stop it.
	defer func() { h.deleteQuietly("mnt") }()
	if st := h.status("mnt"); st.Spec.VM.Mounts[0].Digest == "forged" {
		t.Errorf("the client's digest was kept: %+v", st.Spec.VM.Mounts[0])
	}
	rec := h.awaitJob("mnt", apitype.JobMountPull)
	h.checkJob(c, rec.ID)
	if rec.Status != apitype.JobSucceeded || len(rec.Mounts) != 1 {
		t.Fatalf("the automatic pull: %+v", rec)
	}
	m := rec.Mounts[0]
	if m.Digest != v1 || m.Path != "/data" || m.Files == nil || *m.Files != 1 || m.Reused == nil || *m.Reused || m.Changed == nil || !*m.Changed || *m.Bytes == 0 || *m.Unpacked != int64(len("version one\n")) {
		t.Errorf("outcome %+v", m)
	}
	t.Logf("pull log: %q", rec.Log)
	if st := h.status("mnt"); st.Spec.VM.Mounts[0].Digest != v1 {
		t.Errorf("status digest %q, want %s", st.Spec.VM.Mounts[0].Digest, v1)
	}
	if r := h.getEventually("mnt.test", "/data/index.html"); string(r.body) != "version one\n" {
		t.Errorf("the replica read %q", r.body)
	}
	if r := get(t, h.proxy+"/ro", "mnt.test"); strings.TrimSpace(string(r.body)) != "ro" {
		t.Errorf("the mount is writable: %d %q", r.code, r.body)
	}

	// A second pull of the same digest reuses the tree and changes nothing.
	if r := h.json("POST", "/deployments/mnt/mounts/pull", `{}`); r.code != 202 {
		t.Fatalf("pull: %d %s", r.code, r.body)
	}
	rec = h.awaitJob("mnt", apitype.JobMountPull, rec.ID)
	if m := rec.Mounts[0]; rec.Status != apitype.JobSucceeded || !*m.Reused || *m.Changed || *m.Bytes != 0 || m.Files != nil {
		t.Errorf("the second pull: %+v %+v", rec, m)
	}
	h.checkJob(c, rec.ID)

	// A new version: the digest changes and the new replica sees it.
	v2 := h.push("default", "site-data", tarball(t, "pkg", map[string]string{"index.html": "version two\n"}))
	before := h.jobIDs("mnt")
	if r := h.json("POST", "/deployments/mnt/mounts/pull", `{"force":true}`); r.code != 202 {
		t.Fatalf("pull: %d %s", r.code, r.body)
	}
	rec = h.awaitJob("mnt", apitype.JobMountPull, before...)
	if m := rec.Mounts[0]; rec.Status != apitype.JobSucceeded || m.Digest != v2 || !*m.Changed || *m.Reused {
		t.Fatalf("the pull of v2: %+v %+v", rec, m)
	}
	if st := h.status("mnt"); st.Spec.VM.Mounts[0].Digest != v2 {
		t.Errorf("status digest %q, want %s", st.Spec.VM.Mounts[0].Digest, v2)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := get(t, h.proxy+"/data/index.html", "mnt.test")
		if r.code == 200 && string(r.body) == "version two\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new replica never served v2: %d %q", r.code, r.body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// What the mount resolved to survives a restart: the status still
	// names v2 and the deployment serves it.
	h = restart(h)
	if st := h.status("mnt"); st.Spec.VM.Mounts[0].Digest != v2 {
		t.Errorf("after a restart: status digest %q, want %s", st.Spec.VM.Mounts[0].Digest, v2)
	}
	if r := h.getEventually("mnt.test", "/data/index.html"); string(r.body) != "version two\n" {
		t.Errorf("after a restart the replica read %q", r.body)
	}
	if ids := h.jobIDs("mnt"); len(ids) != len(before)+1 {
		t.Errorf("the restart started a pull of mounts already pulled: jobs %v", ids)
	}

	// An edit to a ref not pulled: no pool, a clear 503, and the pull the
	// edit starts fails naming the tag.
	before = h.jobIDs("mnt")
	sp2 := strings.Replace(sp, `"ref":"site-data"`, `"ref":"no-such-tag"`, 1)
	if r := h.json("PUT", "/deployments/mnt", sp2); r.code != 200 {
		t.Fatalf("edit: %d %s", r.code, r.body)
	}
	if r := get(t, h.proxy+"/data/index.html", "mnt.test"); r.code != 503 || !strings.Contains(string(r.body), "mounts are being pulled") {
		t.Errorf("a deployment with an unpulled mount answered %d %q", r.code, r.body)
	}
	rec = h.awaitJob("mnt", apitype.JobMountPull, before...)
	if rec.Status != apitype.JobFailed || rec.Error == nil || !strings.Contains(*rec.Error, `no tag "no-such-tag"`) {
		t.Errorf("the pull of a missing tag: %+v", rec)
	}
}

// jobIDs are the ids of deployment id's jobs.
func (h *harness) jobIDs(id string) []string {
	var recs []apitype.JobRecord
	json.Unmarshal(h.do("GET", "/deployments/"+id+"/jobs", "", "").body, &recs)
	var out []string
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

// TestMountPullWalls: a deployment in namespace team-b cannot mount team-a's
// tag or blob through local (the store's claims); a store at a link-local
// (metadata) address is refused; a mount's auth reaches the store as its
// key and never the job's log.
func TestMountPullWalls(t *testing.T) {
	var seen atomic.Value
	ext := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Authorization"))
		http.NotFound(w, r)
	}))
	defer ext.Close()
	var logs syncbuf.Buffer
	h := startContainers(t, &logs, func(o *Options) { o.ArtifactAllowPrivate = true })
	c := contracttest.MustLoad(t)
	secret := "art-KEY-s3cr3t"
	if r := h.json("POST", "/secrets", `{"id":"art","data":{"token":"`+secret+`"}}`); r.code/100 != 2 {
		t.Fatalf("secret: %d %s", r.code, r.body)
	}
	d := h.push("team-a", "private", tarball(t, "", map[string]string{"f": "a's data"}))
	mount := func(id, ns, m string) apitype.JobRecord {
		t.Helper()
		sp := fmt.Sprintf(`{"id":%q,"namespace":%q,"routes":[{"host":"%s.test"}],`+
			`"vm":{"driver":"container","image":"busybox","port":8080,"mounts":[%s]},"scaling":{"min_replicas":0}}`, id, ns, id, m)
		if r := h.json("POST", "/deployments", sp); r.code != 201 {
			t.Fatalf("register %s: %d %s", id, r.code, r.body)
		}
		rec := h.awaitJob(id, apitype.JobMountPull)
		h.checkJob(c, rec.ID)
		if rec.Status != apitype.JobFailed || rec.Error == nil {
			t.Fatalf("%s: the pull did not fail: %+v", id, rec)
		}
		return rec
	}
	if rec := mount("btag", "team-b", `{"path":"/data","store":"local","ref":"private"}`); !strings.Contains(*rec.Error, `no tag "private" in namespace "team-b"`) {
		t.Errorf("team-b naming team-a's tag: %s", *rec.Error)
	}
	if rec := mount("bblob", "team-b", `{"path":"/data","store":"local","ref":"`+d+`"}`); !strings.Contains(*rec.Error, "no blob sha256:"+d+` in namespace "team-b"`) {
		t.Errorf("team-b naming team-a's digest: %s", *rec.Error)
	}
	// A metadata or link-local store is refused when the spec is written.
	for _, store := range []string{"http://169.254.169.254/latest", "http://169.254.10.10", "http://[fe80::1]:8080"} {
		sp := `{"id":"meta","routes":[{"host":"meta.test"}],"vm":{"driver":"container","image":"busybox","port":8080,` +
			`"mounts":[{"path":"/data","store":"` + store + `","ref":"v1"}]}}`
		if r := h.json("POST", "/deployments", sp); r.code != 400 || !strings.Contains(string(r.body), "vm.mounts[0].store: ") {
			t.Errorf("a mount from %s: %d %s", store, r.code, r.body)
		}
	}
	rec := mount("keyed", "default", `{"path":"/data","store":"`+ext.URL+`","ref":"v1","auth":{"secret":"art","key":"token"}}`)
	if got, _ := seen.Load().(string); got != "Bearer "+secret {
		t.Errorf("the store saw Authorization %q", got)
	}
	raw := h.do("GET", "/jobs/"+rec.ID, "", "")
	if strings.Contains(string(raw.body), secret) || strings.Contains(logs.String(), secret) {
		t.Errorf("the secret reached the record or the log: %s", raw.body)
	}
	if r := get(t, h.proxy+"/", "keyed.test"); r.code != 503 || !strings.Contains(string(r.body), "mounts are being pulled") {
		t.Errorf("a deployment whose pull failed answered %d %q", r.code, r.body)
	}
}

// deleteQuietly deletes a deployment (its replicas with it), reporting
// nothing: for a test's end, fatal or not.
func (h *harness) deleteQuietly(id string) {
	req, _ := http.NewRequest("DELETE", h.admin+"/deployments/"+id, nil)
	if r, err := http.DefaultClient.Do(req); err == nil {
		r.Body.Close()
	}
}

// TestArtifactPullSite: a site with an artifact answers 503 until the pull
// its registration starts unpacks the bundle, then serves its index.html
// from the bundle's tree; a pull of the same ref is reused; a new version
// pulled with ref switches the site; operation_id is refused (a site has
// no rollout); a namespace
// cannot pull another's tag; the records validate.
func TestArtifactPullSite(t *testing.T) {
	h := start(t, "")
	c := contracttest.MustLoad(t)
	v1 := h.push("default", "docs-bundle", tarball(t, "dist", map[string]string{"index.html": "<h1>bundle one</h1>", "a/b.txt": "b"}))
	sp := `{"id":"docs","routes":[{"host":"docs.test"}],"site":{"root":""},` +
		`"artifact":{"store":"local","ref":"docs-bundle","strip_components":1}}`
	if r := h.json("POST", "/deployments", sp); r.code != 201 {
		t.Fatalf("register: %d %s", r.code, r.body)
	}
	rec := h.awaitJob("docs", apitype.JobArtifactPull)
	h.checkJob(c, rec.ID)
	if rec.Status != apitype.JobSucceeded || rec.Digest != v1 || rec.Store != "local" || rec.Artifact != "docs-bundle" ||
		rec.Reused == nil || *rec.Reused || rec.Files == nil || *rec.Files != 2 || rec.SiteRoot == "" || *rec.Bytes == 0 {
		t.Fatalf("the automatic pull: %+v", rec)
	}
	if r := get(t, h.proxy+"/", "docs.test"); r.code != 200 || string(r.body) != "<h1>bundle one</h1>" {
		t.Errorf("the site served %d %q", r.code, r.body)
	}
	if st := h.status("docs"); st.Site == nil || st.Site.Root != rec.SiteRoot {
		t.Errorf("status site: %+v, want root %s", st.Site, rec.SiteRoot)
	}

	before := h.jobIDs("docs")
	if r := h.json("POST", "/deployments/docs/pull", `{}`); r.code != 202 {
		t.Fatalf("pull: %d %s", r.code, r.body)
	}
	again := h.awaitJob("docs", apitype.JobArtifactPull, before...)
	if again.Status != apitype.JobSucceeded || !*again.Reused || *again.Bytes != 0 || again.SiteRoot != rec.SiteRoot {
		t.Errorf("the second pull: %+v", again)
	}
	h.checkJob(c, again.ID)

	v2 := h.push("default", "docs-v2", tarball(t, "dist", map[string]string{"index.html": "<h1>bundle two</h1>"}))
	for body, want := range map[string]string{
		`{"operation_id":"op-1"}`:              "operation_id: needs ref",
		`{"ref":"docs-v2","operation_id":"x"}`: "operation_id: a site switches to its pulled bundle at once",
		`{"nope":1}`:                           "the body must be {ref?, operation_id?, force?}",
	} {
		if r := h.json("POST", "/deployments/docs/pull", body); r.code != 400 || !strings.Contains(string(r.body), want) {
			t.Errorf("pull %s: %d %s, want 400 %q", body, r.code, r.body, want)
		}
	}
	before = h.jobIDs("docs")
	if r := h.json("POST", "/deployments/docs/pull", `{"ref":"docs-v2"}`); r.code != 202 {
		t.Fatalf("pull v2: %d %s", r.code, r.body)
	}
	rec = h.awaitJob("docs", apitype.JobArtifactPull, before...)
	if rec.Status != apitype.JobSucceeded || rec.Digest != v2 || *rec.Reused {
		t.Fatalf("the pull of v2: %+v", rec)
	}
	if r := get(t, h.proxy+"/", "docs.test"); string(r.body) != "<h1>bundle two</h1>" {
		t.Errorf("after the v2 pull the site served %d %q", r.code, r.body)
	}

	// Another namespace's tag is not there for team-b's site.
	sp = `{"id":"bdocs","namespace":"team-b","routes":[{"host":"bdocs.test"}],"site":{"root":""},` +
		`"artifact":{"store":"local","ref":"docs-bundle"}}`
	if r := h.json("POST", "/deployments", sp); r.code != 201 {
		t.Fatalf("register bdocs: %d %s", r.code, r.body)
	}
	rec = h.awaitJob("bdocs", apitype.JobArtifactPull)
	if rec.Status != apitype.JobFailed || !strings.Contains(*rec.Error, `no tag "docs-bundle" in namespace "team-b"`) {
		t.Errorf("team-b pulling team-a's tag: %+v", rec)
	}
	if r := get(t, h.proxy+"/", "bdocs.test"); r.code != 503 || !strings.Contains(string(r.body), "bundle is being pulled") {
		t.Errorf("an unpulled site answered %d %q", r.code, r.body)
	}
}

// TestArtifactPullVM: a container deployment with an artifact and no image
// yet has no pool until its pull imports the rootfs tarball and the mount
// pull that follows it unpacks its mount, then serves from both; a pull of
// the same ref is reused and rolls nothing out.
func TestArtifactPullVM(t *testing.T) {
	var logs syncbuf.Buffer
	h := startContainers(t, &logs, nil)
	c := contracttest.MustLoad(t)
	rootfs := t.TempDir()
	if err := vmtest.BusyboxRoot(rootfs); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(rootfs, "www"), 0o755)
	os.WriteFile(filepath.Join(rootfs, "www", "index.html"), []byte("from the artifact rootfs\n"), 0o644)
	var tb bytes.Buffer
	cmd := exec.Command("tar", "-C", rootfs, "-czf", "-", ".")
	cmd.Stdout = &tb
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	d := h.push("default", "app-rootfs", tb.Bytes())
	t.Logf("rootfs tarball: %d bytes", tb.Len())
	h.push("default", "app-data", tarball(t, "", map[string]string{"x.txt": "mounted data\n"}))
	sp := `{"id":"art","routes":[{"host":"art.test"}],"vm":{"driver":"container","port":8080,"start_command":"exec httpd -f -p $PORT -h /",` +
		`"mounts":[{"path":"/data","store":"local","ref":"app-data"}]},` +
		`"artifact":{"store":"local","ref":"app-rootfs","image_name":"app"},"scaling":{"min_replicas":0,"max_replicas":1}}`
	if r := h.json("POST", "/deployments", sp); r.code != 201 {
		t.Fatalf("register: %d %s", r.code, r.body)
	}
	defer func() { h.deleteQuietly("art") }()
	rec := h.awaitJob("art", apitype.JobArtifactPull)
	h.checkJob(c, rec.ID)
	want := "app-" + d[:12]
	if rec.Status != apitype.JobSucceeded || rec.Image != want || rec.Digest != d || rec.RolledOut == nil || !*rec.RolledOut || *rec.Reused || *rec.Bytes != int64(tb.Len()) {
		t.Fatalf("the automatic pull: %+v", rec)
	}
	t.Logf("pull log: %q", rec.Log)
	if st := h.status("art"); st.Spec.VM.Image != want {
		t.Errorf("vm.image %q, want %s", st.Spec.VM.Image, want)
	}
	// The mounts' pull follows the image's.
	if m := h.awaitJob("art", apitype.JobMountPull); m.Status != apitype.JobSucceeded {
		t.Fatalf("the mount pull after the artifact's: %+v", m)
	}
	if r := h.getEventually("art.test", "/www/index.html"); string(r.body) != "from the artifact rootfs\n" {
		t.Errorf("the replica served %q", r.body)
	}
	if r := h.getEventually("art.test", "/data/x.txt"); string(r.body) != "mounted data\n" {
		t.Errorf("the replica's mount served %q", r.body)
	}
	before := h.jobIDs("art")
	if r := h.json("POST", "/deployments/art/pull", `{}`); r.code != 202 {
		t.Fatalf("pull: %d %s", r.code, r.body)
	}
	rec = h.awaitJob("art", apitype.JobArtifactPull, before...)
	if rec.Status != apitype.JobSucceeded || !*rec.Reused || *rec.RolledOut || *rec.Bytes != 0 {
		t.Errorf("the second pull: %+v", rec)
	}
	h.checkJob(c, rec.ID)

	// A new version pulled with an operation_id is the rollout of that
	// id; the id cannot be used twice, nor be malformed.
	os.WriteFile(filepath.Join(rootfs, "www", "index.html"), []byte("from the second rootfs\n"), 0o644)
	tb.Reset()
	cmd = exec.Command("tar", "-C", rootfs, "-czf", "-", ".")
	cmd.Stdout = &tb
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	h.push("default", "app-rootfs-2", tb.Bytes())
	before = h.jobIDs("art")
	if r := h.json("POST", "/deployments/art/pull", `{"ref":"app-rootfs-2","operation_id":"pull-op-1"}`); r.code != 202 {
		t.Fatalf("pull with an operation_id: %d %s", r.code, r.body)
	}
	rec = h.awaitJob("art", apitype.JobArtifactPull, before...)
	if rec.Status != apitype.JobSucceeded || rec.RolledOut == nil || !*rec.RolledOut {
		t.Fatalf("the pull with an operation_id: %+v", rec)
	}
	waitFor(t, "rollout pull-op-1 to settle", func() bool {
		r := h.do("GET", "/deployments/art/rollouts/pull-op-1", "", "")
		var op apitype.RolloutOperation
		return r.code == 200 && json.Unmarshal(r.body, &op) == nil && op.Status == "succeeded"
	})
	if r := h.getEventually("art.test", "/www/index.html"); string(r.body) != "from the second rootfs\n" {
		t.Errorf("after the rollout the replica served %q", r.body)
	}
	for body, want := range map[string]string{
		`{"ref":"app-rootfs","operation_id":"pull-op-1"}`: "has a rollout \"pull-op-1\" already",
		`{"ref":"app-rootfs","operation_id":"a b"}`:       "operation_id: ",
	} {
		if r := h.json("POST", "/deployments/art/pull", body); r.code/100 != 4 || !strings.Contains(errMsg(t, r), want) {
			t.Errorf("pull %s: %d %s, want %q", body, r.code, r.body, want)
		}
	}
}

// TestMountPull100MiB measures a mount pull of a 100 MiB tarball (ten
// files of incompressible bytes) from berth's own store, as the job's log
// reports it. It asserts nothing about the time.
func TestMountPull100MiB(t *testing.T) {
	skipShort(t, "pushes and pulls 100 MiB")
	var logs syncbuf.Buffer
	h := startContainers(t, &logs, nil)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	chunk := make([]byte, 10<<20)
	for i := range 10 {
		for j := range chunk {
			chunk[j] = byte(uint32(j*2654435761+i*40503) >> 13)
		}
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("f%d.bin", i), Mode: 0o644, Size: int64(len(chunk)), Typeflag: tar.TypeReg})
		tw.Write(chunk)
	}
	tw.Close()
	t0 := time.Now()
	h.push("default", "big", buf.Bytes())
	t.Logf("push of %d bytes: %s", buf.Len(), time.Since(t0).Round(time.Millisecond))
	sp := `{"id":"big","routes":[{"host":"big.test"}],"vm":{"driver":"container","image":"busybox","port":8080,` +
		`"mounts":[{"path":"/data","store":"local","ref":"big"}]},"scaling":{"min_replicas":0}}`
	t0 = time.Now()
	if r := h.json("POST", "/deployments", sp); r.code != 201 {
		t.Fatalf("register: %d %s", r.code, r.body)
	}
	rec := h.awaitJob("big", apitype.JobMountPull)
	if rec.Status != apitype.JobSucceeded {
		t.Fatalf("pull: %+v", rec)
	}
	t.Logf("register to pulled: %s; %q", time.Since(t0).Round(time.Millisecond), rec.Log[len(rec.Log)-1])
	before := h.jobIDs("big")
	t0 = time.Now()
	h.json("POST", "/deployments/big/mounts/pull", `{"force":true}`)
	rec = h.awaitJob("big", apitype.JobMountPull, before...)
	t.Logf("forced re-fetch and verify: %s; %q", time.Since(t0).Round(time.Millisecond), rec.Log[len(rec.Log)-1])
}
