package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of the RUN steps' caps.
const (
	defaultMemory = 4 << 30
	defaultProcs  = 1024
	// sizeEvery is how often a running build's directory is measured
	// against MaxBytes.
	sizeEvery = 2 * time.Second
	// cleanupTimeout bounds removing a build's containers and images.
	cleanupTimeout = time.Minute
)

// buildah runs one build's buildah commands against storage of its own:
// the vfs driver (overlay needs kernel support a container host may lack;
// vfs works everywhere, at the price of a full copy per layer) under the
// build's directory, so berth's builds never touch the host's container
// storage and removing the directory removes everything.
type buildah struct {
	bin    string
	global []string
	env    []string
	tag    string
	ctr    string
	b      *Builder
	lg     *logger
	dir    string
}

func (b *Builder) newBuildah(dir, id string, lg *logger) (*buildah, error) {
	bin, err := b.program(b.Buildah, "buildah")
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "storage", "root")
	runroot := filepath.Join(dir, "storage", "run")
	tmp := filepath.Join(dir, "tmp")
	home := filepath.Join(dir, "home")
	for _, d := range []string{root, runroot, tmp, home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	// A storage.conf of its own: the host's could add image stores or
	// options that reach outside the build's directory.
	conf := filepath.Join(dir, "storage.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("[storage]\ndriver = \"vfs\"\nrunroot = %q\ngraphroot = %q\n", runroot, root)), 0o600); err != nil {
		return nil, err
	}
	auth := filepath.Join(dir, "registry-auth.json")
	if err := os.WriteFile(auth, []byte(`{"auths":{}}`+"\n"), 0o600); err != nil {
		return nil, err
	}
	return &buildah{
		bin:    bin,
		global: []string{"--storage-driver", "vfs", "--root", root, "--runroot", runroot},
		// REGISTRY_AUTH_FILE names an empty one: base images are pulled
		// anonymously, never with registry logins the host's root has
		// (/run/containers/0/auth.json).
		env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp, "LC_ALL=C",
			"CONTAINERS_STORAGE_CONF=" + conf, "REGISTRY_AUTH_FILE=" + auth},
		tag: "localhost/berth-" + strings.ToLower(id) + ":latest",
		b:   b, lg: lg, dir: dir,
	}, nil
}

func (bd *buildah) args(a ...string) []string { return append(slices.Clip(bd.global), a...) }

// build runs buildah bud, stopping it when the build's directory grows
// past maxBytes.
func (bd *buildah) build(ctx context.Context, ctxDir, dockerfile string, maxBytes int64) error {
	b := bd.b
	iso := b.Isolation
	if iso == "" {
		iso = "oci"
	}
	if iso != "oci" && iso != "chroot" {
		return fmt.Errorf("isolation %q: want oci or chroot", iso)
	}
	args := []string{"bud", "--isolation", iso}
	if iso == "oci" {
		rt := b.Runtime
		if rt == "" {
			rt, _ = exec.LookPath("runc")
		}
		if rt != "" {
			args = append(args, "--runtime", rt)
		}
	}
	switch {
	case b.Network:
		args = append(args, "--network", "host")
	case iso == "oci":
		args = append(args, "--network", "none")
	default:
		bd.lg.line("warning: chroot isolation: RUN steps share the host's network")
	}
	pull := b.Pull
	if pull == "" {
		pull = "missing"
	}
	mem, procs := b.Memory, b.Procs
	if mem == 0 {
		mem = defaultMemory
	}
	if procs == 0 {
		procs = defaultProcs
	}
	if iso == "oci" && mem > 0 {
		// A memory cgroup needs the OCI runtime; chroot has none.
		args = append(args, "--memory", strconv.FormatInt(mem, 10))
	}
	if procs > 0 {
		args = append(args, "--ulimit", fmt.Sprintf("nproc=%d:%d", procs, procs))
	}
	args = append(args, "--pull="+pull, "--layers=false", "--format", "oci",
		"-f", dockerfile, "-t", bd.tag, ctxDir)

	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(sizeEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if n, _ := treeBytes(bd.dir); n > maxBytes {
					stop(fmt.Errorf("the build wrote more than %d bytes (%d)", maxBytes, n))
					return
				}
			}
		}
	}()
	return run(wctx, bd.lg, bd.bin, bd.args(args...), bd.env, ctxDir)
}

// ociConfig is the part of buildah inspect's output Build reports.
type ociConfig struct {
	OCIv1 struct {
		Config struct {
			User         string              `json:"User"`
			ExposedPorts map[string]struct{} `json:"ExposedPorts"`
			Env          []string            `json:"Env"`
			Entrypoint   []string            `json:"Entrypoint"`
			Cmd          []string            `json:"Cmd"`
			WorkingDir   string              `json:"WorkingDir"`
			Labels       map[string]string   `json:"Labels"`
		} `json:"config"`
	} `json:"OCIv1"`
}

func (bd *buildah) config(ctx context.Context) (Config, error) {
	out, err := output(ctx, bd.lg, bd.bin, bd.args("inspect", "--type", "image", bd.tag), bd.env, bd.dir)
	if err != nil {
		return Config{}, err
	}
	var oc ociConfig
	if err := json.Unmarshal([]byte(out), &oc); err != nil {
		return Config{}, fmt.Errorf("buildah inspect: %w", err)
	}
	c := oc.OCIv1.Config
	cfg := Config{Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Labels: c.Labels}
	for p := range c.ExposedPorts {
		cfg.ExposedPorts = append(cfg.ExposedPorts, p)
		num, proto, _ := strings.Cut(p, "/")
		if n, err := strconv.Atoi(num); err == nil && n > 0 && n < 65536 && (proto == "" || proto == "tcp") && (cfg.Port == 0 || n < cfg.Port) {
			cfg.Port = n
		}
	}
	slices.Sort(cfg.ExposedPorts)
	return cfg, nil
}

// mount makes a working container of the image and returns its root
// filesystem: with vfs, a plain directory holding the image's tree.
func (bd *buildah) mount(ctx context.Context) (string, error) {
	out, err := output(ctx, bd.lg, bd.bin, bd.args("from", "--pull=never", "--quiet", bd.tag), bd.env, bd.dir)
	if err != nil {
		return "", err
	}
	bd.ctr = strings.TrimSpace(out)
	if bd.ctr == "" {
		return "", errors.New("buildah from named no container")
	}
	out, err = output(ctx, bd.lg, bd.bin, bd.args("mount", bd.ctr), bd.env, bd.dir)
	if err != nil {
		return "", err
	}
	p := strings.TrimSpace(out)
	if r, err := filepath.Rel(bd.dir, p); err != nil || !filepath.IsLocal(r) {
		return "", fmt.Errorf("buildah mounted the image at %q, outside the build's storage", p)
	}
	return p, nil
}

// cleanup removes the build's containers and images from its storage (the
// directory itself is removed afterwards), on a context of its own: it
// runs after a build stopped because its context ended too.
func (bd *buildah) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	quiet := newLogger(nil, nil)
	if bd.ctr != "" {
		_ = run(ctx, quiet, bd.bin, bd.args("umount", bd.ctr), bd.env, bd.dir)
	}
	if err := run(ctx, quiet, bd.bin, bd.args("rm", "--all"), bd.env, bd.dir); err != nil {
		bd.lg.line("cleanup: " + err.Error() + ": " + strings.Join(quiet.tail(), "; "))
	}
	if err := run(ctx, quiet, bd.bin, bd.args("rmi", "--all", "--force"), bd.env, bd.dir); err != nil {
		bd.lg.line("cleanup: " + err.Error() + ": " + strings.Join(quiet.tail(), "; "))
	}
}

// treeBytes is the sum of the sizes of the regular files under dir (not
// following links). Files vanishing while it walks are skipped.
func treeBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n, err
}

// removeBuildDir removes a build's directory, after detaching whatever is
// still mounted under it (a build stopped halfway may leave buildah's
// mounts): removing files through a live mount could reach outside it.
func removeBuildDir(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return fmt.Errorf("%s: %w (left in place)", dir, err)
	}
	return os.RemoveAll(dir)
}
