// Package replicadir is the per-replica state directory every local driver
// keeps: <Root>/<id>/ with a state.json holding what re-adoption needs. It
// validates ids (a replica name berth gives, safe as one path element),
// writes the state atomically, loads one replica's state and lists them all.
// What else lives in a replica directory is the driver's own.
package replicadir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
	"github.com/berth-dev/berth/internal/vm/proc"
)

// StateFile is the name of a replica's state inside its directory.
const StateFile = "state.json"

// ValidID reports whether id is a replica name berth gives and is safe as a
// single path element (and, having no commas, in QEMU's option syntax).
func ValidID(id string) bool {
	if _, ok := vm.ParseName(id); !ok {
		return false
	}
	for _, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// WriteAtomic replaces dir/name by rename, so no reader sees half of it.
func WriteAtomic(dir, name string, b []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && perm != 0o600 {
		err = os.Chmod(tmp.Name(), perm)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// WriteState replaces the state file of the replica directory dir.
func WriteState(dir string, st any) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return WriteAtomic(dir, StateFile, b, 0o600)
}

// Dir is a driver's root of replica directories; S is its state type.
type Dir[S any] struct {
	// Root is the directory holding one directory per replica.
	Root string
	// Driver names the driver in errors and log lines ("process").
	Driver string
	// Log receives replicas skipped by States (a corrupt state file).
	Log *slog.Logger
	// ID is the replica id a state records.
	ID func(S) string
	// Empty is the state of a replica whose directory has no state file
	// yet (a start interrupted before it wrote one); its pid is 0.
	Empty func(id, deployment string) S

	mu       sync.Mutex
	starting map[string]bool        // ids claimed by a Start that has not returned
	locks    map[string]*sync.Mutex // per id: see Lock
}

// Lock serializes the operations that change replica id's sandbox and
// state (Stop, Suspend, Resume) within this process, and returns the
// unlock. A Stop that removed the replica calls Forget while it holds it.
func (d *Dir[S]) Lock(id string) (unlock func()) {
	d.mu.Lock()
	l, ok := d.locks[id]
	if !ok {
		if d.locks == nil {
			d.locks = make(map[string]*sync.Mutex)
		}
		l = new(sync.Mutex)
		d.locks[id] = l
	}
	d.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Forget drops replica id's lock (it was removed).
func (d *Dir[S]) Forget(id string) {
	d.mu.Lock()
	delete(d.locks, id)
	d.mu.Unlock()
}

// Claim makes replica id's directory for a Start, which fails if the
// replica exists already, and marks the replica starting (Starting) until
// release is called, when the Start returns.
func (d *Dir[S]) Claim(id string) (release func(), err error) {
	d.mu.Lock()
	err = os.Mkdir(d.Path(id), 0o700)
	if err == nil {
		if d.starting == nil {
			d.starting = make(map[string]bool)
		}
		d.starting[id] = true
	}
	d.mu.Unlock()
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s: start %s: the replica already exists", d.Driver, id)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", d.Driver, id, err)
	}
	return func() {
		d.mu.Lock()
		delete(d.starting, id)
		d.mu.Unlock()
	}, nil
}

// Starting reports whether a Start of replica id in this process has
// claimed it and not returned yet.
func (d *Dir[S]) Starting(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.starting[id]
}

// CheckSpec checks what every driver requires of a spec: a replica name
// berth gives, of the spec's deployment; a port in range; a known size
// class; a known owner kind with an id, if an owner is set; environment variable names (and values) the kernel takes; no NUL
// in the command, working directory and setup hooks. It returns the
// deployment the name belongs to and the size; the error says what is
// wrong, for the driver to prefix.
func CheckSpec(spec vm.Spec) (owner string, size vm.Size, err error) {
	if !ValidID(spec.Name) {
		return "", size, fmt.Errorf("not a replica name (want %s<deployment>-<12 hex digits>)", vm.NamePrefix)
	}
	owner, _ = vm.ParseName(spec.Name)
	if spec.Deployment != "" && spec.Deployment != owner {
		return "", size, fmt.Errorf("the name belongs to deployment %q, not %q", owner, spec.Deployment)
	}
	if !spec.Owner.IsZero() && (spec.Owner.ID == "" || spec.Owner.Kind != vm.OwnerDeployment && spec.Owner.Kind != vm.OwnerComputer) {
		return "", size, fmt.Errorf("bad owner %q", spec.Owner)
	}
	if spec.Port < 0 || spec.Port > 65535 {
		return "", size, fmt.Errorf("port %d out of range", spec.Port)
	}
	class := spec.SizeClass
	if class == "" {
		class = vm.DefaultSize
	}
	size, ok := vm.Sizes[class]
	if !ok {
		return "", size, fmt.Errorf("unknown size class %q", spec.SizeClass)
	}
	for k, v := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return "", size, fmt.Errorf("bad environment variable %q", k)
		}
	}
	if strings.ContainsRune(spec.Command, 0) || strings.ContainsRune(spec.WorkDir, 0) {
		return "", size, errors.New("NUL byte in command or working directory")
	}
	for _, h := range spec.SetupHooks {
		if strings.ContainsRune(h, 0) {
			return "", size, errors.New("NUL byte in a setup hook")
		}
	}
	return owner, size, nil
}

// CheckMounts checks a Mounter's Spec.Mounts (see vm.Mount): each Source
// an existing directory; each Target a clean absolute path other than /,
// neither equal to nor nested with another's, nor with /workspace (where
// a Workspace appears) when the spec has one; and, unless writable, each
// mount read-only. workspace is where the driver shows a Workspace. The
// error names the mount.
func CheckMounts(spec vm.Spec, writable bool, workspace string) error {
	for i, m := range spec.Mounts {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("mounts[%d] (%s): %s", i, m, fmt.Sprintf(format, args...))
		}
		if !filepath.IsAbs(m.Source) || strings.ContainsRune(m.Source, 0) {
			return bad("the source is not an absolute path")
		}
		if fi, err := os.Stat(m.Source); err != nil {
			return bad("the source: %v", err)
		} else if !fi.IsDir() {
			return bad("the source is not a directory")
		}
		t := m.Target
		switch {
		case !filepath.IsAbs(t) || strings.ContainsRune(t, 0):
			return bad("the target must be an absolute path")
		case filepath.Clean(t) != t:
			return bad("the target must be a clean path (no trailing /, // or . and .. parts)")
		case t == "/":
			return bad("cannot mount over /")
		case spec.Workspace != "" && nests(t, workspace):
			return bad("the target collides with the workspace at %s", workspace)
		}
		for j, o := range spec.Mounts[:i] {
			if nests(t, o.Target) {
				return bad("the target nests with mounts[%d] (%s)", j, o)
			}
		}
		if !m.ReadOnly && !writable {
			return bad("this driver attaches mounts read-only only")
		}
	}
	return nil
}

// nests reports whether clean absolute paths a and b are equal or one
// lies in the other.
func nests(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// NoMounts refuses a spec with mounts on a driver that is no vm.Mounter,
// rather than start a replica without them.
func NoMounts(driver string, spec vm.Spec) error {
	if len(spec.Mounts) > 0 {
		return fmt.Errorf("the %s driver cannot attach mounts (%s): it is no vm.Mounter", driver, spec.Mounts[0])
	}
	return nil
}

// CheckWorkspace checks a Spec.Workspace: an absolute path to an existing
// directory.
func CheckWorkspace(path string) error {
	if !filepath.IsAbs(path) || strings.ContainsRune(path, 0) {
		return fmt.Errorf("workspace %q is not an absolute path", path)
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return fmt.Errorf("workspace %q is not a directory", path)
	}
	return nil
}

// Path is a path inside replica id's directory (the directory itself
// without names).
func (d *Dir[S]) Path(id string, name ...string) string {
	return filepath.Join(append([]string{d.Root, id}, name...)...)
}

// NotFound is the error for an unknown replica id.
func (d *Dir[S]) NotFound(id string) error {
	return fmt.Errorf("%s: %q: %w", d.Driver, id, vm.ErrNotFound)
}

// Exists reports whether id is valid and has a directory.
func (d *Dir[S]) Exists(id string) bool {
	if !ValidID(id) {
		return false
	}
	fi, err := os.Stat(d.Path(id))
	return err == nil && fi.IsDir()
}

// Load reads a replica's state. It returns an error wrapping vm.ErrNotFound
// for an invalid id or one without a directory.
func (d *Dir[S]) Load(id string) (S, error) {
	var zero S
	if !ValidID(id) {
		return zero, d.NotFound(id)
	}
	b, err := os.ReadFile(d.Path(id, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(d.Path(id)); err != nil {
			return zero, fmt.Errorf("%s: %s: %w", d.Driver, id, vm.ErrNotFound)
		}
		owner, _ := vm.ParseName(id)
		return d.Empty(id, owner), nil
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %s: %w", d.Driver, id, err)
	}
	var st S
	if err := json.Unmarshal(b, &st); err != nil {
		return zero, fmt.Errorf("%s: %s: corrupt %s: %w", d.Driver, id, StateFile, err)
	}
	if got := d.ID(st); got != id {
		return zero, fmt.Errorf("%s: %s: %s names %q", d.Driver, id, StateFile, got)
	}
	return st, nil
}

// States loads every replica under Root, skipping (and logging) those whose
// state cannot be read.
func (d *Dir[S]) States() ([]S, error) {
	ents, err := os.ReadDir(d.Root)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Driver, err)
	}
	var sts []S
	for _, e := range ents {
		if !e.IsDir() || !ValidID(e.Name()) {
			continue
		}
		st, err := d.Load(e.Name())
		if err != nil {
			if !errors.Is(err, vm.ErrNotFound) && d.Log != nil {
				d.Log.Warn(d.Driver+": skipping replica", "id", e.Name(), "err", err)
			}
			continue
		}
		sts = append(sts, st)
	}
	return sts, nil
}

// Inspect loads replica id and describes it with instance.
func (d *Dir[S]) Inspect(id string, instance func(S) vm.Instance) (vm.Instance, error) {
	st, err := d.Load(id)
	if err != nil {
		return vm.Instance{}, err
	}
	return instance(st), nil
}

// List describes every replica under Root with instance.
func (d *Dir[S]) List(instance func(S) vm.Instance) ([]vm.Instance, error) {
	sts, err := d.States()
	if err != nil {
		return nil, err
	}
	insts := make([]vm.Instance, 0, len(sts))
	for _, st := range sts {
		insts = append(insts, instance(st))
	}
	return insts, nil
}

// TailLines is how many output lines a failure Reason ends with.
const TailLines = 5

// WithTail appends the last output lines of a replica to a Reason.
func WithTail(reason string, tail []string) string {
	if len(tail) == 0 {
		return reason
	}
	return reason + "; last output:\n" + strings.Join(tail, "\n")
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitPoll is how often Wait looks at a replica that has no process to
// wait on (one being started, or suspended to disk).
const waitPoll = 50 * time.Millisecond

// Wait is vm.Waiter's Wait for a driver whose replica runs while one host
// process does (its agent, its container's init, its VMM), which process
// names: it waits on that process (a pidfd, not a poll) and returns once
// instance reports the replica terminal. A replica that goes away meanwhile
// (stopped) ends the wait with an error wrapping vm.ErrNotFound.
func (d *Dir[S]) Wait(ctx context.Context, id string, instance func(S) vm.Instance, process func(S) (pid int, startTicks uint64)) (vm.Instance, error) {
	for {
		st, err := d.Load(id)
		if err != nil {
			return vm.Instance{}, err
		}
		inst := instance(st)
		if inst.State.Terminal() {
			return inst, nil
		}
		if pid, ticks := process(st); proc.Alive(pid, ticks) {
			if err := proc.Wait(ctx, pid, ticks); err != nil {
				return vm.Instance{}, err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return vm.Instance{}, ctx.Err()
		case <-time.After(waitPoll):
		}
	}
}

// LeaseFile is the name of a replica's lease deadline (Spec.TTL,
// vm.Leaser), in unix seconds as package agent reads it.
const LeaseFile = "lease"

// WriteLease replaces the lease file in dir atomically, so that its reader
// (the agent, or a driver after a restart) never sees half a deadline.
func WriteLease(dir string, until time.Time, perm fs.FileMode) error {
	return WriteAtomic(dir, LeaseFile, agent.FormatLease(until), perm)
}

// ReadLease reads the lease file in dir.
func ReadLease(dir string) (time.Time, bool) {
	b, err := os.ReadFile(filepath.Join(dir, LeaseFile))
	if err != nil {
		return time.Time{}, false
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(secs, 0), true
}

// Renew is vm.Leaser's Renew for the lease file of replica id, in the
// directory sub inside its replica directory: it returns an error wrapping
// vm.ErrNotFound for an unknown replica or one stopped meanwhile.
func (d *Dir[S]) Renew(ctx context.Context, id string, until time.Time, perm fs.FileMode, sub ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !d.Exists(id) {
		return fmt.Errorf("%s: renew %s: %w", d.Driver, id, vm.ErrNotFound)
	}
	if err := WriteLease(d.Path(id, sub...), until, perm); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// Stopped meanwhile: its directory went away.
			return fmt.Errorf("%s: renew %s: %w", d.Driver, id, vm.ErrNotFound)
		}
		return fmt.Errorf("%s: renew %s: %w", d.Driver, id, err)
	}
	return nil
}

// Ended reports whether replica id is in a terminal state, as instance
// describes it; an error wraps vm.ErrNotFound once it is gone.
func (d *Dir[S]) Ended(id string, instance func(S) vm.Instance) (bool, error) {
	st, err := d.Load(id)
	if err != nil {
		return false, err
	}
	return instance(st).State.Terminal(), nil
}

// Logs is vm.LogReader's Logs over the log file at name inside replica
// id's directory, read with read: console.ReadRotated for an agent log of
// its own, console.ReadLogs for a serial console.
func (d *Dir[S]) Logs(id string, n int, read func(path string, n int) ([]vm.LogLine, error), name ...string) ([]vm.LogLine, error) {
	if _, err := d.Load(id); err != nil {
		return nil, err
	}
	lines, err := read(d.Path(id, name...), n)
	if err != nil {
		return nil, fmt.Errorf("%s: logs of %s: %w", d.Driver, id, err)
	}
	return lines, nil
}

// FollowLogs is vm.LogFollower's FollowLogs over the log file at name
// inside replica id's directory, followed with follow (console.Follow or
// console.FollowRotated) until ctx ends or the replica, as instance
// describes it, has ended; it returns an error wrapping vm.ErrNotFound if
// the replica is stopped meanwhile.
func (d *Dir[S]) FollowLogs(ctx context.Context, id string, w io.Writer, instance func(S) vm.Instance,
	follow func(ctx context.Context, path string, w io.Writer, ended func() (bool, error)) error, name ...string) error {
	if _, err := d.Load(id); err != nil {
		return err
	}
	err := follow(ctx, d.Path(id, name...), w, func() (bool, error) { return d.Ended(id, instance) })
	if err != nil && !errors.Is(err, vm.ErrNotFound) {
		return fmt.Errorf("%s: logs of %s: %w", d.Driver, id, err)
	}
	return err
}

// ProcessUsage is vm.UsageReader's Usage for a replica that is one host
// process while it runs (a VMM), which process names (pid 0 when it is not
// running, or is suspended): the process's resident memory and its CPU use
// since the previous reading (m) or since start.
func (d *Dir[S]) ProcessUsage(id string, m *proc.CPUMeter, process func(S) (pid int, startTicks uint64, start time.Time)) (vm.Usage, error) {
	st, err := d.Load(id)
	if err != nil {
		return vm.Usage{}, err
	}
	pid, ticks, start := process(st)
	if !proc.Alive(pid, ticks) {
		return vm.Usage{}, nil
	}
	mem, cpu, ok := m.Process(id, pid, start)
	if !ok {
		return vm.Usage{}, nil
	}
	return vm.Usage{MemoryBytes: mem, CPUPercent: cpu}, nil
}

// DialUnix is vm.AgentDialer's DialAgent for an agent that listens on the
// unix socket at name inside replica id's directory.
func (d *Dir[S]) DialUnix(ctx context.Context, id string, name ...string) (net.Conn, error) {
	if _, err := d.Load(id); err != nil {
		return nil, err
	}
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", d.Path(id, name...))
	if err != nil {
		return nil, fmt.Errorf("%s: agent of %s: %w", d.Driver, id, err)
	}
	return c, nil
}

// AgentExit describes inst from the exit file at exitPath, which the agent
// (package agent, --exit-file) writes when the app ends, and the app's log
// at logPath: exited, with the app's exit code and the agent's reason and
// the last output; or failed when the file is unreadable and the agent is
// gone (alive is false). It reports whether the file decided the state.
func AgentExit(inst *vm.Instance, exitPath, logPath string, alive bool) bool {
	b, err := os.ReadFile(exitPath)
	if err != nil {
		return false
	}
	var ex struct {
		ExitCode int    `json:"exit_code"`
		Reason   string `json:"reason"`
	}
	if err := json.Unmarshal(b, &ex); err == nil {
		inst.State = vm.StateExited
		inst.ExitCode = &ex.ExitCode
		inst.Reason = WithTail(ex.Reason, console.AppTail(logPath, TailLines))
		return true
	}
	if !alive {
		inst.State = vm.StateFailed
		inst.Reason = WithTail("the agent left an unreadable "+filepath.Base(exitPath), console.AppTail(logPath, TailLines))
		return true
	}
	return false
}

// ChownTree gives dir and everything under it (symbolic links themselves,
// not what they name) to uid:gid: a replica's own workspace copy, seeded
// by berth as root, handed to the user its sandbox runs as (Spec.User),
// who could not write it otherwise.
func ChownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
