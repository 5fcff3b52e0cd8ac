package firecracker

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// Compile-time checks of the abilities the driver declares. It is no
// vm.Waiter: a suspended replica has no VMM to wait on.
var (
	_ vm.Driver      = (*Driver)(nil)
	_ vm.Abilities   = (*Driver)(nil)
	_ vm.Suspender   = (*Driver)(nil)
	_ vm.LogReader   = (*Driver)(nil)
	_ vm.LogFollower = (*Driver)(nil)
	_ vm.AgentDialer = (*Driver)(nil)
	_ vm.UsageReader = (*Driver)(nil)
	_ vm.Leaser      = (*Driver)(nil)
	_ vm.Checker     = (*Driver)(nil)
)

// Abilities lists what the driver offers; the conformance suite checks
// each one.
func (d *Driver) Abilities() []vm.Ability {
	return []vm.Ability{vm.CanSuspend, vm.CanLease, vm.CanLogs, vm.CanFollowLogs, vm.CanDialAgent, vm.CanUsage, vm.CanCheck}
}

// Check reports whether microVMs can still start: Firecracker (and the
// jailer), the guest kernel, /dev/kvm and the state directory are still
// there.
func (d *Driver) Check(ctx context.Context) error {
	for _, f := range []string{d.fcBin, d.jailer, d.kernel, "/dev/kvm"} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("firecracker: %v: %w", err, vm.ErrUnavailable)
		}
	}
	if fi, err := os.Stat(d.dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("firecracker: the state directory %s is gone: %w", d.dir, vm.ErrUnavailable)
	}
	return nil
}

// Usage reports the VMM's resident memory (guest memory the guest has touched, plus
// the VMM's own) and its CPU use since the previous call (since its
// start on the first). A suspended replica uses nothing.
func (d *Driver) Usage(ctx context.Context, id string) (vm.Usage, error) {
	return d.rd.ProcessUsage(id, &d.cpu, func(st state) (int, uint64, time.Time) {
		if st.Suspended {
			return 0, 0, st.StartedAt
		}
		return st.PID, st.StartTicks, st.StartedAt
	})
}
