package kvm

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// Hypervisor runs the guests' QEMU processes for a Driver. By default the
// driver runs QEMU itself (daemonized, with a QMP socket per replica);
// package libvirt plugs in one that has libvirtd run it instead, and keeps
// everything else of the driver (disks, taps, config drive, agent, logs,
// leases, re-adoption). Implementations must be safe for concurrent use.
type Hypervisor interface {
	// Launch starts the guest m describes and returns the pid of its QEMU
	// process once the machine runs (the driver watches that process to
	// know whether the guest lives, and reads its CPU and memory use).
	Launch(ctx context.Context, m Machine) (pid int, err error)
	// Shutdown asks the guest to end politely: Ctrl-Alt-Del, which the
	// agent as init receives as SIGINT.
	Shutdown(ctx context.Context, id string) error
	// Pause stops the guest's vCPUs, keeping its memory; Continue resumes
	// them.
	Pause(ctx context.Context, id string) error
	Continue(ctx context.Context, id string) error
	// Kill ends the guest at once. The driver SIGKILLs QEMU's pid after
	// it anyway, so an error here is only logged.
	Kill(ctx context.Context, id string) error
}

// Machine is one replica's guest as the driver has prepared it: what a
// Hypervisor needs to start it.
type Machine struct {
	ID       string // the replica id, the guest's name
	Accel    string // "kvm" or "tcg"
	VCPUs    int
	MemoryMB int

	Kernel  string // the guest kernel (Options.Kernel)
	Initrd  string // the initramfs, "" for none
	Cmdline string // the kernel command line (see bootArgs)

	// RootDisk is the replica's own ext4 disk, the first virtio disk
	// (/dev/vda); ConfigDisk is the agent's config drive, the second
	// (/dev/vdb), attached read-only. Both are raw files.
	RootDisk   string
	ConfigDisk string
	// Console is the file the guest's first serial port (ttyS0) is
	// appended to: kernel messages and the agent's log.
	Console string
	// AgentSocket is the unix socket the hypervisor listens on for the
	// virtio serial port named AgentPortName.
	AgentSocket string
	// Tap is the tap device on the host (it exists; the hypervisor must
	// not create or delete it) and MAC the guest's address on it.
	Tap string
	MAC string
	// Workspace is the host directory shared with the guest over virtio
	// 9p under the mount tag WorkspaceTag (the command line then has
	// berth_workspace=, and the initramfs mounts it at /workspace), with
	// the passthrough security model: QEMU, as root, gives files the
	// owners and modes the guest sets. "" means none.
	Workspace string
	// Mounts are host directories shared with the guest read-only over
	// virtio 9p, the i-th under the mount tag MountTag(i), with the
	// passthrough security model (the command line then has
	// berth_mounts=, and the initramfs mounts each read-only at its
	// Target). The hypervisor must refuse the guest's writes to them.
	Mounts []Mount
}

// machine describes a replica's guest for a Hypervisor.
func (d *Driver) machine(st state, size vm.Size) Machine {
	dir := d.replicaDir(st.ID)
	acc := d.current()
	return Machine{
		ID:          st.ID,
		Accel:       acc.accel,
		VCPUs:       size.VCPUs,
		MemoryMB:    size.MemoryMB,
		Kernel:      acc.kernel,
		Initrd:      d.initrd,
		Cmdline:     d.bootArgs(st),
		RootDisk:    filepath.Join(dir, rootfsFile),
		ConfigDisk:  filepath.Join(dir, configFile),
		Console:     filepath.Join(dir, consoleFile),
		AgentSocket: filepath.Join(dir, agentSock),
		Tap:         st.Tap,
		MAC:         st.MAC,
		Workspace:   st.Workspace,
		Mounts:      st.Mounts,
	}
}

// pause, cont and shutdown act on a guest through the Hypervisor, or
// through QEMU's QMP socket when the driver runs QEMU itself.
func (d *Driver) pause(ctx context.Context, id string) error {
	if d.hv != nil {
		return d.hv.Pause(ctx, id)
	}
	return qmpRun(ctx, d.path(id, qmpSock), "stop", nil)
}

func (d *Driver) cont(ctx context.Context, id string) error {
	if d.hv != nil {
		return d.hv.Continue(ctx, id)
	}
	return qmpRun(ctx, d.path(id, qmpSock), "cont", nil)
}

func (d *Driver) shutdown(ctx context.Context, id string) error {
	if d.hv != nil {
		return d.hv.Shutdown(ctx, id)
	}
	return qmpRun(ctx, d.path(id, qmpSock), "send-key", ctrlAltDel)
}

// launchHV starts a guest through the Hypervisor and records its QEMU's
// pid.
func (d *Driver) launchHV(ctx context.Context, st state, size vm.Size) (state, error) {
	pid, err := d.hv.Launch(ctx, d.machine(st, size))
	if err != nil {
		if tail := console.Tail(d.path(st.ID, consoleFile), replicadir.TailLines); len(tail) > 0 {
			err = fmt.Errorf("%w; console: %s", err, strings.Join(tail, " | "))
		}
		return st, err
	}
	if pid <= 0 {
		return st, fmt.Errorf("the hypervisor reported QEMU's pid as %d", pid)
	}
	return d.recordPID(st, pid)
}
