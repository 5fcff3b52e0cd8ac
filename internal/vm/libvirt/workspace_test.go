package libvirt

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
)

// TestWorkspace boots a domain with a Spec.Workspace: libvirt's QEMU
// shares the host directory (the domain's <filesystem>, virtio-9p-pci on
// the pc machine), the kvm initramfs mounts it at /workspace, and what the
// guest writes there is the host's, also after Stop.
func TestWorkspace(t *testing.T) {
	e := setup(t)
	d, err := New(options(t, e, nil))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer d.Close()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := vm.Name("ws", uint64(time.Now().UnixNano()))
	if _, err := d.Start(t.Context(), vm.Spec{Name: id, Image: "conformance", Workspace: ws}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer d.Stop(context.Background(), id, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) })
	defer c.Close()
	if _, err := c.Info(ctx); err != nil {
		in, _ := d.Inspect(context.Background(), id)
		t.Fatalf("the agent did not answer: %v (state %s, %s)", err, in.State, in.Reason)
	}
	r, err := c.Exec(ctx, agent.ExecRequest{Command: "cat hello.txt && echo from the guest > made.txt"})
	if err != nil || r.ExitCode != 0 || r.Stdout != "hello from the host\n" {
		t.Fatalf("exec in the workspace: %q (exit %d, %v), want the host's file", r.Output, r.ExitCode, err)
	}
	// The guest's root makes no device node in the host directory: what
	// libvirt's QEMU may do is qemu.conf's, and with its default
	// clear_emulator_capabilities (the tests' qemu.conf leaves it so)
	// QEMU has no CAP_MKNOD.
	if r, err := c.Exec(ctx, agent.ExecRequest{Command: "mknod /workspace/null c 1 3"}); err != nil || r.ExitCode == 0 {
		t.Errorf("mknod in /workspace: exit %d, %q, %v; want it refused", r.ExitCode, r.Output, err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "null")); err == nil {
		t.Errorf("the guest made %s on the host (mode %v)", filepath.Join(ws, "null"), fi.Mode())
	}
	if err := d.Stop(t.Context(), id, time.Minute); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "made.txt")); err != nil || string(b) != "from the guest\n" {
		t.Errorf("after Stop the host reads %q, %v from the file the guest wrote", b, err)
	}
}
