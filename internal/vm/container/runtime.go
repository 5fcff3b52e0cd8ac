package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// runtime drives an OCI runtime's command line: crun and runc share the
// verbs berth uses (run --detach, pause, resume, delete).
type runtime struct {
	path string
	crun bool   // crun takes --cgroup-manager; runc uses cgroupfs by default
	root string // --root
}

// FindRuntime returns the OCI runtime the driver would use: name (crun,
// runc or a path) when given, else crun when it can run on this host, else
// runc. The error says what is missing.
func FindRuntime(name string) (path string, err error) {
	rt, err := findRuntime(name)
	return rt.path, err
}

func findRuntime(name string) (runtime, error) {
	if name != "" {
		p, err := lookRuntime(name)
		if err != nil {
			return runtime{}, err
		}
		rt := runtime{path: p, crun: strings.Contains(filepath.Base(p), "crun")}
		if rt.crun {
			if err := CrunCgroupProblem(); err != nil {
				return runtime{}, err
			}
		}
		return rt, nil
	}
	var why []string
	if p, err := lookRuntime("crun"); err != nil {
		why = append(why, err.Error())
	} else if err := CrunCgroupProblem(); err != nil {
		why = append(why, err.Error())
	} else {
		return runtime{path: p, crun: true}, nil
	}
	if p, err := lookRuntime("runc"); err == nil {
		return runtime{path: p}, nil
	} else {
		why = append(why, err.Error())
	}
	return runtime{}, errors.New(strings.Join(why, "; "))
}

// CrunCgroupProblem reports why crun cannot manage cgroups here, or nil:
// on a hybrid cgroup host (v1 controllers, and a cgroup2 hierarchy at
// /sys/fs/cgroup/unified) crun refuses to start containers while the
// unified hierarchy has any controller. `berth host setup` binds such
// controllers to v1 hierarchies of their own to make crun work.
func CrunCgroupProblem() error {
	var st syscall.Statfs_t
	if syscall.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == cgroup2Magic {
		return nil // unified: fine
	}
	b, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers")
	if err != nil {
		return nil // legacy v1 only: fine
	}
	if c := strings.TrimSpace(string(b)); c != "" {
		return fmt.Errorf("crun refuses this hybrid cgroup host while the unified hierarchy has controllers (%s); run berth host setup, or install runc", c)
	}
	return nil
}

// cgroup2Magic is CGROUP2_SUPER_MAGIC.
const cgroup2Magic = 0x63677270

// cmd runs the runtime with args, its output appended to errFile (or
// returned in the error when errFile is "").
func (r runtime) cmd(ctx context.Context, errFile string, args ...string) error {
	full := []string{"--root", r.root}
	if r.crun {
		full = append(full, "--cgroup-manager=cgroupfs")
	}
	full = append(full, args...)
	c := exec.CommandContext(ctx, r.path, full...)
	var buf bytes.Buffer
	if errFile != "" {
		f, err := os.OpenFile(errFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		// A file, not a pipe: the container's init inherits it, and a
		// pipe would keep the runtime's caller waiting for the init.
		c.Stdout, c.Stderr = f, f
	} else {
		c.Stdout, c.Stderr = &buf, &buf
	}
	if err := c.Run(); err != nil {
		msg := strings.TrimSpace(buf.String())
		if errFile != "" {
			if b, rerr := os.ReadFile(errFile); rerr == nil {
				msg = lastLines(string(b), 3)
			}
		}
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(r.path), args[0], err, msg)
	}
	return nil
}

// run creates and starts a container, detached: the runtime returns once
// the init runs.
func (r runtime) run(ctx context.Context, id, bundle, pidFile, errFile string) error {
	return r.cmd(ctx, errFile, "run", "--detach", "--bundle", bundle, "--pid-file", pidFile, id)
}

func (r runtime) pause(ctx context.Context, id string) error  { return r.cmd(ctx, "", "pause", id) }
func (r runtime) resume(ctx context.Context, id string) error { return r.cmd(ctx, "", "resume", id) }

// delete removes a container; one the runtime does not know is not an
// error (a start interrupted before create, or a second Stop).
func (r runtime) delete(ctx context.Context, id string) error {
	err := r.cmd(ctx, "", "delete", "--force", id)
	if err == nil {
		return nil
	}
	if _, serr := os.Stat(filepath.Join(r.root, id)); errors.Is(serr, os.ErrNotExist) {
		return nil
	}
	return err
}
