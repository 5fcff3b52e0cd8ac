package hostcheck

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/berth-dev/berth/internal/vm/drivers"
	"github.com/berth-dev/berth/internal/vm/kvm"
)

func TestMain(m *testing.M) { os.Exit(netnstest.Main(m)) }

// bare is a host with nothing: no binaries, no KVM, no privileges.
func bare(t *testing.T) Host {
	return Host{
		Net: hostnet.Config{Bridge: "bnone0", Subnet: netip.MustParsePrefix("10.9.0.0/24"), StateDir: t.TempDir()},
		KVM: filepath.Join(t.TempDir(), "no-kvm"),
		// A socket path nothing listens on.
		LibvirtSocket: filepath.Join(t.TempDir(), "libvirt-sock"),
		LookBin:       func(name string) (string, error) { return "", errors.New("not found") },
		GuestKernel:   filepath.Join(t.TempDir(), "no-vmlinuz"),
	}
}

func find(rs []Result, driver string) Result {
	for _, r := range rs {
		if r.Driver == driver {
			return r
		}
	}
	return Result{}
}

func TestCheckBareHost(t *testing.T) {
	rs := Check(t.Context(), bare(t))
	if len(rs) != 5 {
		t.Fatalf("Check returned %d results, want 5", len(rs))
	}
	if p := find(rs, "process"); !p.Available || len(p.Notes) == 0 {
		t.Errorf("process = %+v; want available, with a note about running unprivileged", p)
	}
	for driver, wants := range map[string][]string{
		"container":   {"root privileges", "ip (Debian package iproute2)", "guest network"},
		"firecracker": {"firecracker", "mkfs.ext4 (Debian package e2fsprogs)", "no-kvm: no hardware virtualization"},
		"kvm":         {"qemu-system-x86_64 (Debian package qemu-system-x86)", "no-vmlinuz", "busybox-static"},
		"libvirt":     {"root privileges", "qemu-system-x86_64 (Debian package qemu-system-x86)", "libvirtd answering on", "libvirt-sock", "guest network"},
	} {
		r := find(rs, driver)
		if r.Available {
			t.Errorf("%s is available on a bare host", driver)
		}
		all := strings.Join(r.Missing, "\n")
		for _, w := range wants {
			if !strings.Contains(all, w) {
				t.Errorf("%s: missing %q, want it to name %q", driver, all, w)
			}
		}
	}
	var buf bytes.Buffer
	Print(&buf, rs)
	if !strings.Contains(buf.String(), "container: missing: root privileges") {
		t.Errorf("Print wrote:\n%s", buf.String())
	}
}

// TestCheckKVM checks a host with everything the kvm driver needs but
// /dev/kvm: its guests run under TCG, so that is a note, not a lack; and
// that a dynamically linked agent is a note for the kvm and container
// drivers, a lack only for firecracker's.
func TestCheckKVM(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !dynamic(exe) {
		t.Skip("the test binary is static (built without cgo and -race)")
	}
	h := bare(t)
	h.Root = true
	h.LookBin = func(name string) (string, error) { return "/bin/" + name, nil }
	h.GuestKernel = filepath.Join(t.TempDir(), "vmlinuz-6.1.0-test")
	os.WriteFile(h.GuestKernel, []byte("kernel"), 0o644)
	h.GuestInitrd = "/srv/initrd.img" // so no busybox is needed
	h.Agent, h.GuestAgent = exe, exe
	rs := Check(t.Context(), h)
	r := find(rs, "kvm")
	if all := strings.Join(r.Missing, "\n"); strings.Contains(all, "no-kvm") || strings.Contains(all, "kernel") || strings.Contains(all, "busybox") {
		t.Errorf("kvm: missing %q; want neither /dev/kvm, the kernel nor busybox", all)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, w := range []string{"no-kvm", "TCG", "dynamic berth: its libc is bundled into sandboxes"} {
		if !strings.Contains(notes, w) {
			t.Errorf("kvm: notes %q; want one saying %q", notes, w)
		}
	}
	c := find(rs, "container")
	if all := strings.Join(c.Missing, "\n"); strings.Contains(all, "static") {
		t.Errorf("container: missing %q; a dynamic berth will do", all)
	}
	if notes := strings.Join(c.Notes, "\n"); !strings.Contains(notes, "dynamic berth") {
		t.Errorf("container: notes %q; want the dynamic berth's", notes)
	}
	if fc := find(rs, "firecracker"); !strings.Contains(strings.Join(fc.Missing, "\n"), "statically linked berth") {
		t.Errorf("firecracker: missing %q; want a static agent", fc.Missing)
	}
	if bb, err := exec.LookPath("busybox"); err == nil && static(bb) {
		h.Agent = bb
		c := find(Check(t.Context(), h), "container")
		if notes := strings.Join(c.Notes, "\n"); strings.Contains(notes, "dynamic berth") {
			t.Errorf("container with a static agent: notes %q", notes)
		}
	}
	h.GuestKernel = ""
	h.GuestModules = filepath.Join(t.TempDir(), "no-modules")
	if all := strings.Join(find(Check(t.Context(), h), "kvm").Missing, "\n"); !strings.Contains(all, "a guest kernel") {
		t.Errorf("kvm without a kernel and its modules: missing %q", all)
	}
}

// TestCheckKVMProbe checks a host whose KVM device opens but cannot boot
// the guest kernel (a nested /dev/kvm): the drivers' probe decides TCG,
// and the check says so and why, probing once for both drivers; and that
// BERTH_KVM_ACCEL overrides the probe.
func TestCheckKVMProbe(t *testing.T) {
	h := bare(t)
	h.Root = true
	h.LookBin = func(name string) (string, error) { return "/bin/" + name, nil }
	h.KVM = filepath.Join(t.TempDir(), "kvm")
	os.WriteFile(h.KVM, nil, 0o644) // opens read-write
	h.GuestKernel = filepath.Join(t.TempDir(), "vmlinuz-6.1.0-test")
	os.WriteFile(h.GuestKernel, []byte("kernel"), 0o644)
	h.GuestInitrd = "/srv/initrd.img"
	var probed []string
	h.ProbeKVM = func(ctx context.Context, kernel string) kvm.ProbeResult {
		probed = append(probed, kernel)
		return kvm.ProbeResult{Accel: "tcg", Reason: "no sign of userspace within 15s; the console ends: Probing EDD (edd=off to disable)... ok"}
	}
	rs := Check(t.Context(), h)
	if len(probed) != 1 || probed[0] != h.GuestKernel {
		t.Errorf("probed %q, want the guest kernel once", probed)
	}
	for _, d := range []string{"kvm", "libvirt"} {
		notes := strings.Join(find(rs, d).Notes, "\n")
		for _, w := range []string{"KVM does not boot the guest kernel", "Probing EDD", "TCG"} {
			if !strings.Contains(notes, w) {
				t.Errorf("%s: notes %q; want one saying %q", d, notes, w)
			}
		}
	}

	// Where the probe boots, no TCG.
	h.ProbeKVM = func(ctx context.Context, kernel string) kvm.ProbeResult {
		return kvm.ProbeResult{Accel: "kvm", Reason: "reached userspace"}
	}
	if notes := strings.Join(find(Check(t.Context(), h), "kvm").Notes, "\n"); strings.Contains(notes, "TCG") {
		t.Errorf("kvm with a working probe: notes %q, want no TCG", notes)
	}

	// BERTH_KVM_ACCEL: tcg is a note without a probe; kvm without a KVM
	// device is a lack (the driver refuses to start).
	probed = nil
	h.ProbeKVM = func(ctx context.Context, kernel string) kvm.ProbeResult {
		probed = append(probed, kernel)
		return kvm.ProbeResult{Accel: "kvm"}
	}
	h.Accel = "tcg"
	if notes := strings.Join(find(Check(t.Context(), h), "kvm").Notes, "\n"); !strings.Contains(notes, "BERTH_KVM_ACCEL=tcg") || len(probed) != 0 {
		t.Errorf("BERTH_KVM_ACCEL=tcg: notes %q, %d probes; want the override noted, no probe", notes, len(probed))
	}
	h.Accel, h.KVM = "kvm", filepath.Join(t.TempDir(), "no-kvm")
	if all := strings.Join(find(Check(t.Context(), h), "kvm").Missing, "\n"); !strings.Contains(all, "BERTH_KVM_ACCEL=kvm") {
		t.Errorf("BERTH_KVM_ACCEL=kvm without KVM: missing %q", all)
	}
}

// TestCheckLibvirt checks that a libvirtd answering on the socket is not
// reported missing, and that a host without KVM gets a note, not a lack.
func TestCheckLibvirt(t *testing.T) {
	h := bare(t)
	h.LibvirtSocket = filepath.Join(t.TempDir(), "sock")
	l, err := net.Listen("unix", h.LibvirtSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := find(Check(t.Context(), h), "libvirt")
	if all := strings.Join(r.Missing, "\n"); strings.Contains(all, "libvirtd answering") {
		t.Errorf("libvirt: missing %q with libvirtd listening", all)
	}
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "TCG") {
		t.Errorf("libvirt notes %q; want one about TCG without KVM", notes)
	}
}

func TestMainUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), nil, drivers.Options{}, &out, &errOut); code != 2 {
		t.Errorf("berth host: exit %d, want 2", code)
	}
	if code := Main(t.Context(), []string{"frobnicate"}, drivers.Options{}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "unknown subcommand") {
		t.Errorf("berth host frobnicate: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := Main(t.Context(), []string{"check", "--require", "nope", "--data-dir", t.TempDir()}, drivers.Options{}, &out, &errOut); code != 2 {
		t.Errorf("--require nope: exit %d, want 2", code)
	}
	out.Reset()
	if code := Main(t.Context(), []string{"check", "-o", "json", "--data-dir", t.TempDir()}, drivers.Options{}, &out, &errOut); code != 0 || !strings.Contains(out.String(), `"driver": "container"`) {
		t.Errorf("check -o json: exit %d, output %s", code, out.String())
	}
}

// fakeHybrid is a hybrid cgroup layout in a temporary directory whose
// unified hierarchy has controllers ctls. Its Mount takes a controller
// out of the unified hierarchy, as the kernel does, and counts the
// mounts; nothing is mounted (binding a controller to a v1 hierarchy
// would change the real host's layout, whatever the namespace).
func fakeHybrid(t *testing.T, ctls ...string) (Cgroups, *[]string) {
	t.Helper()
	root := t.TempDir()
	controllers := filepath.Join(root, "unified", "cgroup.controllers")
	if err := os.MkdirAll(filepath.Dir(controllers), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(controllers, []byte(strings.Join(ctls, " ")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mounted []string
	return Cgroups{Root: root, Mount: func(ctl, dir string) error {
		if dir != filepath.Join(root, ctl) {
			t.Errorf("mounting %s at %s, want %s", ctl, dir, filepath.Join(root, ctl))
		}
		mounted = append(mounted, ctl)
		b, err := os.ReadFile(controllers)
		if err != nil {
			return err
		}
		left := slices.DeleteFunc(strings.Fields(string(b)), func(c string) bool { return c == ctl })
		return os.WriteFile(controllers, []byte(strings.Join(left, " ")), 0o644)
	}}, &mounted
}

// TestSetup prepares the host inside the tests' own network namespace,
// with a fake hybrid cgroup layout, twice: the first run creates the
// directories and the bridge and moves the unified hierarchy's
// controllers, marked as a cgroup change; the second changes nothing,
// reports everything in place and leaves the same rule set.
func TestSetup(t *testing.T) {
	netnstest.Require(t)
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables is missing")
	}
	dataDir := t.TempDir()
	h := bare(t)
	h.Net.StateDir = filepath.Join(dataDir, "net")
	t.Cleanup(func() { hostnet.Teardown(context.Background(), h.Net) })
	cg, mounted := fakeHybrid(t, "hugetlb", "misc")
	p := Prep{DataDir: dataDir, Net: h.Net, Cgroups: cg}
	var first, second []Step
	if err := Setup(t.Context(), p, func(s Step) { first = append(first, s) }); err != nil {
		t.Fatalf("Setup: %v (steps %v)", err, first)
	}
	once := netnstest.Rules(t)
	if err := Setup(t.Context(), p, func(s Step) { second = append(second, s) }); err != nil {
		t.Fatalf("second Setup: %v (steps %v)", err, second)
	}
	if twice := netnstest.Rules(t); twice != once {
		t.Errorf("the rules after two Setups differ from those after one:\n%s\nvs\n%s", twice, once)
	}
	if got := strings.Join(*mounted, " "); got != "hugetlb misc" {
		t.Errorf("mounted v1 hierarchies for %q, want hugetlb misc, once each", got)
	}
	var cgChanges []string
	for _, s := range first {
		if s.Cgroups {
			cgChanges = append(cgChanges, s.Detail)
		}
	}
	if len(cgChanges) != 2 || !strings.Contains(cgChanges[0], "mounted a cgroup v1 hierarchy for the hugetlb controller at "+filepath.Join(cg.Root, "hugetlb")) {
		t.Errorf("cgroup changes reported: %q; want one per controller naming it and where", cgChanges)
	}
	if !slices.ContainsFunc(first, func(s Step) bool { return s.What == "bridge bnone0" && s.Detail == "created" && s.Changed }) {
		t.Errorf("the first Setup did not report creating the bridge: %v", first)
	}
	for _, s := range second {
		if s.Changed || s.Cgroups {
			t.Errorf("the second Setup changed %s", s)
		}
	}
	for _, want := range []string{"bridge bnone0: present", "directories under " + dataDir + ": present", "cgroup layout: hybrid, and the unified hierarchy " + filepath.Join(cg.Root, "unified") + " has no controllers: nothing to change"} {
		if !slices.ContainsFunc(second, func(s Step) bool { return s.String() == want }) {
			t.Errorf("the second Setup did not report %q: %v", want, second)
		}
	}
	if err := hostnet.Check(t.Context(), h.Net); err != nil {
		t.Errorf("after Setup: %v", err)
	}
	for _, d := range []string{"images", "containers", "net"} {
		if fi, err := os.Stat(filepath.Join(dataDir, d)); err != nil || !fi.IsDir() {
			t.Errorf("Setup did not create %s: %v", d, err)
		}
	}
	h.Root, h.LookBin = true, exec.LookPath
	c := find(Check(t.Context(), h), "container")
	if strings.Contains(strings.Join(c.Missing, "\n"), "guest network") {
		t.Errorf("after Setup the container check still misses the network: %v", c.Missing)
	}
}

// TestSetupCgroupMountPoint: a controller still in the unified hierarchy
// whose v1 directory is already a mount point is not mounted over; Setup
// fails naming the step and the driver it affects.
func TestSetupCgroupMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	cg, mounted := fakeHybrid(t, "hugetlb")
	dir := filepath.Join(cg.Root, "hugetlb")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=16k"); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	err := cg.prepare(func(Step) {})
	var se *SetupError
	if !errors.As(err, &se) || se.Step != "cgroup layout" || !strings.Contains(se.Error(), "already a mount point") || !strings.Contains(strings.Join(se.Affects, ","), "container") {
		t.Errorf("prepare over a mount point: %v; want a SetupError of the cgroup layout naming the mount point", err)
	}
	if len(*mounted) != 0 {
		t.Errorf("mounted %v over a mount point", *mounted)
	}
}

// TestServeSetupLines: berth serve's host setup logs one line when not
// root, and a failure with the step and the drivers it affects.
func TestServeSetupLines(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	serveSetup(t.Context(), log, t.TempDir(), hostnet.Config{}, Cgroups{}, false)
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "level=INFO") || !strings.Contains(got, "host setup skipped: berth serve is not root") || !strings.Contains(got, "berth host setup as root") {
		t.Errorf("not root: logged %q; want one info line saying so and naming berth host setup", got)
	}
	if os.Geteuid() != 0 {
		return
	}
	buf.Reset()
	// A guest network that cannot be made (a bridge name no interface can
	// have) fails before it touches the host; the cgroup layout is a fake.
	cg, _ := fakeHybrid(t)
	serveSetup(t.Context(), log, t.TempDir(), hostnet.Config{Bridge: "a-bridge-name-too-long"}, cg, true)
	if got := buf.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "affects=\"container, firecracker, kvm, libvirt\"") || !strings.Contains(got, "a-bridge-name-too-long") {
		t.Errorf("a bad bridge name: logged %q; want an error naming it and the drivers it affects", got)
	}
}

// TestServeSetupNoEgress: where IPv4 forwarding cannot be enabled (a
// read-only /proc/sys, as in many containers), berth serve's host setup
// with egress on still makes the guests' host-only network, logs an error
// naming the failed step and that only egress is affected, and goes on to
// the cgroup step. It runs in a fresh network and mount namespace, with a
// read-only file bound over ip_forward there only.
func TestServeSetupNoEgress(t *testing.T) {
	netnstest.Require(t)
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables is missing")
	}
	const fwd = "/proc/sys/net/ipv4/ip_forward"
	if os.Getenv("HOSTCHECK_TEST_ROPROC") == "" {
		cmd := exec.Command("unshare", "--net", "--mount", os.Args[0], "-test.run=^TestServeSetupNoEgress$", "-test.v")
		cmd.Env = append(os.Environ(), "HOSTCHECK_TEST_ROPROC=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestServeSetupNoEgress") {
			t.Fatalf("in a fresh namespace: %v\n%s", err, out)
		}
		return
	}
	zero := filepath.Join(t.TempDir(), "ip_forward")
	if err := os.WriteFile(zero, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(zero, fwd, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("", fwd, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	cg, mounted := fakeHybrid(t, "hugetlb")
	var buf bytes.Buffer
	dataDir := t.TempDir()
	gnet := hostnet.Config{Bridge: "bnoegr0", Subnet: netip.MustParsePrefix("10.9.3.0/24"), Egress: true, StateDir: filepath.Join(dataDir, "net")}
	serveSetup(t.Context(), slog.New(slog.NewTextHandler(&buf, nil)), dataDir, gnet, cg, true)
	got := buf.String()
	for _, want := range []string{
		`level=ERROR msg="host setup failed; serving without it" step="guest network (bridge bnoegr0 on 10.9.3.0/24, egress on (NAT))" affects="guest egress of the container`,
		"enabling IPv4 forwarding for guest egress",
		"guests get the host-only network, without egress",
		`msg="host setup: bridge bnoegr0: brought up"`,
		`level=WARN msg="host setup changed the host's cgroup layout`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "host setup done") || len(*mounted) != 1 {
		t.Errorf("mounted %v; log:\n%s", *mounted, got)
	}
	if err := hostnet.Check(t.Context(), gnet); err != nil {
		t.Errorf("the guests' host-only network is not there: %v", err)
	}
}

// TestMainSetup: berth host setup prints each step, "changed:" the first
// time and "ok:" when run again, a cgroup layout change on a line of its
// own.
func TestMainSetup(t *testing.T) {
	netnstest.Require(t)
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables is missing")
	}
	t.Setenv("BERTH_BRIDGE", "bmain0")
	t.Setenv("BERTH_GUEST_SUBNET", "10.9.2.0/24")
	dataDir := t.TempDir()
	c, err := hostnet.ConfigFromEnv(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostnet.Teardown(context.Background(), c) })
	cg, _ := fakeHybrid(t, "hugetlb")
	run := func() string {
		var out, errOut bytes.Buffer
		if code := hostMain(t.Context(), []string{"setup", "--data-dir", dataDir}, drivers.Options{}, &out, &errOut, cg); code != 0 {
			t.Fatalf("berth host setup: exit %d: %s%s", code, out.String(), errOut.String())
		}
		return out.String()
	}
	first, second := run(), run()
	for _, want := range []string{"changed: bridge bmain0: created\n", "changed: iptables -t filter FORWARD -i bmain0 ! -o bmain0 -j DROP: inserted\n", "changed the host's cgroup layout: mounted a cgroup v1 hierarchy for the hugetlb controller"} {
		if !strings.Contains(first, want) {
			t.Errorf("the first berth host setup lacks %q:\n%s", want, first)
		}
	}
	if strings.Contains(second, "changed") || !strings.Contains(second, "ok: bridge bmain0: present\n") || !strings.Contains(second, "ok: iptables -t filter FORWARD -i bmain0 ! -o bmain0 -j DROP: present\n") {
		t.Errorf("the second berth host setup:\n%s\nwant every step ok, nothing changed", second)
	}
}
