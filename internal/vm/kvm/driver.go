package kvm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
	"github.com/berth-dev/berth/internal/vm/microvm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// Options configures a Driver.
type Options struct {
	// Dir is the state root, e.g. <data-dir>/kvm. Created if missing.
	// Required. Unix sockets live below it, so keep it short.
	Dir string

	// QEMUBin is the QEMU system emulator; a bare name is looked up in
	// PATH. Empty means "qemu-system-x86_64" (Debian: qemu-system-x86).
	QEMUBin string

	// Kernel is the guest kernel: an uncompressed vmlinux (booted through
	// its PVH entry, fastest) or a bzImage such as Debian's
	// /boot/vmlinuz-* (linux-image-amd64). Required.
	Kernel string

	// Initrd is the initramfs that loads the modules the guest needs and
	// mounts the root disk (see WriteInitrd). Required unless the kernel
	// has virtio-mmio, virtio block, net and console and ext4 built in and
	// KernelArgs says how to boot without it (then set NoInitrd).
	Initrd string

	// NoInitrd boots without an initramfs: the kernel mounts the root disk
	// itself (root=/dev/vda) and runs the agent, and configures eth0 from
	// its ip= parameter (CONFIG_IP_PNP). For kernels built for it, like
	// Firecracker's CI kernels.
	NoInitrd bool

	// KernelArgs are added to the guest's kernel command line.
	KernelArgs string

	// GuestInit is the path of the berth binary inside the image, which
	// becomes the guest's init. Empty means /berth-agent.
	GuestInit string

	// GuestInitArgs go between GuestInit and the agent's arguments on
	// init's command line. They let a dynamically linked berth be the
	// init: GuestInit is then the ELF interpreter bundled into the image
	// and GuestInitArgs its flags and the berth binary's path (see
	// agentbin.Bin.Command). None may be empty or hold white space.
	GuestInitArgs []string

	// Images provides the root disks. Required.
	Images microvm.Images

	// Net provides the tap devices and addresses. Required.
	Net microvm.Network

	// Accel is "kvm", "tcg" (emulation: slow, but needs no /dev/kvm), or
	// empty: decided at the first Start by what works (ProbeAccel: kvm
	// where a probe boot of Kernel with Initrd under KVM reaches
	// userspace, tcg otherwise, with the reason logged and in
	// AccelReason). Starts meanwhile wait for that one probe.
	Accel string

	// ProbeCache is the directory ProbeAccel keeps its answers in, so that
	// a host probes a kernel once. Empty means <Dir>/accel-probe.
	ProbeCache string

	// TCGKernel, when set, is booted instead of Kernel under TCG: the
	// same kernel uncompressed (a vmlinux, see ExtractVmlinux), which
	// boots seconds faster under emulation. It must exist by the first
	// Start under TCG.
	TCGKernel string

	// LeaseCheck is how often the agent in the guest reads its lease
	// file (its --lease-check). Zero means the agent's default.
	LeaseCheck time.Duration

	// BootAllowance is how long past Spec.TTL the guest's own backstop
	// lease reaches. The lease's deadline is absolute and the guest boots
	// after Start, slowly under TCG, so the guest boots with Spec.TTL plus
	// this, and the driver passes the real deadline (Spec.TTL after Start,
	// or what Renew set since) on once the agent answers; the backstop
	// only counts when berth is gone before that. It is also how long the
	// driver tries to reach a booting guest for that. Zero means 1 minute
	// with KVM and 5 minutes under TCG.
	BootAllowance time.Duration

	// Hypervisor runs the guests' QEMU. Nil means the driver runs QEMU
	// itself (QEMUBin); package libvirt sets one that asks libvirtd.
	Hypervisor Hypervisor

	// Log receives what the driver degrades on. Nil discards.
	Log *slog.Logger
}

// DefaultPort is the app's port in the guest when the spec names none: each
// replica has its own address, so every app may use the same port.
const DefaultPort = 8080

// AgentPortName is the name of the virtio serial port the agent listens
// on in the guest (virtserialport name=, `--listen virtio:berth.agent`).
const AgentPortName = "berth.agent"

// Paths inside the guest.
const (
	guestConsole = "/dev/ttyS0"
	guestRoot    = "/dev/vda"
	guestConfig  = "/dev/vdb" // the second virtio disk; see qemuArgs
	guestLease   = "/run/berth/lease"
	guestHome    = "/root"
	// guestWorkspace is where the initramfs mounts a Spec.Workspace, as
	// the container driver bind-mounts it.
	guestWorkspace = "/workspace"
)

// File names in a replica's directory.
const (
	stateFile   = "state.json"
	pidFile     = "qemu.pid"
	qmpSock     = "qmp.sock"
	agentSock   = "agent.sock"
	rootfsFile  = "rootfs.ext4"
	configFile  = "config.img"
	consoleFile = "console.log"        // the serial console
	qemuLogFile = "qemu.log"           // QEMU's own messages after it daemonized
	leaseFile   = replicadir.LeaseFile // the last deadline Renew set
)

// maxSockPath is the longest unix socket path Linux accepts.
const maxSockPath = 107

// Driver runs each replica as a QEMU microvm guest. It is safe for
// concurrent use, and several Drivers (or berth processes, one after
// another) may share a Dir.
type Driver struct {
	replicadir.Reports[state] // Inspect, List

	dir        string
	qemu       string
	kernel     string
	initrd     string // empty: none
	kernelArgs string
	init       string
	initArgs   []string // Options.GuestInitArgs
	images     microvm.Images
	net        microvm.Network
	hv         Hypervisor // nil: QEMU run directly
	leaseCheck time.Duration
	log        *slog.Logger
	rd         replicadir.Dir[state]

	// The accelerator, decided at New or by the first Start's probe.
	tcgKernel  string        // Options.TCGKernel
	allowance0 time.Duration // Options.BootAllowance
	probeQEMU  string        // the QEMU ProbeAccel runs; "" when none
	probeCache string
	accelMu    sync.Mutex
	acc        *accelCfg     // nil until decided
	probing    chan struct{} // closed when the probe under way ends

	mu     sync.Mutex
	cpu    proc.CPUMeter         // Usage readings
	agents map[string]*agentConn // per id: the session to its agent
}

// New returns a driver keeping its state under o.Dir. It returns an error
// wrapping vm.ErrUnavailable, naming what is missing, when this host cannot
// run guests: no QEMU, no guest kernel or initramfs, no KVM when Accel is
// "kvm", or no image store or host network wired in.
func New(o Options) (*Driver, error) {
	unavailable := func(format string, args ...any) (*Driver, error) {
		return nil, fmt.Errorf("kvm: "+format+": %w", append(args, vm.ErrUnavailable)...)
	}
	if o.Dir == "" {
		return nil, errors.New("kvm: Options.Dir is required")
	}
	switch o.Accel {
	case "":
	case "kvm":
		if err := kvmUsable(); err != nil {
			return unavailable("no KVM on this host (%v)", err)
		}
	case "tcg":
	default:
		return nil, fmt.Errorf("kvm: Accel %q: want kvm, tcg or empty", o.Accel)
	}
	var qemu string
	if o.Hypervisor == nil {
		var err error
		if qemu, err = microvm.LookBin(o.QEMUBin, "qemu-system-x86_64"); err != nil {
			return unavailable("no QEMU (%v); on Debian install qemu-system-x86", err)
		}
	}
	c, err := microvm.Common{Dir: o.Dir, Kernel: o.Kernel, GuestInit: o.GuestInit, Images: o.Images, Net: o.Net, Log: o.Log}.Check("kvm")
	if err != nil {
		return nil, err
	}
	dir, kernel, init, log := c.Dir, c.Kernel, c.GuestInit, c.Log
	var initrd string
	if !o.NoInitrd {
		if o.Initrd == "" {
			return unavailable("no guest initramfs configured (see WriteInitrd)")
		}
		if initrd, err = filepath.Abs(o.Initrd); err != nil {
			return nil, fmt.Errorf("kvm: %w", err)
		}
		if _, err := os.Stat(initrd); err != nil {
			return unavailable("guest initramfs: %v", err)
		}
	}
	for _, a := range o.GuestInitArgs {
		if a == "" || strings.ContainsAny(a, " \t\n") {
			return nil, fmt.Errorf("kvm: GuestInitArgs %q: each must be non-empty, without white space", o.GuestInitArgs)
		}
	}
	if strings.Contains(" "+o.KernelArgs+" ", " -- ") {
		return nil, errors.New("kvm: KernelArgs must not pass init arguments (--): the driver does")
	}
	var tcgKernel string
	if o.TCGKernel != "" {
		if tcgKernel, err = filepath.Abs(o.TCGKernel); err != nil {
			return nil, fmt.Errorf("kvm: %w", err)
		}
	}
	probeQEMU := qemu
	if o.Accel == "" && probeQEMU == "" {
		// A Hypervisor runs QEMU; the probe runs it directly.
		probeQEMU, _ = microvm.LookBin(o.QEMUBin, "qemu-system-x86_64")
	}
	probeCache := o.ProbeCache
	if probeCache == "" {
		probeCache = filepath.Join(dir, "accel-probe")
	}
	d := &Driver{
		dir:        dir,
		qemu:       qemu,
		kernel:     kernel,
		initrd:     initrd,
		kernelArgs: strings.TrimSpace(o.KernelArgs),
		init:       init,
		initArgs:   slices.Clone(o.GuestInitArgs),
		images:     o.Images,
		net:        o.Net,
		hv:         o.Hypervisor,
		leaseCheck: o.LeaseCheck,
		log:        log,
		tcgKernel:  tcgKernel,
		allowance0: o.BootAllowance,
		probeQEMU:  probeQEMU,
		probeCache: probeCache,
		agents:     make(map[string]*agentConn),
	}
	d.Reports = replicadir.Reports[state]{Dir: &d.rd, Instance: d.instance}
	d.rd = replicadir.Dir[state]{
		Root: dir, Driver: "kvm", Log: log,
		ID:    func(st state) string { return st.ID },
		Empty: func(id, owner string) state { return state{ID: id, Deployment: owner} },
	}
	if o.Accel != "" {
		d.acc = d.newAccelCfg(o.Accel, "set by Options.Accel")
	}
	return d, nil
}

// kvmUsable reports why /dev/kvm cannot be used, or nil.
func kvmUsable() error {
	f, err := os.OpenFile(kvmDevice, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// hostTSCKHz is the host CPU's clock in kHz from /proc/cpuinfo, which under
// TCG is the rate of the guest's TSC (QEMU passes the host's through). The
// guest is told it (tsc_early_khz): calibrating the TSC against the
// emulated PIT fails on a busy host, and a microvm has no other timer to
// calibrate against, so the boot hangs. 0 if unknown.
func hostTSCKHz() int64 {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || mhz <= 0 || mhz > 100000 {
			return 0
		}
		return int64(math.Round(mhz * 1000))
	}
	return 0
}

// state is a replica's state.json: only what re-adoption needs, never the
// environment (which may hold resolved secrets).
type state struct {
	ID         string `json:"id"`
	Deployment string `json:"deployment"`
	// Owner is Spec.Owner as started; zero in the state of a replica of an
	// older berth (vm.ResolveOwner derives it from the name then).
	Owner      vm.Owner  `json:"owner,omitzero"`
	Port       int       `json:"port"`
	Tap        string    `json:"tap,omitempty"`
	GuestIP    string    `json:"guest_ip,omitempty"`
	HostIP     string    `json:"host_ip,omitempty"`
	PrefixLen  int       `json:"prefix_len,omitempty"`
	MAC        string    `json:"mac,omitempty"`
	PID        int       `json:"pid"`         // QEMU; 0 before it runs
	StartTicks uint64    `json:"start_ticks"` // /proc/<pid>/stat field 22, against pid reuse
	StartedAt  time.Time `json:"started_at"`
	Suspended  bool      `json:"suspended,omitempty"`
	// Workspace is the host directory shared with the guest (Spec.Workspace),
	// "" for none.
	Workspace string `json:"workspace,omitempty"`
	// Mounts are the host trees shared with the guest read-only
	// (Spec.Mounts), the i-th under the 9p tag MountTag(i).
	Mounts []Mount `json:"mounts,omitempty"`
}

// Mount is one of a guest's read-only mounts (vm.Mount): the host
// directory Source, which the guest sees at Target.
type Mount struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// MountTag is the 9p mount tag of a guest's i-th mount (QEMU's
// mount_tag=, libvirt's <target dir=>): berth.m<i>.
func MountTag(i int) string { return "berth.m" + strconv.Itoa(i) }

// checkMounts checks a spec's mounts for a guest: what
// replicadir.CheckMounts checks, read-only only (a writable 9p share
// would write the guest's changes into the host tree every replica
// shares), and targets that can travel on the kernel command line
// (berth_mounts=). It needs the initramfs, which mounts them.
func (d *Driver) checkMounts(spec vm.Spec) error {
	for i, m := range spec.Mounts {
		if !m.ReadOnly {
			return fmt.Errorf("mounts[%d] (%s): the kvm driver attaches mounts read-only only: a writable 9p share would write the guest's changes through into the host tree that every replica shares", i, m)
		}
		if c := strings.IndexFunc(m.Target, func(r rune) bool { return !cmdlineSafe(r) }); c >= 0 {
			return fmt.Errorf("mounts[%d] (%s): the target may only hold A-Z a-z 0-9 / . _ - + @ on the kvm driver, which passes it on the kernel command line (it holds %q)", i, m, m.Target[c:c+1])
		}
	}
	if err := replicadir.CheckMounts(spec, false, guestWorkspace); err != nil {
		return err
	}
	if len(spec.Mounts) > 0 && d.initrd == "" {
		return errors.New("mounts need the driver's initramfs (Options.Initrd), which mounts them")
	}
	ms := make([]Mount, len(spec.Mounts))
	for i, m := range spec.Mounts {
		ms[i].Target = m.Target
	}
	if n := len(mountsArg(ms)); n > maxMountsArg {
		return fmt.Errorf("the mounts' targets take %d bytes on the kernel command line, more than the %d it has room for; use shorter paths", n, maxMountsArg)
	}
	return nil
}

// maxMountsArg bounds berth_mounts= on the kernel command line, whose
// whole is at most 2047 bytes on x86 (COMMAND_LINE_SIZE); the rest of it
// takes about 300.
const maxMountsArg = 1024

// cmdlineSafe reports whether r may stand in a mount target on the
// kernel command line: no space, quote or backslash (which the kernel's
// parser reads), no comma or colon (which separate berth_mounts=).
func cmdlineSafe(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("/._-+@", r)
}

func (st state) addr() string {
	if st.GuestIP == "" {
		return ""
	}
	return net.JoinHostPort(st.GuestIP, strconv.Itoa(st.Port))
}

// replicaDir is the directory with the replica's files.
func (d *Driver) replicaDir(id string) string { return d.rd.Path(id) }

func (d *Driver) path(id, name string) string { return d.rd.Path(id, name) }

// Start creates the replica's disk, tap and config drive and starts QEMU,
// returning once the guest runs; the kernel, the agent and the app are
// still booting, readiness is the caller's probe (under TCG boot-to-ready
// takes seconds). spec.Image is required. The app's environment is PATH,
// HOME (/root), HOSTNAME (the id), spec.Env and PORT (spec.Port, or
// DefaultPort), which wins over a PORT in spec.Env. A relative WorkDir is
// relative to /; the default is /root.
func (d *Driver) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	return d.rd.Start(ctx, spec, d.check, d.launch, func(ctx context.Context, st state) error { return d.destroy(ctx, st, 0) }, d.instance)
}

// check validates spec and returns the initial state and the size; the
// error is for Dir.Start to prefix.
func (d *Driver) check(spec vm.Spec) (state, vm.Size, error) {
	fail := func(format string, args ...any) (state, vm.Size, error) {
		return state{}, vm.Size{}, fmt.Errorf(format, args...)
	}
	owner, size, err := microvm.CheckSpec("kvm", spec)
	if err != nil {
		return state{}, size, err
	}
	if spec.Workspace != "" {
		if err := replicadir.CheckWorkspace(spec.Workspace); err != nil {
			return fail("%v", err)
		}
		if d.initrd == "" {
			// The initramfs mounts it; without one nothing would.
			return fail("a workspace needs the driver's initramfs (Options.Initrd), which mounts it")
		}
	}
	if err := d.checkMounts(spec); err != nil {
		return fail("%v", err)
	}
	st := state{ID: spec.Name, Deployment: owner, Owner: vm.ResolveOwner(spec.Owner, spec.Name), Port: spec.Port}
	if spec.Workspace != "" {
		st.Workspace = filepath.Clean(spec.Workspace)
	}
	for _, m := range spec.Mounts {
		st.Mounts = append(st.Mounts, Mount{Source: filepath.Clean(m.Source), Target: m.Target})
	}
	if st.Port == 0 {
		st.Port = DefaultPort
	}
	for _, s := range []string{qmpSock, agentSock} {
		if p := d.path(st.ID, s); len(p) > maxSockPath {
			return fail("socket path %s is longer than %d bytes; use a shorter Dir", p, maxSockPath)
		}
	}
	return st, size, nil
}

// launch prepares the replica's files and starts QEMU. The returned state
// is what exists so far, for cleanup when it fails.
func (d *Driver) launch(ctx context.Context, spec vm.Spec, st state, size vm.Size) (state, error) {
	// The first Start decides the accelerator (a probe boot, seconds);
	// the replica is starting meanwhile (Inspect).
	if _, err := d.decideAccel(ctx); err != nil {
		return st, fmt.Errorf("deciding the accelerator: %w", err)
	}
	st.StartedAt = time.Now().UTC()
	if err := replicadir.WriteState(d.replicaDir(st.ID), st); err != nil {
		return st, err
	}
	if st.Workspace != "" && spec.User != nil {
		// The share passes owners through (security_model=passthrough),
		// so the image's user can write its workspace only if it owns
		// it: the replica's own copy, seeded by berth as root.
		if err := replicadir.ChownTree(st.Workspace, int(spec.User.UID), int(spec.User.GID)); err != nil {
			return st, fmt.Errorf("handing the workspace to user %s: %w", spec.User.AgentFlag(), err)
		}
	}
	if err := microvm.CopyRootDisk(ctx, d.images, spec, d.path(st.ID, rootfsFile)); err != nil {
		return st, err
	}

	tap, err := microvm.CreateTap(ctx, d.net, st.ID, 0xb5, func(tap string) error {
		// Recorded at once, so that cleanup and a later Stop delete it.
		st.Tap = tap
		return replicadir.WriteState(d.replicaDir(st.ID), st)
	})
	if err != nil {
		return st, err
	}
	if !validMAC(tap.MAC) {
		return st, fmt.Errorf("host network: MAC address %q is malformed", tap.MAC)
	}
	if !validIfName(tap.Name) {
		return st, fmt.Errorf("host network: tap name %q is not a valid interface name", tap.Name)
	}
	st.GuestIP, st.PrefixLen, st.HostIP, st.MAC = tap.GuestIP, tap.PrefixLen, tap.HostIP, tap.MAC

	cfg, err := agent.EncodeGuestConfig(d.guestConfig(spec, st))
	if err != nil {
		return st, err
	}
	if err := os.WriteFile(d.path(st.ID, configFile), cfg, 0o600); err != nil {
		return st, err
	}
	if spec.TTL > 0 {
		if err := replicadir.WriteLease(d.replicaDir(st.ID), st.StartedAt.Add(spec.TTL), 0o600); err != nil {
			return st, err
		}
	}
	if st, err = d.spawn(ctx, st, size); err != nil {
		return st, err
	}
	d.agentFor(st.ID)
	d.mu.Lock()
	d.agents[st.ID].bootPending = true
	d.mu.Unlock()
	go d.afterBoot(context.WithoutCancel(ctx), st)
	return st, nil
}

func validMAC(s string) bool {
	hw, err := net.ParseMAC(s)
	return err == nil && len(hw) == 6
}

// validIfName accepts what Linux accepts as an interface name, and nothing
// that QEMU's option syntax would split (commas).
func validIfName(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// bootArgs is the guest kernel's command line: the serial console (the log
// and the exit record travel on it); reboot=k, so that the agent's reboot
// when it is done resets through the keyboard controller and QEMU, started
// with -no-reboot, exits; panic=1 for the same on a panic; no probing of
// the keyboard controller's mouse port; under
// TCG the TSC rate (see hostTSCKHz); the initramfs's parameters (root disk,
// eth0's address and the workspace's 9p tag, which init receives as
// environment variables); then
// Options.KernelArgs; and after " -- " init's arguments: the agent.
func (d *Driver) bootArgs(st state) string {
	args := []string{
		"console=ttyS0", "reboot=k", "panic=1", "quiet",
		"i8042.noaux",
	}
	if khz := d.current().tscKHz; khz > 0 && !strings.Contains(d.kernelArgs, "tsc_early_khz=") {
		args = append(args, "tsc_early_khz="+strconv.FormatInt(khz, 10))
	}
	ip := st.GuestIP + "/" + strconv.Itoa(st.PrefixLen)
	if d.initrd != "" {
		args = append(args, "berth_root="+guestRoot, "berth_ip="+ip, "berth_gw="+st.HostIP)
		if st.Workspace != "" {
			args = append(args, "berth_workspace="+WorkspaceTag)
		}
		if len(st.Mounts) > 0 {
			args = append(args, "berth_mounts="+mountsArg(st.Mounts))
		}
	} else {
		args = append(args, "root="+guestRoot, "rw", "init="+d.init,
			microvm.KernelIP(st.GuestIP, st.HostIP, st.PrefixLen))
	}
	if d.kernelArgs != "" {
		args = append(args, d.kernelArgs)
	}
	args = append(args, "--")
	if d.initrd != "" {
		// The initramfs's init switches to the root disk and execs these.
		args = append(args, d.init)
	}
	args = append(args, d.initArgs...)
	args = append(args, "agent", "--vm-init", "--config", guestConfig)
	return strings.Join(args, " ")
}

// qemuArgs is QEMU's command line for a replica: a microvm (no PCI, no
// firmware to speak of, virtio-mmio devices) with the keyboard controller
// added for Ctrl-Alt-Del and resets, daemonized with a pid file and a QMP
// socket in the replica's directory, the serial console appended to
// console.log, the root disk as the first virtio disk (vda) and the config
// drive as the second (vdb, read-only), the tap as eth0, the agent's
// virtio serial port behind agent.sock, and the workspace, if any, as a 9p
// share (security_model=passthrough: the guest's owners and modes are the
// host files' own, as in a container's bind mount, so the directory moves
// between backings unchanged).
func (d *Driver) qemuArgs(st state, size vm.Size) []string {
	dir := d.replicaDir(st.ID)
	acc := d.current()
	cpu := "max"
	if acc.accel == "kvm" {
		cpu = "host"
	}
	args := []string{
		"-name", st.ID,
		"-machine", "microvm,isa-serial=on,rtc=on",
		"-accel", acc.accel,
		"-cpu", cpu,
		"-m", strconv.Itoa(size.MemoryMB),
		"-smp", strconv.Itoa(size.VCPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-daemonize", "-pidfile", filepath.Join(dir, pidFile),
		"-D", filepath.Join(dir, qemuLogFile),
		"-qmp", "unix:" + opt(filepath.Join(dir, qmpSock)) + ",server=on,wait=off",
		"-chardev", "file,id=console,append=on,path=" + opt(filepath.Join(dir, consoleFile)),
		"-serial", "chardev:console",
		"-device", "i8042",
		"-kernel", acc.kernel,
		"-append", d.bootArgs(st),
		"-drive", "if=none,id=root,format=raw,file=" + opt(filepath.Join(dir, rootfsFile)),
		"-device", "virtio-blk-device,drive=root",
		"-drive", "if=none,id=config,format=raw,readonly=on,file=" + opt(filepath.Join(dir, configFile)),
		"-device", "virtio-blk-device,drive=config",
		"-netdev", "tap,id=net0,script=no,downscript=no,ifname=" + st.Tap,
		"-device", "virtio-net-device,netdev=net0,mac=" + st.MAC,
		"-device", "virtio-serial-device,max_ports=2",
		"-chardev", "socket,id=agent,server=on,wait=off,path=" + opt(filepath.Join(dir, agentSock)),
		"-device", "virtserialport,chardev=agent,name=" + AgentPortName,
	}
	if st.Workspace != "" {
		// Last, so that the disks keep their virtio-mmio slots and names.
		args = append(args,
			"-fsdev", "local,id=ws,security_model=passthrough,path="+opt(st.Workspace),
			"-device", "virtio-9p-device,fsdev=ws,mount_tag="+WorkspaceTag)
	}
	for i, m := range st.Mounts {
		// readonly=on: QEMU refuses the guest's writes, whatever the
		// guest's mount options say.
		id := "m" + strconv.Itoa(i)
		args = append(args,
			"-fsdev", "local,id="+id+",security_model=passthrough,readonly=on,path="+opt(m.Source),
			"-device", "virtio-9p-device,fsdev="+id+",mount_tag="+MountTag(i))
	}
	if d.initrd != "" {
		args = append(args, "-initrd", d.initrd)
	}
	return args
}

// mountsArg is the value of berth_mounts= on the kernel command line:
// <tag>:<target> for each mount, comma-separated (checkMounts keeps both
// out of the targets).
func mountsArg(ms []Mount) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = MountTag(i) + ":" + m.Target
	}
	return strings.Join(parts, ",")
}

// opt escapes a value for QEMU's comma-separated option syntax.
func opt(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// guestConfig is what the agent in the guest is told: its flags, COMMAND,
// the app's environment, and the initial lease. With a workspace the agent
// is rooted in it (--root), and it is HOME and the base of WorkDir, as in
// the container driver.
func (d *Driver) guestConfig(spec vm.Spec, st state) agent.GuestConfig {
	g := microvm.Guest{
		Listen:     "virtio:" + AgentPortName,
		Console:    guestConsole,
		LeaseFile:  guestLease,
		Home:       guestHome,
		LeaseCheck: d.leaseCheck,
	}
	if st.Workspace != "" {
		g.Home, g.Base, g.Root = guestWorkspace, guestWorkspace, guestWorkspace
	}
	if spec.TTL > 0 {
		// The backstop: the real deadline follows once the guest is up
		// (leaseAfterBoot), which a short TTL may not outlast.
		g.Lease = st.StartedAt.Add(spec.TTL + d.current().allowance)
	}
	return microvm.GuestConfig(spec, st.ID, st.Port, g)
}

// spawn starts QEMU, which daemonizes once the machine is set up (so a bad
// option or a missing tap fails here, with QEMU's message), reads its pid
// file and records the pid in the state.
func (d *Driver) spawn(ctx context.Context, st state, size vm.Size) (state, error) {
	dir := d.replicaDir(st.ID)
	for _, s := range []string{qmpSock, agentSock, pidFile} {
		if err := os.Remove(filepath.Join(dir, s)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return st, err
		}
	}
	if d.hv != nil {
		return d.launchHV(ctx, st, size)
	}
	cmd := exec.CommandContext(ctx, d.qemu, d.qemuArgs(st, size)...)
	cmd.Dir = dir
	// QEMU needs nothing of berth's environment, which may hold secrets.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Setsid: the daemon must not share berth's session or process group,
	// so the VM survives berth's death and its terminal's signals.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := runWithoutMknod(cmd); err != nil {
		// Daemonized, QEMU writes its errors to the -D log, not to its
		// stderr; the replica's files are removed after a failed start.
		return st, fmt.Errorf("qemu: %v%s", err, d.startFailure(st.ID, out.String()))
	}
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return st, fmt.Errorf("qemu daemonized without a pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return st, fmt.Errorf("qemu pid file holds %q", b)
	}
	return d.recordPID(st, pid)
}

// runWithoutMknod runs cmd (QEMU) from an OS thread of its own whose
// capability bounding set lacks CAP_MKNOD, so that QEMU, root as berth
// is, cannot make device nodes: through a workspace's 9p share
// (security_model=passthrough) a guest's mknod would otherwise make a real
// one in the host directory. Fifos and sockets need no capability and
// stay possible. The thread is never unlocked, so it ends with its
// goroutine and no other goroutine runs on it. Where the drop fails (berth
// without CAP_SETPCAP, not root) QEMU has no CAP_MKNOD to lose.
func runWithoutMknod(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		_ = unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_MKNOD, 0, 0, 0)
		errc <- cmd.Run()
	}()
	return <-errc
}

// startFailure is what says why QEMU did not start: its output, its log
// and the console's last lines, each as "; <what>: <lines>".
func (d *Driver) startFailure(id, output string) string {
	var b strings.Builder
	if s := replicadir.LastLines(output, replicadir.TailLines); s != "" {
		b.WriteString("; qemu said: " + s)
	}
	if tail := console.Tail(d.path(id, qemuLogFile), replicadir.TailLines); len(tail) > 0 {
		b.WriteString("; qemu log: " + strings.Join(tail, " | "))
	}
	if tail := console.Tail(d.path(id, consoleFile), replicadir.TailLines); len(tail) > 0 {
		b.WriteString("; console: " + strings.Join(tail, " | "))
	}
	if b.Len() == 0 {
		b.WriteString("; QEMU said nothing")
	}
	return b.String()
}

// recordPID records QEMU's pid and start time in the state.
func (d *Driver) recordPID(st state, pid int) (state, error) {
	st.PID = pid
	if ps, err := proc.ReadStat(pid); err == nil {
		st.StartTicks = ps.StartTicks
	}
	if err := replicadir.WriteState(d.replicaDir(st.ID), st); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return st, err
	}
	return st, nil
}

// instance derives a replica's state from its files and its QEMU process
// (see microvm.Ended for one whose QEMU is gone).
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
	alive := st.PID != 0 && proc.Alive(st.PID, st.StartTicks)
	consoleLog := d.path(st.ID, consoleFile)
	switch {
	case alive && st.Suspended:
		inst.State = vm.StateSuspended
	case alive:
		inst.State = vm.StateRunning
	case starting:
		inst.State = vm.StateStarting
	default:
		if microvm.Ended(&inst, consoleLog, st.PID, "QEMU") {
			return inst
		}
		if tail := console.Tail(d.path(st.ID, qemuLogFile), 2); len(tail) > 0 {
			inst.Reason += "\nqemu: " + strings.Join(tail, "\n")
		}
	}
	return inst
}

// Stop asks the guest to shut down (Ctrl-Alt-Del through QMP, which the
// agent as init receives as SIGINT and forwards to the app), waits up to
// grace for QEMU to exit, kills it, and removes the tap and every file of
// the replica. Stopping an ended replica just cleans up; a suspended one is
// continued first (proc.End: thaw, then ask, then kill), so that its guest
// can act on Ctrl-Alt-Del.
func (d *Driver) Stop(ctx context.Context, id string, grace time.Duration) error {
	return d.rd.Stop(ctx, id, &d.cpu, func(ctx context.Context, st state) error {
		d.dropAgent(id)
		return d.destroy(ctx, st, grace)
	})
}

// destroy ends QEMU (politely for up to grace when its guest runs) and
// removes the tap and the replica directory.
func (d *Driver) destroy(ctx context.Context, st state, grace time.Duration) error {
	if st.PID != 0 && proc.Alive(st.PID, st.StartTicks) {
		hvKilled := false
		perr, err := proc.End(ctx, grace, proc.Ending{
			What: fmt.Sprintf("QEMU (pid %d)", st.PID),
			Gone: func() bool { return !proc.Alive(st.PID, st.StartTicks) },
			Thaw: func() {
				if st.Suspended {
					qctx, cancel := context.WithTimeout(ctx, min(grace, 2*time.Second))
					defer cancel()
					d.cont(qctx, st.ID)
				}
			},
			Polite: func() error {
				qctx, cancel := context.WithTimeout(ctx, min(grace, 2*time.Second))
				defer cancel()
				return d.shutdown(qctx, st.ID)
			},
			Kill: func() {
				if d.hv != nil && !hvKilled {
					hvKilled = true
					if err := d.hv.Kill(ctx, st.ID); err != nil {
						d.log.Warn("kvm: hypervisor kill", "id", st.ID, "err", err)
					}
				}
				syscall.Kill(st.PID, syscall.SIGKILL)
			},
		})
		if perr != nil {
			d.log.Warn("kvm: Ctrl-Alt-Del", "id", st.ID, "err", perr)
		}
		if err != nil {
			return err
		}
	}
	if st.Tap != "" {
		if err := d.net.DeleteTap(context.WithoutCancel(ctx), st.ID); err != nil {
			return fmt.Errorf("deleting tap %s: %w", st.Tap, err)
		}
	}
	return os.RemoveAll(d.replicaDir(st.ID))
}

// ctrlAltDel is QMP send-key's argument for Ctrl-Alt-Del.
var ctrlAltDel = map[string]any{"keys": []map[string]string{
	{"type": "qcode", "data": "ctrl"},
	{"type": "qcode", "data": "alt"},
	{"type": "qcode", "data": "delete"},
}}
