package libvirt

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/kvm"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Guests are heavy, under TCG very: one at a time without KVM (as
	// the driver's probe finds it, see probeCacheDir).
	if testAccel() == "kvm" {
		flag.Set("test.parallel", "2")
	} else {
		flag.Set("test.parallel", "1")
	}
	os.Exit(netnstest.Main(runner{m}))
}

// probeCacheDir is where the tests' drivers keep their accelerator
// probes' answers: one place for the machine (the kvm driver's tests use
// it too), so that it probes /boot's kernel once.
var probeCacheDir = filepath.Join(os.TempDir(), "berth-kvm-probe")

// testAccel is the accelerator the drivers of the real runs pick: what
// the probe finds for the newest /boot/vmlinuz-* (cached, where the
// drivers find it).
func testAccel() string {
	if a := os.Getenv("BERTH_KVM_ACCEL"); a != "" {
		return a
	}
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	bb, err := exec.LookPath("busybox")
	if len(ks) == 0 || err != nil {
		return "tcg"
	}
	sort.Strings(ks)
	return kvm.ProbeKernel(context.Background(), "", ks[len(ks)-1], bb, probeCacheDir).Accel
}

// runner stops the tests' private libvirtd and removes their files once
// the tests are done.
type runner struct{ m *testing.M }

func (r runner) Run() int {
	code := r.m.Run()
	if envVal.stop != nil {
		envVal.stop()
	}
	return code
}

// env is what the real runs need, set up once: a private libvirtd in the
// tests' network namespace, a guest kernel and initramfs, berth's image
// store with the test image, and berth's bridge.
type env struct {
	dir            string
	socket         string
	kernel, initrd string
	tcgKernel      string // booted under TCG instead of kernel
	images         *image.Store
	net            *hostnet.Network
	stop           func()
}

var (
	envOnce sync.Once
	envVal  env
	envSkip string
	envErr  error
)

func setup(t *testing.T) env {
	t.Helper()
	envOnce.Do(func() { envSkip, envErr = prepare(&envVal) })
	if envSkip != "" {
		t.Skip(envSkip)
	}
	if envErr != nil {
		t.Fatal(envErr)
	}
	return envVal
}

// libvirtdBin finds libvirtd, which Debian installs to /usr/sbin.
func libvirtdBin() (string, error) {
	if p, err := exec.LookPath("libvirtd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/libvirtd"); err != nil {
		return "", err
	}
	return "/usr/sbin/libvirtd", nil
}

func prepare(e *env) (skip string, err error) {
	if os.Geteuid() != 0 {
		return "not root: libvirtd, taps and the bridge need it", nil
	}
	if netnstest.Inside() == "" {
		return "no network namespace of the tests' own (netnstest): ip or nsenter missing", nil
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return "no /dev/net/tun: " + err.Error(), nil
	}
	libvirtd, err := libvirtdBin()
	if err != nil {
		return "libvirtd is missing; scripts/test installs libvirt-daemon-system", nil
	}
	for _, tool := range []string{"qemu-system-x86_64", "busybox", "mkfs.ext4", "ip", "unshare", "go", "xz"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("%s is missing (%v); scripts/test installs the packages", tool, err), nil
		}
	}
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		return "no guest kernel: install linux-image-amd64", nil
	}
	sort.Strings(ks)
	bzImage := ks[len(ks)-1]
	modules := filepath.Join("/lib/modules", strings.TrimPrefix(filepath.Base(bzImage), "vmlinuz-"))

	// Short: unix socket paths live below it.
	if e.dir, err = os.MkdirTemp("", "lvt"); err != nil {
		return "", err
	}
	e.stop = func() { os.RemoveAll(e.dir) }
	path := func(name string) string { return filepath.Join(e.dir, name) }

	// KVM boots (and the driver's probe tries) the bzImage, TCG its
	// vmlinux, seconds faster, as in berth serve.
	e.kernel = bzImage
	if kvm.ExtractVmlinux(bzImage, path("vmlinux")) == nil {
		e.tcgKernel = path("vmlinux")
	}
	e.initrd = path("initrd.img")
	f, err := os.Create(e.initrd)
	if err != nil {
		return "", err
	}
	bb, _ := exec.LookPath("busybox")
	err = kvm.WriteInitrd(f, kvm.InitrdOptions{ModulesDir: modules, Busybox: bb})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}

	// The image: busybox with its applets, and the kvm driver's test guest
	// binary (agent and apps) as /berth-agent.
	root := path("rootfs")
	if err := vmtest.BusyboxRoot(root); err != nil {
		return "", err
	}
	build := exec.Command("go", "build", "-o", filepath.Join(root, "berth-agent"), "github.com/berth-dev/berth/internal/vm/kvm/testdata/guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the guest binary: %v: %s", err, out)
	}
	db, err := store.Open(path("db"))
	if err != nil {
		return "", err
	}
	if e.images, err = image.New(context.Background(), image.Options{Dir: path("images"), Catalog: db}); err != nil {
		return "", err
	}
	if _, err := e.images.Import(context.Background(), "conformance", root); err != nil {
		return "", err
	}

	// berth's bridge, inside the tests' network namespace.
	cfg := hostnet.Config{Bridge: "lvtbr0", Subnet: netip.MustParsePrefix("10.214.0.0/24"), StateDir: path("net")}
	if err := hostnet.Setup(context.Background(), cfg); err != nil {
		return "", err
	}
	if e.net, err = hostnet.New(cfg); err != nil {
		return "", err
	}

	stop, sock, err := startLibvirtd(libvirtd, path("libvirt"))
	if err != nil {
		return "", err
	}
	e.socket = sock
	e.stop = func() { stop(); os.RemoveAll(e.dir) }
	return "", nil
}

// startLibvirtd starts a libvirtd of the tests' own in their network
// namespace (so its QEMUs find the taps there) and in a mount namespace of
// its own, with fresh directories over the system daemon's state, run,
// log and configuration directories (an overlay over /etc adds what a host
// without libvirt-daemon-system lacks) and a qemu.conf of its own (QEMU as root without
// virtlogd, which is socket-activated by systemd on a real host); it
// listens in dir. It returns how to stop it.
func startLibvirtd(bin, dir string) (stop func(), socket string, err error) {
	sock := filepath.Join(dir, "sock")
	if err := os.MkdirAll(sock, 0o700); err != nil {
		return nil, "", err
	}
	conf := fmt.Sprintf("unix_sock_dir = %q\nunix_sock_rw_perms = \"0700\"\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n"+
		"log_outputs = \"3:file:%s\"\n", sock, filepath.Join(dir, "libvirtd.log"))
	qemuConf := "stdio_handler = \"file\"\nuser = \"root\"\ngroup = \"root\"\ndynamic_ownership = 0\nsecurity_driver = \"none\"\nnamespaces = [ ]\n"
	if err := os.WriteFile(filepath.Join(dir, "libvirtd.conf"), []byte(conf), 0o600); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "qemu.conf"), []byte(qemuConf), 0o600); err != nil {
		return nil, "", err
	}
	script := `set -e
for d in /run/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt; do
	mkdir -p "$d"
	mount -t tmpfs -o mode=0755 tmpfs "$d"
done
# /etc through an overlay, in this mount namespace only, so that what
# libvirtd needs there exists without the host's /etc changing: a fresh
# /etc/libvirt (the host's, if any, stays unseen; libvirt-daemon alone
# makes none) with the qemu.conf, and the user and group libvirt-qemu,
# which the QEMU driver resolves before it reads qemu.conf (Debian's
# libvirt-daemon-system creates them).
mkdir -p "$1/etc"
mount -t tmpfs -o mode=0755 tmpfs "$1/etc"
mkdir "$1/etc/upper" "$1/etc/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/etc/upper,workdir=$1/etc/work" /etc
mkdir -p /etc/libvirt
mount -t tmpfs -o mode=0755 tmpfs /etc/libvirt
cp "$1/qemu.conf" /etc/libvirt/qemu.conf
getent group libvirt-qemu >/dev/null || echo 'libvirt-qemu:x:64055:' >>/etc/group
getent passwd libvirt-qemu >/dev/null || echo 'libvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin' >>/etc/passwd
exec "$2" -f "$1/libvirtd.conf" -p "$1/libvirtd.pid"
`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", dir, bin)
	out, err := os.Create(filepath.Join(dir, "out.log"))
	if err != nil {
		return nil, "", err
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Pdeathsig: a test binary killed before its cleanup takes its
	// libvirtd along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, "", fmt.Errorf("starting libvirtd: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(exited) }()
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	socket = filepath.Join(sock, "libvirt-sock")
	exitErr := func() error {
		b, _ := os.ReadFile(filepath.Join(dir, "out.log"))
		l, _ := os.ReadFile(filepath.Join(dir, "libvirtd.log"))
		var errs []string
		for line := range strings.Lines(string(l)) {
			if strings.Contains(line, " error : ") {
				errs = append(errs, strings.TrimSpace(line))
			}
		}
		return fmt.Errorf("libvirtd exited: %s; its errors:\n%s", strings.TrimSpace(string(b)), strings.Join(errs, "\n"))
	}
	for i := 0; i < 600; i++ { // up to a minute
		if c, err := net.Dial("unix", socket); err == nil {
			c.Close()
			// Listening is not initialized: a QEMU driver that fails
			// ends libvirtd after it listened. Answering a connection
			// to qemu:///system is.
			hv := &hypervisor{socket: socket}
			err := hv.connect()
			hv.close()
			if err == nil {
				return stop, socket, nil
			}
		}
		select {
		case <-exited:
			return nil, "", exitErr()
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	return nil, "", fmt.Errorf("libvirtd did not listen on %s within a minute", socket)
}

// options are the driver options of the real runs, with a driver state
// directory of their own.
func options(t *testing.T, e env, log *slog.Logger) Options {
	dir, err := os.MkdirTemp(e.dir, "d")
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Options: kvm.Options{
			Dir:        dir,
			Kernel:     e.kernel,
			TCGKernel:  e.tcgKernel,
			ProbeCache: probeCacheDir,
			Initrd:     e.initrd,
			Images:     e.images,
			Net:        e.net,
			LeaseCheck: 100 * time.Millisecond,
			Log:        log,
		},
		Socket: e.socket,
	}
}

const guestApp = "exec env BERTH_KVM_GUEST_ROLE=app /berth-agent"

// TestConformance runs vmtest's suite against libvirt domains: kvm where
// /dev/kvm exists, qemu (TCG) elsewhere.
func TestConformance(t *testing.T) {
	e := setup(t)
	o := options(t, e, nil)
	t.Run("BootToReady", func(t *testing.T) { bootToReady(t, e) })
	newDriver := func(t *testing.T) *Driver {
		d, err := New(o)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	vmtest.RunDriverTests(t, func(t *testing.T) vm.Driver { return newDriver(t) }, vmtest.Options{
		App:        guestApp,
		EnvApp:     "exec env BERTH_KVM_GUEST_ROLE=envapp /berth-agent",
		Image:      "conformance",
		WorkDir:    "/tmp",
		LeaseCheck: o.LeaseCheck,
		// A TCG guest on a busy 2-core host takes 40 s and more to serve.
		Patience: map[bool]time.Duration{true: 0, false: 3 * time.Minute}[testAccel() == "kvm"],
		Reopen:   func(t *testing.T, old vm.Driver) vm.Driver { return newDriver(t) },
	})
}

// bootToReady starts one guest and logs how long it took from Start to
// the agent answering, which the driver also logs as boot_to_ready.
func bootToReady(t *testing.T, e env) {
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	o := options(t, e, log)
	d, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer d.Close()
	id := vm.Name("boot", uint64(time.Now().UnixNano()))
	t0 := time.Now()
	if _, err := d.Start(t.Context(), vm.Spec{Name: id, Image: "conformance", Command: guestApp}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer d.Stop(context.Background(), id, 5*time.Second)
	started := time.Since(t0)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) })
	defer c.Close()
	info, err := c.Info(ctx)
	if err != nil {
		in, _ := d.Inspect(context.Background(), id)
		console, _ := os.ReadFile(filepath.Join(o.Dir, id, "console.log"))
		t.Fatalf("the agent did not answer: %v (state %s, %s); console:\n%s", err, in.State, in.Reason, console)
	}
	t.Logf("accel %s: Start returned after %v, the agent (%+v) answered after %v",
		d.Accel(), started.Round(time.Millisecond), info, time.Since(t0).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "boot_to_ready=") {
		t.Errorf("the driver did not log the boot; its log:\n%s", logged.String())
	}
	t.Logf("driver log:\n%s", logged.String())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
