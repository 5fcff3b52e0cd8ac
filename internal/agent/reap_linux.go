package agent

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
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
		case <-children.recheck:
		}
	}
}

// reapOnce finds zombie children in /proc and waits for the ones no
// exec.Cmd owns. Scanning /proc (rather than wait(-1)) is what lets owned
// children keep their exit status.
//
// /proc may be the host's rather than the agent's PID namespace's (the
// process driver does not mount one): then its pids, the agent's own
// included, are the host's. So the agent finds itself as /proc/self, its
// children through /proc/self/task/*/children (not a scan of every process
// on the host, on every SIGCHLD), and a zombie's pid in its own namespace,
// which wait4 takes, from the NSpid line of its status.
func reapOnce() int {
	// Most SIGCHLDs are an exec's command ending. When its exec.Cmd has
	// reaped it already, no child is waitable and there is nothing to scan
	// (one syscall instead of reading /proc for every thread). When the
	// waitable child is owned, its exec.Cmd is about to reap it: the scan
	// waits for that (wait pokes children.recheck) and looks again then.
	pid, ok := zombiePending()
	if !ok {
		return 0
	}
	if children.deferToOwner(pid) {
		return 0
	}
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return 0
	}
	// The scan runs unlocked, so that it does not hold back the start of
	// the next command; a zombie that looks unowned is checked again under
	// the lock, once every start in flight has registered its child.
	var orphans []int
	for _, p := range childCandidates(self) {
		stat, err := os.ReadFile("/proc/" + p + "/stat")
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
		if len(f) < 2 || string(f[0]) != "Z" || string(f[1]) != self {
			continue
		}
		pid, ok := nsPID(p)
		if !ok || children.isOwned(pid) {
			continue
		}
		orphans = append(orphans, pid)
	}
	if len(orphans) == 0 {
		return 0
	}
	children.startMu.Lock()
	defer children.startMu.Unlock()
	n := 0
	for _, pid := range orphans {
		if children.isOwned(pid) {
			continue
		}
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err == nil && got == pid {
			n++
		}
	}
	return n
}

// zombiePending returns a child of the agent that has exited and not been
// waited for, if there is one, without waiting for it (WNOWAIT leaves its
// status to whoever owns it).
func zombiePending() (pid int, ok bool) {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return 0, false // ECHILD: no children at all
	}
	if info.Signo == 0 {
		return 0, false
	}
	// si_pid is the first field of the union that follows si_signo,
	// si_errno and si_code, aligned to a pointer.
	const ptr = unsafe.Sizeof(uintptr(0))
	off := (unsafe.Sizeof(int32(0))*3 + ptr - 1) &^ (ptr - 1)
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), off))), true
}

// childCandidates returns the /proc pids that may be children of the
// process that /proc knows as self: its threads' children files, or every
// process where the kernel has no such files.
func childCandidates(self string) []string {
	tasks, err := os.ReadDir("/proc/self/task")
	if err == nil {
		var out []string
		found := true
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
			if err != nil {
				found = false
				break
			}
			for _, p := range strings.Fields(string(b)) {
				out = append(out, p)
			}
		}
		if found {
			return out
		}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil && e.Name() != self {
			out = append(out, e.Name())
		}
	}
	return out
}

// nsPID returns the pid of /proc's process p in its own (innermost) PID
// namespace, which is the agent's for its children: the last NSpid field
// of its status (p itself on kernels without the line).
func nsPID(p string) (int, bool) {
	b, err := os.ReadFile("/proc/" + p + "/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			pid, err := strconv.Atoi(f[len(f)-1])
			return pid, err == nil
		}
	}
	pid, err := strconv.Atoi(p)
	return pid, err == nil
}
