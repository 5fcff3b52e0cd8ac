package kvm

import (
	"context"
	"io"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
)

// Logs returns up to n of the replica's most recent output lines (all of
// them when n <= 0), oldest first, from its serial console (package
// console).
func (d *Driver) Logs(ctx context.Context, id string, n int) ([]vm.LogLine, error) {
	return d.rd.Logs(id, n, console.ReadLogs, consoleFile)
}

// FollowLogs writes the replica's output lines to w as they reach the
// console, starting with the next one, in the agent's log format (see
// console.Follow). It returns nil when ctx ends or once the replica has
// ended and its output was written, and an error wrapping vm.ErrNotFound if
// the replica is stopped meanwhile.
func (d *Driver) FollowLogs(ctx context.Context, id string, w io.Writer) error {
	return d.rd.FollowLogs(ctx, id, w, d.instance, console.Follow, consoleFile)
}
