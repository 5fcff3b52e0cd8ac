package process

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/berth-dev/berth/internal/vm"
)

// The driver offers every ability but vm.Mounter; this guards each at
// compile time.
var (
	_ vm.Driver      = (*Driver)(nil)
	_ vm.Abilities   = (*Driver)(nil)
	_ vm.Suspender   = (*Driver)(nil)
	_ vm.Leaser      = (*Driver)(nil)
	_ vm.LogReader   = (*Driver)(nil)
	_ vm.LogFollower = (*Driver)(nil)
	_ vm.AgentDialer = (*Driver)(nil)
	_ vm.UsageReader = (*Driver)(nil)
	_ vm.Waiter      = (*Driver)(nil)
	_ vm.Checker     = (*Driver)(nil)
)

// Abilities lists what the driver offers (all but vm.CanMount: a replica
// shares the host's file system and has no mount namespace of its own to
// attach Spec.Mounts in, so it refuses them); the conformance suite checks
// each one.
func (d *Driver) Abilities() []vm.Ability {
	return slices.DeleteFunc(slices.Clone(vm.AllAbilities), func(a vm.Ability) bool { return a == vm.CanMount })
}

// Wait returns once replica id has ended, learning it from its agent's
// exit (a pidfd) rather than by polling.
func (d *Driver) Wait(ctx context.Context, id string) (vm.Instance, error) {
	return d.rd.Wait(ctx, id, d.instance, func(st state) (int, uint64) {
		st = d.adopt(st)
		return st.PID, st.StartTicks
	})
}

// Check reports whether replicas can still start: the agent's executable
// and the state directory are still there.
func (d *Driver) Check(ctx context.Context) error {
	if _, err := os.Stat(d.agent[0]); err != nil {
		return fmt.Errorf("process: the agent executable: %v: %w", err, vm.ErrUnavailable)
	}
	if fi, err := os.Stat(d.dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("process: the state directory %s is gone: %w", d.dir, vm.ErrUnavailable)
	}
	if d.unlimited != nil {
		return fmt.Errorf("%v: %w", d.unlimited, vm.ErrUnavailable)
	}
	return nil
}
