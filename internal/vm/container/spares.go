package container

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
	sparepool "github.com/berth-dev/berth/internal/vm/spares"
)

// Spare containers: the rules are in the package documentation
// ("Spares").

// DefaultSpares is how many idle containers a Driver keeps ready per
// image and size class when Options.Spares is nil.
const DefaultSpares = 1

// maxSpareKinds bounds the image and size class pairs a Driver keeps
// spares for: the ones most recently started.
const maxSpareKinds = 4

// spareRoom is the length of the --spare-room argument: room on a spare's
// command line for the assigned arguments (see package agent).
const spareRoom = 2048

// spareReady bounds the wait for a new spare's agent to listen, and a
// Start's wait for a spare that is being made.
const spareReady = 30 * time.Second

// spareWait bounds how long a Start waits for a spare under way before it
// starts cold.
const spareWait = 5 * time.Second

// sparePrefix starts the directory names of spares; never a replica id.
const sparePrefix = ".spare-"

// spareFile is a spare's state.json: what cleaning it up needs.
const spareFile = "spare.json"

// spareKind is what a spare is made for: a replica of another image or
// size class cannot use it.
type spareKind struct{ image, class string }

// spare is a created container whose agent waits for its replica.
type spare struct {
	kind  spareKind
	lower string // the image tree its overlay is over
	st    state  // ID is the directory name; PID, StartTicks, Cgroup, RuntimeID
	link  *os.File
	// low says it was made in the background (after a StartBackground):
	// at a low CPU priority, which assign changes for a Start.
	low bool
}

// newPool is the driver's pool of n spares per kind.
func (d *Driver) newPool(n int) *sparepool.Pool[spareKind, *spare] {
	return sparepool.New(sparepool.Config[spareKind, *spare]{
		N:    n,
		Drop: d.dropSpare,
		Failed: func(k spareKind, err error, _ int) {
			d.log.Warn("container: making a spare container failed", "image", k.image, "err", err)
		},
	})
}

// spareEligible reports whether spec can start from a spare: a spare has
// no workspace bind mount, no mounts (Spec.Mounts: its container runs
// already, so its mount namespace cannot get them) and no disk of its own,
// and needs overlayfs.
func (d *Driver) spareEligible(spec vm.Spec, st state) bool {
	return d.pool.N() > 0 && st.Overlay && st.DiskGB == 0 && spec.Workspace == "" && len(spec.Mounts) == 0
}

func kindOf(spec vm.Spec) spareKind {
	class := spec.SizeClass
	if class == "" {
		class = vm.DefaultSize
	}
	return spareKind{spec.Image, class}
}

// takeSpare returns a live spare of kind over lower, waiting (up to
// spareWait) for one under way, or nil.
func (d *Driver) takeSpare(ctx context.Context, kind spareKind, lower string) *spare {
	sp, _ := d.pool.Take(ctx, kind, spareWait, func(sp *spare) bool {
		// Of no use when the image changed or the spare died.
		return sp.lower == lower && proc.Alive(sp.st.PID, sp.st.StartTicks)
	})
	return sp
}

// afterStart records kind as recently used and tops its spares up in the
// background once the replica's app listens (or a second has passed):
// making a spare next to a booting app would slow the app down. ctx is
// Start's; the wait outlives it. After a StartBackground (low) the
// spares are made at its low priority too: the replicas serving keep the
// CPU while a rollout makes the spare its next candidate takes.
func (d *Driver) afterStart(ctx context.Context, spec vm.Spec, st state, lower string, size vm.Size, low bool) {
	if !d.spareEligible(spec, st) {
		return
	}
	kind := kindOf(spec)
	d.recent(kind)
	go func() {
		proc.WaitFor(context.WithoutCancel(ctx), time.Second, func() bool { return listening(st.PID, st.Port) })
		d.refill(kind, lower, size, low)
	}()
}

// Prewarm makes a spare container for replicas of spec (its image and
// size class) in the background, as a Start of it would after it, and
// returns at once; spec needs no Name. berth calls it for a deployment
// that scales from zero when its pool starts, so that the first scale
// from zero after berth starts takes a spare like the rest. Spares are
// kept for the maxSpareKinds kinds prewarmed or started most recently.
func (d *Driver) Prewarm(spec vm.Spec) {
	if spec.Name == "" {
		spec.Name = vm.Name(spec.Deployment, 0) // what check needs; never started
	}
	st, size, err := d.check(spec)
	if err != nil || !d.spareEligible(spec, st) {
		return
	}
	go func() {
		lower, err := d.images.Rootfs(spec.Image)
		if err != nil {
			return // its Start will say why
		}
		kind := kindOf(spec)
		d.recent(kind)
		d.refill(kind, lower, size, false)
	}()
}

// recent records kind as the one most recently used, evicting the spares
// of the kinds past maxSpareKinds.
func (d *Driver) recent(kind spareKind) {
	d.kindMu.Lock()
	kinds := []spareKind{kind}
	for _, k := range d.kinds {
		if k != kind {
			kinds = append(kinds, k)
		}
	}
	var evicted []spareKind
	if len(kinds) > maxSpareKinds {
		evicted = kinds[maxSpareKinds:]
		kinds = kinds[:maxSpareKinds]
	}
	d.kinds = kinds
	d.kindMu.Unlock()
	for _, k := range evicted {
		d.pool.Evict(k)
	}
}

// listening reports whether a socket in pid's network namespace listens
// on port.
func listening(pid, port int) bool {
	want := fmt.Sprintf(":%04X ", port)
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + f)
		if err != nil {
			return false
		}
		for line := range strings.Lines(string(b)) {
			// "sl local_address rem_address st ..."; 0A is LISTEN.
			fs := strings.Fields(line)
			if len(fs) > 3 && fs[3] == "0A" && strings.Contains(fs[1]+" ", want) {
				return true
			}
		}
	}
	return false
}

// refill starts making spares of kind until Spares are ready or under way,
// at a low CPU priority with low.
func (d *Driver) refill(kind spareKind, lower string, size vm.Size, low bool) {
	d.reapStale()
	d.pool.Fill(kind, d.wanted, func() (*spare, error) { return d.makeSpare(kind, lower, size, low) })
}

// wanted reports whether kind is among the recent kinds.
func (d *Driver) wanted(kind spareKind) bool {
	d.kindMu.Lock()
	defer d.kindMu.Unlock()
	for _, k := range d.kinds {
		if k == kind {
			return true
		}
	}
	return false
}

// spareState is what spare.json holds.
type spareState struct {
	State state  `json:"state"`
	Lower string `json:"lower"`
}

func writeSpareState(dir string, st state, lower string) error {
	b, err := json.Marshal(spareState{st, lower})
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, spareFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, spareFile))
}

// spareCommand is a spare's init command line.
func (d *Driver) spareCommand() []string {
	args := append(slices.Clone(d.args),
		"--listen", "unix:"+runInside+"/"+sockFile,
		"--spare", "--spare-fd", "3",
		"--spare-room="+strings.Repeat(" ", spareRoom))
	return d.agentArgv(args...)
}

// makeSpare creates and starts a spare container of kind: its rootfs, an
// empty network namespace (the veth comes with the replica, named after
// it), and the agent in spare mode, linked to the driver by a socket.
func (d *Driver) makeSpare(kind spareKind, lower string, size vm.Size, low bool) (*spare, error) {
	ctx := context.Background()
	var rnd [6]byte
	rand.Read(rnd[:])
	h := hex.EncodeToString(rnd[:])
	name := sparePrefix + h
	dir := filepath.Join(d.dir, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	st := state{ID: name, Image: kind.image, Cgroup: d.cgParent + "/spare-" + h, Overlay: true, RuntimeID: "spare-" + h}
	fail := func(err error) (*spare, error) {
		d.cleanup(ctx, st)
		return nil, err
	}
	for _, sub := range []string{bundleDir, rootfsDir, upperDir, workDir, runDir} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return fail(err)
		}
	}
	os.Chmod(filepath.Join(dir, rootfsDir), 0o755)
	if err := writeSpareState(dir, st, lower); err != nil {
		return fail(err)
	}
	if err := d.mountRootfs(dir, lower, st, low); err != nil {
		return fail(err)
	}
	cfg := d.config(vm.Spec{Name: name, Image: kind.image}, st, "/", size)
	cfg.Hostname = st.RuntimeID
	cfg.Process.Args = d.spareCommand()
	cfg.Process.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if low {
		lowPriority(cfg)
	}
	b, err := json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(dir, bundleDir, "config.json"), b, 0o600); err != nil {
		return fail(err)
	}
	if err := hostnet.NewNetns(filepath.Join(dir, netnsFile)); err != nil {
		return fail(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "spare-link")
	unix.SetNonblock(fds[0], true)
	link := os.NewFile(uintptr(fds[0]), "spare-link")
	err = d.rt.runWith(ctx, st.RuntimeID, filepath.Join(dir, bundleDir), filepath.Join(dir, pidFile), filepath.Join(dir, runtimeErr), theirs, low)
	theirs.Close()
	if err != nil {
		link.Close()
		return fail(err)
	}
	pb, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err == nil {
		st.PID, err = strconv.Atoi(strings.TrimSpace(string(pb)))
	}
	if err != nil || st.PID <= 0 {
		link.Close()
		return fail(fmt.Errorf("the runtime wrote a bad pid %q", pb))
	}
	ps, err := proc.ReadStat(st.PID)
	if err != nil {
		link.Close()
		return fail(fmt.Errorf("the spare's init is gone: %w", err))
	}
	st.StartTicks = ps.StartTicks
	if err := writeSpareState(dir, st, lower); err != nil {
		link.Close()
		return fail(err)
	}
	link.SetReadDeadline(time.Now().Add(spareReady))
	var buf [16]byte
	n, err := link.Read(buf[:])
	if err != nil || string(buf[:n]) != "ready\n" {
		link.Close()
		return fail(fmt.Errorf("the spare's agent did not get ready: %q, %v", buf[:n], err))
	}
	link.SetReadDeadline(time.Time{})
	return &spare{kind: kind, lower: lower, st: st, link: link, low: low}, nil
}

// dropSpare ends a spare and removes everything of it.
func (d *Driver) dropSpare(sp *spare) {
	sp.link.Close()
	if sp.st.PID != 0 && proc.Alive(sp.st.PID, sp.st.StartTicks) {
		syscall.Kill(sp.st.PID, syscall.SIGKILL)
	}
	if err := d.cleanup(context.Background(), sp.st); err != nil {
		d.log.Warn("container: removing a spare container", "spare", sp.st.ID, "err", err)
	}
}

// reapStale removes the spares under Dir whose agent has ended: those of
// a berth that is gone (a spare's agent exits when its driver's end of
// the link closes), and spares that failed. A live one belongs to a live
// Driver and is left alone.
func (d *Driver) reapStale() {
	d.reapSpares(false)
}

// reapSpares removes the spares under Dir that are not running (every
// spare with all).
func (d *Driver) reapSpares(all bool) {
	for _, name := range sparepool.Left(d.dir, sparePrefix) {
		dir := filepath.Join(d.dir, name)
		var ss spareState
		b, err := os.ReadFile(filepath.Join(dir, spareFile))
		if err == nil {
			err = json.Unmarshal(b, &ss)
		}
		if err != nil || ss.State.ID != name {
			// Being made (spare.json comes first) or corrupt: only
			// what its name says can be cleaned up, and only with all.
			if !all {
				continue
			}
			h := strings.TrimPrefix(name, sparePrefix)
			ss.State = state{ID: name, Cgroup: d.cgParent + "/spare-" + h, RuntimeID: "spare-" + h}
		}
		alive := ss.State.PID != 0 && proc.Alive(ss.State.PID, ss.State.StartTicks)
		if alive && !all {
			continue
		}
		if ss.State.PID == 0 && !all {
			// Still being made by a live Driver, most likely.
			if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) < spareReady {
				continue
			}
		}
		if alive {
			syscall.Kill(ss.State.PID, syscall.SIGKILL)
		}
		if err := d.cleanup(context.Background(), ss.State); err != nil {
			d.log.Warn("container: removing a stale spare container", "spare", name, "err", err)
		}
	}
}

// Close ends the driver's spare containers and removes them. Replicas are
// not touched: they outlive the Driver.
func (d *Driver) Close() error {
	d.pool.Close()
	return nil
}

// assign makes sp the replica spec: the spare's directory becomes the
// replica's, its namespace gets the replica's veth and address, its UTS
// namespace the replica's host name, and its agent the replica's flags,
// command and environment. st is the replica's initial state; the state
// returned is what cleaning up needs if it fails.
func (d *Driver) assign(ctx context.Context, spec vm.Spec, st state, sp *spare, low bool) (state, error) {
	defer sp.link.Close()
	t := time.Now()
	step := func(name string) {
		if d.trace != nil {
			now := time.Now()
			d.trace(name, now.Sub(t))
			t = now
		}
	}
	dir := d.path(spec.Name)
	// Start made dir, empty; a directory renamed onto an empty one
	// replaces it (rename(2) does; os.Rename refuses any directory).
	if err := unix.Rename(d.path(sp.st.ID), dir); err != nil {
		go d.dropSpare(sp)
		return st, err
	}
	st.PID, st.StartTicks, st.Cgroup, st.RuntimeID = sp.st.PID, sp.st.StartTicks, sp.st.Cgroup, sp.st.RuntimeID
	st.StartedAt = time.Now().UTC()
	if err := replicadir.WriteState(dir, st); err != nil {
		return st, err
	}
	os.Remove(filepath.Join(dir, spareFile))
	if sp.low != low {
		// Before the agent starts anything: the hooks and the app
		// inherit its priority.
		if err := d.setPriority(st, low); err != nil {
			return st, err
		}
	}
	step("mount")
	wd := containerWorkDir(spec)
	if err := mkdirIn(filepath.Join(dir, rootfsDir), wd); err != nil {
		return st, fmt.Errorf("creating the working directory %s: %w", wd, err)
	}
	if spec.TTL > 0 {
		if err := replicadir.WriteLease(filepath.Join(dir, runDir), st.StartedAt.Add(spec.TTL), 0o644); err != nil {
			return st, err
		}
	}
	if err := setHostnameOf(st.PID, vm.Hostname(spec.Name)); err != nil {
		return st, fmt.Errorf("setting the host name: %w", err)
	}
	step("prepare")
	var err error
	if st.Addr, err = d.net.AttachVethAt(ctx, spec.Name, filepath.Join(dir, netnsFile)); err != nil {
		return st, err
	}
	if err := replicadir.WriteState(dir, st); err != nil {
		return st, err
	}
	step("network")
	sock := filepath.Join(dir, runDir, sockFile)
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, "unix", sock)
	})
	defer c.Close()
	actx, cancel := context.WithTimeout(ctx, spareReady)
	defer cancel()
	err = c.Assign(actx, agent.GuestConfig{Args: d.agentArgs(spec, wd), Env: environ(spec, st)})
	step("run")
	if err != nil {
		return st, fmt.Errorf("assigning the spare: %w", err)
	}
	if !proc.Alive(st.PID, st.StartTicks) {
		return st, errors.New("the spare's init ended during its assignment")
	}
	return st, nil
}

// setHostnameOf sets the host name in the UTS namespace of pid. The agent
// cannot (the container has no CAP_SYS_ADMIN), so the driver does, on a
// locked thread that goes back to its own namespace afterwards (if it
// cannot, the thread stays locked and ends with its goroutine).
func setHostnameOf(pid int, name string) error {
	target, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/uts")
	if err != nil {
		return err
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/uts", os.Getpid(), unix.Gettid()))
		if err != nil {
			goruntime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWUTS); err != nil {
			goruntime.UnlockOSThread()
			errc <- err
			return
		}
		err = unix.Sethostname([]byte(name))
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWUTS) == nil {
			goruntime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
