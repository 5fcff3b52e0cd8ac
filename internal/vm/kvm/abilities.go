package kvm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// The driver offers every ability; this guards each at compile time.
var _ vm.Complete = (*Driver)(nil)

// Abilities lists what the driver offers (all of them); the conformance
// suite checks each one.
func (d *Driver) Abilities() []vm.Ability { return slices.Clone(vm.AllAbilities) }

// WritableMounts is false: the driver shares mounts over 9p read-only
// (QEMU's readonly=on, and the guest mounts them ro), since a writable
// share would write a guest's changes into the host tree every replica
// shares; it refuses a writable mount.
func (d *Driver) WritableMounts() bool { return false }

// Wait returns once replica id has ended, learning it from its QEMU's exit
// (a pidfd) rather than by polling: a guest whose app ended reboots, and
// QEMU exits then.
func (d *Driver) Wait(ctx context.Context, id string) (vm.Instance, error) {
	return d.rd.Wait(ctx, id, d.instance, func(st state) (int, uint64) { return st.PID, st.StartTicks })
}

// Check reports whether guests can still start: QEMU (when the driver runs
// it), the guest kernel and the state directory are still there, and so
// is /dev/kvm when guests run on it.
func (d *Driver) Check(ctx context.Context) error {
	if d.qemu != "" {
		if _, err := os.Stat(d.qemu); err != nil {
			return fmt.Errorf("kvm: QEMU: %v: %w", err, vm.ErrUnavailable)
		}
	}
	if _, err := os.Stat(d.kernel); err != nil {
		return fmt.Errorf("kvm: the guest kernel: %v: %w", err, vm.ErrUnavailable)
	}
	if fi, err := os.Stat(d.dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("kvm: the state directory %s is gone: %w", d.dir, vm.ErrUnavailable)
	}
	d.accelMu.Lock()
	acc := d.acc
	d.accelMu.Unlock()
	if acc != nil && acc.accel == "kvm" {
		if err := kvmUsable(); err != nil {
			return fmt.Errorf("kvm: %v: %w", err, vm.ErrUnavailable)
		}
	}
	return nil
}

// Usage reports the QEMU process's resident memory (guest memory the guest has touched,
// plus QEMU's own) and its CPU use since the previous call (since its
// start on the first). A suspended replica uses nothing.
func (d *Driver) Usage(ctx context.Context, id string) (vm.Usage, error) {
	return d.rd.ProcessUsage(id, &d.cpu, func(st state) (int, uint64, time.Time) {
		if st.Suspended {
			return 0, 0, st.StartedAt
		}
		return st.PID, st.StartTicks, st.StartedAt
	})
}
