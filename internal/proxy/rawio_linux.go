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

	// A write held back by holdWrite: the next Read sends it (pend, pn of
	// it sent) from inside the poller's read, after one read that must
	// find nothing (the check of an idle connection), and then waits for
	// the answer without a read that would find nothing yet. An idle
	// upstream connection's reuse costs a read, the write and the read of
	// the answer: the separate peek at the socket and the read that came
	// back EAGAIN are gone.
	hold    bool
	pend    []byte
	pendBuf []byte
	pn      int
	sendFn  func(uintptr) bool
}

// canHold reports whether r can hold a write (holdWrite): it serves a
// socket.
func (r *rawIO) canHold() bool { return r.rc != nil }

// holdWrite makes the next Write wait for the Read after it (see pend).
func (r *rawIO) holdWrite() { r.hold = r.rc != nil }

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
		r.readFn, r.writeF, r.sendFn = r.doRead, r.doWrite, r.doSend
	}
	return true
}

func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.rp, r.rn, r.rerr = p, 0, nil
	var err error
	if r.pend != nil {
		err = r.rc.Read(r.sendFn)
		if err == nil && r.rerr == nil && r.pend != nil {
			// The socket took part of the write only: the rest waits
			// for room as any write does, then the answer is read.
			rest := r.pend[r.pn:]
			r.pend = nil
			if _, err = r.Write(rest); err == nil {
				r.rp, r.rn, r.rerr = p, 0, nil
				err = r.rc.Read(r.readFn)
			}
		}
		r.pend = nil
	} else {
		err = r.rc.Read(r.readFn)
	}
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

// doSend is Read's callback while a write is held: the check, the write,
// then reads as doRead.
func (r *rawIO) doSend(fd uintptr) bool {
	if r.pend == nil {
		return r.doRead(fd)
	}
	if r.pn == 0 {
		for {
			_, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rp[0])), uintptr(len(r.rp)))
			if e == syscall.EINTR {
				continue
			}
			if e != syscall.EAGAIN {
				// Bytes nobody asked for, EOF or an error: the
				// connection cannot carry the request, which was not
				// sent.
				r.rerr, r.pend = errStaleIdle, nil
				return true
			}
			break
		}
	}
	for r.pn < len(r.pend) {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&r.pend[r.pn])), uintptr(len(r.pend)-r.pn))
		switch e {
		case 0:
			r.pn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return true // Read finishes the write
		default:
			r.rerr, r.pend = os.NewSyscallError("write", e), nil
			return true
		}
	}
	r.pend = nil
	// Nothing can have come back yet: wait for the answer without reading.
	// The poller was reset before the check above, so the answer's arrival
	// wakes this wait.
	return false
}

func (r *rawIO) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.hold {
		// Held for the next Read, in a buffer of r's own: the caller's
		// (a bufio.Writer's) is reused as soon as this returns.
		r.hold = false
		r.pendBuf = append(r.pendBuf[:0], p...)
		r.pend, r.pn = r.pendBuf, 0
		return len(p), nil
	}
	if r.pend != nil {
		// A second write before the Read: the held one goes first.
		rest := r.pend[r.pn:]
		r.pend = nil
		if _, err := r.Write(rest); err != nil {
			return 0, err
		}
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
