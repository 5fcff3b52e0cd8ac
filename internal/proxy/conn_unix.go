//go:build unix

package proxy

import "syscall"

// peekAlive peeks at the socket without blocking: would-block means open and
// quiet, anything else (EOF, data, an error) means not reusable.
func peekAlive(rc syscall.RawConn) bool {
	var alive bool
	err := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // never wait for readability
	})
	return err == nil && alive
}
