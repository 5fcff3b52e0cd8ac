package proxy

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a TCP connection with raw system calls, still
// through Go's poller (syscall.RawConn: its lock, deadlines and readiness
// waits). A socket read or write never blocks here — the socket is
// non-blocking, and EAGAIN is left to the poller — so the runtime need not
// be told of each call: an ordinary syscall marks the P as in a system
// call, which sysmon, finding it there after 20 µs (a loopback write that
// delivers to the peer takes about that), hands to another thread; with
// several per request that was a thread wake-up a request and sysmon never
// backing off.
type rawIO struct {
	rc             syscall.RawConn
	rp, wp         []byte
	rn, wn         int
	rerr, werr     error
	readFn, writeF func(uintptr) bool
}

// init points r at nc and reports whether nc is a socket it can serve.
func (r *rawIO) init(nc net.Conn) bool {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	r.rc = rc
	if r.readFn == nil {
		r.readFn, r.writeF = r.doRead, r.doWrite
	}
	return true
}

func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.rp, r.rn, r.rerr = p, 0, nil
	err := r.rc.Read(r.readFn)
	n := r.rn
	if err == nil {
		err = r.rerr
	}
	r.rp, r.rerr = nil, nil
	return n, err
}

func (r *rawIO) doRead(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rp[0])), uintptr(len(r.rp)))
		switch e {
		case 0:
			r.rn = int(n)
			if n == 0 {
				r.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			r.rerr = os.NewSyscallError("read", e)
			return true
		}
	}
}

func (r *rawIO) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.wp, r.wn, r.werr = p, 0, nil
	err := r.rc.Write(r.writeF)
	n := r.wn
	if err == nil {
		err = r.werr
	}
	r.wp, r.werr = nil, nil
	return n, err
}

func (r *rawIO) doWrite(fd uintptr) bool {
	for r.wn < len(r.wp) {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&r.wp[r.wn])), uintptr(len(r.wp)-r.wn))
		switch e {
		case 0:
			r.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			r.werr = os.NewSyscallError("write", e)
			return true
		}
	}
	return true
}
