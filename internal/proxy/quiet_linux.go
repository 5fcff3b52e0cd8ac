package proxy

import (
	"syscall"
	"unsafe"
)

// quiet peeks at a socket without blocking: would-block means open with
// nothing to read. A raw system call, as rawIO's (it cannot block).
func quiet(fd uintptr) bool {
	var b [1]byte
	_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return e == syscall.EAGAIN || e == syscall.EWOULDBLOCK
}
