package agent

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// lockWait bounds how long a writer waits for another process's flock of
// the root directory (see rootLock).
const lockWait = 5 * time.Second

// flockDir takes an exclusive flock of the open directory d, polling
// without blocking so that the wait is bounded; it reports whether it got
// the lock. A file system without flock counts as not locked.
func flockDir(d *os.File) bool {
	rc, err := d.SyscallConn()
	if err != nil {
		return false
	}
	deadline := time.Now().Add(lockWait)
	wait := 50 * time.Microsecond
	for {
		var ferr error
		if err := rc.Control(func(fd uintptr) { ferr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB) }); err != nil {
			return false
		}
		switch {
		case ferr == nil:
			return true
		case !errors.Is(ferr, unix.EWOULDBLOCK) && !errors.Is(ferr, unix.EINTR):
			return false
		case time.Now().After(deadline):
			return false
		}
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Millisecond)
	}
}
