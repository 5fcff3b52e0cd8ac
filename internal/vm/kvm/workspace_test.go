package kvm

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
)

// TestWorkspace boots a guest with a Spec.Workspace (a Computer's files):
// the host directory is the guest's /workspace, read and written both
// through a shell in the guest and through the agent's file API (rooted
// there), and what the guest wrote is the host's after Stop and the next
// guest's after a new Start.
func TestWorkspace(t *testing.T) {
	e := setup(t)
	o := testOptions(t, e)
	d, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	id := vm.Name("ws", uint64(time.Now().UnixNano()))
	c := startWorkspace(t, d, id, ws)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	run := func(command string) string {
		t.Helper()
		r, err := c.Exec(ctx, agent.ExecRequest{Command: command})
		if err != nil {
			t.Fatalf("exec %q: %v", command, err)
		}
		if r.ExitCode != 0 {
			t.Fatalf("exec %q: exit %d: %s", command, r.ExitCode, r.Output)
		}
		return r.Stdout
	}
	if got := run("cat /workspace/hello.txt"); got != "hello from the host\n" {
		t.Errorf("the guest reads %q from the host's file", got)
	}
	// The workspace is the default working directory and HOME.
	if got := run(`pwd; echo "$HOME"`); got != "/workspace\n/workspace\n" {
		t.Errorf("pwd and HOME in the guest: %q, want /workspace twice", got)
	}
	if got := run("grep ' /workspace ' /proc/mounts"); !strings.Contains(got, "9p") || !strings.Contains(got, "msize=262144") {
		t.Errorf("/workspace is mounted as %q, want 9p with msize=262144", got)
	}
	run("mkdir -p /workspace/made && echo from the guest > /workspace/made/guest.txt")
	if b, err := os.ReadFile(filepath.Join(ws, "made", "guest.txt")); err != nil || string(b) != "from the guest\n" {
		t.Errorf("the host reads %q, %v from the file the guest wrote", b, err)
	}
	// passthrough: the guest's root owns its files on the host too.
	if fi, err := os.Stat(filepath.Join(ws, "made", "guest.txt")); err == nil {
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() || fi.Mode().Perm() != 0o644 {
			t.Errorf("the guest's file is uid %d, mode %v on the host; want uid %d, 0644", st.Uid, fi.Mode().Perm(), os.Geteuid())
		}
	}
	// The guest's root cannot make a device node in the host directory
	// (QEMU runs without CAP_MKNOD).
	if r, err := c.Exec(ctx, agent.ExecRequest{Command: "mknod /workspace/null c 1 3"}); err != nil || r.ExitCode == 0 || !strings.Contains(r.Output, "not permitted") {
		t.Errorf("mknod in /workspace: exit %d, %q, %v; want it refused", r.ExitCode, r.Output, err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "null")); err == nil {
		t.Errorf("the guest made %s on the host (mode %v)", filepath.Join(ws, "null"), fi.Mode())
	}
	// The agent's file API is rooted in the workspace.
	if _, err := c.WriteFile(ctx, "/made/api.txt", strings.NewReader("through the agent\n"), 0o600); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "made", "api.txt")); err != nil || string(b) != "through the agent\n" {
		t.Errorf("the host reads %q, %v from the file written through the agent", b, err)
	}
	if b, err := c.ReadFile(ctx, "/hello.txt"); err != nil || string(b) != "hello from the host\n" {
		t.Errorf("ReadFile(/hello.txt) = %q, %v", b, err)
	}

	// A renewed lease reaches the agent's lease file (/v1/lease), not the
	// workspace its file endpoints are rooted in. Renew leaves the push
	// to afterBoot while that has yet to reach the agent.
	for d.bootPending(id) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	if err := d.Renew(ctx, id, until); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if got := run("cat /run/berth/lease"); got != strconv.FormatInt(until.Unix(), 10)+"\n" {
		t.Errorf("the guest's lease file holds %q after Renew to %d", got, until.Unix())
	}
	if _, err := os.Lstat(filepath.Join(ws, "run")); err == nil {
		t.Errorf("the lease went into the workspace (%s)", filepath.Join(ws, "run"))
	}

	// What 9p costs, against the root disk (virtio-blk), for the log:
	// 32 MiB written (fsynced) and read back with cold caches, timed from
	// here (one exec each: the agent's round trip is in it).
	const mib = 32
	for _, dir := range []string{"/workspace", "/root"} {
		f := dir + "/big"
		t0 := time.Now()
		run("dd if=/dev/zero of=" + f + " bs=1M count=" + strconv.Itoa(mib) + " conv=fsync 2>/dev/null")
		w := time.Since(t0)
		run("echo 3 > /proc/sys/vm/drop_caches")
		t0 = time.Now()
		run("dd if=" + f + " of=/dev/null bs=1M 2>/dev/null")
		r := time.Since(t0)
		run("rm " + f)
		// Small files: 9p's cost is a round trip through QEMU per call.
		t0 = time.Now()
		run("mkdir " + dir + "/many && cd " + dir + "/many && for i in $(seq 200); do echo $i > f$i; done && cat * > /dev/null && cd .. && rm -r many")
		n := time.Since(t0)
		t.Logf("accel %s, %s: write %.0f MiB/s, read %.0f MiB/s; 200 small files created, read and removed in %v",
			d.Accel(), dir, mib/w.Seconds(), mib/r.Seconds(), n.Round(time.Millisecond))
	}

	c.Close()
	if err := d.Stop(t.Context(), id, time.Minute); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(d.replicaDir(id)); !os.IsNotExist(err) {
		t.Errorf("Stop left the replica directory: %v", err)
	}
	for name, want := range map[string]string{"hello.txt": "hello from the host\n", "made/guest.txt": "from the guest\n", "made/api.txt": "through the agent\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(b) != want {
			t.Errorf("after Stop, %s holds %q, %v; want %q", name, b, err, want)
		}
	}

	// A new guest over the same workspace finds the last one's files.
	id2 := vm.Name("ws", uint64(time.Now().UnixNano()))
	c2 := startWorkspace(t, d, id2, ws)
	defer c2.Close()
	r, err := c2.Exec(ctx, agent.ExecRequest{Argv: []string{"cat", "made/guest.txt", "made/api.txt"}})
	if err != nil || r.ExitCode != 0 || r.Stdout != "from the guest\nthrough the agent\n" {
		t.Errorf("the next guest reads %q (exit %d, %v)", r.Output, r.ExitCode, err)
	}
}

// startWorkspace starts a guest with workspace ws and waits for its agent.
func startWorkspace(t *testing.T, d *Driver, id, ws string) *agent.Client {
	t.Helper()
	t0 := time.Now()
	if _, err := d.Start(t.Context(), vm.Spec{Name: id, Image: "conformance", Workspace: ws}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), id, 0) })
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) })
	if _, err := c.Info(ctx); err != nil {
		in, _ := d.Inspect(context.Background(), id)
		c.Close()
		t.Fatalf("the agent did not answer: %v (state %s, %s)", err, in.State, in.Reason)
	}
	t.Logf("accel %s: agent ready %v after Start", d.Accel(), time.Since(t0).Round(time.Millisecond))
	return c
}
