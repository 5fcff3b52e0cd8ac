package vmtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The helpers below make what the tests of the drivers, the server and
// Computers run sandboxes with on a real host: a busybox root file system
// as an image, and the agent as the sandboxes' init. They live here, one
// copy for all those tests, since this package is imported by tests only.

// BusyboxRoot makes a small root file system in dir (created if missing):
// the host's busybox in /bin with a relative symlink per applet (/bin/sh
// for the agent, the shell tools and httpd for the apps; relative, since
// `busybox --install -s` would point them at the host's path), the
// directories a container or a guest needs, a sticky world-writable /tmp
// (os.ModeSticky: a 0o1777 FileMode is not sticky) and an
// /etc/passwd with root. It has no /berth-agent: the drivers put their
// agent into the sandbox, or the caller writes one. The busybox should be
// static (Debian: busybox-static); callers that need it so check with
// agentbin.IsStatic.
func BusyboxRoot(dir string) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox is missing (Debian: busybox-static): %w", err)
	}
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "run", "tmp", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o777|os.ModeSticky); err != nil {
		return err
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), b, 0o755); err != nil {
		return err
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
}

// testAgent is the package BuildAgent builds.
const testAgent = "github.com/berth-dev/berth/internal/vm/vmtest/testagent"

// BuildAgent builds berth's agent mode alone (package testagent) to path.
// Without cgo it is statically linked, the zero-cost way into any image;
// with cgo (see HaveCC) it is dynamically linked, as `go build` builds
// berth on a host with a C compiler, and a sandbox runs it through the
// interpreter and libraries bundled from the host (package agentbin).
func BuildAgent(path string, cgo bool) error {
	env := "CGO_ENABLED=0"
	if cgo {
		env = "CGO_ENABLED=1"
	}
	build := exec.Command("go", "build", "-o", path, testAgent)
	build.Env = append(os.Environ(), env)
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the agent (%s): %v: %s", env, err, out)
	}
	return nil
}

// HaveCC reports whether cgo can build here: go env CC names a compiler
// that is installed.
func HaveCC() bool {
	out, err := exec.Command("go", "env", "CC").Output()
	if err != nil {
		return false
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return false
	}
	_, err = exec.LookPath(f[0])
	return err == nil
}

// WaitProcessSpares waits (at most 10 s) until n spare agents of the
// process driver whose Dir is dir answer on their sockets
// (<dir>/.spare-*/agent.sock, see package process), so that a benchmark
// measures the steady state of a host whose sandboxes are not all started
// in one burst. The driver tops its spares up only once the replica just
// started listens on its port, or after a second. When they are not all
// ready in time it logs so and returns: the benchmark measures anyway.
func WaitProcessSpares(tb testing.TB, dir string, n int) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ready := AnsweringSockets(filepath.Join(dir, ".spare-*", "agent.sock"))
		if ready >= n {
			return
		}
		if time.Now().After(deadline) {
			tb.Logf("only %d of %d spare agents ready after 10s; measuring anyway", ready, n)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// AnsweringSockets counts the unix sockets matching glob that accept a
// connection: the spares of a driver that are ready.
func AnsweringSockets(glob string) int {
	ready := 0
	socks, _ := filepath.Glob(glob)
	for _, s := range socks {
		if c, err := net.Dial("unix", s); err == nil {
			c.Close()
			ready++
		}
	}
	return ready
}

// ReportP50P90 adds the p50 and p90 of ds, in milliseconds, to b's metrics
// as <name>-p50-ms and <name>-p90-ms. It sorts ds.
func ReportP50P90(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), name+"-p50-ms")
	b.ReportMetric(q(0.9), name+"-p90-ms")
}
