package container

import (
	"context"
	"fmt"
	"os"

	"github.com/berth-dev/berth/internal/vm"
)

// Compile-time checks of the abilities the driver declares.
var (
	_ vm.Driver      = (*Driver)(nil)
	_ vm.Abilities   = (*Driver)(nil)
	_ vm.Suspender   = (*Driver)(nil)
	_ vm.LogReader   = (*Driver)(nil)
	_ vm.LogFollower = (*Driver)(nil)
	_ vm.AgentDialer = (*Driver)(nil)
	_ vm.UsageReader = (*Driver)(nil)
	_ vm.Leaser      = (*Driver)(nil)
	_ vm.Waiter      = (*Driver)(nil)
	_ vm.Checker     = (*Driver)(nil)
)

// Abilities lists what the driver offers; the conformance suite checks
// each one.
func (d *Driver) Abilities() []vm.Ability {
	return []vm.Ability{vm.CanSuspend, vm.CanLease, vm.CanLogs, vm.CanFollowLogs, vm.CanDialAgent, vm.CanUsage, vm.CanWait, vm.CanCheck}
}

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
