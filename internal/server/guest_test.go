package server

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/kvm"
)

func TestKernelRelease(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/boot/vmlinuz-6.1.0-57-amd64", "6.1.0-57-amd64"},
		{"/srv/vmlinux-6.1", "6.1"},
		{"/srv/vmlinux", ""},
		{"/boot/bzImage", ""},
		{"/boot/vmlinuz-", ""},
		{"/boot/vmlinuz-..", ""},
	} {
		if got := kernelRelease(tc.path); got != tc.want {
			t.Errorf("kernelRelease(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// TestGuestAgent checks that only a static executable becomes the guests'
// agent, and that the reason says how to get one.
func TestGuestAgent(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "script")
	os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("BERTH_CONTAINER_AGENT", "")
	for _, tc := range []struct {
		name, agent, want string
	}{
		{"not ELF", text, "set BERTH_GUEST_AGENT"},
		{"missing", filepath.Join(dir, "nothing"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envGuestAgent, tc.agent)
			_, err := guestAgent()
			if !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("guestAgent() = %v, want ErrUnavailable saying %q", err, tc.want)
			}
		})
	}
	// The test binary is static only when built without cgo and -race.
	t.Run("test binary", func(t *testing.T) {
		t.Setenv(envGuestAgent, "")
		got, err := guestAgent()
		if static := checkStatic(exe) == nil; static != (err == nil) {
			t.Fatalf("guestAgent() = %q, %v for a test binary whose static is %v", got, err, static)
		}
		if err != nil && !strings.Contains(err.Error(), "dynamically linked") {
			t.Errorf("guestAgent() = %v, want it to say the binary is dynamically linked", err)
		}
	})
	if bb, err := exec.LookPath("busybox"); err == nil && checkStatic(bb) == nil {
		t.Run("static", func(t *testing.T) {
			t.Setenv(envGuestAgent, "")
			t.Setenv("BERTH_CONTAINER_AGENT", bb) // the fallback
			if got, err := guestAgent(); err != nil || got != bb {
				t.Errorf("guestAgent() = %q, %v, want %q", got, err, bb)
			}
		})
	}
}

// TestGuestBoot builds the kvm driver's boot files from a made-up kernel
// and module tree, and checks that a second berth over the same directory
// finds them built, and that a changed module tree builds them again.
func TestGuestBoot(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil || checkStatic(bb) != nil {
		t.Skip("needs a static busybox (Debian: busybox-static)")
	}
	dir := t.TempDir()
	// A "bzImage" without an xz payload: ExtractVmlinux fails, and the
	// kernel is copied as it is.
	kernel := filepath.Join(dir, "vmlinuz-9.9.9-test")
	k := make([]byte, 4096)
	copy(k[0x202:], "HdrS")
	if err := os.WriteFile(kernel, k, 0o644); err != nil {
		t.Fatal(err)
	}
	// Every module the initramfs loads is built in.
	modules := filepath.Join(dir, "modules")
	os.MkdirAll(modules, 0o755)
	os.WriteFile(filepath.Join(modules, "modules.dep"), nil, 0o644)
	os.WriteFile(filepath.Join(modules, "modules.builtin"), []byte(strings.Join(kvm.InitrdModules, ".ko\n")+".ko\n"), 0o644)
	t.Setenv(envGuestKernel, kernel)
	t.Setenv(envGuestModules, modules)
	t.Setenv(envGuestInitrd, "")
	cache := filepath.Join(dir, "cache")
	log := slog.New(slog.DiscardHandler)

	b, err := newGuestBoot(cache, true, log)
	if err != nil {
		t.Fatal(err)
	}
	if b.isReady() {
		t.Fatal("boot files ready before any build")
	}
	for _, p := range []string{b.kernel, b.initrd} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the driver's paths must exist before the build: %v", err)
		}
	}
	if err := b.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(b.kernel); string(got) != string(k) {
		t.Errorf("kernel %s: %d bytes, want the bzImage's %d", b.kernel, len(got), len(k))
	}
	if fi, err := os.Stat(b.initrd); err != nil || fi.Size() < 1000 {
		t.Errorf("initrd %s: %v, %v", b.initrd, fi, err)
	}

	again, err := newGuestBoot(cache, true, log)
	if err != nil || !again.isReady() {
		t.Fatalf("a second start over the same inputs: ready %v, %v; want the cached files", again != nil && again.isReady(), err)
	}
	// Files gone from the cache are built again, whatever the stamp says.
	os.Remove(b.initrd)
	gone, err := newGuestBoot(cache, true, log)
	if err != nil || gone.isReady() {
		t.Fatalf("after the initramfs was removed: %v; want a rebuild pending", err)
	}
	if err := gone.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(b.initrd); err != nil || fi.Size() < 1000 {
		t.Errorf("initrd %s after the rebuild: %v, %v", b.initrd, fi, err)
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(modules, "modules.dep"), later, later)
	if changed, err := newGuestBoot(cache, true, log); err != nil || changed.isReady() {
		t.Fatalf("after the module tree changed: %v; want a rebuild pending", err)
	}
}

// TestGuestBootUnavailable checks the reasons given for a host without a
// usable guest kernel.
func TestGuestBootUnavailable(t *testing.T) {
	dir := t.TempDir()
	kernel := filepath.Join(dir, "bzImage")
	os.WriteFile(kernel, []byte("kernel"), 0o644)
	for _, tc := range []struct {
		name, kernel, modules, want string
	}{
		{"missing kernel", filepath.Join(dir, "nothing"), "", "guest kernel"},
		{"release unknown", kernel, "", envGuestModules},
		{"no module tree", kernel, filepath.Join(dir, "nothing"), "module tree"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envGuestKernel, tc.kernel)
			t.Setenv(envGuestModules, tc.modules)
			t.Setenv(envGuestInitrd, "")
			_, err := newGuestBoot(filepath.Join(dir, "cache"), false, slog.New(slog.DiscardHandler))
			if !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("newGuestBoot = %v, want ErrUnavailable mentioning %q", err, tc.want)
			}
		})
	}
}

// TestFirecrackerUnavailable checks that a host without KVM is told so,
// and before anything else Firecracker needs.
func TestFirecrackerUnavailable(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err == nil {
		t.Skip("this host has /dev/kvm")
	}
	_, err := firecrackerOptions(t.TempDir(), &agentDisks{}, nil, slog.New(slog.DiscardHandler))
	if !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), "no KVM") {
		t.Errorf("firecrackerOptions = %v, want ErrUnavailable saying there is no KVM", err)
	}
}

// TestWriteAgent writes an agent into an ext4 disk that has a
// /berth-agent of its own, and reads back what the disk then holds.
func TestWriteAgent(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (Debian: e2fsprogs)", tool)
		}
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(tree, 0o755)
	os.WriteFile(filepath.Join(tree, "berth-agent"), []byte("the image's own"), 0o600)
	img := filepath.Join(dir, "disk.ext4")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", tree, img, "16M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	agent := filepath.Join(dir, "agent")
	want := strings.Repeat("agent bytes\n", 10000)
	os.WriteFile(agent, []byte(want), 0o700)
	if err := writeAgent(img, agent); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command("debugfs", "-R", "cat "+guestInit, img).Output()
	if err != nil || string(got) != want {
		t.Errorf("%s in the disk: %d bytes (%v), want the agent's %d", guestInit, len(got), err, len(want))
	}
	stat, _ := exec.Command("debugfs", "-R", "stat "+guestInit, img).Output()
	if !strings.Contains(string(stat), "Mode:  0755") || !strings.Contains(string(stat), "User:     0") {
		t.Errorf("%s should be root's, mode 0755:\n%s", guestInit, stat)
	}
	// A disk too small for the agent is an error, not a truncated agent.
	small := filepath.Join(dir, "small.ext4")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", small, "1M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	big := filepath.Join(dir, "big")
	junk := make([]byte, 4<<20) // not zeros, which debugfs would leave as a hole
	for i := range junk {
		junk[i] = byte(i*7 + i>>8)
	}
	os.WriteFile(big, junk, 0o755)
	if err := writeAgent(small, big); err == nil {
		t.Error("writing a 4 MiB agent into a 1 MiB disk succeeded")
	}
}
