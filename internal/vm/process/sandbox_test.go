package process

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// sandboxExec runs command in replica id through its agent and returns
// its output; a non-zero exit fails t unless allowFail.
func sandboxExec(t *testing.T, d *Driver, id, command string) (string, int) {
	t.Helper()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) })
	defer c.Close()
	res, err := c.Exec(t.Context(), agent.ExecRequest{Command: command})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return res.Stdout + res.Stderr, res.ExitCode
}

// TestSandbox is the attack of issue 9 through the real driver: a replica
// (and anything exec'd in it) must not run as root on the host, see other
// processes or their environment, read berth's data directory, inherit
// berth's environment, fork without bound, or regain privileges.
func TestSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandboxes need root")
	}
	t.Setenv("BERTH_ADMIN_PASSWORD", "hunter2")
	// berth started with the password in its environment: what
	// /proc/<pid>/environ shows, even after berth unset it.
	berth := exec.Command("sleep", "600")
	berth.Env = []string{"BERTH_ADMIN_PASSWORD=hunter2"}
	if err := berth.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { berth.Process.Kill(); berth.Wait() })
	// berth's data directory: the driver's Dir is inside it, as
	// <data-dir>/replicas is.
	dataDir, err := os.MkdirTemp("/var/tmp", "bs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dataDir) })
	secret := filepath.Join(dataDir, "secret.key")
	if err := os.WriteFile(secret, []byte("the-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := options(t, filepath.Join(dataDir, "r"), true)
	o.PidsMax = 100
	o.HideDirs = []string{dataDir}
	// Searchable and readable by all: hidden all the same.
	if err := os.Chmod(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	o.CgroupParent = ""
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	id := vm.Name("sbx", 1)
	if _, err := d.Start(t.Context(), vm.Spec{Name: id, Command: appCommand(t, "app")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), id, time.Second) })
	inst := waitServing(t, d, id)

	// The host-side uid of a process exec'd in the sandbox.
	out, _ := sandboxExec(t, d, id, "echo $$; id -u; sleep 30 >/dev/null 2>&1 & echo $!")
	f := strings.Fields(out)
	if len(f) < 3 {
		t.Fatalf("exec said %q", out)
	}
	if f[1] == "0" {
		t.Errorf("an exec runs as uid 0 in the sandbox")
	}
	hostPID := hostPIDOf(t, inst.PID, f[2])
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", hostPID))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if fs := strings.Fields(line); len(fs) > 1 && (fs[0] == "Uid:" || fs[0] == "Gid:") {
			for _, v := range fs[1:] {
				if v == "0" {
					t.Errorf("the sandbox's process is root on the host: %s", strings.TrimSpace(line))
				}
			}
		}
		if strings.HasPrefix(line, "NoNewPrivs:") && strings.TrimSpace(strings.TrimPrefix(line, "NoNewPrivs:")) != "1" {
			t.Errorf("the sandbox's process can gain privileges: %s", strings.TrimSpace(line))
		}
	}

	// Only the sandbox's own processes, and no berth environment.
	out, _ = sandboxExec(t, d, id, "ls /proc | grep -c '^[0-9]'; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c hunter2; env | grep -c hunter2; grep NoNewPrivs /proc/self/status")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 {
		t.Fatalf("exec said %q", out)
	}
	if n, _ := strconv.Atoi(lines[0]); n > 10 || n == 0 {
		t.Errorf("the sandbox sees %s processes in /proc, not just its own", lines[0])
	}
	if lines[1] != "0" || lines[2] != "0" {
		t.Errorf("berth's BERTH_ADMIN_PASSWORD is visible in the sandbox: %q", out)
	}
	if strings.Fields(lines[3])[1] != "1" {
		t.Errorf("no_new_privs is not set in the sandbox: %q", lines[3])
	}

	// berth's data directory.
	if out, code := sandboxExec(t, d, id, "cat "+quote(secret)); code == 0 || strings.Contains(out, "the-secret") {
		t.Errorf("the sandbox reads berth's secret key (exit %d): %q", code, out)
	}
	if out, _ := sandboxExec(t, d, id, "ls -a "+quote(dataDir)+" "+quote(d.dir)); strings.Contains(out, "secret.key") || strings.Contains(out, uidsFile) {
		t.Errorf("the sandbox lists berth's data directory: %q", out)
	}
	// Its own data directory is its own.
	if out, code := sandboxExec(t, d, id, "cd && echo hi > mine.txt && cat mine.txt && pwd"); code != 0 || !strings.Contains(out, "hi") {
		t.Errorf("the sandbox cannot write its data directory (exit %d): %q", code, out)
	}

	// A terminal session works as the sandbox's user too.
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) })
	defer c.Close()
	sess, err := c.PTY(t.Context(), agent.PTYRequest{Command: "echo uid=$(id -u); test -t 0 && echo tty"})
	if err != nil {
		t.Fatal(err)
	}
	pty, _ := io.ReadAll(sess)
	if code, err := sess.Wait(); err != nil || code != 0 || !strings.Contains(string(pty), "tty") || strings.Contains(string(pty), "uid=0") {
		t.Errorf("pty session: exit %d, %v: %q", code, err, pty)
	}
	sess.Close()

	// A fork bomb stops at pids.max (threads count too: the agent's and
	// the app's take some).
	st, err := d.rd.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	cg := st.Cgroup
	if cg == "" && len(st.CgroupsV1) > 0 {
		cg = st.CgroupsV1[0]
	}
	if cg == "" {
		t.Fatal("the replica has no cgroup for its pids limit")
	}
	out, code := sandboxExec(t, d, id, "(for i in $(seq 200); do sleep 30 >/dev/null 2>&1 & done) 2>/dev/null; echo forked")
	if !strings.Contains(out, "forked") {
		t.Errorf("the fork loop said %q (exit %d)", out, code)
	}
	cur, _ := os.ReadFile(filepath.Join(cg, "pids.current"))
	if n, err := strconv.Atoi(strings.TrimSpace(string(cur))); err != nil || n > o.PidsMax {
		t.Errorf("the replica has %q pids, above pids.max %d", cur, o.PidsMax)
	}
	events, _ := os.ReadFile(filepath.Join(cg, "pids.events"))
	if strings.TrimSpace(string(events)) == "max 0" {
		t.Errorf("the fork loop never hit pids.max: %q", events)
	}
}

// TestSandboxFromSpare: a replica that a spare agent takes is sandboxed
// and limited like one started cold (on cgroup v1 the spare's cgroups
// become the replica's).
func TestSandboxFromSpare(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandboxes need root")
	}
	o := options(t, shortTempDir(t), true)
	o.CgroupParent = ""
	o.PidsMax = 99
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	var ids []string
	var sparePID int
	for i := range 2 {
		id := vm.Name(fmt.Sprintf("spr%d", i), uint64(i))
		if i == 1 {
			vmtest.WaitProcessSpares(t, o.Dir, DefaultSpares)
			// A spare's agent answers a moment before the pool lists it.
			for deadline := time.Now().Add(10 * time.Second); sparePID == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if ready := d.pool.Ready(struct{}{}); len(ready) > 0 {
					sparePID = ready[0].pid
				}
			}
		}
		if _, err := d.Start(t.Context(), vm.Spec{Name: id, Command: appCommand(t, "app")}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Stop(context.Background(), id, time.Second) })
		ids = append(ids, id)
	}
	id := ids[1]
	inst := waitServing(t, d, id)
	if inst.PID != sparePID {
		t.Fatalf("the second replica's agent %d is not the spare %d", inst.PID, sparePID)
	}
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", inst.PID)); !strings.Contains(string(b), "--sandbox") {
		t.Fatalf("the second replica's agent is not a sandbox's: %q", b)
	}
	if out, _ := sandboxExec(t, d, id, "id -u; ls /proc | grep -c '^[0-9]'"); strings.HasPrefix(out, "0\n") {
		t.Errorf("an exec in the spare's replica runs as root: %q", out)
	}
	st, err := d.rd.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	cg := st.Cgroup
	if cg == "" && len(st.CgroupsV1) > 0 {
		cg = st.CgroupsV1[0]
	}
	if cg == "" {
		t.Fatal("the replica has no cgroup")
	}
	if b, _ := os.ReadFile(filepath.Join(cg, "pids.max")); strings.TrimSpace(string(b)) != "99" {
		t.Errorf("pids.max of the replica = %q, want 99", b)
	}
	if b, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs")); !slices.Contains(strings.Fields(string(b)), strconv.Itoa(inst.PID)) {
		t.Errorf("the agent %d is not in its replica's cgroup %s: %q", inst.PID, cg, b)
	}
}

// hostPIDOf maps a pid in the PID namespace of agent (a host pid) to the
// host's.
func hostPIDOf(t *testing.T, agentPID int, nsPID string) int {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", agentPID))
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range proc.Pids() {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || l != ns {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] == nsPID {
				return pid
			}
		}
	}
	t.Fatalf("no process %s in the sandbox", nsPID)
	return 0
}

// TestStartRefusedWithoutLimits: as root, where no cgroup can limit a
// replica's pids, Start refuses rather than run it unlimited, unless the
// operator allows it.
func TestStartRefusedWithoutLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("without root replicas run unlimited, as before")
	}
	o := options(t, shortTempDir(t), true)
	o.CgroupParent = t.TempDir() // not a cgroup v2 directory
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	_, err = d.Start(t.Context(), vm.Spec{Name: vm.Name("nolimit", 1), Command: "true"})
	if err == nil || !strings.Contains(err.Error(), "refusing to start replicas without pids, memory and CPU limits") {
		t.Errorf("Start without a usable cgroup: %v, want a refusal", err)
	}
	o.AllowUnlimited = true
	if d, err := New(o); err != nil || d.unlimited != nil {
		t.Errorf("New with AllowUnlimited: %v, %v", err, d.unlimited)
	} else {
		d.Close()
	}
}

// TestSandboxUIDs: each deployment gets a uid of its own, kept across
// replicas and drivers.
func TestSandboxUIDs(t *testing.T) {
	dir := t.TempDir()
	d := &Driver{dir: dir, uidBase: DefaultUIDBase, uidN: 2}
	a, err1 := d.sandboxUID("a")
	b, err2 := d.sandboxUID("b")
	a2, err3 := (&Driver{dir: dir, uidBase: DefaultUIDBase, uidN: 2}).sandboxUID("a")
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatal(err1, err2, err3)
	}
	if a == b || a != a2 || a < DefaultUIDBase || b < DefaultUIDBase {
		t.Errorf("uids a=%d b=%d a again=%d", a, b, a2)
	}
	if _, err := d.sandboxUID("c"); err == nil {
		t.Error("a third deployment got one of two uids")
	}
}
