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
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/kvm"
	"github.com/berth-dev/berth/internal/vm/libvirt/libvirttest"
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
	libvirtd, err := libvirttest.Bin()
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

	stop, sock, err := libvirttest.Start(libvirtd, path("libvirt"))
	if err != nil {
		return "", err
	}
	e.socket = sock
	e.stop = func() { stop(); os.RemoveAll(e.dir) }
	return "", nil
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
