package firecracker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// Suspend pauses the microVM, writes a full snapshot (the VM state and all
// of its memory) into the replica's directory, and ends the VMM: a
// suspended replica holds no memory or CPU, only files. Its disk, tap and
// address are kept, so Resume brings back the same guest at the same
// address. If berth dies midway, the replica is still running (before the
// snapshot is recorded) or suspended (after).
func (d *Driver) Suspend(ctx context.Context, id string) error {
	defer d.rd.Lock(id)()
	st, err := d.rd.Load(id)
	if err != nil {
		return err
	}
	if st.Suspended || st.PID == 0 || !proc.Alive(st.PID, st.StartTicks) {
		return fmt.Errorf("firecracker: suspend %s: the replica is not running", id)
	}
	c := NewClient(d.hostPath(st, apiSock))
	if err := c.PatchVM(ctx, VMPaused); err != nil {
		return fmt.Errorf("firecracker: suspend %s: %w", id, err)
	}
	// A new generation each time: the running VMM may still map the memory
	// file it was restored from, which must not be rewritten under it.
	gen := st.SnapGen + 1
	snap, mem := snapNames(gen)
	err = c.CreateSnapshot(ctx, SnapshotCreate{
		SnapshotType: SnapshotFull,
		SnapshotPath: d.vmmPath(st, snap),
		MemFilePath:  d.vmmPath(st, mem),
	})
	if err != nil {
		os.Remove(d.hostPath(st, snap))
		os.Remove(d.hostPath(st, mem))
		if rerr := c.PatchVM(context.WithoutCancel(ctx), VMResumed); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("firecracker: suspend %s: %w", id, err)
	}
	old := st.SnapGen
	st.Suspended, st.SnapGen = true, gen
	if err := replicadir.WriteState(d.replicaDir(id), st); err != nil {
		c.PatchVM(context.WithoutCancel(ctx), VMResumed)
		return fmt.Errorf("firecracker: suspend %s: %w", id, err)
	}
	// Paused and saved: nothing is lost by killing it.
	if err := killVMM(ctx, st); err != nil {
		return fmt.Errorf("firecracker: suspend %s: %w", id, err)
	}
	st.PID, st.StartTicks = 0, 0
	if err := replicadir.WriteState(d.replicaDir(id), st); err != nil {
		return fmt.Errorf("firecracker: suspend %s: %w", id, err)
	}
	if old > 0 {
		s, m := snapNames(old)
		os.Remove(d.hostPath(st, s))
		os.Remove(d.hostPath(st, m))
	}
	return nil
}

// Resume starts a fresh VMM and loads the replica's snapshot into it with
// resume_vm, so the guest continues where it was paused: same processes,
// same memory, same address. The memory file is mapped, not read, which is
// what makes this fast (well under 300 ms on a KVM host); it stays until
// the next Suspend or Stop. A lease renewed while suspended is passed on to
// the agent.
func (d *Driver) Resume(ctx context.Context, id string) (vm.Instance, error) {
	defer d.rd.Lock(id)()
	st, err := d.rd.Load(id)
	if err != nil {
		return vm.Instance{}, err
	}
	if !st.Suspended {
		return vm.Instance{}, fmt.Errorf("firecracker: resume %s: the replica is not suspended", id)
	}
	snap, mem := snapNames(st.SnapGen)
	for _, f := range []string{snap, mem} {
		if _, err := os.Stat(d.hostPath(st, f)); err != nil {
			return vm.Instance{}, fmt.Errorf("firecracker: resume %s: snapshot: %w", id, err)
		}
	}
	// A VMM left paused by a Suspend that berth did not finish.
	if st.PID != 0 && proc.Alive(st.PID, st.StartTicks) {
		if err := killVMM(ctx, st); err != nil {
			return vm.Instance{}, fmt.Errorf("firecracker: resume %s: %w", id, err)
		}
	}
	// The restored vsock device binds its socket again.
	if err := os.Remove(d.hostPath(st, vsockSock)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return vm.Instance{}, fmt.Errorf("firecracker: resume %s: %w", id, err)
	}
	c, st, err := d.spawn(ctx, st)
	if err == nil {
		err = c.PutLogger(ctx, Logger{LogPath: d.vmmPath(st, vmmLogFile), Level: "Warning", ShowLevel: true})
	}
	if err == nil {
		err = c.LoadSnapshot(ctx, SnapshotLoad{
			SnapshotPath: d.vmmPath(st, snap),
			MemBackend:   &MemoryBackend{BackendType: BackendFile, BackendPath: d.vmmPath(st, mem)},
			ResumeVM:     true,
		})
	}
	if err != nil {
		if st.PID != 0 {
			killVMM(context.WithoutCancel(ctx), st)
		}
		st.PID, st.StartTicks = 0, 0
		replicadir.WriteState(d.replicaDir(id), st)
		return vm.Instance{}, fmt.Errorf("firecracker: resume %s: %w", id, d.withConsole(st, err))
	}
	st.Suspended = false
	if err := replicadir.WriteState(d.replicaDir(id), st); err != nil {
		return vm.Instance{}, fmt.Errorf("firecracker: resume %s: %w", id, err)
	}
	if until, ok := d.hostLease(id); ok {
		if err := d.pushLease(ctx, st, until); err != nil {
			d.log.Warn("firecracker: passing the lease on after resume", "id", id, "err", err)
		}
	}
	return d.instance(st), nil
}

// pushLease writes the lease file in the guest through the agent.
func (d *Driver) pushLease(ctx context.Context, st state, until time.Time) error {
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.dialAgent(ctx, st) })
	defer c.Close()
	_, err := c.WriteFile(ctx, guestLease, bytes.NewReader(agent.FormatLease(until)), 0o600)
	return err
}

// Renew moves a replica's lease deadline to until: it writes the lease file
// in the guest through the agent, which checks it every --lease-check. The
// deadline is also kept on the host (leaseFile), so that a replica renewed
// while suspended, when its guest cannot be reached, gets it at Resume.
func (d *Driver) Renew(ctx context.Context, id string, until time.Time) error {
	st, err := d.rd.RenewState(ctx, id, until, 0o600)
	if err != nil || st.Suspended {
		return err
	}
	if err := d.pushLease(ctx, st, until); err != nil {
		return fmt.Errorf("firecracker: renew %s: %w", id, err)
	}
	return nil
}

// hostLease reads the deadline Renew last kept for a replica.
func (d *Driver) hostLease(id string) (time.Time, bool) {
	return replicadir.ReadLease(d.replicaDir(id))
}
