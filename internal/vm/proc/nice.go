package proc

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
)

// BackgroundNice is the nice value of a replica started in the background
// (a rollout's candidate, until it is promoted): the lowest priority, so
// that its boot takes CPU only from what would otherwise be idle time.
const BackgroundNice = 19

// OwnNice is the calling process's nice value.
func OwnNice() (int, error) {
	// Linux's getpriority returns 20 - nice.
	raw, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	return 20 - raw, err
}

// Nice is the nice value of thread tid.
func Nice(tid int) (int, error) {
	raw, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	return 20 - raw, err
}

// StartNiced starts cmd at nice: from a thread set to it for the fork,
// which the child inherits, so even its runtime's start-up runs at that
// priority. The thread gets its priority back afterwards (raising it
// needs CAP_SYS_NICE; if that fails, the thread ends with the goroutine
// rather than run the caller's work at a low priority). If the thread's
// priority cannot be set, cmd starts at the caller's.
func StartNiced(cmd *exec.Cmd, nice int) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		tid := syscall.Gettid()
		raw, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
		if err != nil || syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice) != nil {
			runtime.UnlockOSThread()
			errc <- cmd.Start()
			return
		}
		err = cmd.Start()
		if syscall.Setpriority(syscall.PRIO_PROCESS, tid, 20-raw) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Threads lists the threads of process pid (none if it is gone).
func Threads(pid int) []int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}

// Renice sets every thread of the processes members lists whose nice value
// which accepts to nice, pass after pass until one changes nothing (a
// thread cloned during a pass inherits its creator's value, which the
// next pass sees), at most maxRenicePasses. Threads that end meanwhile are
// skipped. It needs CAP_SYS_NICE to lower a nice value.
func Renice(members func() []int, nice int, which func(nice int) bool) error {
	var errs []error
	for range maxRenicePasses {
		changed := false
		errs = errs[:0]
		for _, pid := range members() {
			for _, tid := range Threads(pid) {
				n, err := Nice(tid)
				if err != nil || n == nice || !which(n) {
					continue // gone, or nothing to do
				}
				if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil {
					if !errors.Is(err, syscall.ESRCH) {
						errs = append(errs, err)
					}
					continue
				}
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	return errors.Join(errs...)
}

// maxRenicePasses bounds Renice's passes over an app that keeps forking.
const maxRenicePasses = 8

// AnyNice accepts every nice value (Renice).
func AnyNice(int) bool { return true }
