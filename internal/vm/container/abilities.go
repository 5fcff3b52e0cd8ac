package container

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/berth-dev/berth/internal/vm"
)

// The driver offers every ability; this guards each at compile time.
var _ vm.Complete = (*Driver)(nil)

// Abilities lists what the driver offers (all of them); the conformance
// suite checks each one.
func (d *Driver) Abilities() []vm.Ability { return slices.Clone(vm.AllAbilities) }

// WritableMounts is true: a writable mount is a read-write bind mount of
// the host tree, so a writer changes it for every replica sharing it.
func (d *Driver) WritableMounts() bool { return true }

// Wait returns once replica id has ended, learning it from its
// container's init (a pidfd) rather than by polling.
func (d *Driver) Wait(ctx context.Context, id string) (vm.Instance, error) {
	return d.rd.Wait(ctx, id, d.instance, func(st state) (int, uint64) { return st.PID, st.StartTicks })
}

// Check reports whether replicas can still start: the OCI runtime and the
// state directory are still there.
func (d *Driver) Check(ctx context.Context) error {
	if _, err := os.Stat(d.rt.path); err != nil {
		return fmt.Errorf("container: the OCI runtime: %v: %w", err, vm.ErrUnavailable)
	}
	if fi, err := os.Stat(d.dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("container: the state directory %s is gone: %w", d.dir, vm.ErrUnavailable)
	}
	return nil
}
