package proc

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Wait blocks until the process pid that started at startTicks has ended
// (at once if it is not alive) or ctx ends. It needs no child: it waits on
// a pidfd (Linux 5.3), so it works for a process a previous berth started,
// and falls back to polling where pidfds are missing.
func Wait(ctx context.Context, pid int, startTicks uint64) error {
	if !Alive(pid, startTicks) {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return poll(ctx, pid, startTicks)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	// The pidfd names whatever process had pid when it was opened: it is
	// ours if that process is still the one that started at startTicks.
	if !Alive(pid, startTicks) {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return poll(ctx, pid, startTicks)
	}
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		// Not pollable by the runtime: poll instead.
		return poll(ctx, pid, startTicks)
	}
	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	rerr := rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n > 0 || !Alive(pid, startTicks)
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	if rerr != nil {
		return poll(ctx, pid, startTicks)
	}
	return nil
}

// poll waits for the process to end by looking at it every 50 ms.
func poll(ctx context.Context, pid int, startTicks uint64) error {
	for !WaitFor(ctx, time.Hour, func() bool { return !Alive(pid, startTicks) }) {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}
