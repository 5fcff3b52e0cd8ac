package vmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/agentbin"
)

// TestBusyboxRoot checks the tree: busybox itself, relative applet links
// (sh runs a command chrooted nowhere: through the link in the tree), the
// sticky /tmp and root in /etc/passwd.
func TestBusyboxRoot(t *testing.T) {
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Skip("busybox is missing (Debian: busybox-static)")
	}
	dir := filepath.Join(t.TempDir(), "root")
	if err := BusyboxRoot(dir); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "bin", "sh")); err != nil || l != "busybox" {
		t.Errorf("bin/sh links to %q (%v), want busybox", l, err)
	}
	out, err := exec.Command(filepath.Join(dir, "bin", "sh"), "-c", "echo hello").Output()
	if err != nil || string(out) != "hello\n" {
		t.Errorf("bin/sh -c 'echo hello': %q, %v", out, err)
	}
	for _, d := range []string{"proc", "sys", "dev", "run", "root"} {
		if st, err := os.Stat(filepath.Join(dir, d)); err != nil || !st.IsDir() {
			t.Errorf("/%s: %v, want a directory", d, err)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "tmp")); err != nil || st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Errorf("/tmp: %v (%v), want a sticky world-writable directory", st.Mode(), err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "etc", "passwd")); err != nil || !strings.HasPrefix(string(b), "root:x:0:0:") {
		t.Errorf("/etc/passwd: %q, %v; want root", b, err)
	}
}

// TestBuildAgent builds the agent both ways: without cgo it must be
// static, with cgo (where there is a C compiler) dynamic; and it is the
// agent, which refuses to run without the agent argument.
func TestBuildAgent(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	for _, cgo := range []bool{false, true} {
		if cgo && !HaveCC() {
			t.Log("no C compiler: the cgo build is not checked")
			continue
		}
		path := filepath.Join(t.TempDir(), "agent")
		if err := BuildAgent(path, cgo); err != nil {
			t.Fatal(err)
		}
		if static, err := agentbin.IsStatic(path); err != nil || static == cgo {
			t.Errorf("the agent built with cgo %v: static %v (%v)", cgo, static, err)
		}
		out, err := exec.Command(path).CombinedOutput()
		if code := exitCode(err); code != 2 || !strings.Contains(string(out), "usage: testagent agent") {
			t.Errorf("the agent without arguments: exit %d, %q; want its usage and 2", code, out)
		}
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
