// Package container is berth's container driver (vm.driver "container"):
// each replica runs from its image's root filesystem (package image) under
// an OCI runtime — crun, or runc where crun cannot run — with the berth
// agent (package agent) as the container's init. A replica has its own PID,
// mount, UTS, IPC and network namespaces; its network is a veth pair on
// berth's bridge with one guest address of its own (package hostnet), the
// same model as the VM drivers' taps, so berth reaches every isolating
// driver's replicas at guest_ip:vm.port.
//
// Every replica has a directory <Dir>/<id>/ (mode 0700):
//
//	state.json   what re-adoption needs: id, deployment, image, port,
//	             guest address, init pid and its start time, cgroup path,
//	             suspended flag. Never the environment (it may hold secrets).
//	bundle/      the OCI bundle: config.json, generated here
//	rootfs/      the container's root: an overlay of the image's tree
//	             (read-only lower) and upper/ (this replica's writes), or
//	             a copy of the tree where overlayfs is unavailable
//	upper/ work/ the overlay's upper and work directories
//	disk.ext4    with Spec.DiskSizeGB only: the replica's own filesystem,
//	             a sparse file on a loop device
//	disk/        where it is mounted; it holds upper/ and work/ instead
//	run/         mounted at /.berth/run in the container: the agent's
//	             socket (DialAgent), output.log, exit.json, lease, and the
//	             background processes' output (processes/)
//	init.pid     the init's host pid, written by the runtime
//	netns        the replica's network namespace, bound here
//	runtime.err  the runtime's and the agent's own stderr
//
// The agent binary (Options.Agent, berth) is bind-mounted read-only at
// /.berth/berth and runs as PID 1 with the agent contract's flags; it runs
// the setup hooks and start_command with /bin/sh -c from the image. A
// statically linked berth runs as it is. A dynamically linked one (built
// with cgo, as `go build` does on a host with a C compiler) has its ELF
// interpreter and libraries copied from the host once, at New, into
// <Dir>/.agent-lib (package agentbin), which every container gets
// read-only at /.berth/lib; its init is then that interpreter running
// /.berth/berth with that library path, so the image's own libc (or lack
// of one) never matters. The agent's children (hooks, the app) are the
// image's own programs and use the image's libraries. A Spec.Workspace is bind-mounted at /workspace
// and roots the agent's file operations. Each of Spec.Mounts (the driver
// is a vm.Mounter, writable mounts too) is bind-mounted (rbind, nosuid,
// nodev, and ro unless the mount is writable: the runtime then remounts
// it read-only) at its target, whose directory the driver makes in the
// replica's own root first, never in the shared image tree.
//
// Start is: mount the rootfs; make a network namespace and plug it into
// the bridge; write config.json; `runtime run --detach` into that
// namespace — one runtime command, and the network is up before the app
// runs. Stop sends SIGTERM to the init (the agent
// forwards it to the app), SIGKILL after the grace period (PID 1 dying
// takes the namespace with it), then `runtime delete`, which removes the
// cgroup, and removes the veth, the mount, the address and the directory:
// a stopped replica leaves nothing behind.
//
// The runtime manages cgroups (cgroupsPath <CgroupParent>/<id>, cgroupfs
// manager), with limits from the size class (vm.Sizes):
//
//	class   vCPUs  memory    cpu quota per 100 ms period
//	micro     1    256 MiB   100 ms
//	mini      1    512 MiB   100 ms
//	small     1    1 GiB     100 ms   (the default)
//	medium    2    2 GiB     200 ms
//	large     4    4 GiB     400 ms
//	xlarge    8    8 GiB     800 ms
//
// and a limit of 4096 processes. The CPU quota caps a replica at its
// vCPUs' worth of time whatever the host's core count.
// Suspend is the cgroup freezer (`runtime pause`), Resume thaws it
// (`runtime resume`); memory, sockets and the address are kept.
//
// StartBackground starts a replica nobody waits for yet (a rollout's
// candidate) at a low CPU priority: the runtime runs at nice 19, which
// the container's init, hooks and app inherit, and the OCI config gives
// the cgroup cpu.shares 2 (cpu.weight 1 on cgroup v2) from its creation;
// a spare it takes is set to that before its assignment, and the spares
// made after it are made so too. Foreground (berth calls it when the
// replica is promoted) writes the default weight back and renices the
// threads of the cgroup's processes that are at 19 to berth's own value.
//
// Spec.DiskSizeGB (0: unlimited) bounds what the replica can write: its
// overlay's upper and work directories live on an ext4 filesystem of that
// many GiB of its own (disk.ext4 on a loop device, cloned from an empty
// one made once per size under <Dir>/.disks), so a write past it fails
// with ENOSPC in the container; the image's files do not count (without
// overlayfs the image's copy is on that disk, and does). The file
// is sparse: it takes host space only for what the replica writes. The
// loop device detaches itself when Stop unmounts the filesystem. Without
// a disk size a replica gets no loop device and writes to the data
// directory's filesystem, unbounded. A host without loop devices, ext4 or
// mkfs.ext4 runs such replicas unbounded too, and says so in the log once.
//
// Replicas outlive berth: the runtime detaches them, and a new Driver over
// the same Dir finds them through their state files (the init's start time
// defeats pid reuse). A replica whose init was killed from outside is
// reported failed, with the runtime's stderr and its last output lines in
// the reason, so the pool replaces it.
//
// # Spares
//
// A cold start pays for the runtime (cgroups, namespaces, mounts: ~25 ms
// on a 2-CPU VM) and for the agent's own start-up (a Go binary: ~15 ms)
// before the app can begin. So once a replica of an image has started and
// its app listens, the driver makes Options.Spares (DefaultSpares) spare
// containers for that image and size class, for the maxSpareKinds most
// recently started ones: <Dir>/.spare-<hex>/ with the same layout (its
// spare.json instead of state.json), the overlay over the image, an empty
// network namespace, and the agent in spare mode (`berth agent --spare`,
// see package agent) as init, linked to the driver by a socket passed as
// its fd 3 (`runtime run --preserve-fds 1`). A Start that fits a spare (an
// image and size class with one, no workspace, no mounts (Spec.Mounts:
// a running container cannot get them), no disk of its own,
// overlayfs) takes it, waiting up to spareWait for one being made:
//
//  1. it renames the spare's directory onto the replica's (the mounts and
//     the agent's socket move with it) and writes state.json, which keeps
//     the spare's runtime name and cgroup (RuntimeID, Cgroup);
//  2. it makes the working directory and lease, and sets the UTS host
//     name from outside (setns; the container has no CAP_SYS_ADMIN);
//  3. it plugs the replica's veth, named after the replica, into the
//     namespace, with the replica's address;
//  4. it hands the agent the replica's flags, command and environment
//     (POST /v1/assign), and the agent starts the app.
//
// If any step fails the spare is removed and the replica starts cold: a
// spare can only make a Start faster. Spares are no replicas: List never
// shows them. A spare's agent exits when the driver's end of its link
// closes — at Close, or when berth dies — and a Driver removes the
// spares it finds ended (at New and before making more); a live one
// belongs to a live Driver. Close removes the Driver's own.
package container

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/agentbin"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
	sparepool "github.com/berth-dev/berth/internal/vm/spares"
)

// Images gives the root filesystem of an image by name (*image.Store).
type Images interface {
	Rootfs(name string) (string, error)
}

// Network plugs a container's network namespace into berth's bridge
// (*hostnet.Network).
type Network interface {
	// AttachVethAt gives the network namespace bound at path an eth0
	// with id's guest address (allocating it the first time) and returns
	// it.
	AttachVethAt(ctx context.Context, id, path string) (netip.Addr, error)
	// DetachVeth removes id's interface and frees its address.
	DetachVeth(ctx context.Context, id string) error
}

// Options configures a Driver.
type Options struct {
	// Dir is the state root, e.g. <data-dir>/containers; created if
	// missing. Required. Agent sockets live below it, so keep it short.
	Dir string

	// Runtime is the OCI runtime: "crun", "runc" or a path to either.
	// Empty means crun when it can run on this host, else runc.
	Runtime string

	// RuntimeRoot is the runtime's state directory (its --root). Empty
	// means <Dir>/.runtime.
	RuntimeRoot string

	// Images resolves Spec.Image. Required.
	Images Images

	// Net gives replicas their addresses. Required.
	Net Network

	// Agent is the berth binary bind-mounted into every container as its
	// init. Empty means the running executable. A dynamically linked one
	// runs through its bundled interpreter and libraries (see the package
	// documentation).
	Agent string

	// AgentArgs are put between "agent" and the contract's flags, e.g.
	// "--lease-check=50ms" in tests.
	AgentArgs []string

	// CgroupParent is where replicas' cgroups go, as an absolute cgroup
	// path. Empty means /berth.
	CgroupParent string

	// Log receives what the driver degrades on. Nil discards.
	Log *slog.Logger

	// Spares is how many idle containers to keep ready per image and
	// size class recently started (see "Spares" in the package
	// documentation). Nil means DefaultSpares; 0 disables them.
	Spares *int
}

// Driver runs replicas as OCI containers. It is safe for concurrent use,
// and Drivers of successive berth processes may share a Dir.
type Driver struct {
	replicadir.Reports[state] // Inspect, List

	dir      string
	rt       runtime
	images   Images
	net      Network
	agent    agentbin.Bin // the agent, and its bundle when it is dynamic
	args     []string
	cgParent string
	overlay  bool
	log      *slog.Logger
	nice     int // berth's own nice value: a replica's normal priority

	// noDisk says why Spec.DiskSizeGB cannot be enforced here ("": it
	// can); diskOnce logs it once; diskMu serializes making templates.
	noDisk   string
	diskOnce sync.Once
	diskMu   sync.Mutex

	// trace, when set (benchmarks), is told how long each step of a start
	// took: "mount", "prepare" (files), "network", "run" (the runtime).
	trace func(step string, d time.Duration)

	cpu proc.CPUMeter // Usage readings
	rd  replicadir.Dir[state]

	pool   *sparepool.Pool[spareKind, *spare] // spare containers; N is Options.Spares
	kindMu sync.Mutex                         // guards kinds
	kinds  []spareKind                        // kept spares for, most recent first
}

// File names inside a replica directory.
const (
	stateFile   = replicadir.StateFile
	bundleDir   = "bundle"
	rootfsDir   = "rootfs"
	upperDir    = "upper"
	workDir     = "work"
	runDir      = "run"
	pidFile     = "init.pid"
	netnsFile   = "netns"
	runtimeErr  = "runtime.err"
	sockFile    = "agent.sock"
	logFile     = "output.log"
	exitFile    = "exit.json"
	leaseFile   = replicadir.LeaseFile
	agentInside = "/.berth/berth"
	libInside   = "/.berth/lib" // a dynamic agent's bundle
	agentLibDir = ".agent-lib"  // where it is on the host, under Dir
	runInside   = "/.berth/run"
)

// maxSockPath is the longest unix socket path Linux accepts.
const maxSockPath = 107

// DefaultPort is the app's port when a spec names none.
const DefaultPort = 8080

// New returns a driver keeping its state under o.Dir. It fails with an
// error wrapping vm.ErrUnavailable, saying what is missing, on hosts where
// containers cannot run: not root, no usable runtime, no agent that can
// run in a container (not an executable, or a dynamic one whose
// libraries are not found).
func New(o Options) (*Driver, error) {
	if o.Dir == "" {
		return nil, errors.New("container: Options.Dir is required")
	}
	if o.Images == nil || o.Net == nil {
		return nil, errors.New("container: Options.Images and Options.Net are required")
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("container: needs root (namespaces, mounts, cgroups): %w", vm.ErrUnavailable)
	}
	rt, err := findRuntime(o.Runtime)
	if err != nil {
		return nil, fmt.Errorf("container: %w: %w", err, vm.ErrUnavailable)
	}
	agentBin := o.Agent
	if agentBin == "" {
		if agentBin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("container: finding the agent: %w", err)
		}
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	bin, err := bundleAgent(agentBin, filepath.Join(dir, agentLibDir))
	if err != nil {
		return nil, fmt.Errorf("container: %w: %w", err, vm.ErrUnavailable)
	}
	rt.root = o.RuntimeRoot
	if rt.root == "" {
		rt.root = filepath.Join(dir, ".runtime")
	}
	if err := os.MkdirAll(rt.root, 0o700); err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	parent := o.CgroupParent
	if parent == "" {
		parent = "/berth"
	}
	if !filepath.IsAbs(parent) || filepath.Clean(parent) != parent {
		return nil, fmt.Errorf("container: CgroupParent %q must be a clean absolute cgroup path", parent)
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if rt.crun {
		if rt.exe, err = sealedCopy(rt.path); err != nil {
			// Only slower: crun makes its own copy on every command.
			log.Warn("container: no sealed copy of crun; it copies itself on every command", "err", err)
		}
	}
	d := &Driver{
		dir: dir, rt: rt, images: o.Images, net: o.Net, agent: bin,
		args: slices.Clone(o.AgentArgs), cgParent: parent, overlay: hasOverlay(), log: log,
		noDisk: diskProblem(),
	}
	if n, err := proc.OwnNice(); err == nil {
		d.nice = n
	}
	d.Reports = replicadir.Reports[state]{Dir: &d.rd, Instance: d.instance}
	d.rd = replicadir.Dir[state]{
		Root: dir, Driver: "container", Log: log,
		ID: func(st state) string { return st.ID },
		Empty: func(id, owner string) state {
			return state{ID: id, Deployment: owner, Cgroup: parent + "/" + id}
		},
	}
	spares := DefaultSpares
	if o.Spares != nil {
		spares = max(*o.Spares, 0)
	}
	d.pool = d.newPool(spares)
	// Spares of a berth that is gone ended with it; remove what is left.
	d.reapStale()
	if !d.overlay {
		log.Warn("container: overlayfs is unavailable; every replica gets a full copy of its image")
	}
	return d, nil
}

// bundleAgent returns the agent binary at path, ready to run in any image:
// a static one as it is, a dynamic one with its interpreter and libraries
// copied into lib (package agentbin). Each file there is replaced by a
// rename, never rewritten, so the replicas of an earlier berth, which
// mapped the old ones, and Drivers sharing Dir go on undisturbed.
func bundleAgent(path, lib string) (agentbin.Bin, error) {
	f, err := elf.Open(path)
	if err != nil {
		return agentbin.Bin{}, fmt.Errorf("the agent binary %s: %w", path, err)
	}
	f.Close()
	b, err := agentbin.Bundle(path, lib)
	if err != nil {
		return b, fmt.Errorf("the agent binary %s is dynamically linked and its libraries cannot be bundled (build berth with CGO_ENABLED=0 to need none): %w", path, err)
	}
	return b, nil
}

// hasOverlay reports whether the kernel has overlayfs.
func hasOverlay() bool {
	b, err := os.ReadFile("/proc/filesystems")
	return err == nil && strings.Contains(string(b), "\toverlay\n")
}

// state is a replica's state.json.
type state struct {
	ID         string `json:"id"`
	Deployment string `json:"deployment"`
	// Owner is Spec.Owner as started; zero in the state of a replica of an
	// older berth (vm.ResolveOwner derives it from the name then).
	Owner      vm.Owner   `json:"owner,omitzero"`
	Image      string     `json:"image"`
	Port       int        `json:"port"`
	Addr       netip.Addr `json:"addr"`
	PID        int        `json:"pid"`         // host pid of the init; 0 until created
	StartTicks uint64     `json:"start_ticks"` // /proc/<pid>/stat field 22
	Cgroup     string     `json:"cgroup"`      // cgroupsPath
	Overlay    bool       `json:"overlay"`
	DiskGB     int        `json:"disk_gb,omitempty"` // size of the replica's own disk; 0: none
	StartedAt  time.Time  `json:"started_at"`
	Suspended  bool       `json:"suspended,omitempty"`
	// RuntimeID is the runtime's name for the container when it is not
	// ID: a replica started from a spare keeps the spare's.
	RuntimeID string `json:"runtime_id,omitempty"`
}

// runtimeID is the runtime's name for the replica's container.
func (st state) runtimeID() string {
	if st.RuntimeID != "" {
		return st.RuntimeID
	}
	return st.ID
}

func (st state) addr() string {
	if !st.Addr.IsValid() {
		return ""
	}
	return netip.AddrPortFrom(st.Addr, uint16(st.Port)).String()
}

func (d *Driver) path(id string, name ...string) string { return d.rd.Path(id, name...) }

// Start creates and starts a replica, returning once its init runs.
//
// The app's environment is PATH (a standard one), HOME=/root, HOSTNAME (the
// replica id), spec.Env, and PORT (spec.Port, default 8080), which wins
// over a PORT in spec.Env. WorkDir is a path in the container (relative
// ones are relative to /, or to /workspace with a Workspace) and is
// created. Every port the app opens is reachable at the replica's address,
// so OpenPorts need nothing more.
func (d *Driver) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	return d.start(ctx, spec, false)
}

// StartBackground is Start at a low CPU priority, for a replica nobody
// waits for (a rollout's candidate, while the previous replicas serve):
// the runtime runs at nice proc.BackgroundNice, so the container's init,
// hooks and app do too, and the container's cgroup has the lowest CPU
// weight from its creation (cpu.shares 2 in its OCI config: cpu.weight 1
// on cgroup v2). A spare it takes is set to that before its assignment.
// So its boot takes CPU from the replicas serving (and from berth) only
// when they leave some idle. Foreground gives it the normal priority back.
func (d *Driver) StartBackground(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	return d.start(ctx, spec, true)
}

func (d *Driver) start(ctx context.Context, spec vm.Spec, low bool) (vm.Instance, error) {
	if err := ctx.Err(); err != nil {
		return vm.Instance{}, err
	}
	st, size, err := d.check(spec)
	if err != nil {
		return vm.Instance{}, err
	}
	lower, err := d.images.Rootfs(spec.Image)
	if err != nil {
		return vm.Instance{}, fmt.Errorf("container: start %s: %w", spec.Name, err)
	}
	if spec.DiskSizeGB > 0 && st.DiskGB == 0 {
		d.diskOnce.Do(func() {
			d.log.Warn("container: vm.disk_size_gb is not enforced on this host", "disk_size_gb", spec.DiskSizeGB, "why", d.noDisk)
		})
	}
	release, err := d.rd.Claim(spec.Name)
	if err != nil {
		return vm.Instance{}, err
	}
	defer release()
	dir := d.path(spec.Name)
	if d.spareEligible(spec, st) {
		if sp := d.takeSpare(ctx, kindOf(spec), lower); sp != nil {
			warm, err := d.assign(ctx, spec, st, sp, low)
			if err == nil {
				d.afterStart(ctx, spec, warm, lower, size, low)
				return d.instance(warm), nil
			}
			// A spare only ever makes a start faster: start cold.
			d.log.Warn("container: a spare container could not take the replica; starting a new one", "id", spec.Name, "err", err)
			d.cleanup(context.WithoutCancel(ctx), warm)
			if err := os.Mkdir(dir, 0o700); err != nil {
				return vm.Instance{}, fmt.Errorf("container: start %s: %w", spec.Name, err)
			}
		}
	}
	st, err = d.launch(ctx, spec, st, lower, size, low)
	if err != nil {
		reason := err.Error()
		if b, rerr := os.ReadFile(d.path(spec.Name, runtimeErr)); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			reason += "; runtime: " + replicadir.LastLines(string(b), replicadir.TailLines)
		}
		d.cleanup(context.WithoutCancel(ctx), st)
		return vm.Instance{}, fmt.Errorf("container: start %s: %s", spec.Name, reason)
	}
	d.afterStart(ctx, spec, st, lower, size, low)
	return d.instance(st), nil
}

// check validates spec and returns the initial state and size.
func (d *Driver) check(spec vm.Spec) (state, vm.Size, error) {
	fail := func(format string, args ...any) (state, vm.Size, error) {
		return state{}, vm.Size{}, fmt.Errorf("container: start %q: "+format, append([]any{spec.Name}, args...)...)
	}
	owner, size, err := replicadir.CheckSpec(spec)
	if err != nil {
		return fail("%v", err)
	}
	if spec.Image == "" {
		return fail("the container driver needs an image (vm.image)")
	}
	if spec.Workspace != "" {
		if err := replicadir.CheckWorkspace(spec.Workspace); err != nil {
			return fail("%v", err)
		}
		if spec.User != nil {
			// The bind mount keeps owners: the image's user can write
			// its workspace (the replica's own copy, seeded by berth as
			// root) only if it owns it.
			if err := replicadir.ChownTree(spec.Workspace, int(spec.User.UID), int(spec.User.GID)); err != nil {
				return fail("handing the workspace to user %s: %v", spec.User.AgentFlag(), err)
			}
		}
	}
	if err := replicadir.CheckMounts(spec, true, workspaceInside); err != nil {
		return fail("%v", err)
	}
	if spec.DiskSizeGB < 0 || spec.DiskSizeGB > maxDiskGB {
		return fail("disk size %d GB out of range (1 to %d, or 0 for none)", spec.DiskSizeGB, maxDiskGB)
	}
	if p := d.path(spec.Name, runDir, sockFile); len(p) > maxSockPath {
		return fail("agent socket path %s is longer than %d bytes; use a shorter Dir", p, maxSockPath)
	}
	port := spec.Port
	if port == 0 {
		port = DefaultPort
	}
	st := state{
		ID: spec.Name, Deployment: owner, Owner: vm.ResolveOwner(spec.Owner, spec.Name), Image: spec.Image, Port: port,
		Cgroup: d.cgParent + "/" + spec.Name, Overlay: d.overlay,
	}
	if d.noDisk == "" {
		st.DiskGB = spec.DiskSizeGB
	}
	return st, size, nil
}

// containerWorkDir is the app's working directory inside the container.
func containerWorkDir(spec vm.Spec) string {
	base := "/"
	if spec.Workspace != "" {
		base = workspaceInside
	}
	if spec.WorkDir == "" {
		return base
	}
	if filepath.IsAbs(spec.WorkDir) {
		return filepath.Clean(spec.WorkDir)
	}
	return filepath.Join(base, spec.WorkDir)
}

// workspaceInside is where a Spec.Workspace appears in the container.
const workspaceInside = "/workspace"

// launch prepares the replica's files and starts its container.
func (d *Driver) launch(ctx context.Context, spec vm.Spec, st state, lower string, size vm.Size, low bool) (state, error) {
	dir := d.path(spec.Name)
	for _, sub := range []string{bundleDir, rootfsDir, upperDir, workDir, runDir} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return st, err
		}
	}
	os.Chmod(filepath.Join(dir, rootfsDir), 0o755)
	st.StartedAt = time.Now().UTC()
	// Recorded before anything is mounted, so a berth that dies from here
	// on leaves state a later Stop can clean up from.
	if err := replicadir.WriteState(dir, st); err != nil {
		return st, err
	}
	t := time.Now()
	step := func(name string) {
		if d.trace != nil {
			now := time.Now()
			d.trace(name, now.Sub(t))
			t = now
		}
	}
	if err := d.mountRootfs(dir, lower, st, low); err != nil {
		return st, err
	}
	step("mount")
	wd := containerWorkDir(spec)
	if spec.Workspace == "" || !strings.HasPrefix(wd+"/", workspaceInside+"/") {
		if err := mkdirIn(filepath.Join(dir, rootfsDir), wd); err != nil {
			return st, fmt.Errorf("creating the working directory %s: %w", wd, err)
		}
	}
	for i, m := range spec.Mounts {
		// In the replica's own root (the overlay's upper layer, or its
		// copy of the image), never in the image tree it shares.
		if err := mkdirIn(filepath.Join(dir, rootfsDir), m.Target); err != nil {
			return st, fmt.Errorf("mounts[%d] (%s): creating the mount point: %w", i, m, err)
		}
	}
	if spec.TTL > 0 {
		if err := replicadir.WriteLease(filepath.Join(dir, runDir), st.StartedAt.Add(spec.TTL), 0o644); err != nil {
			return st, err
		}
	}
	cfg := d.config(spec, st, wd, size)
	if low {
		lowPriority(cfg)
	}
	b, err := json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		return st, err
	}
	if err := os.WriteFile(filepath.Join(dir, bundleDir, "config.json"), b, 0o600); err != nil {
		return st, err
	}
	step("prepare")
	ns := filepath.Join(dir, netnsFile)
	if err := hostnet.NewNetns(ns); err != nil {
		return st, err
	}
	if st.Addr, err = d.net.AttachVethAt(ctx, spec.Name, ns); err != nil {
		return st, err
	}
	if err := replicadir.WriteState(dir, st); err != nil {
		return st, err
	}
	step("network")
	if err := d.rt.run(ctx, spec.Name, filepath.Join(dir, bundleDir), filepath.Join(dir, pidFile), filepath.Join(dir, runtimeErr), low); err != nil {
		return st, err
	}
	step("run")
	pb, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return st, fmt.Errorf("reading the init's pid: %w", err)
	}
	st.PID, err = strconv.Atoi(strings.TrimSpace(string(pb)))
	if err != nil || st.PID <= 0 {
		return st, fmt.Errorf("the runtime wrote a bad pid %q", pb)
	}
	if ps, err := proc.ReadStat(st.PID); err == nil {
		st.StartTicks = ps.StartTicks
	} else {
		// The init is gone already (the app failed at once): keep the
		// pid, and a start time that matches nothing, so it reads dead
		// and its exit file says why.
		st.StartTicks = 0
	}
	if err := replicadir.WriteState(dir, st); err != nil {
		return st, err
	}
	return st, nil
}

// mkdirIn creates the directory p (absolute, inside the container) under
// root without following symlinks out of it.
func mkdirIn(root, p string) error {
	rel := strings.TrimPrefix(filepath.Clean(p), "/")
	if rel == "" {
		return nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.MkdirAll(rel, 0o755)
}

// environ is the app's environment.
func environ(spec vm.Spec, st state) []string {
	home := "/root"
	if spec.Workspace != "" {
		home = workspaceInside
	}
	return vm.AppEnv([]string{"PATH=" + vm.StdPath, "HOME=" + home, "HOSTNAME=" + vm.Hostname(spec.Name)}, spec.Env, st.Port)
}

// agentCommand is the init's command line inside the container: the
// agent, through its bundled interpreter when it is dynamic, with
// agentArgs.
func (d *Driver) agentCommand(spec vm.Spec, wd string) []string {
	return d.agentArgv(d.agentArgs(spec, wd)...)
}

// agentArgv is the command line that runs `berth agent args...` in a
// container.
func (d *Driver) agentArgv(args ...string) []string {
	return d.agent.Command(agentInside, libInside, append([]string{"agent"}, args...)...)
}

// agentArgs are the agent's arguments for a replica: the driver's
// AgentArgs, the agent contract's flags and the command. A spare is
// assigned these.
func (d *Driver) agentArgs(spec vm.Spec, wd string) []string {
	args := slices.Clone(d.args)
	args = append(args,
		"--listen", "unix:"+runInside+"/"+sockFile,
		"--log", runInside+"/"+logFile,
		"--exit-file", runInside+"/"+exitFile,
		"--lease-file", runInside+"/"+leaseFile,
		"--state-dir", runInside+"/processes",
		"--workdir", wd)
	if spec.Workspace != "" {
		args = append(args, "--root", workspaceInside)
	}
	if spec.User != nil {
		// The image's user: the agent (root, the container's init)
		// starts everything as it.
		args = append(args, "--user", spec.User.AgentFlag())
	}
	for _, h := range spec.SetupHooks {
		args = append(args, "--setup", h)
	}
	if spec.Command != "" {
		args = append(args, "--", "/bin/sh", "-c", spec.Command)
	}
	return args
}

// Renew moves a replica's lease deadline to until.
func (d *Driver) Renew(ctx context.Context, id string, until time.Time) error {
	return d.rd.Renew(ctx, id, until, 0o644, runDir)
}

// instance derives a replica's state from its files and its init.
func (d *Driver) instance(st state) vm.Instance {
	inst := vm.Instance{
		ID: st.ID, Deployment: st.Deployment, Owner: vm.ResolveOwner(st.Owner, st.ID), Addr: st.addr(),
		StartedAt: st.StartedAt, PID: st.PID,
	}
	starting := d.rd.Starting(st.ID)
	alive := st.PID != 0 && proc.Alive(st.PID, st.StartTicks)
	dir := d.path(st.ID)
	if replicadir.AgentExit(&inst, filepath.Join(dir, runDir, exitFile), filepath.Join(dir, runDir, logFile), alive) {
		return inst
	}
	switch {
	case alive && starting:
		inst.State = vm.StateStarting
	case alive && st.Suspended:
		inst.State = vm.StateSuspended
	case alive:
		inst.State = vm.StateRunning
	case starting:
		inst.State = vm.StateStarting
	case st.PID == 0:
		inst.State = vm.StateFailed
		inst.Reason = "the start of this replica was interrupted before its container ran"
	default:
		inst.State = vm.StateFailed
		reason := "the container's init ended without recording an exit"
		if b, err := os.ReadFile(filepath.Join(dir, runtimeErr)); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			reason += ": " + replicadir.LastLines(string(b), replicadir.TailLines)
		}
		inst.Reason = replicadir.WithTail(reason, d.tail(dir))
	}
	return inst
}

func (d *Driver) tail(dir string) []string {
	return console.AppTail(filepath.Join(dir, runDir, logFile), replicadir.TailLines)
}

// Stop asks the replica to end (SIGTERM to the init, which the agent
// forwards to the app), waits up to grace, kills it, and removes the
// container, its cgroup, veth, mounts, loop device, address and directory. Stopping an
// ended replica just cleans up.
func (d *Driver) Stop(ctx context.Context, id string, grace time.Duration) error {
	st, err := d.rd.Load(id)
	if err != nil {
		return err
	}
	if _, err := proc.End(ctx, grace, d.ending(ctx, st)); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("container: stop %s: %w", id, err)
	}
	if err := d.cleanup(ctx, st); err != nil {
		return fmt.Errorf("container: stop %s: %w", id, err)
	}
	d.cpu.Forget(id)
	return nil
}

// ending is how Stop ends a replica's init: SIGTERM, which the agent
// forwards to the app, after a suspended replica is thawed; then SIGKILL.
func (d *Driver) ending(ctx context.Context, st state) proc.Ending {
	e := proc.Ending{
		What:   "the init",
		Gone:   func() bool { return st.PID == 0 || !proc.Alive(st.PID, st.StartTicks) },
		Polite: func() error { return syscall.Kill(st.PID, syscall.SIGTERM) },
		Kill:   func() { syscall.Kill(st.PID, syscall.SIGKILL) },
	}
	if st.Suspended {
		e.Thaw = func() { d.rt.resume(ctx, st.runtimeID()) }
	}
	return e
}

// cleanup removes everything of a replica whose init is gone (or never
// ran): the runtime's container and cgroup, the veth and address, the
// rootfs mount, the disk's mount and loop device, and the directory.
func (d *Driver) cleanup(ctx context.Context, st state) error {
	var errs []error
	if err := d.rt.delete(ctx, st.runtimeID()); err != nil {
		errs = append(errs, err)
	}
	if st.PID != 0 && proc.Alive(st.PID, st.StartTicks) {
		// The runtime's delete --force killed a created-but-not-started
		// init; let it go before its mounts do.
		syscall.Kill(st.PID, syscall.SIGKILL)
		proc.WaitFor(ctx, proc.KillPatience, func() bool { return !proc.Alive(st.PID, st.StartTicks) })
	}
	removeCgroups(st.Cgroup)
	if err := d.net.DetachVeth(ctx, st.ID); err != nil {
		errs = append(errs, err)
	}
	dir := d.path(st.ID)
	if err := hostnet.RemoveNetns(filepath.Join(dir, netnsFile)); err != nil {
		errs = append(errs, err)
	}
	if err := unmount(filepath.Join(dir, rootfsDir)); err != nil {
		errs = append(errs, err)
	}
	if err := releaseDisk(dir); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Suspend freezes every process of the replica (the runtime's pause, the
// cgroup freezer). The flag is persisted first, so a berth that dies
// midway reports the replica suspended and Resume thaws it.
func (d *Driver) Suspend(ctx context.Context, id string) error {
	st, err := d.rd.Load(id)
	if err != nil {
		return err
	}
	if st.PID == 0 || !proc.Alive(st.PID, st.StartTicks) {
		return fmt.Errorf("container: suspend %s: the replica is not running", id)
	}
	st.Suspended = true
	if err := replicadir.WriteState(d.path(id), st); err != nil {
		return fmt.Errorf("container: suspend %s: %w", id, err)
	}
	if err := d.rt.pause(ctx, st.runtimeID()); err != nil {
		st.Suspended = false
		replicadir.WriteState(d.path(id), st)
		return fmt.Errorf("container: suspend %s: %w", id, err)
	}
	return nil
}

// Resume thaws a suspended replica.
func (d *Driver) Resume(ctx context.Context, id string) (vm.Instance, error) {
	st, err := d.rd.Load(id)
	if err != nil {
		return vm.Instance{}, err
	}
	if st.PID == 0 || !proc.Alive(st.PID, st.StartTicks) {
		return vm.Instance{}, fmt.Errorf("container: resume %s: the replica is not running", id)
	}
	if err := d.rt.resume(ctx, st.runtimeID()); err != nil && st.Suspended {
		return vm.Instance{}, fmt.Errorf("container: resume %s: %w", id, err)
	}
	st.Suspended = false
	if err := replicadir.WriteState(d.path(id), st); err != nil {
		return vm.Instance{}, fmt.Errorf("container: resume %s: %w", id, err)
	}
	return d.instance(st), nil
}

// DialAgent connects to the replica's agent over its unix socket, which
// the container's init binds in the replica's run/ directory.
func (d *Driver) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	return d.rd.DialUnix(ctx, id, runDir, sockFile)
}

// lookRuntime finds a runtime binary by name or path.
func lookRuntime(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("OCI runtime %s not found (Debian package %s)", name, filepath.Base(name))
	}
	return p, nil
}
