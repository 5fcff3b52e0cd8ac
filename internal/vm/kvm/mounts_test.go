package kvm

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
)

// TestMounts boots a guest with two Spec.Mounts and a workspace: each
// host tree is at its target (the mount points made on the guest's own
// root disk), mounted read-only over 9p, and writes to it fail in the
// guest, as root (also after a remount rw), and leave the host tree as it was.
func TestMounts(t *testing.T) {
	e := setup(t)
	d, err := New(testOptions(t, e))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	model, data, ws := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(model, "weights.bin"), []byte("weights from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(data, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "sub", "a.txt"), []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	id := vm.Name("mnt", uint64(time.Now().UnixNano()))
	spec := vm.Spec{Name: id, Image: "conformance", Workspace: ws, Mounts: []vm.Mount{
		{Source: model, Target: "/opt/model", ReadOnly: true},
		{Source: data, Target: "/srv/data-1", ReadOnly: true},
	}}
	t0 := time.Now()
	if _, err := d.Start(t.Context(), spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), id, 0) })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) })
	defer c.Close()
	if _, err := c.Info(ctx); err != nil {
		in, _ := d.Inspect(context.Background(), id)
		t.Fatalf("the agent did not answer: %v (state %s, %s)", err, in.State, in.Reason)
	}
	t.Logf("accel %s: agent ready %v after Start", d.Accel(), time.Since(t0).Round(time.Millisecond))
	run := func(command string) (string, int) {
		t.Helper()
		r, err := c.Exec(ctx, agent.ExecRequest{Command: command})
		if err != nil {
			t.Fatalf("exec %q: %v", command, err)
		}
		return r.Output, r.ExitCode
	}
	if out, code := run("cat /opt/model/weights.bin /srv/data-1/sub/a.txt"); code != 0 || out != "weights from the host\ndata\n" {
		t.Errorf("the guest reads %q (exit %d) from the mounts", out, code)
	}
	for _, target := range []string{"/opt/model", "/srv/data-1"} {
		out, _ := run("grep ' " + target + " ' /proc/mounts")
		if f := strings.Fields(out); len(f) < 4 || f[2] != "9p" || !slices.Contains(strings.Split(f[3], ","), "ro") {
			t.Errorf("%s is mounted as %q, want 9p, ro", target, out)
		}
	}
	for _, cmd := range []string{
		"echo x > /opt/model/new", "echo x >> /opt/model/weights.bin", "rm /srv/data-1/sub/a.txt",
		"mkdir /srv/data-1/d", "touch /srv/data-1/sub", "mount -o remount,rw /opt/model && echo x > /opt/model/new",
	} {
		if out, code := run(cmd); code == 0 {
			t.Errorf("%q in the guest succeeded on a read-only mount (%q)", cmd, out)
		}
	}
	// The workspace beside the mounts stays writable.
	if out, code := run("echo w > /workspace/w.txt"); code != 0 {
		t.Errorf("writing the workspace: exit %d: %s", code, out)
	}
	c.Close()
	if err := d.Stop(t.Context(), id, time.Minute); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for dir, want := range map[string][]string{model: {"weights.bin"}, data: {"sub"}} {
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if !slices.Equal(names, want) {
			t.Errorf("after the guest, %s holds %v, want %v", dir, names, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(model, "weights.bin")); err != nil || string(b) != "weights from the host\n" {
		t.Errorf("after the guest, weights.bin holds %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "w.txt")); err != nil || string(b) != "w\n" {
		t.Errorf("the workspace's w.txt holds %q, %v", b, err)
	}
}
