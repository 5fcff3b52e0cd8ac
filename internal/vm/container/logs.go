package container

import (
	"context"
	"io"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
)

// Logs returns up to n of the replica's most recent output lines (all when
// n <= 0), oldest first, from output.log and its rotated predecessor.
func (d *Driver) Logs(ctx context.Context, id string, n int) ([]vm.LogLine, error) {
	return d.rd.Logs(id, n, console.ReadRotated, runDir, logFile)
}

// FollowLogs writes the replica's output lines to w as they are written,
// starting with the next one: each as a JSON line
// {"t":"<RFC3339Nano>","s":"stdout"|"stderr","m":"<text>"}, the agent's
// log format. It follows the log across rotation. It returns nil when ctx
// ends or once the replica has ended and all its output was written, and an
// error wrapping vm.ErrNotFound if the replica is stopped meanwhile.
func (d *Driver) FollowLogs(ctx context.Context, id string, w io.Writer) error {
	return d.rd.FollowLogs(ctx, id, w, d.instance, console.FollowRotated, runDir, logFile)
}
