package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
	"golang.org/x/sys/unix"
)

// runtime drives an OCI runtime's command line: crun and runc share the
// verbs berth uses (run --detach, pause, resume, delete).
type runtime struct {
	path string
	crun bool   // crun takes --cgroup-manager; runc uses cgroupfs by default
	root string // --root
	// exe, when set, is a sealed in-memory copy of crun that commands run
	// from instead of path (see sealedCopy).
	exe *os.File
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
	if c := HybridControllers("/sys/fs/cgroup"); len(c) > 0 {
		return fmt.Errorf("crun refuses this hybrid cgroup host while the unified hierarchy has controllers (%s); run berth host setup, or install runc", strings.Join(c, " "))
	}
	return nil
}

// HybridControllers returns the controllers of the unified hierarchy
// (<root>/unified) of a hybrid cgroup host whose hierarchies are mounted
// under root, or nil: none, or root is a unified (cgroup v2) host or a
// legacy (v1 only) one.
func HybridControllers(root string) []string {
	var st syscall.Statfs_t
	if syscall.Statfs(root, &st) == nil && st.Type == cgroup2Magic {
		return nil // unified: fine
	}
	b, err := os.ReadFile(filepath.Join(root, "unified", "cgroup.controllers"))
	if err != nil {
		return nil // legacy v1 only: fine
	}
	return strings.Fields(string(b))
}

// cgroup2Magic is CGROUP2_SUPER_MAGIC.
const cgroup2Magic = 0x63677270

// cmd runs the runtime with args, its output appended to errFile (or
// returned in the error when errFile is "").
func (r runtime) cmd(ctx context.Context, errFile string, args ...string) error {
	return r.cmdWith(ctx, errFile, nil, false, args...)
}

// cmdWith is cmd with extra descriptors for the runtime (3 on), at nice
// proc.BackgroundNice with low: what the runtime starts (the container's
// init) inherits it.
func (r runtime) cmdWith(ctx context.Context, errFile string, extra []*os.File, low bool, args ...string) error {
	full := []string{"--root", r.root}
	if r.crun {
		full = append(full, "--cgroup-manager=cgroupfs")
	}
	full = append(full, args...)
	c := exec.CommandContext(ctx, r.path, full...)
	if r.exe != nil {
		// The same binary, but crun sees a sealed copy of itself and
		// does not make one: a second exec of itself saved per command.
		c.Path = "/proc/self/fd/" + strconv.Itoa(int(r.exe.Fd()))
		c.Args[0] = r.path
	}
	c.ExtraFiles = extra
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
	err := c.Run
	if low {
		err = func() error {
			if err := proc.StartNiced(c, proc.BackgroundNice); err != nil {
				return err
			}
			return c.Wait()
		}
	}
	if err := err(); err != nil {
		msg := strings.TrimSpace(buf.String())
		if errFile != "" {
			if b, rerr := os.ReadFile(errFile); rerr == nil {
				msg = replicadir.LastLines(string(b), 3)
			}
		}
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(r.path), args[0], err, msg)
	}
	return nil
}

// memfdSeals are the seals crun checks for on /proc/self/exe to know it
// already runs from a copy of itself that nobody can write to.
const memfdSeals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE

// sealedCopy returns a sealed memfd holding the binary at path, at a high
// descriptor number. crun, on every start, protects the host's binary
// from a container that would overwrite it through /proc/self/exe
// (CVE-2019-5736) by making such a copy of itself and exec'ing it: one
// more exec per command, ~6 ms on a 2-CPU VM, twice per replica (run and
// delete). Run from this copy, crun finds itself sealed and goes on at
// once; the protection is the same, the copy is made once per Driver.
func sealedCopy(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	fd, err := unix.MemfdCreate("crun_cloned:/proc/self/exe", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	mem := os.NewFile(uintptr(fd), "crun (sealed copy)")
	if _, err := io.Copy(mem, src); err != nil {
		mem.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(mem.Fd(), unix.F_ADD_SEALS, memfdSeals); err != nil {
		mem.Close()
		return nil, err
	}
	// Above any descriptor a child gets (stdio and ExtraFiles), which
	// exec.Cmd places before the kernel opens /proc/self/fd/N.
	high, err := unix.FcntlInt(mem.Fd(), unix.F_DUPFD_CLOEXEC, 100)
	mem.Close()
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(high), "crun (sealed copy)"), nil
}

// run creates and starts a container, detached: the runtime returns once
// the init runs.
func (r runtime) run(ctx context.Context, id, bundle, pidFile, errFile string, low bool) error {
	return r.cmdWith(ctx, errFile, nil, low, "run", "--detach", "--bundle", bundle, "--pid-file", pidFile, id)
}

// runWith is run with link passed to the container's init as its fd 3.
func (r runtime) runWith(ctx context.Context, id, bundle, pidFile, errFile string, link *os.File, low bool) error {
	return r.cmdWith(ctx, errFile, []*os.File{link}, low, "run", "--detach", "--preserve-fds", "1", "--bundle", bundle, "--pid-file", pidFile, id)
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
