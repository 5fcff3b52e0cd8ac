package server

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// LockFileName is the instance lock inside the data directory. A running
// berth holds an exclusive flock(2) of it and keeps its pid in it, so a
// second berth on the same data directory is refused before it opens the
// store: it would reconcile the fleet and stop the first one's replicas.
// The kernel drops the lock when the holder exits, however it exits.
const LockFileName = "berth.lock"

// ErrDataDirInUse is returned by New when another process holds the
// data directory's instance lock.
var ErrDataDirInUse = errors.New("data dir in use")

// inUseError is ErrDataDirInUse with the directory and the holder named.
type inUseError string

func (e inUseError) Error() string        { return string(e) }
func (e inUseError) Is(target error) bool { return target == ErrDataDirInUse }

// instanceLock is a held instance lock.
type instanceLock struct{ f *os.File }

// lockDataDir takes the instance lock of dir (creating dir 0700 and the
// lock file 0600 when needed) without waiting: when another process holds
// it, the error names that process's pid.
func lockDataDir(dir string) (*instanceLock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("data dir %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(abs, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := "another process"
		if pid, perr := strconv.Atoi(string(bytes.TrimSpace(b))); perr == nil && pid > 0 {
			holder = "pid " + strconv.Itoa(pid)
		}
		return nil, inUseError(fmt.Sprintf("data dir %s is in use by %s (another berth serve); stop it first, or give this one its own --data-dir", abs, holder))
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("instance lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("instance lock %s: %w", path, err)
	}
	return &instanceLock{f: f}, nil
}

// release drops the lock. The pid stays in the file; it means nothing
// without the flock.
func (l *instanceLock) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
