package process

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
