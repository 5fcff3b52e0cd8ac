package kvm

import (
	"context"
	"fmt"
	"io"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
)

// Logs returns up to n of the replica's most recent output lines (all of
// them when n <= 0), oldest first, from its serial console (package
// console).
func (d *Driver) Logs(ctx context.Context, id string, n int) ([]vm.LogLine, error) {
	if _, err := d.rd.Load(id); err != nil {
		return nil, err
	}
	lines, err := console.ReadLogs(d.path(id, consoleFile), n)
	if err != nil {
		return nil, fmt.Errorf("kvm: logs of %s: %w", id, err)
	}
	return lines, nil
}

// FollowLogs writes the replica's output lines to w as they reach the
// console, starting with the next one, in the agent's log format (see
// console.Follow). It returns nil when ctx ends or once the replica has
// ended and its output was written, and an error wrapping vm.ErrNotFound if
// the replica is stopped meanwhile.
func (d *Driver) FollowLogs(ctx context.Context, id string, w io.Writer) error {
	if _, err := d.rd.Load(id); err != nil {
		return err
	}
	err := console.Follow(ctx, d.path(id, consoleFile), w, func() (bool, error) {
		st, err := d.rd.Load(id)
		if err != nil {
			return false, err
		}
		return d.instance(st).State.Terminal(), nil
	})
	if err != nil {
		return fmt.Errorf("kvm: logs of %s: %w", id, err)
	}
	return nil
}
