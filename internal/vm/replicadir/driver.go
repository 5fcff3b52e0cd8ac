package replicadir

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
)

// Reports gives a driver that embeds it its vm.Driver Inspect and List:
// the replicas under Dir, each described by Instance.
type Reports[S any] struct {
	Dir      *Dir[S]
	Instance func(S) vm.Instance
}

// Inspect reports one replica.
func (r Reports[S]) Inspect(ctx context.Context, id string) (vm.Instance, error) {
	return r.Dir.Inspect(id, r.Instance)
}

// List reports every replica under Dir, including those a previous berth
// started.
func (r Reports[S]) List(ctx context.Context) ([]vm.Instance, error) {
	return r.Dir.List(r.Instance)
}

// Start is the start sequence of a driver that launches every replica the
// same way: check spec (its error is prefixed "<driver>: start <name>:"),
// claim the id, launch, and on failure clean up what the launch left
// (under ctx without its cancellation: a cancelled start still cleans up)
// and return the launch's error. The state launch returns is what exists
// so far, for cleanup.
func (d *Dir[S]) Start(ctx context.Context, spec vm.Spec,
	check func(vm.Spec) (S, vm.Size, error),
	launch func(context.Context, vm.Spec, S, vm.Size) (S, error),
	cleanup func(context.Context, S) error,
	instance func(S) vm.Instance,
) (vm.Instance, error) {
	if err := ctx.Err(); err != nil {
		return vm.Instance{}, err
	}
	st, size, err := check(spec)
	if err != nil {
		return vm.Instance{}, fmt.Errorf("%s: start %q: %w", d.Driver, spec.Name, err)
	}
	release, err := d.Claim(spec.Name)
	if err != nil {
		return vm.Instance{}, err
	}
	defer release()
	st, err = launch(ctx, spec, st, size)
	if err != nil {
		if cerr := cleanup(context.WithoutCancel(ctx), st); cerr != nil && d.Log != nil {
			d.Log.Warn(d.Driver+": cleaning up a failed start", "id", spec.Name, "err", cerr)
		}
		return vm.Instance{}, fmt.Errorf("%s: start %s: %w", d.Driver, spec.Name, err)
	}
	return instance(st), nil
}

// RenewState is Renew for a driver that passes the lease on to its
// replica: it loads replica id's state first and returns it, for the
// driver to tell the replica.
func (d *Dir[S]) RenewState(ctx context.Context, id string, until time.Time, perm fs.FileMode, sub ...string) (S, error) {
	if err := ctx.Err(); err != nil {
		var zero S
		return zero, err
	}
	st, err := d.Load(id)
	if err != nil {
		return st, err
	}
	return st, d.Renew(ctx, id, until, perm, sub...)
}

// Stop is vm.Driver's Stop for a driver whose Suspend and Resume hold
// Lock: under replica id's lock it loads the replica, ends and removes it
// with destroy, and forgets it here and in cpu.
func (d *Dir[S]) Stop(ctx context.Context, id string, cpu *proc.CPUMeter, destroy func(context.Context, S) error) error {
	unlock := d.Lock(id)
	defer unlock()
	st, err := d.Load(id)
	if err != nil {
		return err
	}
	if err := destroy(ctx, st); err != nil {
		return fmt.Errorf("%s: stop %s: %w", d.Driver, id, err)
	}
	cpu.Forget(id)
	d.Forget(id)
	return nil
}
