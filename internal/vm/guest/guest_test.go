package guest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agentbin"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/kvm"
)

// TestFindAgent checks that an x86-64 executable, static or not, becomes
// the guests' agent, and that anything else is refused with a reason.
func TestFindAgent(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "script")
	os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, agent, want string
	}{
		{"not ELF", text, "set BERTH_GUEST_AGENT"},
		{"missing", filepath.Join(dir, "nothing"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FindAgent(tc.agent)
			if !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FindAgent(%q) = %v, want ErrUnavailable saying %q", tc.agent, err, tc.want)
			}
		})
	}
	// The test binary is dynamically linked when built with -race or cgo:
	// its libraries are bundled (Disks), so it will do.
	t.Run("test binary", func(t *testing.T) {
		if got, err := FindAgent(""); err != nil || got != exe {
			t.Errorf("FindAgent(\"\") = %q, %v; want the test binary %q", got, err, exe)
		}
	})
	if bb, err := exec.LookPath("busybox"); err == nil && CheckStatic(bb) == nil {
		t.Run("static", func(t *testing.T) {
			if got, err := FindAgent(bb); err != nil || got != bb {
				t.Errorf("FindAgent(%q) = %q, %v", bb, got, err)
			}
		})
	}
}

// TestGuestBoot builds the kvm driver's boot files from a made-up kernel
// and module tree, and checks that a second berth over the same directory
// finds them built, and that a changed module tree builds them again.
func TestGuestBoot(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil || CheckStatic(bb) != nil {
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
	cache := filepath.Join(dir, "cache")
	log := slog.New(slog.DiscardHandler)

	b, err := NewBoot(cache, Kernel{Path: kernel, Modules: modules}, true, log)
	if err != nil {
		t.Fatal(err)
	}
	if b.Ready() {
		t.Fatal("boot files ready before any build")
	}
	for _, p := range []string{b.kernel, b.initrd} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the driver's paths must exist before the build: %v", err)
		}
	}
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(b.kernel); string(got) != string(k) {
		t.Errorf("kernel %s: %d bytes, want the bzImage's %d", b.kernel, len(got), len(k))
	}
	if fi, err := os.Stat(b.initrd); err != nil || fi.Size() < 1000 {
		t.Errorf("initrd %s: %v, %v", b.initrd, fi, err)
	}

	// A build a Start gave up on goes on; Close waits for it.
	os.Remove(b.initrd)
	closing, err := NewBoot(cache, Kernel{Path: kernel, Modules: modules}, true, log)
	if err != nil {
		t.Fatal(err)
	}
	gaveUp, cancel := context.WithCancel(context.Background())
	cancel()
	if err := closing.Wait(gaveUp); err == nil && !closing.Ready() {
		t.Fatalf("Wait with an ended context: nil before the build")
	}
	closing.Close()
	if !closing.Ready() {
		t.Fatal("Close returned before the build under way ended")
	}

	again, err := NewBoot(cache, Kernel{Path: kernel, Modules: modules}, true, log)
	if err != nil || !again.Ready() {
		t.Fatalf("a second start over the same inputs: ready %v, %v; want the cached files", again != nil && again.Ready(), err)
	}
	// Files gone from the cache are built again, whatever the stamp says.
	os.Remove(b.initrd)
	gone, err := NewBoot(cache, Kernel{Path: kernel, Modules: modules}, true, log)
	if err != nil || gone.Ready() {
		t.Fatalf("after the initramfs was removed: %v; want a rebuild pending", err)
	}
	if err := gone.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(b.initrd); err != nil || fi.Size() < 1000 {
		t.Errorf("initrd %s after the rebuild: %v, %v", b.initrd, fi, err)
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(modules, "modules.dep"), later, later)
	if changed, err := NewBoot(cache, Kernel{Path: kernel, Modules: modules}, true, log); err != nil || changed.Ready() {
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
		{"release unknown", kernel, "", "BERTH_GUEST_MODULES"},
		{"no module tree", kernel, filepath.Join(dir, "nothing"), "module tree"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewBoot(filepath.Join(dir, "cache"), Kernel{Path: tc.kernel, Modules: tc.modules}, false, slog.New(slog.DiscardHandler))
			if !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewBoot = %v, want ErrUnavailable mentioning %q", err, tc.want)
			}
		})
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
	if err := writeAgent(img, agentbin.Bin{Path: agent}); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command("debugfs", "-R", "cat "+Init, img).Output()
	if err != nil || string(got) != want {
		t.Errorf("%s in the disk: %d bytes (%v), want the agent's %d", Init, len(got), err, len(want))
	}
	stat, _ := exec.Command("debugfs", "-R", "stat "+Init, img).Output()
	if !strings.Contains(string(stat), "Mode:  0755") || !strings.Contains(string(stat), "User:     0") {
		t.Errorf("%s should be root's, mode 0755:\n%s", Init, stat)
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
	if err := writeAgent(small, agentbin.Bin{Path: big}); err == nil {
		t.Error("writing a 4 MiB agent into a 1 MiB disk succeeded")
	}
}

// TestAgentDisks makes guest disks of an image with a dynamically linked
// agent (the race-enabled test binary) and with a static one (busybox),
// and checks what lands in them: the agent, and only with the dynamic one
// its interpreter and libraries in /berth-lib, which the kvm driver is
// told to start it through (GuestInit); and that a changed library
// makes a new disk.
func TestAgentDisks(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (Debian: e2fsprogs)", tool)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if CheckStatic(exe) == nil {
		t.Skip("the test binary is static (built without cgo and -race)")
	}
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	images, err := image.New(context.Background(), image.Options{Dir: filepath.Join(dir, "images"), Catalog: db})
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "etc"), 0o755)
	os.WriteFile(filepath.Join(tree, "etc", "motd"), []byte("hi\n"), 0o644)
	if _, err := images.Import(context.Background(), "tiny", tree); err != nil {
		t.Fatal(err)
	}
	t.Run("dynamic", func(t *testing.T) {
		a := NewDisks(images, filepath.Join(dir, "dyn"), exe)
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.bin.Static() {
			t.Fatal("the test binary's bundle says it is static")
		}
		disk, err := a.Ext4("tiny", 1)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := exec.Command("debugfs", "-R", "ls -l "+LibDir, disk).CombinedOutput()
		if err != nil {
			t.Fatalf("debugfs ls: %v: %s", err, ls)
		}
		names, err := bundleFiles(a.bin)
		if err != nil || len(names) < 2 {
			t.Fatalf("bundle %v, %v: want the interpreter and libc at least", names, err)
		}
		for _, n := range names {
			if !strings.Contains(string(ls), " "+n+"\n") && !strings.HasSuffix(strings.TrimSpace(string(ls)), " "+n) {
				t.Errorf("%s/%s is not in the disk:\n%s", LibDir, n, ls)
			}
			want, _ := os.ReadFile(filepath.Join(a.bin.LibDir, n))
			got, err := exec.Command("debugfs", "-R", "cat "+LibDir+"/"+n, disk).Output()
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s/%s in the disk: %d bytes (%v), want %d", LibDir, n, len(got), err, len(want))
			}
		}
		if !slices.Contains(names, a.bin.Interp) {
			t.Errorf("the interpreter %s is not among the bundle's files %v", a.bin.Interp, names)
		}
		// The kvm driver gets the interpreter as init.
		var o kvm.Options
		o.GuestInit, o.GuestInitArgs = a.GuestInit()
		wantInit := LibDir + "/" + a.bin.Interp
		wantArgs := []string{"--inhibit-cache", "--library-path", LibDir, Init}
		if o.GuestInit != wantInit || !slices.Equal(o.GuestInitArgs, wantArgs) {
			t.Errorf("kvm init %q %q, want %q %q", o.GuestInit, o.GuestInitArgs, wantInit, wantArgs)
		}

		// Another libc (a host upgrade) is another disk.
		lib := filepath.Join(a.bin.LibDir, a.bin.Interp)
		f, err := os.OpenFile(lib, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte{0})
		f.Close()
		b := &Disks{images: images, agent: a.agent, bin: a.bin, dir: a.dir}
		b.digest = sync.OnceValues(b.sum)
		again, err := b.Ext4("tiny", 1)
		if err != nil {
			t.Fatal(err)
		}
		if again == disk {
			t.Error("a changed library gave the same disk")
		}
	})

	bb, err := exec.LookPath("busybox")
	if err != nil || CheckStatic(bb) != nil {
		t.Skip("needs a static busybox (Debian: busybox-static) as a static agent")
	}
	t.Run("static", func(t *testing.T) {
		a := NewDisks(images, filepath.Join(dir, "static"), bb)
		if a.err != nil {
			t.Fatal(a.err)
		}
		if !a.bin.Static() {
			t.Fatal("busybox's bundle says it is dynamic")
		}
		disk, err := a.Ext4("tiny", 1)
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := exec.Command("debugfs", "-R", "stat "+LibDir, disk).CombinedOutput(); !strings.Contains(string(out), "not found") {
			t.Errorf("a static agent's disk has %s:\n%s", LibDir, out)
		}
		got, err := exec.Command("debugfs", "-R", "cat "+Init, disk).Output()
		want, _ := os.ReadFile(bb)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the disk: %d bytes (%v), want busybox's %d", Init, len(got), err, len(want))
		}
		var o kvm.Options
		if o.GuestInit, o.GuestInitArgs = a.GuestInit(); o.GuestInit != "" || o.GuestInitArgs != nil {
			t.Errorf("kvm init for a static agent %q %q, want the driver's default", o.GuestInit, o.GuestInitArgs)
		}
	})
}
