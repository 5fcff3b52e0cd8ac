package kvm

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/agentbin"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// Environment of the conformance run (see the package doc).
const (
	envKernel  = "BERTH_KVM_KERNEL"  // guest kernel; default: the newest /boot/vmlinuz-*
	envModules = "BERTH_KVM_MODULES" // its module tree; default: /lib/modules/<its release>
	envAccel   = "BERTH_KVM_ACCEL"   // kvm or tcg; default: auto
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Guests are heavy, under TCG very: the suite's subtests run one at a
	// time (two on a KVM host), whatever -parallel says.
	if testAccel().Accel == "kvm" {
		flag.Set("test.parallel", "2")
	} else {
		flag.Set("test.parallel", "1")
	}
	code := m.Run()
	if testDirMade.Load() {
		os.RemoveAll(testDir())
	}
	os.Exit(code)
}

// probeCacheDir is where the tests' drivers keep their accelerator
// probes' answers: one place for the machine, so that it probes once, not
// in every test package and run (the kernel is /boot's, the key stays).
var probeCacheDir = filepath.Join(os.TempDir(), "berth-kvm-probe")

// testKernel is the guest kernel of the real runs: $BERTH_KVM_KERNEL, or
// the newest /boot/vmlinuz-*; "" if none.
func testKernel() string {
	if k := os.Getenv(envKernel); k != "" {
		return k
	}
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		return ""
	}
	sort.Strings(ks)
	return ks[len(ks)-1]
}

// testAccel is the accelerator the real runs' drivers pick: $BERTH_KVM_ACCEL,
// or the probe's answer for the test kernel (cached in probeCacheDir, where
// the drivers find it).
var testAccel = sync.OnceValue(func() ProbeResult {
	if a := os.Getenv(envAccel); a != "" {
		return ProbeResult{Accel: a, Reason: "$" + envAccel}
	}
	bb, err := exec.LookPath("busybox")
	kernel := testKernel()
	if err != nil || kernel == "" {
		return ProbeResult{Accel: "tcg", Reason: "no busybox or guest kernel to probe with"}
	}
	return ProbeKernel(context.Background(), "", kernel, bb, probeCacheDir)
})

// testPatience bounds the conformance suite's waits: a TCG guest on a
// busy 2-core host takes 40 s and more to serve.
func testPatience() time.Duration {
	if testAccel().Accel == "kvm" {
		return 0
	}
	return 3 * time.Minute
}

// TestProbeHost reports what the probe finds on this host (on a host
// whose /dev/kvm opens but cannot boot the kernel: tcg, saying why).
func TestProbeHost(t *testing.T) {
	r := testAccel()
	if r.Reason == "" || (r.Accel != "kvm" && r.Accel != "tcg") {
		t.Fatalf("probe: %+v, want kvm or tcg with a reason", r)
	}
	t.Logf("accel %s: %s (cached %v)", r.Accel, r.Reason, r.Cached)
}

// conformanceEnv is what the real runs need, set up once.
type conformanceEnv struct {
	kernel, tcgKernel, initrd, image string
}

var (
	envOnce sync.Once
	envVal  conformanceEnv
	envSkip string
	envErr  error
)

// setup builds the guest binary, kernel, initramfs and image, or says why
// this host cannot run guests.
func setup(t *testing.T) conformanceEnv {
	t.Helper()
	envOnce.Do(func() { envVal, envSkip, envErr = prepare() })
	if envSkip != "" {
		t.Skip(envSkip)
	}
	if envErr != nil {
		t.Fatal(envErr)
	}
	return envVal
}

// testDir holds the run's kernel, initramfs, image and driver state,
// shared by the tests that boot guests; TestMain removes it.
var testDir = sync.OnceValue(func() string {
	d, err := os.MkdirTemp("", "kvmtest")
	if err != nil {
		panic(err)
	}
	testDirMade.Store(true)
	return d
})

var testDirMade atomic.Bool

func prepare() (conformanceEnv, string, error) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return conformanceEnv{}, "the kvm driver's guests are x86_64 Linux", nil
	}
	if os.Geteuid() != 0 {
		return conformanceEnv{}, "not root: tap devices need CAP_NET_ADMIN", nil
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return conformanceEnv{}, "no /dev/net/tun: " + err.Error(), nil
	}
	for _, tool := range []string{"qemu-system-x86_64", "busybox", "mkfs.ext4", "ip", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return conformanceEnv{}, fmt.Sprintf("%s is missing (%v); scripts/test installs the packages", tool, err), nil
		}
	}
	kernel := testKernel()
	if kernel == "" {
		return conformanceEnv{}, "no guest kernel: install linux-image-amd64 or set $" + envKernel, nil
	}
	modules := os.Getenv(envModules)
	if modules == "" {
		release := strings.TrimPrefix(filepath.Base(kernel), "vmlinuz-")
		modules = filepath.Join("/lib/modules", release)
	}
	if _, err := os.Stat(filepath.Join(modules, "modules.dep")); err != nil {
		return conformanceEnv{}, fmt.Sprintf("no module tree for %s (%v): set $%s", kernel, err, envModules), nil
	}
	bb, _ := exec.LookPath("busybox")
	if static, err := agentbin.IsStatic(bb); err == nil && !static {
		return conformanceEnv{}, bb + " is dynamically linked; install busybox-static", nil
	}
	dir := testDir()
	var e conformanceEnv
	// An uncompressed kernel boots seconds faster under TCG (no
	// decompression); a bzImage works too. The bzImage is what KVM boots
	// and the probe tries, as in berth serve.
	e.kernel = kernel
	if vmlinux := filepath.Join(dir, "vmlinux"); ExtractVmlinux(kernel, vmlinux) == nil {
		e.tcgKernel = vmlinux
	}
	e.initrd = filepath.Join(dir, "initrd.img")
	f, err := os.Create(e.initrd)
	if err != nil {
		return e, "", err
	}
	err = WriteInitrd(f, InitrdOptions{ModulesDir: modules, Busybox: bb})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return e, "", err
	}
	guest := filepath.Join(dir, "guest")
	build := exec.Command("go", "build", "-o", guest, "./testdata/guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return e, "", fmt.Errorf("building the guest binary: %v: %s", err, out)
	}
	e.image, err = buildGuestImage(dir, guest)
	return e, "", err
}

// buildGuestImage makes a small ext4 root file system without mounting
// anything: busybox for /bin/sh and the shell tools the suite's commands
// use (vmtest.BusyboxRoot), and the guest binary as /berth-agent (init and
// apps).
func buildGuestImage(dir, guest string) (string, error) {
	root := filepath.Join(dir, "root")
	if err := vmtest.BusyboxRoot(root); err != nil {
		return "", err
	}
	if err := copyFile(guest, filepath.Join(root, "berth-agent")); err != nil {
		return "", err
	}
	img := filepath.Join(dir, "guest.ext4")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", root, img, "256M").CombinedOutput(); err != nil {
		return "", fmt.Errorf("mkfs.ext4: %v: %s", err, out)
	}
	return img, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// testOptions are the driver options of the real runs.
func testOptions(t *testing.T, e conformanceEnv) Options {
	dir, err := os.MkdirTemp(testDir(), "d")
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Dir:        dir,
		Kernel:     e.kernel,
		TCGKernel:  e.tcgKernel,
		ProbeCache: probeCacheDir,
		Initrd:     e.initrd,
		Images:     vmtest.FixedImage(e.image),
		Net:        &vmtest.TapNet{Prefix: "kvmt", Net: "172.31", Base: os.Getpid() % 200},
		Accel:      os.Getenv(envAccel),
		LeaseCheck: 100 * time.Millisecond,
	}
}

const guestApp = "exec env BERTH_KVM_GUEST_ROLE=app /berth-agent"

// TestConformance runs vmtest's suite against real QEMU guests: with KVM
// where /dev/kvm exists, under TCG emulation elsewhere. It first measures
// boot-to-ready once.
func TestConformance(t *testing.T) {
	e := setup(t)
	o := testOptions(t, e)

	t.Run("BootToReady", func(t *testing.T) { measureBoot(t, o) })

	vmtest.RunDriverTests(t, func(t *testing.T) vm.Driver {
		d, err := New(o)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return d
	}, vmtest.Options{
		App:        guestApp,
		EnvApp:     "exec env BERTH_KVM_GUEST_ROLE=envapp /berth-agent",
		Image:      "conformance",
		WorkDir:    "/tmp",
		LeaseCheck: o.LeaseCheck,
		Patience:   testPatience(),
		Reopen: func(t *testing.T, old vm.Driver) vm.Driver {
			d, err := New(o)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return d
		},
	})
}

// measureBoot starts one guest and reports how long it took from Start to
// the agent answering and to the app serving HTTP.
func measureBoot(t *testing.T, o Options) {
	d, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	id := vm.Name("boot", uint64(time.Now().UnixNano()))
	t0 := time.Now()
	inst, err := d.Start(t.Context(), vm.Spec{Name: id, Image: "conformance", Command: guestApp})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			d.Stop(context.Background(), id, 5*time.Second)
		}
	}()
	started := time.Since(t0)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) })
	defer c.Close()
	if _, err := c.Info(ctx); err != nil {
		in, _ := d.Inspect(context.Background(), id)
		t.Fatalf("the agent did not answer: %v (state %s, %s)", err, in.State, in.Reason)
	}
	agentUp := time.Since(t0)
	for {
		resp, err := http.Get("http://" + inst.Addr + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the app did not serve: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("accel %s: Start returned after %v, agent ready after %v, app serving after %v",
		d.Accel(), started.Round(time.Millisecond), agentUp.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	// A polite Stop: Ctrl-Alt-Del reaches the agent, which stops the app
	// and ends the guest well before this grace.
	t1 := time.Now()
	stopped = true
	if err := d.Stop(t.Context(), id, time.Minute); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("Stop took %v (grace 1m)", time.Since(t1).Round(time.Millisecond))
}
