package firecracker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
	"github.com/berth-dev/berth/internal/vm/microvm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// Options configures a Driver.
type Options struct {
	// Dir is the state root, e.g. <data-dir>/firecracker. Created if
	// missing. Required. Unix socket paths live below it, so keep it short
	// (see maxSockPath).
	Dir string

	// FirecrackerBin is the firecracker executable; a bare name is looked
	// up in PATH. Empty means "firecracker".
	FirecrackerBin string

	// UseJailer runs every VMM under Firecracker's jailer (chroot, new
	// mount and PID-less namespaces, cgroups, dropped privileges), as
	// production deployments should. JailerBin defaults to "jailer";
	// JailerUID and JailerGID are the unprivileged ids the VMM runs as;
	// ChrootBase is the jailer's --chroot-base-dir, default <Dir>/jail.
	UseJailer            bool
	JailerBin            string
	JailerUID, JailerGID int
	ChrootBase           string
	// JailerArgs are added to the jailer's flags, e.g. "--cgroup-version",
	// "2" on cgroup v2 hosts, or "--netns", "/var/run/netns/berth".
	JailerArgs []string

	// Kernel is the guest kernel: an uncompressed vmlinux (x86_64) or
	// Image (aarch64) built with virtio-mmio block, net and vsock, ext4,
	// devtmpfs, IP_PNP and the 8250 serial console. Required.
	Kernel string

	// KernelArgs are added to the guest's kernel command line (see
	// bootArgs for what the driver always passes).
	KernelArgs string

	// GuestInit is the path of the berth binary inside the image, which
	// the kernel runs as init. Empty means /berth-agent.
	GuestInit string

	// Images provides the root disks. Required.
	Images microvm.Images

	// Net provides the tap devices and addresses. Required.
	Net microvm.Network

	// AgentPort is the vsock port the agent listens on in the guest.
	// Zero means DefaultAgentPort.
	AgentPort uint32

	// LeaseCheck is how often the agent in the guest reads its lease
	// file (its --lease-check). Zero means the agent's default.
	LeaseCheck time.Duration

	// KVMDevice is the device whose presence New requires. Empty means
	// /dev/kvm; tests point it elsewhere to drive a fake VMM.
	KVMDevice string

	// Log receives what the driver degrades on. Nil discards.
	Log *slog.Logger
}

// DefaultAgentPort is the guest vsock port of the agent.
const DefaultAgentPort = 10052

// DefaultPort is the app's port in the guest when the spec names none: each
// replica has its own address, so every app may use the same port.
const DefaultPort = 8080

// guestCID is every guest's vsock context id. Firecracker's vsock is
// emulated behind a unix socket per VMM, so ids need not be unique.
const guestCID = 3

// Paths inside the guest.
const (
	guestConsole = "/dev/ttyS0"
	guestConfig  = "/dev/vdb" // the second drive; the root disk is vda
	guestLease   = "/run/berth/lease"
	guestHome    = "/root"
)

// Driver runs each replica as a Firecracker microVM. It is safe for
// concurrent use, and several Drivers (or berth processes, one after
// another) may share a Dir.
type Driver struct {
	replicadir.Reports[state] // Inspect, List

	dir        string
	fcBin      string
	jailer     string // empty: no jailer
	uid, gid   int
	jailerArgs []string
	chrootBase string
	kernel     string
	kernelArgs string
	init       string
	images     microvm.Images
	net        microvm.Network
	agentPort  uint32
	leaseCheck time.Duration
	log        *slog.Logger
	rd         replicadir.Dir[state]

	mu  sync.Mutex
	cpu proc.CPUMeter // Usage readings
}

// File names in a replica's directory (or, under the jailer, its chroot).
const (
	stateFile   = "state.json"
	apiSock     = "fc.sock"
	vsockSock   = "vsock.sock"
	rootfsFile  = "rootfs.ext4"
	configFile  = "config.img"
	kernelFile  = "vmlinux"
	consoleFile = "console.log"        // the VMM's stdout and stderr: the serial console
	vmmLogFile  = "vmm.log"            // the VMM's own log (PUT /logger)
	leaseFile   = replicadir.LeaseFile // the last deadline Renew set, for Resume
)

// maxSockPath is the longest unix socket path Linux accepts.
const maxSockPath = 107

// New returns a driver keeping its state under o.Dir. It returns an error
// wrapping vm.ErrUnavailable, naming what is missing, when this host cannot
// run microVMs: no KVM device, no firecracker (or jailer) binary, no guest
// kernel, or no image store or host network wired in.
func New(o Options) (*Driver, error) {
	unavailable := func(format string, args ...any) (*Driver, error) {
		return nil, fmt.Errorf("firecracker: "+format+": %w", append(args, vm.ErrUnavailable)...)
	}
	if o.Dir == "" {
		return nil, errors.New("firecracker: Options.Dir is required")
	}
	kvm := o.KVMDevice
	if kvm == "" {
		kvm = "/dev/kvm"
	}
	if _, err := os.Stat(kvm); err != nil {
		return unavailable("no KVM on this host (%v)", err)
	}
	fcBin, err := microvm.LookBin(o.FirecrackerBin, "firecracker")
	if err != nil {
		return unavailable("no firecracker binary (%v)", err)
	}
	var jailer string
	if o.UseJailer {
		if jailer, err = microvm.LookBin(o.JailerBin, "jailer"); err != nil {
			return unavailable("no jailer binary (%v)", err)
		}
	}
	c, err := microvm.Common{Dir: o.Dir, Kernel: o.Kernel, GuestInit: o.GuestInit, Images: o.Images, Net: o.Net, Log: o.Log}.Check("firecracker")
	if err != nil {
		return nil, err
	}
	dir, kernel, init, log := c.Dir, c.Kernel, c.GuestInit, c.Log
	chroot := o.ChrootBase
	if chroot == "" {
		chroot = filepath.Join(dir, "jail")
	}
	if chroot, err = filepath.Abs(chroot); err != nil {
		return nil, fmt.Errorf("firecracker: %w", err)
	}
	if strings.Contains(o.KernelArgs, " -- ") || strings.HasPrefix(o.KernelArgs, "-- ") {
		return nil, errors.New("firecracker: KernelArgs must not pass init arguments (--): the driver does")
	}
	port := o.AgentPort
	if port == 0 {
		port = DefaultAgentPort
	}
	d := &Driver{
		dir:        dir,
		fcBin:      fcBin,
		jailer:     jailer,
		uid:        o.JailerUID,
		gid:        o.JailerGID,
		jailerArgs: slices.Clone(o.JailerArgs),
		chrootBase: chroot,
		kernel:     kernel,
		kernelArgs: strings.TrimSpace(o.KernelArgs),
		init:       init,
		images:     o.Images,
		net:        o.Net,
		agentPort:  port,
		leaseCheck: o.LeaseCheck,
		log:        log,
	}
	d.Reports = replicadir.Reports[state]{Dir: &d.rd, Instance: d.instance}
	d.rd = replicadir.Dir[state]{
		Root: dir, Driver: "firecracker", Log: log,
		ID:    func(st state) string { return st.ID },
		Empty: func(id, owner string) state { return state{ID: id, Deployment: owner} },
	}
	return d, nil
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
	JailID     string    `json:"jail_id,omitempty"` // set when the VMM runs under the jailer
	PID        int       `json:"pid"`               // the VMM (the jailer execs into it); 0 when none runs
	StartTicks uint64    `json:"start_ticks"`       // /proc/<pid>/stat field 22, against pid reuse
	StartedAt  time.Time `json:"started_at"`
	Suspended  bool      `json:"suspended,omitempty"`
	SnapGen    int       `json:"snap_gen,omitempty"` // generation of the snapshot files
}

func (st state) addr() string {
	if st.GuestIP == "" {
		return ""
	}
	return net.JoinHostPort(st.GuestIP, strconv.Itoa(st.Port))
}

// jailID is the jailer's --id for a replica: short (socket paths in the
// chroot must fit in 107 bytes) and made of the characters it accepts.
func jailID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "berth-" + hex.EncodeToString(sum[:8])
}

// replicaDir is the directory with the replica's state and console log.
func (d *Driver) replicaDir(id string) string { return d.rd.Path(id) }

// vmmRoot is the directory holding the files the VMM opens: the replica
// directory, or under the jailer its chroot.
func (d *Driver) vmmRoot(st state) string {
	if st.JailID == "" {
		return d.replicaDir(st.ID)
	}
	return filepath.Join(d.chrootBase, filepath.Base(d.fcBin), st.JailID, "root")
}

// hostPath is where file name of a replica is on the host.
func (d *Driver) hostPath(st state, name string) string {
	return filepath.Join(d.vmmRoot(st), name)
}

// vmmPath is how the VMM names file name of a replica: the host path, or
// under the jailer the path inside its chroot.
func (d *Driver) vmmPath(st state, name string) string {
	if st.JailID == "" {
		return d.hostPath(st, name)
	}
	return "/" + name
}

func snapNames(gen int) (snap, mem string) {
	return fmt.Sprintf("vm-%d.snap", gen), fmt.Sprintf("mem-%d.snap", gen)
}

// Start creates the replica's disk, tap and config drive, starts a VMM,
// configures it and boots the guest, returning once the guest runs; the
// agent and the app inside are still booting, readiness is the caller's
// probe. spec.Image is required. The app's environment is PATH, HOME
// (/root), HOSTNAME (the id), spec.Env and PORT (spec.Port, or
// DefaultPort), which wins over a PORT in spec.Env. A relative WorkDir is
// relative to /; the default is /root. OpenPorts need nothing: the guest's
// address is its own.
func (d *Driver) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	return d.rd.Start(ctx, spec, d.check, d.launch, func(ctx context.Context, st state) error { return d.destroy(ctx, st, 0) }, d.instance)
}

// check validates spec and returns the initial state and the size; the
// error is for Dir.Start to prefix.
func (d *Driver) check(spec vm.Spec) (state, vm.Size, error) {
	fail := func(format string, args ...any) (state, vm.Size, error) {
		return state{}, vm.Size{}, fmt.Errorf(format, args...)
	}
	owner, size, err := microvm.CheckSpec("firecracker", spec)
	if err != nil {
		return state{}, size, err
	}
	if spec.Workspace != "" {
		// Firecracker has no shared file system (no 9p, virtiofs only in
		// newer releases behind vhost-user); a Computer's workspace is a
		// host directory that must stay one across backings.
		return fail("workspaces are not supported by the firecracker driver (it cannot share a host directory); use kvm or libvirt")
	}
	if err := replicadir.NoMounts("firecracker", spec); err != nil {
		// For the same reason.
		return fail("%v; use container, kvm or libvirt", err)
	}
	if size.VCPUs > 1 && size.VCPUs%2 != 0 || size.VCPUs > 32 {
		return fail("size class %q has %d vCPUs; Firecracker takes 1 or an even number up to 32", cmp.Or(spec.SizeClass, vm.DefaultSize), size.VCPUs)
	}
	st := state{ID: spec.Name, Deployment: owner, Owner: vm.ResolveOwner(spec.Owner, spec.Name), Port: spec.Port}
	if st.Port == 0 {
		st.Port = DefaultPort
	}
	if d.jailer != "" {
		st.JailID = jailID(spec.Name)
	}
	for _, s := range []string{apiSock, vsockSock} {
		if p := d.hostPath(st, s); len(p) > maxSockPath {
			return fail("socket path %s is longer than %d bytes; use a shorter Dir or ChrootBase", p, maxSockPath)
		}
	}
	return st, size, nil
}

// launch prepares the replica's files, starts the VMM and boots the guest.
// The returned state is what exists so far, for cleanup when it fails.
func (d *Driver) launch(ctx context.Context, spec vm.Spec, st state, size vm.Size) (state, error) {
	st.StartedAt = time.Now().UTC()
	root := d.vmmRoot(st)
	if st.JailID != "" {
		if err := os.MkdirAll(root, 0o700); err != nil {
			return st, err
		}
	}
	if err := replicadir.WriteState(d.replicaDir(st.ID), st); err != nil {
		return st, err
	}

	if err := microvm.CopyRootDisk(ctx, d.images, spec, filepath.Join(root, rootfsFile)); err != nil {
		return st, err
	}

	tap, err := microvm.CreateTap(ctx, d.net, st.ID, 0xfc, func(tap string) error {
		// Recorded at once, so that cleanup and a later Stop delete it.
		st.Tap = tap
		return replicadir.WriteState(d.replicaDir(st.ID), st)
	})
	if err != nil {
		return st, err
	}
	st.GuestIP, st.PrefixLen, st.HostIP, st.MAC = tap.GuestIP, tap.PrefixLen, tap.HostIP, tap.MAC

	cfg, err := agent.EncodeGuestConfig(d.guestConfig(spec, st))
	if err != nil {
		return st, err
	}
	if err := os.WriteFile(filepath.Join(root, configFile), cfg, 0o600); err != nil {
		return st, err
	}
	kernel := d.kernel
	if st.JailID != "" {
		// The jailed VMM sees only its chroot: link (or copy) the kernel
		// in, and hand it the files it writes or opens read-write.
		if kernel, err = d.jailFile(st, d.kernel, kernelFile); err != nil {
			return st, err
		}
		for _, f := range []string{"", rootfsFile, configFile} {
			if err := os.Chown(filepath.Join(root, f), d.uid, d.gid); err != nil {
				return st, err
			}
		}
	}

	c, st, err := d.spawn(ctx, st)
	if err != nil {
		return st, err
	}
	steps := []func() error{
		func() error {
			return c.PutLogger(ctx, Logger{LogPath: d.vmmPath(st, vmmLogFile), Level: "Warning", ShowLevel: true})
		},
		func() error {
			return c.PutMachineConfig(ctx, MachineConfig{VCPUCount: size.VCPUs, MemSizeMiB: size.MemoryMB})
		},
		func() error {
			return c.PutBootSource(ctx, BootSource{KernelImagePath: kernel, BootArgs: d.bootArgs(st)})
		},
		func() error {
			return c.PutDrive(ctx, Drive{DriveID: "rootfs", PathOnHost: d.vmmPath(st, rootfsFile), IsRootDevice: true})
		},
		func() error {
			return c.PutDrive(ctx, Drive{DriveID: "config", PathOnHost: d.vmmPath(st, configFile), IsReadOnly: true})
		},
		func() error {
			return c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth0", HostDevName: st.Tap, GuestMAC: st.MAC})
		},
		func() error {
			return c.PutVsock(ctx, Vsock{GuestCID: guestCID, UDSPath: d.vmmPath(st, vsockSock)})
		},
		func() error { return c.Action(ctx, ActionInstanceStart) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return st, d.withConsole(st, err)
		}
	}
	return st, nil
}

// jailFile puts src into a replica's chroot as name (a hard link, or a
// copy across file systems) and returns the path the jailed VMM uses.
func (d *Driver) jailFile(st state, src, name string) (string, error) {
	dst := d.hostPath(st, name)
	os.Remove(dst)
	if err := os.Link(src, dst); err != nil {
		if out, err := exec.Command("cp", "--reflink=auto", src, dst).CombinedOutput(); err != nil {
			return "", fmt.Errorf("copying %s into the jail: %v: %s", src, err, strings.TrimSpace(string(out)))
		}
	}
	return d.vmmPath(st, name), nil
}

// bootArgs is the guest kernel's command line: the serial console (the log
// and the exit record travel on it), reboot=k and panic=1 so that a guest
// that ends or panics makes the VMM exit, the keyboard controller options
// Firecracker needs for Ctrl-Alt-Del, the kernel's static IP configuration
// of eth0, Options.KernelArgs, and the agent as init. Everything after
// " -- " is init's argv; Firecracker keeps its own root=/dev/vda before it.
func (d *Driver) bootArgs(st state) string {
	args := []string{
		"console=ttyS0", "reboot=k", "panic=1", "pci=off",
		"i8042.noaux", "i8042.nomux", "i8042.nopnp", "i8042.dumbkbd",
		microvm.KernelIP(st.GuestIP, st.HostIP, st.PrefixLen),
	}
	if d.kernelArgs != "" {
		args = append(args, d.kernelArgs)
	}
	args = append(args, "init="+d.init, "--", "agent", "--vm-init", "--config", guestConfig)
	return strings.Join(args, " ")
}

// guestConfig is what the agent in the guest is told: its flags, COMMAND,
// the app's environment, and the initial lease.
func (d *Driver) guestConfig(spec vm.Spec, st state) agent.GuestConfig {
	g := microvm.Guest{
		Listen:     "vsock:" + strconv.FormatUint(uint64(d.agentPort), 10),
		Console:    guestConsole,
		LeaseFile:  guestLease,
		Home:       guestHome,
		LeaseCheck: d.leaseCheck,
	}
	if spec.TTL > 0 {
		g.Lease = st.StartedAt.Add(spec.TTL)
	}
	return microvm.GuestConfig(spec, st.ID, st.Port, g)
}

// apiPatience bounds how long a new VMM may take to answer on its socket.
const apiPatience = 10 * time.Second

// spawn starts a VMM (under the jailer if configured) in a new session, so
// it outlives berth, with the serial console appended to console.log, and
// returns a client once its API answers. The state returned has the VMM's
// pid and is persisted.
func (d *Driver) spawn(ctx context.Context, st state) (*Client, state, error) {
	sock := d.hostPath(st, apiSock)
	// Firecracker refuses to start over an existing socket file.
	if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, st, err
	}
	var cmd *exec.Cmd
	if st.JailID == "" {
		cmd = exec.Command(d.fcBin, "--api-sock", sock)
	} else {
		// A second run (Resume) must not trip over the device nodes and
		// the VMM copy the first one made.
		for _, p := range []string{"dev", "run", filepath.Base(d.fcBin)} {
			os.RemoveAll(d.hostPath(st, p))
		}
		args := []string{
			"--id", st.JailID, "--exec-file", d.fcBin,
			"--uid", strconv.Itoa(d.uid), "--gid", strconv.Itoa(d.gid),
			"--chroot-base-dir", d.chrootBase,
		}
		args = append(append(args, d.jailerArgs...), "--", "--api-sock", d.vmmPath(st, apiSock))
		cmd = exec.Command(d.jailer, args...)
	}
	// Firecracker opens the log file without creating it.
	vmmLog, err := os.OpenFile(d.hostPath(st, vmmLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, st, err
	}
	vmmLog.Close()
	if st.JailID != "" {
		if err := os.Chown(d.hostPath(st, vmmLogFile), d.uid, d.gid); err != nil {
			return nil, st, err
		}
	}
	cmd.Dir = d.replicaDir(st.ID)
	// The VMM needs nothing of berth's environment, which may hold secrets.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	console, err := os.OpenFile(filepath.Join(d.replicaDir(st.ID), consoleFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, st, err
	}
	defer console.Close()
	cmd.Stdout, cmd.Stderr = console, console
	// Setsid: not in berth's session or process group, so the VM survives
	// berth's death and its terminal's signals. No Pdeathsig on purpose.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, st, err
	}
	// Reap it while berth lives; after a berth restart it is init's child.
	go cmd.Wait()
	st.PID = cmd.Process.Pid
	if ps, err := proc.ReadStat(st.PID); err == nil {
		st.StartTicks = ps.StartTicks
	}
	if err := replicadir.WriteState(d.replicaDir(st.ID), st); err != nil {
		cmd.Process.Kill()
		return nil, st, err
	}
	c := NewClient(sock)
	deadline := time.Now().Add(apiPatience)
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			if _, err := c.Describe(ctx); err == nil {
				return c, st, nil
			} else if isAPIError(err) {
				return nil, st, err
			}
		}
		if !proc.Alive(st.PID, st.StartTicks) {
			return nil, st, d.withConsole(st, errors.New("the VMM exited before its API answered"))
		}
		if time.Now().After(deadline) {
			return nil, st, d.withConsole(st, fmt.Errorf("the VMM's API did not answer within %s", apiPatience))
		}
		select {
		case <-ctx.Done():
			return nil, st, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// withConsole adds the console's last lines to err: a VMM that refuses its
// configuration or dies says why there.
func (d *Driver) withConsole(st state, err error) error {
	tail := console.Tail(filepath.Join(d.replicaDir(st.ID), consoleFile), replicadir.TailLines)
	if len(tail) == 0 {
		return err
	}
	return fmt.Errorf("%w; console:\n%s", err, strings.Join(tail, "\n"))
}

// instance derives a replica's state from its files and its VMM (see
// microvm.Ended for one whose VMM is gone).
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
	consoleLog := filepath.Join(d.replicaDir(st.ID), consoleFile)
	switch {
	case st.Suspended:
		inst.State = vm.StateSuspended
		inst.PID = 0
	case alive:
		inst.State = vm.StateRunning
	case starting:
		inst.State = vm.StateStarting
	default:
		microvm.Ended(&inst, consoleLog, st.PID, "its VMM")
	}
	return inst
}

// Stop asks the guest to shut down (SendCtrlAltDel, which the agent as init
// receives as SIGINT and forwards to the app), waits up to grace for the VMM
// to exit, kills it, and removes the tap and every file of the replica,
// snapshots included. Stopping an ended or suspended replica just cleans up.
func (d *Driver) Stop(ctx context.Context, id string, grace time.Duration) error {
	return d.rd.Stop(ctx, id, &d.cpu, func(ctx context.Context, st state) error { return d.destroy(ctx, st, grace) })
}

// destroy ends the VMM (politely for up to grace when it runs a guest) and
// removes the tap, the jail and the replica directory.
func (d *Driver) destroy(ctx context.Context, st state, grace time.Duration) error {
	if st.PID != 0 && proc.Alive(st.PID, st.StartTicks) {
		e := proc.Ending{
			What: fmt.Sprintf("the VMM (pid %d)", st.PID),
			Gone: func() bool { return !proc.Alive(st.PID, st.StartTicks) },
			Kill: func() { syscall.Kill(st.PID, syscall.SIGKILL) },
		}
		// A suspended replica's VMM only writes its snapshot: there is no
		// guest to ask.
		if !st.Suspended {
			e.Polite = func() error {
				actx, cancel := context.WithTimeout(ctx, min(grace, 2*time.Second))
				defer cancel()
				return NewClient(d.hostPath(st, apiSock)).Action(actx, ActionSendCtrlAltDel)
			}
		}
		if _, err := proc.End(ctx, grace, e); err != nil {
			return err
		}
	}
	if st.Tap != "" {
		if err := d.net.DeleteTap(context.WithoutCancel(ctx), st.ID); err != nil {
			return fmt.Errorf("deleting tap %s: %w", st.Tap, err)
		}
	}
	if st.JailID != "" {
		if err := os.RemoveAll(filepath.Dir(d.vmmRoot(st))); err != nil {
			return err
		}
	}
	return os.RemoveAll(d.replicaDir(st.ID))
}

// killVMM SIGKILLs the VMM and waits until it is gone.
func killVMM(ctx context.Context, st state) error {
	return proc.Kill(ctx, st.PID, st.StartTicks, fmt.Sprintf("the VMM (pid %d)", st.PID))
}
