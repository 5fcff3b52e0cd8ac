package proxy

import (
	"errors"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// parker holds idle kept-alive connections without a goroutine each. A
// goroutine's stack and a connection's buffers are 20-odd KiB; nginx keeps
// an idle connection in under 1 KiB. A connection idle for parkAfter gives
// up both: its socket goes into an epoll set of the parker's (edge of
// readability, one shot), and when the client sends again (or hangs up) a
// goroutine with fresh buffers takes it back (H1Server.resume). Parked
// connections count as idle for Shutdown and Close, and close when their
// idle timeout passes (swept every sweepEvery).
type parker struct {
	s *H1Server

	start sync.Once
	epfd  int
	err   error

	mu     sync.Mutex
	closed bool // Close ran: nothing more is parked
	conns  map[int32]*parkedConn
	sweep  *time.Timer
	// Without allocation there is no garbage collection to hand the
	// parked connections' stacks and buffers back: freeDelay after a
	// parking (so a burst is freed at once), at most every freeGap,
	// memory is returned to the OS.
	free     *time.Timer // pending; nil when none
	lastFree time.Time
}

const (
	freeDelay = 4 * workerIdle // the workers the parked connections leave have ended
	freeGap   = 10 * time.Second
)

func newParker(s *H1Server) *parker { return &parker{s: s, conns: make(map[int32]*parkedConn)} }

// sweepEvery is how often parked connections past their idle timeout are
// closed: an eighth of it, so a parked connection closes within 9/8 of
// IdleTimeout.
func (p *parker) sweepEvery() time.Duration { return max(p.s.idle/8, 100*time.Millisecond) }

// park takes c's connection, idle since c.now, and reports whether it did;
// when not, the caller closes the connection.
func (p *parker) park(c *h1conn, expires time.Time) bool {
	p.start.Do(func() {
		p.epfd, p.err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if p.err == nil {
			go p.loop()
		}
	})
	if p.err != nil {
		return false
	}
	cfd := connFD(c.rwc)
	if cfd < 0 {
		return false
	}
	// The parked connection keeps only a duplicate of its socket: the
	// net.Conn (its netFD, poller registration and addresses, a few
	// hundred bytes) is closed once the duplicate is in the epoll set, and
	// resume wraps the socket in a new one.
	nfd, err := unix.FcntlInt(uintptr(cfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return false
	}
	fd := int32(nfd)
	pc := &parkedConn{hl: c.hl, base: c.base, fd: fd, expires: expires}
	p.mu.Lock()
	if p.closed || p.s.inShutdown.Load() {
		p.mu.Unlock()
		unix.Close(nfd)
		return false
	}
	p.conns[fd] = pc
	if p.sweep == nil && !expires.IsZero() {
		p.sweep = time.AfterFunc(p.sweepEvery(), p.expire)
	}
	if p.free == nil {
		p.free = time.AfterFunc(max(freeDelay, freeGap-time.Since(p.lastFree)), p.freeMemory)
	}
	p.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: fd}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, nfd, &ev); err != nil {
		p.mu.Lock()
		owned := p.conns[fd] == pc
		if owned {
			delete(p.conns, fd)
		}
		p.mu.Unlock()
		if owned {
			unix.Close(nfd)
			return false // the caller closes the connection
		}
		// Not ours any more: Close took the duplicate and closes it.
	}
	c.rwc.Close() // the duplicate holds the socket
	return true
}

// freeMemory returns what parked connections gave up to the OS.
func (p *parker) freeMemory() {
	debug.FreeOSMemory()
	p.mu.Lock()
	p.free, p.lastFree = nil, time.Now()
	p.mu.Unlock()
}

// connFD returns the socket of a connection, or -1.
func connFD(nc net.Conn) int32 {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := int32(-1)
	if rc.Control(func(s uintptr) { fd = int32(s) }) != nil {
		return -1
	}
	return fd
}

// take removes fd's parked connection from the set, if it is still there.
func (p *parker) take(fd int32) *parkedConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc := p.conns[fd]
	delete(p.conns, fd)
	return pc
}

// loop resumes the connections the client sends on (or hangs up).
func (p *parker) loop() {
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // closed (H1Server.Close)
		}
		for _, ev := range events[:n] {
			pc := p.take(ev.Fd)
			if pc == nil {
				continue // closed by a sweep or Shutdown just now
			}
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(pc.fd), nil)
			p.s.resume(pc)
		}
	}
}

// expire closes the parked connections past their idle timeout.
func (p *parker) expire() {
	now := time.Now()
	var dead []*parkedConn
	p.mu.Lock()
	for fd, pc := range p.conns {
		if !pc.expires.IsZero() && !now.Before(pc.expires) {
			dead = append(dead, pc)
			delete(p.conns, fd)
		}
	}
	if len(p.conns) > 0 {
		p.sweep.Reset(p.sweepEvery())
	} else {
		p.sweep = nil
	}
	p.mu.Unlock()
	p.closeConns(dead)
}

// closeAll closes every parked connection (they are all idle), and the
// epoll set too when final.
func (p *parker) closeAll(final bool) {
	p.mu.Lock()
	dead := make([]*parkedConn, 0, len(p.conns))
	for fd, pc := range p.conns {
		dead = append(dead, pc)
		delete(p.conns, fd)
	}
	wasClosed := p.closed
	p.closed = p.closed || final
	p.mu.Unlock()
	p.closeConns(dead)
	if final && !wasClosed {
		// A park under way finds the set closed and its connection
		// gone from conns, and lets it be closed.
		p.start.Do(func() { p.err = net.ErrClosed })
		if p.err == nil {
			unix.Close(p.epfd)
		}
	}
}

func (p *parker) closeConns(cs []*parkedConn) {
	for _, pc := range cs {
		unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(pc.fd), nil)
		unix.Close(int(pc.fd))
	}
}

// parkedCount reports how many connections are parked (for tests).
func (p *parker) parkedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// resumeConn wraps a parked connection's socket in a new net.Conn, and
// closes the parked descriptor (the new one is a duplicate).
func resumeConn(pc *parkedConn) (net.Conn, error) {
	f := os.NewFile(uintptr(pc.fd), "parked")
	defer f.Close()
	return net.FileConn(f)
}
