package process

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
	sparepool "github.com/berth-dev/berth/internal/vm/spares"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Spare agents: the design is in the package documentation.

// DefaultSpares is how many spare agents a Driver keeps when
// Options.Spares is nil.
const DefaultSpares = 2

// spareRoom is the length of the --spare-room argument: room on a spare's
// command line for the arguments of its assignment, which the agent writes
// over its own so that ps shows the replica's (paths first, so a long
// COMMAND is what gets cut).
const spareRoom = 2048

// spareReady bounds the wait for a new spare to listen.
const spareReady = 30 * time.Second

// assignTimeout bounds the assignment request.
const assignTimeout = 10 * time.Second

// sparePrefix starts the directory names of spares.
const sparePrefix = ".spare-"

// spare is a started, idle agent.
type spare struct {
	name  string // its directory under Dir
	pid   int
	ticks uint64
	link  *os.File      // the driver's end of --spare-fd
	done  chan struct{} // closed once the process is reaped
	// cgroups are its cgroup v1 cgroups (named like its directory),
	// which become its replica's.
	cgroups []string
}

// spareState is a spare's state.json.
type spareState struct {
	Spare      string `json:"spare"`
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
}

// takeSpare returns a ready, live spare, or nil.
func (d *Driver) takeSpare(ctx context.Context) *spare {
	sp, _ := d.pool.Take(ctx, struct{}{}, 0, func(sp *spare) bool {
		select {
		case <-sp.done:
			return false
		default:
			return proc.Alive(sp.pid, sp.ticks)
		}
	})
	return sp
}

// refillWait bounds how long refillAfter waits for the app of the replica
// just started to listen.
const refillWait = time.Second

// refillAfter calls refill once something listens on the loopback port of
// the replica just started, or refillWait has passed. Starting a spare is
// the berth binary's start-up, which on a small host slows down an app
// booting at the same time even at a low CPU priority (memory, page
// faults); waiting for the app keeps the two apart, and then spares are
// topped up well before the next scale-from-zero, usually.
func (d *Driver) refillAfter(port int) {
	go func() {
		deadline := time.Now().Add(refillWait)
		var buf []byte
		for {
			var up bool
			up, buf = listening(port, buf)
			if up || !time.Now().Before(deadline) {
				break
			}
			time.Sleep(refillPoll)
		}
		d.refill()
	}()
}

// init settles the netlink package's byte order before any goroutine asks:
// nl.NativeEndian fills a package variable on its first call without a
// lock, and listening runs in a goroutine per Start, so concurrent first
// calls raced (seen by -race in CI).
func init() { nl.NativeEndian() }

// refillPoll is how often refillAfter looks for the app's socket.
const refillPoll = 2 * time.Millisecond

// listening reports whether a TCP socket listens on port, from the kernel
// rather than by connecting, which the app would see. It asks for the
// listening sockets alone (sock_diag, state LISTEN), which the kernel
// finds in its table of listeners. /proc/net/tcp, read before, walks the
// whole established-connection hash to print every socket: about 7 ms of
// kernel time per look on a 24 GiB host even when idle, so looking every
// 2 ms beside a booting app kept a core busy. buf is unused now and kept
// for the signature's callers; it is returned as given.
func listening(port int, buf []byte) (bool, []byte) {
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		req := nl.NewNetlinkRequest(nl.SOCK_DIAG_BY_FAMILY, unix.NLM_F_DUMP)
		req.AddData(listenRequest{family: family})
		msgs, err := req.Execute(unix.NETLINK_INET_DIAG, nl.SOCK_DIAG_BY_FAMILY)
		if err != nil {
			continue
		}
		for _, m := range msgs {
			// struct inet_diag_msg: family, state, timer, retrans, then
			// the socket id, whose source port comes first, big-endian.
			if len(m) >= 6 && m[1] == tcpListen && int(binary.BigEndian.Uint16(m[4:6])) == port {
				return true, buf
			}
		}
	}
	return false, buf
}

// tcpListen is the kernel's TCP_LISTEN state.
const tcpListen = 10

// listenRequest is a struct inet_diag_req_v2 asking for the TCP sockets
// of one family in state LISTEN.
type listenRequest struct{ family uint8 }

func (listenRequest) Len() int { return 56 }

func (r listenRequest) Serialize() []byte {
	b := make([]byte, 56)
	b[0], b[1] = r.family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(b[4:8], 1<<tcpListen)
	// The socket id (ports, addresses, interface) stays zero; its cookie
	// is INET_DIAG_NOCOOKIE.
	binary.NativeEndian.PutUint32(b[48:52], ^uint32(0))
	binary.NativeEndian.PutUint32(b[52:56], ^uint32(0))
	return b
}

// refill starts spares in the background until Spares are ready or
// starting.
func (d *Driver) refill() { d.pool.Fill(struct{}{}, nil, d.startSpare) }

// Prewarm starts spare agents in the background, up to Options.Spares,
// and returns at once. berth calls it for a deployment that scales from
// zero when its pool starts, so that the first scale from zero after
// berth starts takes a spare like the rest. Only the first call does
// anything: spares are shared by every replica, and from then on each
// Start tops them up once its app listens (a top-up started by a later
// Prewarm, at a deployment's registration, could be booting next to the
// app of the Start that follows it, and slow it down). The spec is not
// needed: any spare takes any replica.
func (d *Driver) Prewarm(vm.Spec) {
	if d.prewarmed.Swap(true) {
		return
	}
	d.refill()
}

// startSpare starts a spare agent and waits until it listens.
func (d *Driver) startSpare() (*spare, error) {
	var rnd [6]byte
	rand.Read(rnd[:])
	name := sparePrefix + hex.EncodeToString(rnd[:])
	dir := filepath.Join(d.dir, name)
	if len(filepath.Join(dir, sockFile)) > maxSockPath {
		return nil, fmt.Errorf("spare socket path in %s is too long", dir)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	sp, err := d.spawnSpare(name, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return sp, nil
}

func (d *Driver) spawnSpare(name, dir string) (*spare, error) {
	if err := os.Mkdir(filepath.Join(dir, dataDir), 0o700); err != nil {
		return nil, err
	}
	errOut, err := os.OpenFile(filepath.Join(dir, errFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer errOut.Close()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	syscall.SetNonblock(fds[0], true)
	link := os.NewFile(uintptr(fds[0]), "spare-link")
	theirs := os.NewFile(uintptr(fds[1]), "spare-link")
	defer theirs.Close()

	var cgroups []string
	if len(d.cg.v1) > 0 {
		// Joined now, off the path of the Start that takes the spare;
		// the limits of the replica's size come with the assignment.
		if cgroups, err = d.cg.createV1(name, vm.Sizes[vm.DefaultSize], false); err != nil {
			return nil, fmt.Errorf("making the spare's cgroups: %w", err)
		}
	}
	args := slices.Clone(d.agent[1:])
	for _, cg := range cgroups {
		args = append(args, "--join-cgroup", cg)
	}
	args = append(args,
		"--listen", "unix:"+filepath.Join(dir, sockFile),
		"--spare", "--spare-fd", "3",
		"--spare-room="+strings.Repeat(" ", spareRoom))
	cmd := exec.Command(d.agent[0], args...)
	cmd.Dir = filepath.Join(dir, dataDir)
	cmd.Env = append([]string{"PATH=" + hostPath(false)}, d.env...) // the agent runs as root
	cmd.Stdout, cmd.Stderr = errOut, errOut
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.SysProcAttr = agentAttr(d.isolate)
	start := cmd.Start
	if d.niceSpares {
		start = func() error { return startNiced(cmd) }
	}
	if err := start(); err != nil {
		link.Close()
		removeCgroups(cgroups)
		return nil, err
	}
	sp := &spare{name: name, pid: cmd.Process.Pid, link: link, done: make(chan struct{}), cgroups: cgroups}
	go func() {
		cmd.Wait()
		close(sp.done)
	}()
	fail := func(err error) (*spare, error) {
		d.dropSpare(sp)
		return nil, err
	}
	ps, err := proc.ReadStat(sp.pid)
	if err != nil {
		return fail(fmt.Errorf("the spare agent ended at once: %w", err))
	}
	sp.ticks = ps.StartTicks
	b, _ := json.Marshal(spareState{Spare: name, PID: sp.pid, StartTicks: sp.ticks})
	if err := os.WriteFile(filepath.Join(dir, stateFile), b, 0o600); err != nil {
		return fail(err)
	}
	link.SetReadDeadline(time.Now().Add(spareReady))
	var buf [16]byte
	n, err := link.Read(buf[:])
	if err != nil || string(buf[:n]) != "ready\n" {
		reason := "did not report ready"
		if b, rerr := os.ReadFile(filepath.Join(dir, errFile)); rerr == nil && len(b) > 0 {
			reason += ": " + replicadir.LastLines(string(b), replicadir.TailLines)
		}
		return fail(fmt.Errorf("the spare agent %s", reason))
	}
	link.SetReadDeadline(time.Time{})
	return sp, nil
}

// spareNice is the nice value spares start at, as root: a low priority, so
// that starting them (the berth binary's start-up, tens of milliseconds of
// CPU) right after a Start does not slow down the app that Start is
// booting, but not the lowest, so that other work on a busy host does not
// starve them. Assignment restores berth's own.
const spareNice = 10

// startNiced starts cmd at nice spareNice (proc.StartNiced).
func startNiced(cmd *exec.Cmd) error { return proc.StartNiced(cmd, spareNice) }

// dropSpare kills an unassigned spare, waits for it and removes its
// directory.
func (d *Driver) dropSpare(sp *spare) {
	sp.link.Close()
	syscall.Kill(sp.pid, syscall.SIGKILL)
	select {
	case <-sp.done:
	case <-time.After(proc.KillPatience):
		d.log.Warn("process: a spare agent survives SIGKILL", "pid", sp.pid)
	}
	removeCgroups(sp.cgroups)
	os.RemoveAll(filepath.Join(d.dir, sp.name))
}

// assign makes sp the agent of the replica spec describes (see the steps
// above). dir <Dir>/<id> exists and is empty. On failure sp is gone and dir
// is empty again, ready for a cold start.
func (d *Driver) assign(ctx context.Context, sp *spare, spec vm.Spec, st state, workDir string, size vm.Size, low bool) (state, error) {
	dir := d.path(spec.Name)
	sdir := filepath.Join(d.dir, sp.name)
	st.PID, st.StartTicks = sp.pid, sp.ticks
	t := time.Now()
	step := func(name string) {
		if d.trace != nil {
			now := time.Now()
			d.trace(name, now.Sub(t))
			t = now
		}
	}
	renamed := false
	fail := func(err error) (state, error) {
		sp.link.Close()
		syscall.Kill(sp.pid, syscall.SIGKILL)
		select {
		case <-sp.done:
		case <-time.After(proc.KillPatience):
		}
		if st.Cgroup != "" {
			removeCgroup(st.Cgroup)
		}
		removeCgroups(st.CgroupsV1)
		if renamed {
			os.RemoveAll(dir)
			if merr := os.Mkdir(dir, 0o700); merr != nil {
				return st, fmt.Errorf("%w; and the replica directory could not be made again: %w", err, merr)
			}
		} else {
			os.RemoveAll(sdir)
		}
		st.PID, st.StartTicks, st.Cgroup, st.CgroupsV1 = 0, 0, "", nil
		return st, err
	}
	if d.niceSpares {
		// Back to berth's priority, or to the background one: the
		// spare's process group is the agent alone (it is a session
		// leader and has forked nothing), every thread of it.
		nice := d.nice
		if low {
			nice = proc.BackgroundNice
		}
		if err := syscall.Setpriority(syscall.PRIO_PGRP, sp.pid, nice); err != nil {
			return fail(fmt.Errorf("restoring the spare's CPU priority: %w", err))
		}
	}
	step("nice")
	if d.cg.parent != "" {
		cg, f, err := d.cg.create(spec.Name, size, low, d.log)
		if err == nil {
			f.Close()
			// One process, with nothing forked yet: moving it moves the
			// whole replica.
			err = os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(sp.pid)), 0)
			if err != nil {
				removeCgroup(cg)
			} else {
				st.Cgroup = cg
			}
		}
		if err != nil {
			d.log.Warn("process: replica runs without a cgroup", "id", spec.Name, "err", err)
		}
	}
	if len(sp.cgroups) > 0 {
		// The spare is in them already: they take the replica's name and
		// limits.
		var err error
		// On failure too, st.CgroupsV1 are the cgroups to remove once
		// fail has killed the spare.
		st.CgroupsV1, err = d.cg.renameV1(sp.cgroups, spec.Name, size, low)
		sp.cgroups = nil
		if err != nil {
			return fail(fmt.Errorf("making the spare's cgroups the replica's: %w", err))
		}
	}
	step("cgroup")
	st.StartedAt = time.Now().UTC()
	if err := replicadir.WriteState(sdir, st); err != nil {
		return fail(err)
	}
	if spec.TTL > 0 {
		if err := replicadir.WriteLease(sdir, st.StartedAt.Add(spec.TTL), 0o600); err != nil {
			return fail(err)
		}
	}
	// Replaces the empty directory Start made to claim the id (rename(2)
	// does; os.Rename refuses to replace a directory).
	if err := syscall.Rename(sdir, dir); err != nil {
		return fail(&os.LinkError{Op: "rename", Old: sdir, New: dir, Err: err})
	}
	renamed = true
	step("state")
	if err := d.prepareDirs(dir, spec, st, workDir); err != nil {
		return fail(err)
	}
	step("prepare")
	g := agent.GuestConfig{Args: d.agentFlags(spec, st, workDir), Env: d.environ(spec, st)}
	ctx, cancel := context.WithTimeout(ctx, assignTimeout)
	defer cancel()
	c := agent.NewClient(agent.UnixDialer(filepath.Join(dir, sockFile)))
	defer c.Close()
	if err := c.Assign(ctx, g); err != nil {
		return fail(err)
	}
	step("assign")
	// The agent stopped watching its end once assigned.
	sp.link.Close()
	return st, nil
}

// cleanSpares kills and removes the spares a previous driver over Dir left.
func (d *Driver) cleanSpares() {
	for _, name := range sparepool.Left(d.dir, sparePrefix) {
		dir := filepath.Join(d.dir, name)
		// state.json is a spareState, or a replica's state when an
		// assignment was under way: both have the pid and start time.
		var ss spareState
		if b, err := os.ReadFile(filepath.Join(dir, stateFile)); err != nil || json.Unmarshal(b, &ss) != nil || ss.PID == 0 {
			// Killed before it recorded the spare's pid.
			if p, ps, ok := findByArg("unix:" + filepath.Join(dir, sockFile)); ok {
				ss.PID, ss.StartTicks = p, ps.StartTicks
			}
		}
		pid, ticks := ss.PID, ss.StartTicks
		if pid != 0 && proc.Alive(pid, ticks) {
			syscall.Kill(pid, syscall.SIGKILL)
			if !proc.WaitFor(context.Background(), proc.KillPatience, func() bool { return !proc.Alive(pid, ticks) }) {
				d.log.Warn("process: a stale spare agent survives SIGKILL", "pid", pid)
			}
		}
		for _, p := range d.cg.v1 {
			if cg := filepath.Join(p.dir, name); fileExists(cg) {
				removeCgroup(cg)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			d.log.Warn("process: removing a stale spare", "dir", dir, "err", err)
		}
	}
}

// Close stops the driver's spare agents and starts no more. Replicas are
// not touched: they outlive the driver as they outlive berth. Other
// methods keep working, starting replicas cold.
func (d *Driver) Close() error {
	d.pool.Close()
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
