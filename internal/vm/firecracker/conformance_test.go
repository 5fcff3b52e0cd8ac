package firecracker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/agentbin"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// Environment of the real conformance run (see the package doc).
const (
	envKernel = "BERTH_FC_KERNEL" // guest vmlinux; required
	envBin    = "BERTH_FC_BIN"    // firecracker binary; default: firecracker in PATH
	envGuest  = "BERTH_FC_GUEST_ROLE"
)

// guestMain is this test binary's part inside a real guest: its init (the
// kernel runs /berth-agent with "agent ...") and the apps the suite
// starts there.
func guestMain() (int, bool) {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		return agent.Main(context.Background(), os.Args[2:], os.Stderr), true
	}
	switch os.Getenv(envGuest) {
	case "app":
		return vmtest.ServeApp("", false), true
	case "envapp":
		return vmtest.ServeApp("", true), true
	}
	return 0, false
}

// TestConformance runs vmtest's suite against real microVMs. It needs a KVM
// host; everywhere else it skips and says what is missing.
func TestConformance(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm: the Firecracker conformance suite runs only on a KVM host (see the package doc for how)")
	}
	fcBin := os.Getenv(envBin)
	if fcBin == "" {
		fcBin = "firecracker"
	}
	if _, err := exec.LookPath(fcBin); err != nil {
		t.Skipf("no firecracker binary (%v): set $%s or put firecracker in PATH", err, envBin)
	}
	kernel := os.Getenv(envKernel)
	if kernel == "" {
		t.Skipf("$%s is not set: it must name a guest vmlinux", envKernel)
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: tap devices need CAP_NET_ADMIN")
	}
	for _, tool := range []string{"busybox", "mkfs.ext4", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (%v)", tool, err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if static, err := agentbin.IsStatic(exe); err == nil && !static {
		t.Skip("the test binary is dynamically linked; it must run as the guest's init: build it with CGO_ENABLED=0 and without -race")
	}

	image := buildGuestImage(t, exe)
	dir := shortTempDir(t)
	o := Options{
		Dir:            dir,
		FirecrackerBin: fcBin,
		Kernel:         kernel,
		Images:         vmtest.FixedImage(image),
		Net:            &vmtest.TapNet{Prefix: "fct", Net: "172.30", Base: 200 + os.Getpid()%50},
		LeaseCheck:     50 * time.Millisecond,
	}
	app := "exec env " + envGuest + "=app /berth-agent"
	vmtest.RunDriverTests(t, func(t *testing.T) vm.Driver {
		d, err := New(o)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return d
	}, vmtest.Options{
		App:        app,
		EnvApp:     "exec env " + envGuest + "=envapp /berth-agent",
		Image:      "conformance",
		WorkDir:    "/tmp",
		LeaseCheck: o.LeaseCheck,
		Reopen: func(t *testing.T, old vm.Driver) vm.Driver {
			d, err := New(o)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return d
		},
	})
}

// buildGuestImage makes a small ext4 root file system without mounting
// anything: busybox for /bin/sh and the shell tools the suite's commands
// use (vmtest.BusyboxRoot), and this test binary as /berth-agent (the
// guest's init and apps).
func buildGuestImage(t *testing.T, exe string) string {
	t.Helper()
	bb, _ := exec.LookPath("busybox")
	if static, err := agentbin.IsStatic(bb); err == nil && !static {
		t.Skipf("%s is dynamically linked; install busybox-static", bb)
	}
	root := t.TempDir()
	if err := vmtest.BusyboxRoot(root); err != nil {
		t.Fatal(err)
	}
	copyFile(t, exe, filepath.Join(root, "berth-agent"), 0o755)
	img := filepath.Join(t.TempDir(), "guest.ext4")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", root, img, "512M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	return img
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
