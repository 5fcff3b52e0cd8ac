package agentbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestBundleRunsInAnEmptyRoot bundles a dynamically linked program (the
// host's echo) and runs it, through Command, in a root that holds nothing
// but it and the bundle: proof that it needs nothing of the sandbox.
func TestBundleRunsInAnEmptyRoot(t *testing.T) {
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Skip("no echo binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	root := t.TempDir()
	if err := copyFile(echo, filepath.Join(root, "echo")); err != nil {
		t.Fatal(err)
	}
	b, err := Bundle(filepath.Join(root, "echo"), filepath.Join(root, "lib"))
	if err != nil {
		t.Fatal(err)
	}
	if b.Static() {
		t.Skipf("%s is statically linked here", echo)
	}
	if _, err := os.Stat(filepath.Join(root, "lib", b.Interp)); err != nil {
		t.Fatalf("the interpreter is not in the bundle: %v", err)
	}
	argv := b.Command("/echo", "/lib", "hello", "from", "the", "bundle")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v: %s", argv, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "hello from the bundle" {
		t.Errorf("output %q", got)
	}

	// Without the bundle the same binary does not run there.
	os.RemoveAll(filepath.Join(root, "lib"))
	cmd = exec.Command("/echo", "x")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	if err := cmd.Run(); err == nil {
		t.Error("the dynamic binary ran in the empty root without its bundle; the test proves nothing")
	}
}

func TestStatic(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox (Debian package busybox-static) is missing")
	}
	dir := t.TempDir()
	b, err := Bundle(bb, filepath.Join(dir, "lib"))
	if err != nil {
		t.Fatal(err)
	}
	if !b.Static() {
		t.Skipf("%s is dynamically linked here", bb)
	}
	if got := b.Command("/bb", "/lib", "true"); strings.Join(got, " ") != "/bb true" {
		t.Errorf("Command = %q, want the binary itself", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "lib")); !os.IsNotExist(err) {
		t.Errorf("a static binary got a bundle directory (%v)", err)
	}
}

func TestNotELF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "script")
	os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
	if _, err := Bundle(p, t.TempDir()); err == nil || !strings.Contains(err.Error(), "agentbin") {
		t.Errorf("Bundle of a script: %v, want an error", err)
	}
}

// TestIsStatic checks IsStatic against Bundle's reading of the same
// binaries (a dynamic echo and a static busybox on a Debian host), and
// that a file that is no ELF executable is an error.
func TestIsStatic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "script")
	os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
	if got, err := IsStatic(p); err == nil || !strings.Contains(err.Error(), "agentbin") {
		t.Errorf("IsStatic of a script = %v, %v; want an error", got, err)
	}
	checked := 0
	for _, name := range []string{"echo", "busybox"} {
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		checked++
		b, err := Bundle(path, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		got, err := IsStatic(path)
		if err != nil || got != b.Static() {
			t.Errorf("IsStatic(%s) = %v, %v; want %v (Bundle's reading)", path, got, err, b.Static())
		}
	}
	if checked == 0 {
		t.Skip("neither echo nor busybox is installed")
	}
}
