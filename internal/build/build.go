// Package build builds a deployment's guest image from a Dockerfile, for
// the image-build job (POST /deployments/:id/build): it fetches the recipe
// (a git checkout, or a Recipe such as a Dockerfile manifest from an
// artifact store), runs Debian's buildah on it in storage private to the
// build, hands the resulting root filesystem tree to the caller's Import
// (berth's image store) and returns the commit built and the image's run
// configuration. Everything a build writes — the checkout, buildah's
// storage, the askpass helper — lives in one directory under the Builder's
// WorkDir and is removed when Build returns, success or not.
//
// It imports only the standard library and netguard, so the jobs framework
// can call it without the builder knowing anything of jobs.
package build

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/netguard"
)

// Defaults of Builder's zero fields.
const (
	// DefaultTimeout bounds a whole build (fetch, buildah, import), as
	// app-lb's APP_LB_BUILD_TIMEOUT_SECS does per step.
	DefaultTimeout = 30 * time.Minute
	// DefaultMaxBytes caps what one build may write to its work directory
	// (checkout plus buildah's storage, which holds the image at least
	// twice with the vfs driver).
	DefaultMaxBytes = 20 << 30
	// DefaultFetchTimeout bounds fetching the source.
	DefaultFetchTimeout = 5 * time.Minute
	// tailLines is how many of the last log lines a BuildError carries.
	tailLines = 20
)

// Builder holds the operator's settings; one Builder may run many builds
// at once, each in a directory of its own. The zero value builds with the
// defaults documented on each field, in os.TempDir (set WorkDir to a
// directory under berth's data dir: builds can be large).
type Builder struct {
	// WorkDir is where builds make their directories (build-*); it is
	// created when missing.
	WorkDir string
	// Buildah and Git are the programs run; "" looks up "buildah" and
	// "git" in PATH.
	Buildah, Git string
	// Isolation is buildah's --isolation for RUN steps: "oci" (default,
	// through Runtime) or "chroot". Only "oci" can run RUN steps without a
	// network (buildah refuses --network none with chroot), so chroot
	// builds' RUN steps share the host's network: use it only where no
	// OCI runtime works.
	Isolation string
	// Runtime is the OCI runtime for Isolation "oci"; "" picks runc when
	// it is installed (crun refuses hybrid cgroup hosts: "cgroups in
	// hybrid mode not supported"), else buildah's default.
	Runtime string
	// Network, when true, gives RUN steps the host's network (buildah
	// --network host); false (default) gives them none.
	Network bool
	// Pull is buildah's --pull policy for base images: "missing"
	// (default: each build has fresh storage, so that pulls every base
	// image a Dockerfile names), "never" or "always".
	Pull string
	// Memory caps each RUN step's memory (buildah --memory, bytes; 0:
	// 4 GiB; negative: no cap, for hosts without a memory cgroup). Only
	// with Isolation "oci": chroot has no cgroup to put it in.
	Memory int64
	// Procs caps each RUN step's processes (--ulimit nproc; 0: 1024;
	// negative: no cap).
	Procs int
	// Timeout bounds a whole build (0: DefaultTimeout); the context given
	// to Build may end it sooner.
	Timeout time.Duration
	// MaxBytes caps the bytes a build may write to its directory (0:
	// DefaultMaxBytes); a build that grows past it is stopped.
	MaxBytes int64
	// AllowLocal lets Repo be a local path or a file:// URL (tests, or an
	// operator's repositories on the host). Off, only https:// remotes
	// (and http:// with AllowHTTP) are fetched: git's file, ext, ssh and
	// git transports are refused — ext:: runs commands, file:// reads the
	// host's own repositories, ssh would use the host's keys.
	AllowLocal bool
	// AllowHTTP lets Repo be a plain http:// remote (a credential sent to
	// one travels in the clear).
	AllowHTTP bool
	// Self and AllowLinkLocal are the address walls the remote's host is
	// checked against (netguard.Refuse), after resolution; git is then
	// pinned to the checked addresses, so a name that resolves elsewhere
	// on git's own lookup does not matter.
	Self           *netguard.Self
	AllowLinkLocal bool
}

// Credential authenticates to an https git remote. It is handed to git
// through the environment of git's process and a GIT_ASKPASS helper that
// reads it from there: never in argv (visible in /proc to every user),
// never in a file, and it is redacted from every log line.
type Credential struct {
	// Username defaults to "x-access-token" (what GitHub expects with a
	// token; most forges accept any name with a token).
	Username string
	Token    string
}

// Recipe is a recipe fetched from elsewhere than git, such as a Dockerfile
// manifest (heyvm.dockerfile.v1) in an artifact store: the Dockerfile and a
// tarball of its build context (nil for an empty context). Build closes the
// context.
type Recipe interface {
	Fetch(ctx context.Context) (dockerfile []byte, contextTar io.ReadCloser, err error)
}

// Request is one build. Exactly one of Repo and Recipe is set.
type Request struct {
	// Repo is the git remote (https://…; see Builder.AllowLocal and
	// AllowHTTP for others). It must not carry a password: give it as Auth.
	Repo string
	// Ref is a branch, tag or commit (full hash, or an abbreviation the
	// remote's branches reach); "" builds the remote's default branch.
	Ref string
	// Dockerfile is the Dockerfile's path in the repository; "" looks in
	// Context, then at the repository's root, for Dockerfile,
	// Containerfile and dockerfile, in that order (see FindDockerfile).
	Dockerfile string
	// Context is the build context, a directory of the repository ("":
	// its root).
	Context string
	// Auth is the credential for an https Repo, or nil.
	Auth *Credential

	// Recipe is the recipe when there is no Repo.
	Recipe Recipe

	// Image is the name the caller imports the result as; Build only
	// reports it back (Result.Image) and uses it in log lines.
	Image string
	// Import receives the built image's root filesystem, a directory that
	// exists only during the call: import it (image.Store.Import(ctx,
	// name, rootfs)) before returning. Required.
	Import func(ctx context.Context, rootfs string) error
	// ImportResult, when set, is called instead of Import, with what the
	// Result says so far (Repo, Commit, Ref, Dockerfile, Config, Bytes):
	// for callers that name the image by its commit or keep its Config
	// with it.
	ImportResult func(ctx context.Context, rootfs string, res Result) error
}

// Config is the run configuration of the built image (its OCI config).
type Config struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"` // KEY=VALUE
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	// ExposedPorts as the Dockerfile's EXPOSE gave them ("8080/tcp"),
	// sorted; Port is the lowest TCP one, 0 when none.
	ExposedPorts []string          `json:"exposed_ports,omitempty"`
	Port         int               `json:"port,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// Result is what a successful build produced.
type Result struct {
	// Repo is the remote fetched, as git was given it (a local path as a
	// file:// URL); "" for a Recipe.
	Repo string
	// Commit is the full hash of the commit built (git sources only).
	Commit string
	// Ref is the ref requested ("" for the default branch).
	Ref string
	// Dockerfile is the Dockerfile's path in the repository, as found.
	Dockerfile string
	// Image is Request.Image.
	Image  string
	Config Config
	// Bytes is the root filesystem's size (the sum of its files' sizes).
	Bytes int64
	// Fetch, Buildah and Import are how long each step took.
	Fetch, Buildah, Import time.Duration
}

// BuildError is a failed build: the step that failed ("source",
// "dockerfile", "buildah", "import", ...) and the last log lines, which
// usually say why.
type BuildError struct {
	Step string
	Err  error
	Tail []string
}

func (e *BuildError) Error() string {
	s := "build: " + e.Step + ": " + e.Err.Error()
	if len(e.Tail) > 0 {
		s += "\nlast log lines:\n" + strings.Join(e.Tail, "\n")
	}
	return s
}

func (e *BuildError) Unwrap() error { return e.Err }

// ErrRefused is wrapped by errors about a request the builder's policy
// refuses (a transport, an address, a path escaping the checkout).
var ErrRefused = errors.New("refused")

// Build runs one build with a zero Builder (see Builder).
func Build(ctx context.Context, req Request, logf func(line string)) (Result, error) {
	var b Builder
	return b.Build(ctx, req, logf)
}

// Build fetches the recipe, builds it with buildah, passes the root
// filesystem to req.Import and removes everything it wrote. logf, when not
// nil, receives the build's log a line at a time (git's and buildah's
// output, and berth's own steps), with the credential redacted; it is
// called from one goroutine at a time.
func (b *Builder) Build(ctx context.Context, req Request, logf func(line string)) (Result, error) {
	lg := newLogger(logf, req.Auth)
	res := Result{Ref: req.Ref, Image: req.Image}
	fail := func(step string, err error) (Result, error) {
		return Result{}, &BuildError{Step: step, Err: lg.redactErr(err), Tail: lg.tail()}
	}
	if req.Import == nil && req.ImportResult == nil {
		return fail("request", errors.New("no Import function"))
	}
	if (req.Repo == "") == (req.Recipe == nil) {
		return fail("request", errors.New("exactly one of a git repository and a recipe is needed"))
	}
	if req.Recipe != nil && (req.Ref != "" || req.Dockerfile != "" || req.Context != "" || req.Auth != nil) {
		// A recipe names its own Dockerfile and context (and fetches with
		// its own credential), as the contract's BuildSpec says.
		return fail("request", errors.New("ref, dockerfile, context and auth are for git sources only"))
	}
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	wd := b.WorkDir
	if wd == "" {
		wd = os.TempDir()
	}
	if err := os.MkdirAll(wd, 0o700); err != nil {
		return fail("workdir", err)
	}
	dir, err := os.MkdirTemp(wd, "build-")
	if err != nil {
		return fail("workdir", err)
	}
	id := filepath.Base(dir)
	defer func() {
		if err := removeBuildDir(dir); err != nil {
			lg.line("cleanup: " + err.Error())
		}
	}()

	// The source.
	start := time.Now()
	var ctxDir, dfPath string
	if req.Repo != "" {
		src := filepath.Join(dir, "src")
		commit, rem, err := b.fetchGit(ctx, dir, src, req, lg)
		if err != nil {
			return fail("source", err)
		}
		res.Commit, res.Repo = commit, redactURL(rem)
		ctxDir, dfPath, res.Dockerfile, err = FindDockerfile(src, req.Context, req.Dockerfile)
		if err != nil {
			return fail("dockerfile", err)
		}
		lg.line(fmt.Sprintf("building %s at %s with %s", res.Repo, commit, res.Dockerfile))
	} else {
		ctxDir, dfPath, err = fetchRecipe(ctx, dir, req.Recipe)
		if err != nil {
			return fail("source", err)
		}
		res.Dockerfile = "Dockerfile"
	}
	res.Fetch = time.Since(start)

	// The image.
	start = time.Now()
	bd, err := b.newBuildah(dir, id, lg)
	if err != nil {
		return fail("buildah", err)
	}
	defer bd.cleanup()
	if err := bd.build(ctx, ctxDir, dfPath, b.maxBytes()); err != nil {
		return fail("buildah", err)
	}
	res.Config, err = bd.config(ctx)
	if err != nil {
		return fail("buildah", err)
	}
	rootfs, err := bd.mount(ctx)
	if err != nil {
		return fail("buildah", err)
	}
	res.Buildah = time.Since(start)
	res.Bytes, err = treeBytes(rootfs)
	if err != nil {
		return fail("buildah", err)
	}
	lg.line(fmt.Sprintf("built %d bytes in %s", res.Bytes, res.Buildah.Round(time.Millisecond)))

	start = time.Now()
	if req.ImportResult != nil {
		err = req.ImportResult(ctx, rootfs, res)
	} else {
		err = req.Import(ctx, rootfs)
	}
	if err != nil {
		return fail("import", err)
	}
	res.Import = time.Since(start)
	return res, nil
}

// Sweep removes the build directories a previous berth left in WorkDir
// (it stopped mid-build), detaching their mounts first. Call it before
// any build starts: it removes running builds' directories too.
func (b *Builder) Sweep() error {
	if b.WorkDir == "" {
		return nil // os.TempDir is not berth's to sweep
	}
	ents, err := os.ReadDir(b.WorkDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("build: sweep: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "build-") {
			if err := removeBuildDir(filepath.Join(b.WorkDir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("build: sweep: %w", err)
	}
	return nil
}

func (b *Builder) maxBytes() int64 {
	if b.MaxBytes > 0 {
		return b.MaxBytes
	}
	return DefaultMaxBytes
}

func (b *Builder) program(set, name string) (string, error) {
	if set != "" {
		return set, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed: %w", name, err)
	}
	return p, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
