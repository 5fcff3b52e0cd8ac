//go:build unix && !linux

package proxy

import "syscall"

// quiet peeks at a socket without blocking: would-block means open with
// nothing to read.
func quiet(fd uintptr) bool {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
}
