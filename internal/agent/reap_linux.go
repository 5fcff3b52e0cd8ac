package agent

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

// reapOrphans runs until ctx ends, reaping zombie children that the agent
// did not start (orphans reparented to it as PID 1) on every SIGCHLD.
func reapOrphans(ctx context.Context) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	defer signal.Stop(ch)
	for {
		reapOnce()
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// reapOnce finds zombies whose parent is this process in /proc and waits
// for the ones no exec.Cmd owns. Scanning /proc (rather than wait(-1))
// is what lets owned children keep their exit status.
func reapOnce() int {
	children.startMu.Lock()
	defer children.startMu.Unlock()
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) S ppid ...": comm may hold spaces and parentheses,
		// so fields are counted from the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 2 || string(f[0]) != "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(string(f[1])); ppid != self || children.isOwned(pid) {
			continue
		}
		var ws syscall.WaitStatus
		if p, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err == nil && p == pid {
			n++
		}
	}
	return n
}
