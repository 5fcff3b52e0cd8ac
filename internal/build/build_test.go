package build

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/store"
)

// needTools skips when the programs a build runs are missing (scripts/test
// installs them) or the test is not root (buildah here is rootful).
func needTools(t testing.TB) {
	t.Helper()
	for _, p := range []string{"buildah", "git", "busybox"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (scripts/test installs it): %v", p, err)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("berth's builds run buildah as root")
	}
}

const dockerfile = `FROM scratch
COPY busybox /bin/busybox
COPY hello.txt /srv/hello.txt
RUN ["/bin/busybox", "sh", "-c", "echo built > /built; /bin/busybox ip -o link | /bin/busybox wc -l > /links"]
WORKDIR /srv
ENV GREETING=hi
EXPOSE 9090 8080
CMD ["/bin/busybox","httpd","-f","-p","8080"]
`

// gitRun runs git in dir with an environment free of the host's config.
func gitRun(t testing.TB, dir string, args ...string) string {
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

// testRepo is a repository with main (hello.txt "one"), branch "two" and
// tag "v2" (hello.txt "two"), and branch "broken" whose Dockerfile fails.
type testRepo struct {
	dir            string
	main, two, bad string // commits
}

func makeRepo(t testing.TB) testRepo {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	gitRun(t, dir, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	write("Dockerfile", dockerfile)
	write("hello.txt", "one\n")
	gitRun(t, dir, "add", ".")
	gitRun(t, dir, "commit", "-q", "-m", "one")
	r := testRepo{dir: dir, main: gitRun(t, dir, "rev-parse", "HEAD")}
	gitRun(t, dir, "checkout", "-q", "-b", "two")
	write("hello.txt", "two\n")
	gitRun(t, dir, "commit", "-q", "-am", "two")
	gitRun(t, dir, "tag", "-a", "-m", "v2", "v2")
	r.two = gitRun(t, dir, "rev-parse", "HEAD")
	gitRun(t, dir, "checkout", "-q", "-b", "broken", "main")
	write("Dockerfile", "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"sh\", \"-c\", \"echo about to fail; exit 3\"]\n")
	gitRun(t, dir, "commit", "-q", "-am", "broken")
	r.bad = gitRun(t, dir, "rev-parse", "HEAD")
	gitRun(t, dir, "checkout", "-q", "main")
	return r
}

// lines collects log lines.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) add(s string) { l.mu.Lock(); l.l = append(l.l, s); l.mu.Unlock() }
func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.l, "\n")
}

func newImageStore(t *testing.T) *image.Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := image.New(t.Context(), image.Options{Dir: filepath.Join(t.TempDir(), "images"), Catalog: st})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// emptyDir fails unless dir holds nothing: every build's files are gone.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the work dir still holds %v after the build", names)
	}
}

func TestBuildFromGit(t *testing.T) {
	needTools(t)
	repo := makeRepo(t)
	imgs := newImageStore(t)
	wd := t.TempDir()
	b := &Builder{WorkDir: wd, AllowLocal: true}
	var log lines
	res, err := b.Build(t.Context(), Request{
		Repo:  repo.dir,
		Image: "app",
		Import: func(ctx context.Context, rootfs string) error {
			_, err := imgs.Import(ctx, "app", rootfs)
			return err
		},
	}, log.add)
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	if res.Commit != repo.main {
		t.Errorf("Commit = %s, want main's %s", res.Commit, repo.main)
	}
	if res.Dockerfile != "Dockerfile" || res.Image != "app" || res.Repo != "file://"+repo.dir {
		t.Errorf("Dockerfile, Image, Repo = %q, %q, %q", res.Dockerfile, res.Image, res.Repo)
	}
	c := res.Config
	if !slices.Equal(c.Cmd, []string{"/bin/busybox", "httpd", "-f", "-p", "8080"}) || c.WorkingDir != "/srv" ||
		!slices.Contains(c.Env, "GREETING=hi") || c.Port != 8080 || !slices.Equal(c.ExposedPorts, []string{"8080/tcp", "9090/tcp"}) {
		t.Errorf("Config = %+v", c)
	}
	root, err := imgs.Rootfs("app")
	if err != nil {
		t.Fatal(err)
	}
	// links: RUN steps see only their own loopback interface (no network).
	for name, want := range map[string]string{"srv/hello.txt": "one\n", "built": "built\n", "links": "1\n"} {
		if b, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(b) != want {
			t.Errorf("%s in the image: %q, %v; want %q", name, b, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "bin/busybox")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("bin/busybox in the image: %v, %v", fi, err)
	}
	if res.Bytes < 100_000 {
		t.Errorf("Bytes = %d, want at least busybox's size", res.Bytes)
	}
	if !strings.Contains(log.String(), "STEP 4/8: RUN") {
		t.Errorf("buildah's output is not in the log:\n%s", log.String())
	}
	emptyDir(t, wd)
	t.Logf("fetch %s, buildah %s, import %s", res.Fetch, res.Buildah, res.Import)
}

// TestBuildRefs builds a branch, an annotated tag, a full and an
// abbreviated commit hash: each checks out the commit it names.
func TestBuildRefs(t *testing.T) {
	needTools(t)
	repo := makeRepo(t)
	for _, tc := range []struct{ ref, commit, hello string }{
		{"two", repo.two, "two\n"},
		{"v2", repo.two, "two\n"},
		{repo.main, repo.main, "one\n"},
		{repo.two[:10], repo.two, "two\n"},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			wd := t.TempDir()
			b := &Builder{WorkDir: wd, AllowLocal: true}
			var got []byte
			var log lines
			res, err := b.Build(t.Context(), Request{Repo: "file://" + repo.dir, Ref: tc.ref,
				Import: func(_ context.Context, rootfs string) (err error) {
					got, err = os.ReadFile(filepath.Join(rootfs, "srv/hello.txt"))
					return err
				}}, log.add)
			if err != nil {
				t.Fatalf("%v\nlog:\n%s", err, log.String())
			}
			if res.Commit != tc.commit || string(got) != tc.hello {
				t.Errorf("Commit %s, hello.txt %q; want %s, %q", res.Commit, got, tc.commit, tc.hello)
			}
			emptyDir(t, wd)
		})
	}
}

func TestBuildFailureCarriesTheLog(t *testing.T) {
	needTools(t)
	repo := makeRepo(t)
	wd := t.TempDir()
	b := &Builder{WorkDir: wd, AllowLocal: true}
	_, err := b.Build(t.Context(), Request{Repo: repo.dir, Ref: "broken",
		Import: func(context.Context, string) error { t.Error("Import called for a failed build"); return nil }}, nil)
	var be *BuildError
	if !errors.As(err, &be) || be.Step != "buildah" {
		t.Fatalf("err = %v, want a BuildError at step buildah", err)
	}
	if !strings.Contains(err.Error(), "about to fail") {
		t.Errorf("the error does not carry the build's last lines:\n%v", err)
	}
	emptyDir(t, wd)

	// A ref that is not there fails at the source.
	_, err = b.Build(t.Context(), Request{Repo: repo.dir, Ref: "nope", Import: func(context.Context, string) error { return nil }}, nil)
	if !errors.As(err, &be) || be.Step != "source" {
		t.Errorf("missing ref: err = %v, want a BuildError at step source", err)
	}
	emptyDir(t, wd)
}

func TestBuildTimeout(t *testing.T) {
	needTools(t)
	repo := makeRepo(t)
	// A Dockerfile that runs forever, on a branch of its own.
	os.WriteFile(filepath.Join(repo.dir, "Dockerfile"), []byte("FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"sleep\", \"600\"]\n"), 0o644)
	gitRun(t, repo.dir, "checkout", "-q", "-b", "slow")
	gitRun(t, repo.dir, "commit", "-q", "-am", "slow")
	wd := t.TempDir()
	b := &Builder{WorkDir: wd, AllowLocal: true, Timeout: 3 * time.Second}
	start := time.Now()
	_, err := b.Build(t.Context(), Request{Repo: repo.dir, Ref: "slow", Import: func(context.Context, string) error { return nil }}, nil)
	if err == nil || !strings.Contains(err.Error(), "time ran out") {
		t.Fatalf("err = %v, want the build's time to run out", err)
	}
	if d := time.Since(start); d > 3*time.Second+stopGrace+5*time.Second {
		t.Errorf("the build took %s to stop", d)
	}
	// Nothing of the build keeps running: the RUN step's sleep is gone.
	out, _ := exec.Command("ps", "-eo", "args").Output()
	if bytes.Contains(out, []byte("busybox sleep 600")) {
		t.Errorf("the RUN step outlived its build:\n%s", out)
	}
	emptyDir(t, wd)
}

func TestBuildSizeCap(t *testing.T) {
	needTools(t)
	repo := makeRepo(t)
	os.WriteFile(filepath.Join(repo.dir, "Dockerfile"), []byte("FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox dd if=/dev/zero of=/big bs=1M count=64; /bin/busybox sleep 30\"]\n"), 0o644)
	gitRun(t, repo.dir, "checkout", "-q", "-b", "big")
	gitRun(t, repo.dir, "commit", "-q", "-am", "big")
	wd := t.TempDir()
	b := &Builder{WorkDir: wd, AllowLocal: true, MaxBytes: 32 << 20}
	_, err := b.Build(t.Context(), Request{Repo: repo.dir, Ref: "big", Import: func(context.Context, string) error { return nil }}, nil)
	if err == nil || !strings.Contains(err.Error(), "wrote more than") {
		t.Fatalf("err = %v, want the size cap", err)
	}
	emptyDir(t, wd)
}

func TestFindDockerfile(t *testing.T) {
	root := t.TempDir()
	mk := func(name string) {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("FROM scratch\n"), 0o644)
	}
	mk("Containerfile")
	mk("app/Dockerfile")
	mk("web/index.html")
	mk("deploy/prod.Dockerfile")
	os.Symlink("/etc/passwd", filepath.Join(root, "evil"))
	os.Symlink("/etc", filepath.Join(root, "evildir"))
	for _, tc := range []struct{ ctx, df, want, err string }{
		{"", "", "Containerfile", ""},
		{"app", "", "app/Dockerfile", ""},
		{"web", "", "Containerfile", ""}, // falls back to the root
		{"", "deploy/prod.Dockerfile", "deploy/prod.Dockerfile", ""},
		{"app", "/deploy/prod.Dockerfile", "deploy/prod.Dockerfile", ""},
		{"", "evil", "", "leads out"},
		{"evildir", "", "", "leads out"},
		{"../x", "", "", "leaves"},
		{"", "../../etc/passwd", "", "leaves"},
		{"", "missing", "", "no such file"},
		{"web/index.html", "", "", "not a directory"},
	} {
		_, _, rel, err := FindDockerfile(root, tc.ctx, tc.df)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("(%q, %q): err = %v, want %q", tc.ctx, tc.df, err, tc.err)
			}
			continue
		}
		if err != nil || rel != tc.want {
			t.Errorf("(%q, %q) = %q, %v; want %q", tc.ctx, tc.df, rel, err, tc.want)
		}
	}
	_, _, _, err := FindDockerfile(filepath.Join(root, "web"), "", "")
	if err == nil || !strings.Contains(err.Error(), "no Dockerfile") {
		t.Errorf("no Dockerfile: err = %v", err)
	}
}

func TestRemotePolicy(t *testing.T) {
	ctx := t.Context()
	strict := &Builder{}
	local := &Builder{AllowLocal: true}
	for _, tc := range []struct {
		b    *Builder
		repo string
		auth *Credential
		err  string // "" allowed
	}{
		{strict, "https://127.0.0.1/x.git", nil, ""},
		{strict, "/srv/repo", nil, "local repositories"},
		{strict, "file:///srv/repo", nil, "file transport"},
		{strict, "ext::sh -c touch% /tmp/pwned", nil, "not a URL"},
		{strict, "ext::sh", nil, "ext:: transport"},
		{strict, "fd::3", nil, "fd:: transport"},
		{strict, "git@github.com:a/b.git", nil, "scheme"},
		{strict, "ssh://git@github.com/a/b.git", nil, "ssh transport"},
		{strict, "git://127.0.0.1/a.git", nil, "git transport"},
		{strict, "http://127.0.0.1/a.git", nil, "http transport"},
		{&Builder{AllowHTTP: true}, "http://127.0.0.1/a.git", nil, ""},
		{strict, "https://user:pw@127.0.0.1/a.git", nil, "credentials in the URL"},
		{strict, "https://169.254.169.254/a.git", nil, "metadata"},
		{strict, "https://[fe80::1]/a.git", nil, "link-local"},
		{strict, "https://100.100.100.200/a.git", nil, "metadata"},
		{strict, "https://[::ffff:169.254.169.254]/a.git", nil, "metadata"},
		{&Builder{AllowLinkLocal: true}, "https://169.254.1.1/a.git", nil, ""},
		{strict, "-uhttps://x/", nil, "not a URL"},
		{local, "/srv/repo", nil, ""},
		{local, "file:///srv/repo", nil, ""},
		{local, "/srv/repo", &Credential{Token: "t"}, "only for https"},
		{local, "file://otherhost/srv/repo", nil, "names no host"},
	} {
		_, err := tc.b.checkRemote(ctx, tc.repo, tc.auth)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: err = %v, want %q", tc.repo, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "pw@") {
			t.Errorf("%q: the error shows the URL's password: %v", tc.repo, err)
		}
	}
	// A name is pinned to the addresses checked; a literal address needs
	// no pin.
	r, err := strict.checkRemote(ctx, "https://localhost:8443/a.git", nil)
	if err != nil || !strings.HasPrefix(r.resolve, "localhost:8443:") || !strings.Contains(r.resolve, "127.0.0.1") {
		t.Errorf("localhost: resolve %q, %v", r.resolve, err)
	}
	if r, _ := strict.checkRemote(ctx, "https://127.0.0.1/a.git", nil); r.resolve != "" {
		t.Errorf("a literal address is pinned: %q", r.resolve)
	}
	for _, ref := range []string{"-uhttps", "a..b", "a:b", "a b", "x^{tree}", strings.Repeat("a", 300)} {
		if err := checkRef(ref); !errors.Is(err, ErrRefused) {
			t.Errorf("ref %q: err = %v, want refused", ref, err)
		}
	}
	for _, ref := range []string{"", "main", "feature/x", "v1.2.3", "0123abcd"} {
		if err := checkRef(ref); err != nil {
			t.Errorf("ref %q: %v", ref, err)
		}
	}
}

func TestLoggerRedactsAndCuts(t *testing.T) {
	var got lines
	lg := newLogger(got.add, &Credential{Token: "s3cr/t+"})
	lg.copyLines(strings.NewReader("a s3cr/t+ b\rprogress 1\rprogress 2\nurl s3cr%2Ft%2B\nbasic eC1hY2Nlc3MtdG9rZW46czNjci90Kw==\n" + strings.Repeat("x", 3*maxLine) + "\nlast"))
	want := []string{"a *** b", "progress 1", "progress 2", "url ***", "basic ***"}
	if len(got.l) != 7 || !slices.Equal(got.l[:5], want) || !strings.HasSuffix(got.l[5], "[line cut]") || len(got.l[5]) > maxLine+20 || got.l[6] != "last" {
		t.Errorf("lines = %q", got.l)
	}
	if tail := lg.tail(); len(tail) != 7 {
		t.Errorf("tail = %d lines", len(tail))
	}
	err := lg.redactErr(errors.New("exit: s3cr/t+"))
	if strings.Contains(err.Error(), "s3cr") {
		t.Errorf("redactErr = %v", err)
	}
}

// grepTree fails if any file under dir contains secret.
func grepTree(t *testing.T, dir, secret string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the credential", p)
		}
		return nil
	})
}

// gitHTTPServer serves repo's branches over git's smart HTTP protocol
// (git http-backend through net/http/cgi) on loopback, behind HTTP basic
// authentication as user with token. It counts the requests that
// authenticated.
func gitHTTPServer(t *testing.T, repo, user, token string) (url string, authed *atomic.Int64) {
	t.Helper()
	root := t.TempDir()
	gitRun(t, root, "clone", "-q", "--bare", repo, "repo.git")
	execPath := gitRun(t, root, "--exec-path")
	backend := &cgi.Handler{
		Path: filepath.Join(execPath, "git-http-backend"),
		Root: "/git",
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"},
	}
	authed = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != token {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		authed.Add(1)
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	// By name, so the address check resolves it and pins git to it.
	return "http://localhost:" + port + "/git/repo.git", authed
}

// TestBuildWithCredential fetches over smart HTTP with a token: the build
// works, and the token is in no log line, no error and no file of the
// build's directory (checked while the build's files all still exist,
// from Import).
func TestBuildWithCredential(t *testing.T) {
	needTools(t)
	repo := makeRepo(t)
	const token = "ghp_Zq9xSecretTok3n/+="
	url, authed := gitHTTPServer(t, repo.dir, "deploy-bot", token)
	wd := t.TempDir()
	b := &Builder{WorkDir: wd, AllowHTTP: true}
	var log lines
	imported := false
	res, err := b.Build(t.Context(), Request{Repo: url, Ref: "two", Auth: &Credential{Username: "deploy-bot", Token: token},
		Import: func(_ context.Context, rootfs string) error {
			imported = true
			grepTree(t, wd, token)
			return nil
		}}, log.add)
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	if res.Commit != repo.two || !imported || authed.Load() == 0 {
		t.Errorf("Commit %s (want %s), imported %v, authenticated requests %d", res.Commit, repo.two, imported, authed.Load())
	}
	if strings.Contains(log.String(), token) {
		t.Errorf("the log shows the token:\n%s", log.String())
	}
	emptyDir(t, wd)

	// A wrong token fails at the source, quickly, without showing it; no
	// credential at all fails the same way (git must not prompt).
	for _, auth := range []*Credential{{Username: "deploy-bot", Token: "wrong-" + token}, nil} {
		log = lines{}
		start := time.Now()
		_, err = b.Build(t.Context(), Request{Repo: url, Auth: auth, Import: func(context.Context, string) error { return nil }}, log.add)
		var be *BuildError
		if !errors.As(err, &be) || be.Step != "source" {
			t.Fatalf("auth %v: err = %v, want a BuildError at step source", auth != nil, err)
		}
		if strings.Contains(err.Error()+log.String(), token) {
			t.Errorf("the error or log shows the token: %v\n%s", err, log.String())
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("a refused credential took %s", d)
		}
		emptyDir(t, wd)
	}
}

func TestRunErrNamesTheSubcommand(t *testing.T) {
	for args, want := range map[string]string{
		"-C /x/src fetch --depth 1":                             "git fetch: ",
		"--storage-driver vfs --root /r --runroot /rr bud -f x": "git bud: ",
	} {
		err := runErr(t.Context(), "/usr/bin/git", strings.Fields(args), errors.New("exit status 1"))
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q…", args, err, want)
		}
	}
}

// memRecipe is a Recipe in memory: a Dockerfile and a context tarball.
type memRecipe struct {
	dockerfile string
	files      map[string]string // name → content; a "->" prefix makes a symlink
	mode       map[string]int64
}

func (m memRecipe) Fetch(context.Context) ([]byte, io.ReadCloser, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(m.files))
	for n := range m.files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		c := m.files[n]
		if target, ok := strings.CutPrefix(c, "->"); ok {
			tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777})
			continue
		}
		mode := m.mode[n]
		if mode == 0 {
			mode = 0o644
		}
		tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Size: int64(len(c)), Mode: mode})
		tw.Write([]byte(c))
	}
	tw.Close()
	zw.Close()
	return []byte(m.dockerfile), io.NopCloser(&buf), nil
}

func TestBuildFromRecipe(t *testing.T) {
	needTools(t)
	bbPath, _ := exec.LookPath("busybox")
	bb, err := os.ReadFile(bbPath)
	if err != nil {
		t.Fatal(err)
	}
	wd := t.TempDir()
	b := &Builder{WorkDir: wd}
	r := memRecipe{
		dockerfile: "FROM scratch\nCOPY busybox /bin/busybox\nCOPY app/ /app/\nENTRYPOINT [\"/bin/busybox\"]\nCMD [\"cat\", \"/app/hi\"]\n",
		files:      map[string]string{"busybox": string(bb), "app/hi": "from a recipe\n", "app/link": "->hi"},
		mode:       map[string]int64{"busybox": 0o755},
	}
	var got []byte
	var log lines
	res, err := b.Build(t.Context(), Request{Recipe: r, Image: "fromstore", Import: func(_ context.Context, rootfs string) (err error) {
		got, err = os.ReadFile(filepath.Join(rootfs, "app/link"))
		return err
	}}, log.add)
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	if string(got) != "from a recipe\n" || res.Commit != "" || !slices.Equal(res.Config.Entrypoint, []string{"/bin/busybox"}) || !slices.Equal(res.Config.Cmd, []string{"cat", "/app/hi"}) {
		t.Errorf("app/link %q, result %+v", got, res)
	}
	emptyDir(t, wd)

	// A context entry leaving the context is refused, as is a recipe with
	// git's fields.
	bad := memRecipe{dockerfile: "FROM scratch\n", files: map[string]string{"../../escape": "x"}}
	if _, err := b.Build(t.Context(), Request{Recipe: bad, Import: func(context.Context, string) error { return nil }}, nil); err == nil || !strings.Contains(err.Error(), "leaves the tree") {
		t.Errorf("escaping entry: err = %v", err)
	}
	viaLink := memRecipe{dockerfile: "FROM scratch\n", files: map[string]string{"a": "->/tmp", "a/escape": "x"}}
	if _, err := b.Build(t.Context(), Request{Recipe: viaLink, Import: func(context.Context, string) error { return nil }}, nil); err == nil {
		t.Errorf("an entry through a symlink out of the context was unpacked")
	}
	if _, err := b.Build(t.Context(), Request{Recipe: r, Ref: "main", Import: func(context.Context, string) error { return nil }}, nil); err == nil {
		t.Errorf("a recipe with a ref was accepted")
	}
	emptyDir(t, wd)
}

// TestBuildChrootIsolation builds with chroot isolation, for hosts where no
// OCI runtime works (its RUN steps then have the host's network).
func TestBuildChrootIsolation(t *testing.T) {
	needTools(t)
	repo := makeRepo(t)
	wd := t.TempDir()
	b := &Builder{WorkDir: wd, AllowLocal: true, Isolation: "chroot"}
	var log lines
	var built []byte
	_, err := b.Build(t.Context(), Request{Repo: repo.dir, Import: func(_ context.Context, rootfs string) (err error) {
		built, err = os.ReadFile(filepath.Join(rootfs, "built"))
		return err
	}}, log.add)
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	if string(built) != "built\n" || !strings.Contains(log.String(), "share the host's network") {
		t.Errorf("built %q; log:\n%s", built, log.String())
	}
	emptyDir(t, wd)
}

// TestConcurrentBuilds runs two builds of one Builder at once: each has
// storage of its own.
func TestConcurrentBuilds(t *testing.T) {
	needTools(t)
	repo := makeRepo(t)
	wd := t.TempDir()
	b := &Builder{WorkDir: wd, AllowLocal: true}
	var wg sync.WaitGroup
	for _, tc := range []struct{ ref, want string }{{"main", "one\n"}, {"two", "two\n"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got []byte
			_, err := b.Build(t.Context(), Request{Repo: repo.dir, Ref: tc.ref, Import: func(_ context.Context, rootfs string) (err error) {
				got, err = os.ReadFile(filepath.Join(rootfs, "srv/hello.txt"))
				return err
			}}, nil)
			if err != nil || string(got) != tc.want {
				t.Errorf("%s: %q, %v", tc.ref, got, err)
			}
		}()
	}
	wg.Wait()
	emptyDir(t, wd)
}

// BenchmarkBuild is one small Dockerfile's build end to end: a local fetch,
// buildah bud (two COPYs and a RUN), the image config, the mount, an import
// into an image store, and the cleanup.
func BenchmarkBuild(b *testing.B) {
	needTools(b)
	repo := makeRepo(b)
	st, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	imgs, err := image.New(b.Context(), image.Options{Dir: filepath.Join(b.TempDir(), "images"), Catalog: st})
	if err != nil {
		b.Fatal(err)
	}
	bd := &Builder{WorkDir: b.TempDir(), AllowLocal: true}
	var fetch, build, imp time.Duration
	for b.Loop() {
		res, err := bd.Build(b.Context(), Request{Repo: repo.dir, Import: func(ctx context.Context, rootfs string) error {
			_, err := imgs.Import(ctx, "bench", rootfs)
			return err
		}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		fetch, build, imp = fetch+res.Fetch, build+res.Buildah, imp+res.Import
	}
	n := float64(b.N)
	b.ReportMetric(fetch.Seconds()*1000/n, "fetch-ms/op")
	b.ReportMetric(build.Seconds()*1000/n, "buildah-ms/op")
	b.ReportMetric(imp.Seconds()*1000/n, "import-ms/op")
}

func TestSweep(t *testing.T) {
	wd := t.TempDir()
	for _, d := range []string{"build-1/storage/root", "build-2", "other"} {
		os.MkdirAll(filepath.Join(wd, d), 0o700)
	}
	os.WriteFile(filepath.Join(wd, "build-1/storage/root/f"), []byte("x"), 0o600)
	if err := (&Builder{WorkDir: wd}).Sweep(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(wd)
	if len(ents) != 1 || ents[0].Name() != "other" {
		t.Errorf("after Sweep: %v", ents)
	}
	if err := (&Builder{WorkDir: filepath.Join(wd, "missing")}).Sweep(); err != nil {
		t.Errorf("Sweep of a missing dir: %v", err)
	}
}

// TestSweepDetachesMounts: a mount left under a build's directory (a build
// killed mid-way) is detached, not emptied through.
func TestSweepDetachesMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	wd := t.TempDir()
	mp := filepath.Join(wd, "build-9", "storage", "mnt point")
	os.MkdirAll(mp, 0o700)
	if err := syscall.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mp, syscall.MNT_DETACH) })
	os.WriteFile(filepath.Join(mp, "f"), []byte("x"), 0o600)
	if err := (&Builder{WorkDir: wd}).Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(wd, "build-9")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("build-9 is still there: %v", err)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(filepath.Join(wd, "build-9"))) {
		t.Errorf("the mount is still there")
	}
}
