package server

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/syncbuf"
)

// buildGit runs git in dir with an environment free of the host's config.
func buildGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestImageBuildContainer: a container deployment with build.repo (a
// local git repository) and no vm.image answers 503 until the build its
// registration starts succeeds; the JobRecord names the commit and
// rolled_out, and the deployment serves the Dockerfile's file from zero
// with its CMD (no start_command). A second commit built through POST
// …/build {ref} serves the new content; a failing Dockerfile fails the
// job with the builder's last lines while the previous image keeps
// serving; a build's auth token is in no log; a confined token may
// neither build from nor register a local repository.
func TestImageBuildContainer(t *testing.T) {
	for _, p := range []string{"buildah", "git"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (scripts/test installs it)", p)
		}
	}
	var logs syncbuf.Buffer
	h := startContainers(t, &logs, func(o *Options) { o.AllowLocalRepos = true })
	c := contracttest.MustLoad(t)

	repo := t.TempDir()
	write := func(name, content string, mode os.FileMode) {
		t.Helper()
		os.MkdirAll(filepath.Dir(filepath.Join(repo, name)), 0o755)
		if err := os.WriteFile(filepath.Join(repo, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	bb, _ := exec.LookPath("busybox")
	bin, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	buildGit(t, repo, "init", "-q", "-b", "main")
	write("busybox", string(bin), 0o755)
	write("www/index.html", "built one\n", 0o644)
	write("Dockerfile", "FROM scratch\nCOPY busybox /bin/busybox\nCOPY www/index.html /www/index.html\n"+
		`CMD ["/bin/busybox","httpd","-f","-p","8080","-h","/www"]`+"\n", 0o644)
	buildGit(t, repo, "add", ".")
	buildGit(t, repo, "commit", "-q", "-m", "one")
	one := buildGit(t, repo, "rev-parse", "HEAD")

	sp := `{"id":"bld","routes":[{"host":"bld.test"}],"vm":{"driver":"container","port":8080},` +
		`"build":{"repo":` + jsonString(repo) + `},"scaling":{"min_replicas":0,"max_replicas":1,"cold_start_timeout_secs":60}}`
	start := time.Now()
	if r := h.json("POST", "/deployments", sp); r.code != 201 {
		t.Fatalf("register: %d %s", r.code, r.body)
	}
	defer func() { h.deleteQuietly("bld") }()
	if r := get(t, h.proxy+"/index.html", "bld.test"); r.code != 503 || !strings.Contains(string(r.body), "has not been built yet: POST /deployments/bld/build") {
		t.Errorf("before its first build: %d %q", r.code, r.body)
	}
	rec := h.awaitJob("bld", apitype.JobImageBuild)
	h.checkJob(c, rec.ID)
	if rec.Status != apitype.JobSucceeded || rec.Commit != one || rec.Repo != repo || rec.Dockerfile != "Dockerfile" ||
		rec.Image != "bld-"+one[:12] || rec.RolledOut == nil || !*rec.RolledOut {
		t.Fatalf("the automatic build: %+v", rec)
	}
	built := time.Since(start)
	if r := h.getEventually("bld.test", "/index.html"); string(r.body) != "built one\n" {
		t.Errorf("served %q", r.body)
	}
	t.Logf("register → built in %s, → serving in %s", built.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if st := h.status("bld"); st.Spec.VM.Image != rec.Image || st.Spec.VM.StartCommand != "" {
		t.Errorf("status vm %+v", st.Spec.VM)
	}

	// A second commit, built by ref.
	write("www/index.html", "built two\n", 0o644)
	buildGit(t, repo, "commit", "-q", "-am", "two")
	two := buildGit(t, repo, "rev-parse", "HEAD")
	before := h.jobIDs("bld")
	start = time.Now()
	r := h.json("POST", "/deployments/bld/build", `{"ref":"main"}`)
	if r.code != 202 {
		t.Fatalf("build: %d %s", r.code, r.body)
	}
	if err := c.CheckJSON("JobRecord", r.body); err != nil {
		t.Errorf("202 JobRecord: %v", err)
	}
	rec = h.awaitJob("bld", apitype.JobImageBuild, before...)
	h.checkJob(c, rec.ID)
	if rec.Status != apitype.JobSucceeded || rec.Commit != two || rec.Ref != "main" || rec.RolledOut == nil || !*rec.RolledOut {
		t.Fatalf("the second build: %+v", rec)
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r := get(t, h.proxy+"/index.html", "bld.test")
		if r.code == 200 && string(r.body) == "built two\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never served the second build: %d %q", r.code, r.body)
		}
	}
	t.Logf("POST build → serving the second commit in %s", time.Since(start).Round(time.Millisecond))

	// A failing Dockerfile: the job fails with the builder's last lines,
	// the deployment keeps serving the second build.
	buildGit(t, repo, "checkout", "-q", "-b", "broken")
	write("Dockerfile", "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"sh\", \"-c\", \"echo about to fail; exit 3\"]\n", 0o644)
	buildGit(t, repo, "commit", "-q", "-am", "broken")
	before = h.jobIDs("bld")
	if r := h.json("POST", "/deployments/bld/build", `{"ref":"broken"}`); r.code != 202 {
		t.Fatalf("build: %d %s", r.code, r.body)
	}
	rec = h.awaitJob("bld", apitype.JobImageBuild, before...)
	h.checkJob(c, rec.ID)
	if rec.Status != apitype.JobFailed || rec.Error == nil || !strings.Contains(*rec.Error, "about to fail") || rec.RolledOut != nil {
		t.Errorf("the broken build: %+v", rec)
	}
	if r := get(t, h.proxy+"/index.html", "bld.test"); r.code != 200 || string(r.body) != "built two\n" {
		t.Errorf("after a failed build: %d %q", r.code, r.body)
	}

	// An edit that leaves vm.image out keeps serving the last build; one
	// that changes the build section starts a build (of the same commit
	// here: reused, nothing to roll out).
	before = h.jobIDs("bld")
	spMain := strings.Replace(sp, `"build":{"repo":`+jsonString(repo)+`}`, `"build":{"repo":`+jsonString(repo)+`,"ref":"main"}`, 1)
	if r := h.json("PUT", "/deployments/bld", spMain); r.code != 200 {
		t.Fatalf("edit: %d %s", r.code, r.body)
	}
	if st := h.status("bld"); st.Spec.VM.Image != "bld-"+two[:12] {
		t.Errorf("after an edit without vm.image: %q", st.Spec.VM.Image)
	}
	if r := get(t, h.proxy+"/index.html", "bld.test"); r.code != 200 || string(r.body) != "built two\n" {
		t.Errorf("after an edit: %d %q", r.code, r.body)
	}
	rec = h.awaitJob("bld", apitype.JobImageBuild, before...)
	if rec.Status != apitype.JobSucceeded || rec.Commit != two || rec.RolledOut == nil || *rec.RolledOut {
		t.Errorf("the build an edit of build.ref started: %+v", rec)
	}

	// A build's auth token never reaches the log (the remote is refused
	// by the address walls after the token was handed over for redaction).
	const token = "ghp_TOKEN-never-logged-42"
	if r := h.json("POST", "/secrets", `{"id":"git","data":{"token":"`+token+`"}}`); r.code/100 != 2 {
		t.Fatalf("secret: %d %s", r.code, r.body)
	}
	spAuth := `{"id":"bldauth","routes":[{"host":"bldauth.test"}],"vm":{"driver":"container","port":8080},` +
		`"build":{"repo":"https://127.0.0.1:1/x.git","auth":{"secret":"git","key":"token","username":"bot"}},"scaling":{"max_replicas":1}}`
	if r := h.json("POST", "/deployments", spAuth); r.code != 201 {
		t.Fatalf("register: %d %s", r.code, r.body)
	}
	defer func() { h.deleteQuietly("bldauth") }()
	rec = h.awaitJob("bldauth", apitype.JobImageBuild)
	raw := h.do("GET", "/jobs/"+rec.ID, "", "").body
	if rec.Status != apitype.JobFailed || strings.Contains(string(raw), token) || strings.Contains(logs.String(), token) {
		t.Errorf("the auth build: %s", raw)
	}

	// A confined token: no build of a local repository, no registering one.
	var m struct {
		Token string `json:"token"`
	}
	if r := h.json("POST", "/tokens", `{"name":"team","admin":"admin","namespace":"default","deployments":[]}`); r.code != 201 {
		t.Fatalf("mint: %d %s", r.code, r.body)
	} else {
		json.Unmarshal(r.body, &m)
	}
	bearer := []string{"Authorization", "Bearer " + m.Token}
	if r := h.json("POST", "/deployments/bld/build", `{}`, bearer...); r.code != 403 || !strings.Contains(string(r.body), "local repository") {
		t.Errorf("a confined build of a local repository: %d %s", r.code, r.body)
	}
	spEtc := strings.NewReplacer(`"id":"bld"`, `"id":"etc"`, `bld.test`, `etc.test`, jsonString(repo), `"/etc"`).Replace(sp)
	if r := h.json("POST", "/deployments", spEtc, bearer...); r.code != 400 || !strings.Contains(string(r.body), "build.repo") {
		t.Errorf("a confined registration of repo /etc: %d %s", r.code, r.body)
	}
}
