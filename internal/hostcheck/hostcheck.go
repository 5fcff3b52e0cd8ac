// Package hostcheck is `berth host check` and `berth host setup`: host
// preparation as code. Check reports, for every vm driver, whether this
// machine can run it and what is missing (binaries, kernel features,
// /dev/kvm, the guest bridge, cgroup controllers, privileges); Setup
// creates what berth may create (the bridge and its egress rules, berth's
// directories, and on hybrid cgroup hosts the v1 hierarchies crun needs).
// Both run on the machine itself, without a server.
//
// The guest network settings are the environment variables berth serve
// reads (package hostnet: BERTH_BRIDGE, BERTH_GUEST_SUBNET,
// BERTH_GUEST_EGRESS), so the two agree on the bridge.
package hostcheck

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/berth-dev/berth/internal/agentbin"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/vm/container"
	"github.com/berth-dev/berth/internal/vm/drivers"
	"github.com/berth-dev/berth/internal/vm/kvm"
	"github.com/berth-dev/berth/internal/vm/libvirt"
)

// Result is what Check found for one driver.
type Result struct {
	Driver    string   `json:"driver"`
	Available bool     `json:"available"`
	Missing   []string `json:"missing"`         // what keeps it from running, each with its remedy
	Notes     []string `json:"notes,omitempty"` // what it runs without (degraded, not missing)
}

// Host is what Check looks at; the zero value is this machine, and tests
// point the paths elsewhere.
type Host struct {
	Net hostnet.Config
	KVM string // the KVM device; empty means /dev/kvm
	// LibvirtSocket is libvirtd's read-write socket; empty means
	// libvirt.DefaultSocket.
	LibvirtSocket string
	Root          bool // whether berth runs as root
	LookBin       func(string) (string, error)
	// Agent is the berth the container driver runs as the containers'
	// init (BERTH_CONTAINER_AGENT), GuestAgent the microVM guests'
	// (BERTH_GUEST_AGENT, else Agent); empty means the running berth.
	Agent, GuestAgent string
	// GuestKernel is the kvm and libvirt drivers' guest kernel
	// (BERTH_GUEST_KERNEL), GuestModules its module tree
	// (BERTH_GUEST_MODULES); empty means what berth serve finds
	// (kvm.FindKernel). GuestInitrd is a ready initramfs
	// (BERTH_GUEST_INITRD): berth then builds none, and needs no busybox.
	GuestKernel, GuestModules, GuestInitrd string
	// Accel is BERTH_KVM_ACCEL: kvm, tcg, or empty (the drivers probe
	// whether KVM boots the guest kernel).
	Accel string
	// ProbeKVM boots kernel under KVM as the kvm and libvirt drivers'
	// first Start does (kvm.ProbeAccel, cached); nil means no probe.
	// Check calls it only where the KVM device opens.
	ProbeKVM func(ctx context.Context, kernel string) kvm.ProbeResult

	accel func() accelFinding // set by Check: findAccel, once
}

// ThisHost describes this machine with the guest network of dataDir and
// the drivers' settings o (cmd/berth reads them, for berth serve and berth
// host alike).
func ThisHost(dataDir string, o drivers.Options) (Host, error) {
	c, err := hostnet.ConfigFromEnv(dataDir)
	if err != nil {
		return Host{}, err
	}
	return Host{
		Net: c, KVM: "/dev/kvm", LibvirtSocket: o.LibvirtSocket, Root: os.Geteuid() == 0, LookBin: exec.LookPath,
		Agent: o.ContainerAgent, GuestAgent: o.GuestAgent,
		GuestKernel: o.GuestKernel.Path, GuestModules: o.GuestKernel.Modules, GuestInitrd: o.GuestKernel.Initrd,
		Accel: o.KVMAccel,
		ProbeKVM: func(ctx context.Context, kernel string) kvm.ProbeResult {
			bb, err := exec.LookPath("busybox")
			if err != nil {
				return kvm.ProbeResult{Accel: "tcg", Reason: "no busybox to probe KVM with (Debian package busybox-static)"}
			}
			return kvm.ProbeKernel(ctx, "", kernel, bb, kvm.ProbeCacheDir(dataDir))
		},
	}, nil
}

// check accumulates one driver's findings.
type check struct{ r Result }

func (c *check) missing(format string, args ...any) {
	c.r.Missing = append(c.r.Missing, fmt.Sprintf(format, args...))
}

func (c *check) note(format string, args ...any) {
	c.r.Notes = append(c.r.Notes, fmt.Sprintf(format, args...))
}

func (c *check) done() Result {
	c.r.Available = len(c.r.Missing) == 0
	if c.r.Missing == nil {
		c.r.Missing = []string{}
	}
	return c.r
}

// bin requires an executable; where says where to get it.
func (h Host) bin(c *check, name, where string) bool {
	if _, err := h.LookBin(name); err != nil {
		c.missing("%s (%s)", name, where)
		return false
	}
	return true
}

// Check inspects the host for every driver, in the order process,
// container, firecracker, kvm, libvirt.
func Check(ctx context.Context, h Host) []Result {
	h.accel = sync.OnceValue(func() accelFinding { return h.findAccel(ctx) })
	return []Result{h.process(), h.container(ctx), h.firecracker(ctx), h.kvm(ctx), h.libvirt(ctx)}
}

// accelFinding is what the kvm and libvirt drivers' guests will run with:
// lack is set when they cannot run at all (BERTH_KVM_ACCEL=kvm without
// KVM), tcg with why when they run under TCG emulation.
type accelFinding struct {
	lack string
	tcg  bool
	why  string
}

// findAccel decides as the drivers do: BERTH_KVM_ACCEL, else TCG where
// the KVM device does not open or a probe boot of the guest kernel under
// KVM fails.
func (h Host) findAccel(ctx context.Context) accelFinding {
	dev := h.kvmDevice()
	switch h.Accel {
	case "tcg":
		return accelFinding{tcg: true, why: "BERTH_KVM_ACCEL=tcg"}
	case "kvm":
		if dev != "" {
			return accelFinding{lack: dev + " (BERTH_KVM_ACCEL=kvm)"}
		}
		return accelFinding{}
	case "":
	default:
		return accelFinding{lack: fmt.Sprintf("BERTH_KVM_ACCEL=%s: want kvm, tcg or unset", h.Accel)}
	}
	if dev != "" {
		return accelFinding{tcg: true, why: dev}
	}
	kernel := h.GuestKernel
	if kernel == "" {
		kernel, _ = kvm.FindKernel(h.GuestModules)
	}
	if h.ProbeKVM == nil || kernel == "" {
		return accelFinding{}
	}
	if r := h.ProbeKVM(ctx, kernel); r.Accel != "kvm" {
		return accelFinding{tcg: true, why: "KVM does not boot the guest kernel: " + r.Reason}
	}
	return accelFinding{}
}

func (h Host) process() Result {
	c := &check{r: Result{Driver: "process"}}
	if !h.Root {
		c.note("not root: replicas share berth's namespaces and get no cgroup limits")
	}
	if cgroupV2() == "" {
		c.note("no cgroup v2 hierarchy at /sys/fs/cgroup: size classes are not enforced")
	}
	return c.done()
}

func (h Host) container(ctx context.Context) Result {
	c := &check{r: Result{Driver: "container"}}
	if !h.Root {
		c.missing("root privileges (namespaces, mounts, cgroups)")
	}
	if _, err := container.FindRuntime(""); err != nil {
		c.missing("an OCI runtime: %v", err)
	}
	for _, b := range [][2]string{{"ip", "Debian package iproute2"}, {"nsenter", "Debian package util-linux"}} {
		h.bin(c, b[0], b[1])
	}
	if !hasFS("overlay") {
		c.note("no overlayfs: every replica gets a full copy of its image")
	}
	h.agentNote(c, h.Agent)
	for _, ctl := range missingControllers("memory", "cpu", "pids", "freezer") {
		c.missing("the %s cgroup controller", ctl)
	}
	h.bridge(ctx, c)
	return c.done()
}

func (h Host) firecracker(ctx context.Context) Result {
	c := &check{r: Result{Driver: "firecracker"}}
	if !h.Root {
		c.missing("root privileges (taps, the bridge, /dev/kvm)")
	}
	h.bin(c, "firecracker", "not packaged by Debian: put its release binary in PATH")
	h.bin(c, "mkfs.ext4", "Debian package e2fsprogs")
	if why := h.kvmDevice(); why != "" {
		c.missing("%s", why)
	}
	if a := h.guestAgent(); dynamic(a) {
		c.missing("a statically linked berth as the guests' agent: the firecracker driver cannot start a dynamic one (%s) yet (build with CGO_ENABLED=0, or set BERTH_GUEST_AGENT)", a)
	}
	if _, err := os.Stat("/dev/vhost-vsock"); err != nil {
		c.missing("/dev/vhost-vsock (modprobe vhost_vsock)")
	}
	h.bridge(ctx, c)
	return c.done()
}

// kvm checks for the kvm driver. Without /dev/kvm its guests run under
// TCG emulation, slowly: a note, not a lack.
func (h Host) kvm(ctx context.Context) Result {
	c := &check{r: Result{Driver: "kvm"}}
	if !h.Root {
		c.missing("root privileges (taps, the bridge, /dev/kvm)")
	}
	h.bin(c, "qemu-system-x86_64", "Debian package qemu-system-x86")
	h.bin(c, "mkfs.ext4", "Debian package e2fsprogs")
	h.bin(c, "debugfs", "Debian package e2fsprogs")
	h.guestBoot(c)
	if a := h.accel(); a.lack != "" {
		c.missing("%s", a.lack)
	} else if a.tcg {
		c.note("%s: guests run under TCG emulation (slow)", a.why)
	}
	h.agentNote(c, h.guestAgent())
	h.bridge(ctx, c)
	return c.done()
}

// guestBoot checks for what the kvm and libvirt drivers boot their guests
// with, found as berth serve finds it: the guest kernel, and unless an
// initramfs is given the busybox it is built with.
func (h Host) guestBoot(c *check) {
	if k := h.GuestKernel; k != "" {
		if _, err := os.Stat(k); err != nil {
			c.missing("the guest kernel BERTH_GUEST_KERNEL=%s: %v", k, err)
		}
	} else if k, _ := kvm.FindKernel(h.GuestModules); k == "" {
		c.missing("a guest kernel: a /boot/vmlinuz-<release> with /lib/modules/<release> (Debian package linux-image-amd64), or set BERTH_GUEST_KERNEL")
	}
	if h.GuestInitrd == "" {
		if bb, err := h.LookBin("busybox"); err != nil || !static(bb) {
			c.missing("a static busybox for the guest initramfs (Debian package busybox-static)")
		}
	}
}

// guestAgent is the berth the microVM drivers put into their guests, as
// berth serve picks it; "" when it cannot be told.
func (h Host) guestAgent() string {
	for _, a := range []string{h.GuestAgent, h.Agent} {
		if a != "" {
			return a
		}
	}
	exe, _ := os.Executable()
	return exe
}

// agentNote notes that the sandboxes' agent (agent, or the running berth
// when empty) is dynamically linked: it is no lack, its libraries go with
// it (package agentbin).
func (h Host) agentNote(c *check, agent string) {
	if agent == "" {
		agent, _ = os.Executable()
	}
	if dynamic(agent) {
		c.note("dynamic berth: its libc is bundled into sandboxes")
	}
}

// libvirt checks for the libvirt driver: the kvm driver's guests run by
// libvirtd, which must answer on its socket. Without /dev/kvm its guests
// run under TCG emulation, slowly: a note, not a lack.
func (h Host) libvirt(ctx context.Context) Result {
	c := &check{r: Result{Driver: "libvirt"}}
	if !h.Root {
		c.missing("root privileges (taps, the bridge, libvirtd's socket)")
	}
	h.bin(c, "qemu-system-x86_64", "Debian package qemu-system-x86")
	h.bin(c, "mkfs.ext4", "Debian package e2fsprogs")
	h.bin(c, "debugfs", "Debian package e2fsprogs")
	h.guestBoot(c)
	sock := h.LibvirtSocket
	if sock == "" {
		sock = libvirt.DefaultSocket
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	conn, err := d.DialContext(dctx, "unix", sock)
	cancel()
	if err != nil {
		c.missing("libvirtd answering on %s (Debian package libvirt-daemon-system, then start libvirtd; or set BERTH_LIBVIRT_SOCKET): %v", sock, err)
	} else {
		conn.Close()
	}
	if a := h.accel(); a.lack != "" {
		c.missing("%s", a.lack)
	} else if a.tcg {
		c.note("%s: domains run as type qemu (TCG emulation, slow)", a.why)
	}
	h.agentNote(c, h.guestAgent())
	h.bridge(ctx, c)
	return c.done()
}

// kvmDevice says why the KVM device cannot be used, with the remedy, or
// "".
func (h Host) kvmDevice() string {
	dev := h.KVM
	if dev == "" {
		dev = "/dev/kvm"
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Sprintf("%s: no hardware virtualization here (enable VT-x/AMD-V or nested virtualization, modprobe kvm_intel or kvm_amd)", dev)
		}
		return fmt.Sprintf("no read-write access to %s: %v", dev, err)
	}
	f.Close()
	return ""
}

func (h Host) bridge(ctx context.Context, c *check) {
	if err := hostnet.Check(ctx, h.Net); err != nil {
		c.missing("the guest network: %v", err)
	}
}

// cgroupV2 returns the mount point of a cgroup v2 hierarchy with
// controllers (the unified one), or "".
func cgroupV2() string {
	var st syscall.Statfs_t
	if syscall.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == 0x63677270 {
		return "/sys/fs/cgroup"
	}
	return ""
}

// missingControllers returns the controllers of want that neither a v1
// hierarchy nor the unified hierarchy offers.
func missingControllers(want ...string) []string {
	have := map[string]bool{}
	if v2 := cgroupV2(); v2 != "" {
		if b, err := os.ReadFile(filepath.Join(v2, "cgroup.controllers")); err == nil {
			for _, c := range strings.Fields(string(b)) {
				have[c] = true
			}
		}
		have["freezer"] = true // cgroup.freeze is in the core of v2
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			_, right, ok := strings.Cut(line, " - ")
			if f := strings.Fields(right); ok && len(f) >= 3 && f[0] == "cgroup" {
				for _, o := range strings.Split(f[2], ",") {
					have[o] = true
				}
			}
		}
	}
	var out []string
	for _, c := range want {
		if !have[c] {
			out = append(out, c)
		}
	}
	return out
}

func hasFS(name string) bool {
	b, err := os.ReadFile("/proc/filesystems")
	return err == nil && strings.Contains(string(b), "\t"+name+"\n")
}

// dynamic reports whether path is an ELF executable with an interpreter.
func dynamic(path string) bool {
	s, err := agentbin.IsStatic(path)
	return err == nil && !s
}

// static reports whether path is an ELF executable without an
// interpreter.
func static(path string) bool {
	s, err := agentbin.IsStatic(path)
	return err == nil && s
}

// Step is one action of Setup, as berth host setup prints it and berth
// serve logs it.
type Step struct {
	What    string // e.g. "bridge berth0"
	Detail  string // e.g. "created", "present"
	Changed bool   // false: already in place, nothing done
	// Cgroups marks a change to the host's cgroup layout, which berth
	// serve logs as a warning.
	Cgroups bool
}

func (s Step) String() string { return s.What + ": " + s.Detail }

// Cgroups is the cgroup layout Setup inspects and, on a hybrid host,
// changes. The zero value is this machine's; tests give a fake, since a
// controller bound to a v1 hierarchy leaves the unified one for every
// namespace of the host.
type Cgroups struct {
	Root  string                             // where the hierarchies are mounted; empty: /sys/fs/cgroup
	Mount func(controller, dir string) error // mounts a v1 hierarchy of controller at dir; nil: mount(2)
}

// Prep is what Setup prepares: berth's directories under DataDir and the
// guest network Net (the one berth serve uses: hostnet.ConfigFromEnv of
// the same data dir).
type Prep struct {
	DataDir string
	Net     hostnet.Config
	Cgroups Cgroups
}

// SetupError is a failed step of Setup, with the drivers it leaves
// unavailable.
type SetupError struct {
	Step    string
	Affects []string // the drivers that cannot run for it
	Err     error
}

func (e *SetupError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// isolating are the drivers that need the guest network.
var isolating = []string{"container", "firecracker", "kvm", "libvirt"}

// Setup prepares the host: berth's directories under p.DataDir, the guest
// bridge with its egress rules (hostnet.Prepare), and on hybrid cgroup
// hosts v1 hierarchies for the controllers of the unified one, which crun
// requires to be empty. It needs root and is idempotent: it reports each
// step to report (nil: none), changed or found in place, and stops at the
// first that fails with a *SetupError (two, joined, when the guests'
// egress fails and a later step too: egress is no reason to stop).
func Setup(ctx context.Context, p Prep, report func(Step)) error {
	if report == nil {
		report = func(Step) {}
	}
	if os.Geteuid() != 0 {
		return errors.New("berth host setup needs root")
	}
	var made []string
	for _, d := range []string{p.DataDir, filepath.Join(p.DataDir, "images"), filepath.Join(p.DataDir, "containers"), filepath.Join(p.DataDir, "net")} {
		if _, err := os.Stat(d); err == nil {
			continue
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return &SetupError{Step: "directories under " + p.DataDir, Affects: []string{"every driver"}, Err: err}
		}
		made = append(made, d)
	}
	if len(made) > 0 {
		report(Step{What: "directories under " + p.DataDir, Detail: "created " + strings.Join(made, ", "), Changed: true})
	} else {
		report(Step{What: "directories under " + p.DataDir, Detail: "present"})
	}
	egress := "off"
	if p.Net.Egress {
		egress = "on (NAT)"
	}
	netStep := fmt.Sprintf("guest network (bridge %s on %s, egress %s)", bridgeName(p.Net), p.Net.Subnet, egress)
	err := hostnet.Prepare(ctx, p.Net, func(s hostnet.Step) { report(Step{What: s.What, Detail: s.Detail, Changed: s.Changed}) })
	switch {
	case errors.Is(err, hostnet.ErrNoEgress):
		// The guests' network is there, without egress: go on.
		err = &SetupError{Step: netStep, Affects: []string{"guest egress of the container, firecracker, kvm and libvirt drivers (their guests still get the host-only network)"}, Err: err}
	case err != nil:
		return &SetupError{Step: netStep, Affects: isolating, Err: err}
	}
	cerr := p.Cgroups.prepare(report)
	switch {
	case err == nil:
		return cerr
	case cerr == nil:
		return err
	}
	return errors.Join(err, cerr)
}

func bridgeName(c hostnet.Config) string {
	if c.Bridge == "" {
		return hostnet.DefaultBridge
	}
	return c.Bridge
}

// prepare empties the unified hierarchy of a hybrid cgroup host: it mounts
// a v1 hierarchy for each of its controllers, which takes the controller
// out of the unified one. Where that is done (or the host is not hybrid)
// it changes nothing.
func (cg Cgroups) prepare(report func(Step)) error {
	root := cg.Root
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	mount := cg.Mount
	if mount == nil {
		mount = func(ctl, dir string) error { return syscall.Mount("cgroup", dir, "cgroup", 0, ctl) }
	}
	unified := filepath.Join(root, "unified")
	const what = "cgroup layout"
	ctls := container.HybridControllers(root)
	if len(ctls) == 0 {
		var st syscall.Statfs_t
		detail := fmt.Sprintf("no cgroup hierarchy at %s: nothing to change", root)
		switch {
		case syscall.Statfs(root, &st) == nil && st.Type == 0x63677270:
			detail = "unified (cgroup v2) at " + root + ": nothing to change"
		case exists(unified):
			detail = "hybrid, and the unified hierarchy " + unified + " has no controllers: nothing to change"
		case len(v1Mounts(root)) > 0:
			detail = "cgroup v1 only at " + root + ": nothing to change"
		}
		report(Step{What: what, Detail: detail})
		return nil
	}
	fail := func(err error) error {
		return &SetupError{Step: what, Affects: []string{"container (crun; runc is not affected)"}, Err: err}
	}
	for _, ctl := range ctls {
		dir := filepath.Join(root, ctl)
		if mountPoint(dir) {
			return fail(fmt.Errorf("the %s controller is in the unified hierarchy %s, but %s is already a mount point: not mounting over it", ctl, unified, dir))
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fail(fmt.Errorf("a v1 hierarchy for the %s controller: %w", ctl, err))
		}
		if err := mount(ctl, dir); err != nil {
			return fail(fmt.Errorf("mounting a v1 hierarchy for the %s controller at %s: %w", ctl, dir, err))
		}
		report(Step{What: what, Detail: fmt.Sprintf("mounted a cgroup v1 hierarchy for the %s controller at %s, which moves %s out of the unified hierarchy %s (crun refuses a hybrid host whose unified hierarchy has controllers)", ctl, dir, ctl, unified), Changed: true, Cgroups: true})
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// mountPoint reports whether dir is mounted on (its device differs from
// its parent's).
func mountPoint(dir string) bool {
	var d, p syscall.Stat_t
	if syscall.Stat(dir, &d) != nil || syscall.Stat(filepath.Dir(dir), &p) != nil {
		return false
	}
	return d.Dev != p.Dev
}

// v1Mounts returns the mount points of cgroup v1 hierarchies under root.
func v1Mounts(root string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		left, right, ok := strings.Cut(line, " - ")
		l, r := strings.Fields(left), strings.Fields(right)
		if ok && len(l) >= 5 && len(r) >= 1 && r[0] == "cgroup" && strings.HasPrefix(l[4], root+"/") {
			out = append(out, l[4])
		}
	}
	return out
}

// Report returns a report for Setup that logs each step as a line of log:
// at info level what is in place or was done, at warn level a change to
// the host's cgroup layout.
func Report(log *slog.Logger) func(Step) {
	return func(s Step) {
		if s.Cgroups {
			log.Warn("host setup changed the host's cgroup layout: "+s.Detail, "step", s.What, "changed", true)
			return
		}
		log.Info("host setup: "+s.String(), "changed", s.Changed)
	}
}

// ServeSetup is what berth serve does before it opens its drivers: as
// root, Setup for dataDir and the guest network berth serve uses
// (net), each step logged; not as root, one line saying
// what is skipped. A failure is logged with the drivers it affects, and
// berth serve goes on: the process and static drivers do not need the
// host prepared, and the isolating ones find what is missing themselves.
func ServeSetup(ctx context.Context, log *slog.Logger, dataDir string, net hostnet.Config, cg Cgroups) {
	serveSetup(ctx, log, dataDir, net, cg, os.Geteuid() == 0)
}

func serveSetup(ctx context.Context, log *slog.Logger, dataDir string, net hostnet.Config, cg Cgroups, root bool) {
	if !root {
		log.Info("host setup skipped: berth serve is not root; the container, firecracker, kvm and libvirt drivers may be unavailable (berth host setup as root prepares the host for them)")
		return
	}
	err := Setup(ctx, Prep{DataDir: dataDir, Net: net, Cgroups: cg}, Report(log))
	if err == nil {
		log.Info("host setup done")
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, err := range errs {
		if se := (*SetupError)(nil); errors.As(err, &se) {
			log.Error("host setup failed; serving without it", "step", se.Step, "affects", strings.Join(se.Affects, ", "), "err", se.Err)
		} else {
			log.Error("host setup failed; serving without it", "err", err)
		}
	}
}

const usage = `Usage: berth host check [--data-dir DIR] [--require DRIVER,...] [-o json]
       berth host setup [--data-dir DIR] [--egress]
`

// Main runs `berth host ARGS` (args exclude "host") and returns the exit
// code: 0 success, 1 a driver named by --require is unavailable or setup
// failed, 2 usage.
func Main(ctx context.Context, args []string, o drivers.Options, stdout, stderr io.Writer) int {
	return hostMain(ctx, args, o, stdout, stderr, Cgroups{})
}

// hostMain is Main with the cgroup layout setup prepares.
func hostMain(ctx context.Context, args []string, o drivers.Options, stdout, stderr io.Writer, cg Cgroups) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub := args[0]
	fs := flag.NewFlagSet("host "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", envOr("BERTH_DATA_DIR", "./berth-data"), "berth's data directory (BERTH_DATA_DIR)")
	output := fs.String("o", "", "json for a machine-readable report")
	egress := fs.Bool("egress", false, "let guests reach beyond the host (NAT); also BERTH_GUEST_EGRESS=on")
	require := fs.String("require", "", "comma-separated drivers that must be available, else exit 1")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "berth host %s: unexpected argument %q\n%s", sub, fs.Arg(0), usage)
		return 2
	}
	h, err := ThisHost(*dataDir, o)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 2
	}
	switch sub {
	case "check":
		results := Check(ctx, h)
		if *output == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(results)
		} else if *output != "" {
			fmt.Fprintf(stderr, "berth host check: -o %q: want json\n", *output)
			return 2
		} else {
			Print(stdout, results)
		}
		code := 0
		for _, name := range strings.Split(*require, ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			found := false
			for _, r := range results {
				if r.Driver == name {
					found = true
					if !r.Available {
						code = 1
					}
				}
			}
			if !found {
				fmt.Fprintf(stderr, "berth host check: --require: no driver %q\n", name)
				return 2
			}
		}
		return code
	case "setup":
		net := h.Net
		net.Egress = net.Egress || *egress
		err := Setup(ctx, Prep{DataDir: *dataDir, Net: net, Cgroups: cg}, func(s Step) {
			switch {
			case s.Cgroups:
				fmt.Fprintln(stdout, "changed the host's cgroup layout:", s.Detail)
			case s.Changed:
				fmt.Fprintln(stdout, "changed:", s)
			default:
				fmt.Fprintln(stdout, "ok:", s)
			}
		})
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "berth host: unknown subcommand %q\n%s", sub, usage)
	return 2
}

// Print writes results as a table: a line per driver, then what each
// lacks or runs without.
func Print(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "DRIVER\tAVAILABLE\tMISSING")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%v\t%d\n", r.Driver, r.Available, len(r.Missing))
	}
	tw.Flush()
	for _, r := range results {
		for _, m := range r.Missing {
			fmt.Fprintf(w, "%s: missing: %s\n", r.Driver, m)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(w, "%s: note: %s\n", r.Driver, n)
		}
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
