// Package process is berth's embedded default replica driver: each replica is
// the berth agent (package agent) running the deployment's start_command with
// /bin/sh -c (or directly, when it is a plain command line: see package
// agent) as a process tree on this host, listening on its own loopback port.
//
// Every replica has a directory <Dir>/<id>/ (mode 0700) holding:
//
//	state.json   what re-adoption needs: id, deployment, port, agent pid and
//	             its start time, isolation, cgroup, suspended flag. Never the
//	             environment, which may hold resolved secrets.
//	data/        the default working directory
//	agent.sock   the agent's unix socket (DialAgent)
//	output.log   the app's output as JSON lines, rotated to output.log.1
//	exit.json    written by the agent when the app ends
//	agent.err    the agent's own stderr, for when it cannot even start
//	lease        the lease deadline in unix seconds (Spec.TTL, Renew); the
//	             agent reads it every --lease-check and, once it has
//	             passed, stops the app and exits ("lease expired")
//	processes/   the agent's background processes' output (--state-dir)
//
// A spec with a Workspace (a Computer's files) runs the agent, hooks and
// command in that directory, with HOME set to it and the agent's file
// operations rooted there (--root); the workspace is the caller's and
// outlives the replica.
//
// The agent is started in a new session (setsid) and without a parent-death
// signal, so replicas outlive a berth crash; a new Driver over the same Dir
// finds them through their state files (the start time defeats pid reuse)
// and adopts them: no duplicates, no orphans. The lease is the backstop for a
// berth that never comes back: without renewals, its replicas end by
// themselves. A suspended replica is frozen with its agent, so its lease is
// enforced only once it is resumed.
//
// # Sandboxes
//
// When berth runs as root (see Options.Isolate; as root it is mandatory)
// each replica is a sandbox. Its agent gets its own PID, mount, UTS and
// IPC namespaces: the agent is PID 1 and reaps, mounts made inside stay
// inside (the root is made recursively private), and the hostname is the
// replica id (the agent sets it, --hostname, before it starts anything).
// The agent (--sandbox UID:GID, see package agent) then mounts a /proc of
// its own PID namespace, so nothing inside sees berth's or other
// replicas' processes or their /proc/<pid>/environ; mounts empty tmpfs on
// /tmp and /dev/shm; hides every host directory that others may not
// search (berth's data directory) under an empty tmpfs in which only the
// replica's directory, its working directory and workspace reappear; and
// runs everything it starts (hooks, COMMAND, execs, shells) as the
// deployment's own unprivileged uid and gid, with no supplementary groups
// and no_new_privs. The agent stays root, behind a socket only root can
// reach. Each deployment gets the next uid from Options.UIDBase
// (recorded in <Dir>/uids.json, so a Computer's workspace keeps its
// owner), which owns the replica's data/ and workspace; the replica
// directory is searchable, not listable, by it. An absolute WorkDir is
// the operator's: the sandbox sees it with the permissions it has. The
// network is the host's, so the app's port is reachable on 127.0.0.1.
//
// Without root, replicas run unsandboxed as berth's own user, with the
// host's view; New logs it.
//
// Where a writable cgroup v2 hierarchy exists, each replica is born (clone3
// CLONE_INTO_CGROUP) in the cgroup <CgroupParent>/<id>, limited by the
// size_class in vm.Sizes: cpu.max gives VCPUs × 100 ms of CPU per 100 ms,
// memory.max is MemoryMB MiB, and pids.max is Options.PidsMax. On a cgroup
// v1 host the replica gets a cgroup in each of the pids, memory and cpu
// hierarchies (<hierarchy>/berth/<id>) with the same limits
// (memory.limit_in_bytes, cpu.cfs_quota_us), which the agent joins before
// it starts anything (--join-cgroup). The cgroup also serves membership,
// and with v2 freezing (Suspend) and cgroup.kill (Stop). As root, with no
// cgroup that can limit pids, Start refuses unless Options.AllowUnlimited
// (or CgroupParent "none") says otherwise. Without root size classes are
// not enforced, and a replica's processes are found through its PID
// namespace or, without isolation, its session.
//
// StartBackground starts a replica nobody waits for yet (a rollout's
// candidate) at a low CPU priority: as root its agent at nice 19 (a spare
// it takes is set to it), which the hooks and app inherit, and its cgroup
// with cpu.weight 1 (cpu.shares 2 on cgroup v1). Foreground (berth calls
// it when the replica is promoted) gives it the default weight and
// renices the threads of its processes at 19 to berth's own value.
//
// # Spare agents
//
// Starting a replica cold costs a process spawn plus the berth binary's
// start-up before the agent can start the app: tens of milliseconds that
// scale-from-zero pays on the request path. So after a Start the driver
// starts up to Spares idle agents in the background (`berth agent --spare`),
// each in <Dir>/.spare-<hex>/ (state.json with its pid, data/, agent.sock,
// agent.err), made exactly like a replica's agent (own session; with
// isolation its own PID, mount, UTS and IPC namespaces) but without a
// cgroup, and waiting for an assignment. A spare's start-up would slow down
// the app that Start is booting (on a 2-CPU host, by about 10 ms), so the
// top-up waits until that app listens (at most a second), and as root
// spares start at nice 10. Start then takes a ready spare:
//
//  1. it gives the spare berth's CPU priority back; with cgroups, it
//     creates the replica's cgroup with its size limits and moves the
//     spare (a single process that has forked nothing) into it, so the
//     app is born there; memory the spare already used stays charged
//     where it was;
//  2. it writes the replica's state.json (and lease) into the spare's
//     directory and renames that directory over the empty <Dir>/<id>/ that
//     Start made to claim the id, so the id appears with a live agent in
//     one step; the spare's socket, agent.err and working directory move
//     with it (open files and bound sockets follow a rename);
//  3. it POSTs the assignment: the same flags and COMMAND a cold start
//     would pass (with the new paths, and --hostname, which the agent
//     sets in its UTS namespace) and the replica's environment; the
//     agent's command line then reads like a cold start's.
//
// If any step fails, the spare is killed and the replica starts cold in a
// clean directory: a spare can only make a Start faster, never fail it.
// Spares are started lazily, so that a Driver that is only opened to list
// or stop replicas starts none: after the first Start, or at Prewarm,
// which berth calls when the pool of a deployment that scales from zero
// starts, so that the first Start after berth starts takes a spare too.
//
// Spares die with the driver: each holds one end of a socket pair whose
// other end only the driver has (--spare-fd), and exits when it closes —
// at Close, or when berth dies. New kills and removes whatever spare
// directories a previous berth left; since several Drivers may share a
// Dir, a Driver whose spare disappeared that way just starts cold. Spares
// never appear in List: their names are no replica ids.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
	sparepool "github.com/berth-dev/berth/internal/vm/spares"
)

// Options configures a Driver.
type Options struct {
	// Dir is the state root, e.g. <data-dir>/replicas. It is created if
	// missing. Required.
	Dir string

	// AgentCommand is the agent's command line before its flags. Empty
	// means the running executable with the argument "agent".
	AgentCommand []string

	// AgentEnv is added to the agent's environment (and so the app's)
	// before the spec's Env; tests use it to make their binary the agent.
	AgentEnv []string

	// Isolate makes each replica a sandbox (see the package
	// documentation, "Sandboxes"). Nil means true when berth runs as
	// root. It needs root, and as root it cannot be turned off: replicas
	// would run as root with the host's view.
	Isolate *bool

	// UIDBase is the first of the host uids (and gids) that sandboxes run
	// as, one per deployment; zero means DefaultUIDBase. UIDCount of them
	// are berth's to hand out (zero means DefaultUIDCount): no other
	// user of the host may own one.
	UIDBase, UIDCount uint32

	// HideDirs are hidden from sandboxes whatever their permissions
	// (berth's data directory), but for the replica's own paths inside;
	// Dir always is.
	HideDirs []string

	// PidsMax caps the processes (and threads) of each replica in its
	// cgroup; zero means DefaultPidsMax.
	PidsMax int

	// AllowUnlimited lets a root berth start replicas where no usable
	// cgroup exists, without pids, memory and CPU limits. Without it such
	// a Start is refused. CgroupParent "none" allows it too.
	AllowUnlimited bool

	// CgroupParent is the cgroup v2 directory under which replicas get
	// their cgroups. Empty means /sys/fs/cgroup/berth when the host has a
	// writable cgroup v2 hierarchy; "none" disables cgroups.
	CgroupParent string

	// Log receives what the driver degrades on (no cgroup limits, ...).
	// Nil discards.
	Log *slog.Logger

	// Spares is how many idle agents the driver keeps started, so that a
	// Start hands the replica to one instead of spawning an agent (see
	// spares.go). Nil means DefaultSpares; 0 disables them. The Driver
	// starts them at Prewarm or after its first Start; Close stops them.
	Spares *int
}

// Driver runs replicas as local process trees. It is safe for concurrent
// use, and several Drivers (or berth processes, one after another) may share
// a Dir.
type Driver struct {
	replicadir.Reports[state] // Inspect, List

	dir     string
	agent   []string
	env     []string
	isolate bool
	uidBase uint32
	uidN    uint32
	hide    []string // Dir and Options.HideDirs, absolute
	cg      cgroupConfig
	// unlimited refuses Starts: as root, with no cgroup to limit
	// replicas and no Options.AllowUnlimited.
	unlimited error
	log       *slog.Logger
	rd        replicadir.Dir[state]
	cpu       proc.CPUMeter // Usage readings

	mu         sync.Mutex                        // guards uids.json (sandbox.go)
	pool       *sparepool.Pool[struct{}, *spare] // spare agents; N is Options.Spares
	niceSpares bool                              // start spares at spareNice (needs root to undo)
	nice       int                               // berth's nice value, which assigned spares get
	prewarmed  atomic.Bool                       // Prewarm has started the spares

	// trace, when set (benchmarks), is told how long each step of a start
	// from a spare took.
	trace func(step string, d time.Duration)
}

// File names inside a replica directory.
const (
	stateFile = "state.json"
	dataDir   = "data"
	sockFile  = "agent.sock"
	logFile   = "output.log"
	exitFile  = "exit.json"
	errFile   = "agent.err"
	leaseFile = replicadir.LeaseFile
	procsDir  = "processes"
)

// maxSockPath is the longest unix socket path Linux accepts (sun_path less
// the terminating NUL).
const maxSockPath = 107

// New returns a driver keeping its state under o.Dir.
func New(o Options) (*Driver, error) {
	if o.Dir == "" {
		return nil, errors.New("process: Options.Dir is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	agent := o.AgentCommand
	if len(agent) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("process: finding the agent: %w", err)
		}
		agent = []string{exe, "agent"}
	}
	isolate := os.Geteuid() == 0
	if o.Isolate != nil {
		isolate = *o.Isolate
	}
	if isolate && os.Geteuid() != 0 {
		return nil, fmt.Errorf("process: isolating replicas in namespaces needs root: %w", vm.ErrUnavailable)
	}
	if !isolate && os.Geteuid() == 0 {
		return nil, errors.New("process: berth runs as root, so replicas must be isolated (Options.Isolate false would run them as root with the host's view)")
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !isolate {
		log.Warn("process: berth is not root: replicas run unsandboxed, as berth's own user with the host's view of processes and files; run berth as root to sandbox them")
	}
	uidBase, uidN := o.UIDBase, o.UIDCount
	if uidBase == 0 {
		uidBase = DefaultUIDBase
	}
	if uidN == 0 {
		uidN = DefaultUIDCount
	}
	if uint64(uidBase)+uint64(uidN) >= 1<<32-1 {
		return nil, fmt.Errorf("process: the sandbox uids %d+%d overflow", uidBase, uidN)
	}
	hide := []string{dir}
	for _, h := range o.HideDirs {
		a, err := filepath.Abs(h)
		if err != nil {
			return nil, fmt.Errorf("process: %w", err)
		}
		hide = append(hide, a)
	}
	pidsMax := o.PidsMax
	if pidsMax == 0 {
		pidsMax = DefaultPidsMax
	}
	if pidsMax < 0 {
		return nil, fmt.Errorf("process: Options.PidsMax is negative (%d)", pidsMax)
	}
	spares := DefaultSpares
	if o.Spares != nil {
		if *o.Spares < 0 {
			return nil, fmt.Errorf("process: Options.Spares is negative (%d)", *o.Spares)
		}
		spares = *o.Spares
	}
	d := &Driver{
		dir:     dir,
		agent:   slices.Clone(agent),
		env:     slices.Clone(o.AgentEnv),
		isolate: isolate,
		uidBase: uidBase,
		uidN:    uidN,
		hide:    hide,
		cg:      setupCgroups(o.CgroupParent, pidsMax, log),
		log:     log,
	}
	d.pool = sparepool.New(sparepool.Config[struct{}, *spare]{
		N:    spares,
		Drop: d.dropSpare,
		Failed: func(_ struct{}, err error, failures int) {
			if failures == sparepool.MaxFailures {
				log.Warn("process: no more spare agents: starting them keeps failing; replicas start cold", "err", err)
			} else {
				log.Debug("process: could not start a spare agent", "err", err)
			}
		},
	})
	d.Reports = replicadir.Reports[state]{Dir: &d.rd, Instance: d.instance}
	d.rd = replicadir.Dir[state]{
		Root: dir, Driver: "process", Log: log,
		ID: func(st state) string { return st.ID },
		Empty: func(id, owner string) state {
			return state{ID: id, Deployment: owner, Isolated: isolate}
		},
	}
	if raw, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0); err == nil && os.Geteuid() == 0 {
		d.niceSpares, d.nice = true, 20-raw
	}
	switch {
	case d.cg.limited():
	case os.Geteuid() != 0 || o.AllowUnlimited || o.CgroupParent == "none":
		log.Warn("process: replicas run without pids, memory and CPU limits", "why", d.cg.none)
	default:
		d.unlimited = fmt.Errorf("process: refusing to start replicas without pids, memory and CPU limits: %s (use a host with cgroup v2 or the cgroup v1 pids controller, or allow it explicitly: BERTH_ALLOW_UNLIMITED=1)", d.cg.none)
		log.Error("process: replicas cannot start", "err", d.unlimited)
	}
	d.cleanSpares()
	return d, nil
}

// state is a replica's state.json: only what re-adoption needs.
type state struct {
	ID         string `json:"id"`
	Deployment string `json:"deployment"`
	// Owner is Spec.Owner as started; zero in the state of a replica of an
	// older berth (vm.ResolveOwner derives it from the name then).
	Owner      vm.Owner  `json:"owner,omitzero"`
	Port       int       `json:"port"`
	PID        int       `json:"pid"`         // host pid of the agent; 0 while starting
	StartTicks uint64    `json:"start_ticks"` // /proc/<pid>/stat field 22, against pid reuse
	Isolated   bool      `json:"isolated"`
	UID        uint32    `json:"uid,omitempty"` // the sandbox's uid and gid, when isolated
	Cgroup     string    `json:"cgroup,omitempty"`
	CgroupsV1  []string  `json:"cgroups_v1,omitempty"` // pids first
	StartedAt  time.Time `json:"started_at"`
	Suspended  bool      `json:"suspended,omitempty"`
}

func (st state) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(st.Port)) }

func (d *Driver) path(id string, name ...string) string { return d.rd.Path(id, name...) }

// Start creates the replica directory and starts the agent, returning once
// the agent runs; readiness of the app is the caller's probe.
//
// The app's environment is PATH (berth's), HOME (the data directory),
// HOSTNAME when isolated, Options.AgentEnv, spec.Env, and PORT, which wins
// over a PORT in spec.Env because berth routes to it. Nothing else of
// berth's environment is passed on. A relative spec.WorkDir is inside the
// data directory and is created; an absolute one must exist. spec.Image
// must be empty; DiskSizeGB is not enforced, and OpenPorts need nothing
// (replicas share the host's network).
func (d *Driver) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	return d.start(ctx, spec, false)
}

// StartBackground is Start at a low CPU priority, for a replica nobody
// waits for (a rollout's candidate, while the previous replicas serve):
// its agent, and so its hooks and app, run at nice proc.BackgroundNice
// (as root; a spare it takes is set to it before its assignment), and its
// cgroup has cpu.weight 1 (cpu.shares 2 on cgroup v1) from its creation,
// so that its boot takes CPU from the replicas serving only when they
// leave some idle. Foreground gives it the normal priority back.
func (d *Driver) StartBackground(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	return d.start(ctx, spec, true)
}

func (d *Driver) start(ctx context.Context, spec vm.Spec, low bool) (vm.Instance, error) {
	if err := ctx.Err(); err != nil {
		return vm.Instance{}, err
	}
	st, workDir, size, err := d.check(spec)
	if err != nil {
		return vm.Instance{}, err
	}
	if d.unlimited != nil {
		return vm.Instance{}, d.unlimited
	}
	if st.Port == 0 {
		if st.Port, err = d.freePort(); err != nil {
			return vm.Instance{}, fmt.Errorf("process: start %s: %w", spec.Name, err)
		}
	}
	release, err := d.rd.Claim(spec.Name)
	if err != nil {
		return vm.Instance{}, err
	}
	defer release()
	dir := d.path(spec.Name)
	// Top the spares up after this Start, in the background, once its app
	// is up; a sandbox without an app (a Computer) has nothing to wait for.
	if spec.Command == "" {
		defer d.refill()
	} else {
		defer d.refillAfter(st.Port)
	}
	if d.isolate {
		if st.UID, err = d.sandboxUID(st.Deployment); err != nil {
			os.Remove(dir)
			return vm.Instance{}, fmt.Errorf("process: start %s: %w", spec.Name, err)
		}
	}
	if sp := d.takeSpare(ctx); sp != nil {
		ast, err := d.assign(ctx, sp, spec, st, workDir, size, low)
		if err == nil {
			return d.instance(ast), nil
		}
		d.log.Warn("process: a spare agent could not take the replica; starting a new agent", "id", spec.Name, "err", err)
		if _, serr := os.Stat(dir); serr != nil {
			return vm.Instance{}, fmt.Errorf("process: start %s: %w", spec.Name, err)
		}
	}
	st, err = d.launch(spec, st, workDir, size, low)
	if err != nil {
		if st.Cgroup != "" {
			removeCgroup(st.Cgroup)
		}
		removeCgroups(st.CgroupsV1)
		os.RemoveAll(dir)
		return vm.Instance{}, fmt.Errorf("process: start %s: %w", spec.Name, err)
	}
	return d.instance(st), nil
}

// check validates spec and returns the initial state, the working directory
// (relative ones are inside data/) and the size.
func (d *Driver) check(spec vm.Spec) (state, string, vm.Size, error) {
	fail := func(format string, args ...any) (state, string, vm.Size, error) {
		return state{}, "", vm.Size{}, fmt.Errorf("process: start %q: "+format, append([]any{spec.Name}, args...)...)
	}
	owner, size, err := replicadir.CheckSpec(spec)
	if err != nil {
		return fail("%v", err)
	}
	if spec.User != nil {
		return fail("the process driver runs every sandbox as its own uid; it cannot run as user %s", spec.User.AgentFlag())
	}
	if spec.Image != "" {
		return fail("the process driver runs no images (image %q)", spec.Image)
	}
	if err := replicadir.NoMounts("process", spec); err != nil {
		return fail("%v", err)
	}
	if p := d.path(spec.Name, sockFile); len(p) > maxSockPath {
		return fail("agent socket path %s is longer than %d bytes; use a shorter Dir", p, maxSockPath)
	}
	if spec.Workspace != "" {
		if err := replicadir.CheckWorkspace(spec.Workspace); err != nil {
			return fail("%v", err)
		}
	}
	workDir := spec.WorkDir
	if workDir == "" && spec.Workspace != "" {
		workDir = spec.Workspace
	} else if workDir == "" {
		workDir = d.path(spec.Name, dataDir)
	} else if !filepath.IsAbs(workDir) {
		workDir = filepath.Join(d.path(spec.Name, dataDir), workDir)
		if !strings.HasPrefix(workDir, d.path(spec.Name, dataDir)+string(filepath.Separator)) {
			return fail("working directory %q leaves the data directory", spec.WorkDir)
		}
	}
	return state{
		ID:         spec.Name,
		Deployment: owner,
		Owner:      vm.ResolveOwner(spec.Owner, spec.Name),
		Port:       spec.Port,
		Isolated:   d.isolate,
	}, workDir, size, nil
}

// freePort asks the kernel for a free loopback port, avoiding the ports of
// replicas that exist (and may be suspended, so not listening right now).
func (d *Driver) freePort() (int, error) {
	used := make(map[int]bool)
	if sts, err := d.rd.States(); err == nil {
		for _, st := range sts {
			used[st.Port] = true
		}
	}
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !used[port] {
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port")
}

// launch prepares the replica directory and starts the agent.
func (d *Driver) launch(spec vm.Spec, st state, workDir string, size vm.Size, low bool) (state, error) {
	dir := d.path(spec.Name)
	if err := os.Mkdir(filepath.Join(dir, dataDir), 0o700); err != nil {
		return st, err
	}
	if err := d.prepareDirs(dir, spec, st, workDir); err != nil {
		return st, err
	}
	var cgDir *os.File
	if d.cg.parent != "" {
		cg, f, err := d.cg.create(spec.Name, size, low, d.log)
		if err != nil {
			d.log.Warn("process: replica runs without a cgroup", "id", spec.Name, "err", err)
		} else {
			defer f.Close()
			st.Cgroup, cgDir = cg, f
		}
	}
	if len(d.cg.v1) > 0 {
		// The agent joins them before it starts anything (--join-cgroup).
		var err error
		if st.CgroupsV1, err = d.cg.createV1(spec.Name, size, low); err != nil {
			return st, fmt.Errorf("making the replica's cgroups: %w", err)
		}
	}
	st.StartedAt = time.Now().UTC()
	if err := replicadir.WriteState(dir, st); err != nil {
		return st, err
	}
	if spec.TTL > 0 {
		if err := replicadir.WriteLease(dir, st.StartedAt.Add(spec.TTL), 0o600); err != nil {
			return st, err
		}
	}

	args := slices.Clone(d.agent[1:])
	for _, cg := range st.CgroupsV1 {
		// Not in agentFlags: a spare is in its cgroups before its
		// assignment.
		args = append(args, "--join-cgroup", cg)
	}
	args = append(args, d.agentFlags(spec, st, workDir)...)
	cmd := exec.Command(d.agent[0], args...)
	cmd.Dir = filepath.Join(dir, dataDir)
	cmd.Env = d.environ(spec, st)
	errOut, err := os.OpenFile(filepath.Join(dir, errFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return st, err
	}
	defer errOut.Close()
	cmd.Stdout, cmd.Stderr = errOut, errOut
	cmd.SysProcAttr = agentAttr(st.Isolated)
	if cgDir != nil {
		// Born in its cgroup: no window in which the agent runs unlimited
		// or forks children outside it.
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cgDir.Fd())
	}
	start := cmd.Start
	if low && d.niceSpares {
		start = func() error { return proc.StartNiced(cmd, proc.BackgroundNice) }
	}
	if err := start(); err != nil {
		return st, err
	}
	// Reap the agent while berth lives, so no zombie stays behind; after
	// a berth restart it is init's child instead.
	go cmd.Wait()
	st.PID = cmd.Process.Pid
	ps, err := proc.ReadStat(st.PID)
	if err != nil {
		// The agent died at once, and was reaped already: keep pid 0 would
		// make it look like an interrupted start, so record the pid; the
		// start time mismatch makes it dead.
		ps.StartTicks = 0
	}
	st.StartTicks = ps.StartTicks
	if err := replicadir.WriteState(dir, st); err != nil {
		cmd.Process.Kill()
		return st, err
	}
	return st, nil
}

// agentFlags are the agent's flags and COMMAND for a replica, after the
// agent command's own arguments: on the command line of a new agent, or in
// a spare's assignment.
func (d *Driver) agentFlags(spec vm.Spec, st state, workDir string) []string {
	dir := d.path(spec.Name)
	args := []string{
		"--listen", "unix:" + filepath.Join(dir, sockFile),
		"--log", filepath.Join(dir, logFile),
		"--exit-file", filepath.Join(dir, exitFile),
		// Always, so that Renew can give a lease to a replica started
		// without one; a missing file means no lease.
		"--lease-file", filepath.Join(dir, leaseFile),
		"--workdir", workDir,
		"--state-dir", filepath.Join(dir, procsDir),
	}
	if spec.Workspace != "" {
		args = append(args, "--root", spec.Workspace)
	}
	if d.isolate {
		args = append(args, "--hostname", vm.Hostname(spec.Name),
			"--sandbox", fmt.Sprintf("%d:%d", st.UID, st.UID))
		for _, h := range d.hide {
			args = append(args, "--hide", h)
		}
	}
	for _, h := range spec.SetupHooks {
		args = append(args, "--setup", h)
	}
	if spec.Command != "" {
		args = append(args, "--", "/bin/sh", "-c", spec.Command)
	}
	return args
}

// environ is the agent's (and so the app's) environment: a small base, not
// berth's own environment, which may hold berth's secrets.
func (d *Driver) environ(spec vm.Spec, st state) []string {
	home := d.path(spec.Name, dataDir)
	if spec.Workspace != "" {
		home = spec.Workspace
	}
	env := []string{
		"PATH=" + hostPath(st.UID != 0),
		"HOME=" + home,
	}
	if st.Isolated {
		env = append(env, "HOSTNAME="+vm.Hostname(spec.Name))
	}
	// PORT last: it must match the address berth routes to.
	return vm.AppEnv(append(env, d.env...), spec.Env, st.Port)
}

// agentAttr is how an agent process is made. Setsid: the replica is not in
// berth's session or process group, so it survives berth's death and
// berth's terminal signals. No Pdeathsig on purpose.
func agentAttr(isolated bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setsid: true}
	if isolated {
		// CLONE_NEWPID must be a clone flag for the agent to become PID 1.
		// Unsharing CLONE_NEWNS makes the runtime remount / recursively
		// private in the child, so the replica's mounts stay its own.
		// The agent names its UTS namespace itself (--hostname) before it
		// starts anything.
		attr.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS
		attr.Unshareflags = syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC
	}
	return attr
}

// hostPath is the PATH replicas get: berth's.
func hostPath(sandboxed bool) string {
	const std = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	path := os.Getenv("PATH")
	if path == "" {
		return std
	}
	if !sandboxed {
		return path
	}
	// A sandbox runs as an unprivileged user: keep only the entries that
	// user can search, so a root-only entry (a pyenv shim under /root,
	// say) does not shadow the system's binary with "permission denied".
	var keep []string
	for _, dir := range filepath.SplitList(path) {
		if othersCanSearch(dir) {
			keep = append(keep, dir)
		}
	}
	if len(keep) == 0 {
		return std
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// othersCanSearch reports whether dir and every directory above it are
// searchable by a user who is neither their owner nor in their group.
func othersCanSearch(dir string) bool {
	if !filepath.IsAbs(dir) {
		return false
	}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}

// Renew moves a replica's lease deadline to until. The agent reads it at its
// next check; a deadline in the past ends the replica then.
func (d *Driver) Renew(ctx context.Context, id string, until time.Time) error {
	return d.rd.Renew(ctx, id, until, 0o600)
}

// adopt fills in the agent of a replica whose state has no pid yet (berth
// died between starting the agent and recording it) by finding the process
// whose command line names the replica's exit file.
func (d *Driver) adopt(st state) state {
	if st.PID != 0 {
		return st
	}
	if pid, ps, ok := findByArg(d.path(st.ID, exitFile)); ok {
		st.PID, st.StartTicks = pid, ps.StartTicks
	}
	return st
}

// instance derives a replica's state from its files and processes.
func (d *Driver) instance(st state) vm.Instance {
	inst := vm.Instance{
		ID:         st.ID,
		Deployment: st.Deployment,
		Owner:      vm.ResolveOwner(st.Owner, st.ID),
		Addr:       st.addr(),
		StartedAt:  st.StartedAt,
		PID:        st.PID,
	}
	starting := d.rd.Starting(st.ID)
	st = d.adopt(st)
	// Liveness first: the agent writes the exit file before it exits, so
	// a dead agent without an exit file read afterwards never had one.
	alive := st.PID != 0 && proc.Alive(st.PID, st.StartTicks)
	dir := d.path(st.ID)
	if replicadir.AgentExit(&inst, filepath.Join(dir, exitFile), filepath.Join(dir, logFile), alive) {
		return inst
	}
	switch {
	case alive && st.Suspended:
		inst.State = vm.StateSuspended
	case alive:
		inst.State = vm.StateRunning
	case st.PID == 0 && starting:
		inst.State = vm.StateStarting
	case st.PID == 0:
		inst.State = vm.StateFailed
		inst.Reason = "the start of this replica was interrupted before the agent ran"
	default:
		inst.State = vm.StateFailed
		reason := "the agent ended without recording an exit"
		if b, err := os.ReadFile(filepath.Join(dir, errFile)); err == nil && len(b) > 0 {
			reason += ": " + replicadir.LastLines(string(b), replicadir.TailLines)
		}
		inst.Reason = replicadir.WithTail(reason, d.tail(dir))
	}
	return inst
}

// tail returns the last few stdout/stderr lines of a replica.
func (d *Driver) tail(dir string) []string {
	return console.AppTail(filepath.Join(dir, logFile), replicadir.TailLines)
}

// Stop asks the replica to end (SIGTERM, which the agent forwards to the
// app), waits up to grace, kills whatever remains, and removes the replica's
// directory and cgroup. Stopping an ended replica just cleans up.
func (d *Driver) Stop(ctx context.Context, id string, grace time.Duration) error {
	st, err := d.rd.Load(id)
	if err != nil {
		return err
	}
	st = d.adopt(st)
	if _, err := proc.End(ctx, grace, d.ending(st)); err != nil {
		return fmt.Errorf("process: stop %s: %w", id, err)
	}
	if st.Cgroup != "" {
		removeCgroup(st.Cgroup)
	}
	removeCgroups(st.CgroupsV1)
	if err := os.RemoveAll(d.path(id)); err != nil {
		return fmt.Errorf("process: stop %s: %w", id, err)
	}
	d.cpu.Forget(id)
	return nil
}

// ending is how Stop ends a replica: SIGTERM to the agent (which forwards
// it to the app) after a suspended replica is thawed, and SIGKILL to the
// agent and every process of the replica, until none is left.
func (d *Driver) ending(st state) proc.Ending {
	agentAlive := func() bool { return st.PID != 0 && proc.Alive(st.PID, st.StartTicks) }
	e := proc.Ending{
		What: "processes of the replica",
		Gone: func() bool { return !agentAlive() && len(d.members(st)) == 0 },
		Polite: func() error {
			if !agentAlive() {
				return errors.New("the agent is gone")
			}
			return syscall.Kill(st.PID, syscall.SIGTERM)
		},
		Kill: func() {
			if agentAlive() {
				syscall.Kill(st.PID, syscall.SIGKILL)
			}
			if st.Cgroup != "" {
				os.WriteFile(filepath.Join(st.Cgroup, "cgroup.kill"), []byte("1"), 0)
			}
			for _, pid := range d.members(st) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		},
	}
	if st.Suspended {
		e.Thaw = func() { d.thaw(st) }
	}
	return e
}
