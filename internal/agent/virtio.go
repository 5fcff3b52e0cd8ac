package agent

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// The virtio transport: a VM without vsock (a QEMU guest on a host without
// /dev/vhost-vsock) reaches its agent over a virtio serial port, which the
// VMM backs with a unix socket on the host (QEMU: a virtserialport whose
// chardev is a socket server). A port is one byte stream between one host
// client and the guest, so connections are multiplexed over it with yamux:
// the host is the yamux client and opens a stream per agent connection,
// the guest (`berth agent --listen virtio:NAME`) accepts them and serves
// the agent protocol on each.
//
// The byte stream outlives its users on both sides: the host client may go
// away (berth restarts) and a new one connect while the guest still holds
// the old yamux session, and bytes of an old session may still be in
// flight. So every host connection starts with a handshake that fences off
// what came before:
//
//	host → guest   16 newlines, then "berth-agent hello <nonce>\n"
//	guest → host   "berth-agent ready <nonce>\n", then yamux
//
// The guest, between sessions, ignores every line that is not a hello; the
// host ignores everything before its ready line. The newlines make a guest
// that still runs an old session fail at once on a yamux header that
// cannot be one (and end that session). A host that gets no answer closes
// its connection and tries again on a fresh one: the guest reads end of
// file when the host side of the port closes, which ends any session it
// had, so each attempt starts from a clean slate.

const (
	portHello   = "berth-agent hello "
	portReady   = "berth-agent ready "
	portPadding = "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
	maxPortLine = 128
)

// portIdle is how often the guest looks at a port whose host side is not
// connected: a virtio port reads end of file then, it does not block.
const portIdle = 100 * time.Millisecond

// portConfig is the yamux configuration of both ends. No keepalive: the
// host learns of a gone guest when the VMM closes the socket, the guest of
// a gone host from end of file; a ping unanswered because the VM is
// paused (suspended) must not end a session.
func portConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.LogOutput = io.Discard
	return c
}

// listenVirtio listens on the virtio serial port named name (as QEMU's
// virtserialport name=, found through /sys/class/virtio-ports), or on the
// device path name when it starts with "/".
func listenVirtio(name string) (net.Listener, error) {
	path := name
	if !strings.HasPrefix(name, "/") {
		p, err := findVirtioPort(name)
		if err != nil {
			return nil, err
		}
		path = p
	}
	// Fail now rather than in the background if it cannot be opened.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("virtio port %s: %w", name, err)
	}
	first := f
	open := func() (io.ReadWriteCloser, error) {
		if first != nil {
			f := first
			first = nil
			return f, nil
		}
		return os.OpenFile(path, os.O_RDWR, 0)
	}
	return newPortListener("virtio:"+name, open), nil
}

// virtioPortsDir lists the guest's virtio serial ports, each with a name.
const virtioPortsDir = "/sys/class/virtio-ports"

// findVirtioPort returns the device of the port named name.
func findVirtioPort(name string) (string, error) {
	ents, err := os.ReadDir(virtioPortsDir)
	if err != nil {
		return "", fmt.Errorf("virtio port %s: no virtio serial ports (%v): is virtio_console loaded?", name, err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(virtioPortsDir, e.Name(), "name"))
		if err == nil && strings.TrimSpace(string(b)) == name {
			return filepath.Join("/dev", e.Name()), nil
		}
	}
	return "", fmt.Errorf("virtio port %s: no port of that name in %s", name, virtioPortsDir)
}

// portAddr is the address of a port listener.
type portAddr string

func (a portAddr) Network() string { return "virtio" }
func (a portAddr) String() string  { return string(a) }

// portListener is the guest side: it runs one yamux session at a time over
// the port (reopened for each) and hands out the streams the host opens.
type portListener struct {
	addr    portAddr
	open    func() (io.ReadWriteCloser, error)
	streams chan net.Conn
	done    chan struct{}
	once    sync.Once

	mu   sync.Mutex
	port io.Closer // the port the current session runs on
}

func newPortListener(addr string, open func() (io.ReadWriteCloser, error)) *portListener {
	l := &portListener{addr: portAddr(addr), open: open, streams: make(chan net.Conn), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *portListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.streams:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *portListener) Addr() net.Addr { return l.addr }

// Close stops accepting and closes the port, which ends the session and
// with it every stream.
func (l *portListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.mu.Lock()
		if l.port != nil {
			l.port.Close()
		}
		l.mu.Unlock()
	})
	return nil
}

func (l *portListener) closed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// sleep waits d or until the listener is closed, and reports whether it
// is still open.
func (l *portListener) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.done:
		return false
	case <-t.C:
		return true
	}
}

func (l *portListener) run() {
	for !l.closed() {
		port, err := l.open()
		if err != nil {
			// The device went away (hot unplug); it may come back.
			if !l.sleep(time.Second) {
				return
			}
			continue
		}
		l.mu.Lock()
		if l.closed() {
			l.mu.Unlock()
			port.Close()
			return
		}
		l.port = port
		l.mu.Unlock()
		l.session(port)
		l.mu.Lock()
		l.port = nil
		l.mu.Unlock()
		// A fresh descriptor per session: a write of the old session still
		// blocked on the port fails now instead of reaching the next host.
		port.Close()
	}
}

// session waits for a host's hello, answers it and serves one yamux
// session until it ends.
func (l *portListener) session(port io.ReadWriteCloser) {
	br := bufio.NewReader(port)
	nonce, err := l.awaitHello(br)
	if err != nil {
		return
	}
	if _, err := io.WriteString(port, portReady+nonce+"\n"); err != nil {
		return
	}
	sess, err := yamux.Server(portStream{br, port}, portConfig())
	if err != nil {
		return
	}
	defer sess.Close()
	for {
		c, err := sess.Accept()
		if err != nil {
			return
		}
		select {
		case l.streams <- c:
		case <-l.done:
			c.Close()
			return
		}
	}
}

// awaitHello reads lines until one is a hello and returns its nonce. End of
// file means no host is connected: it looks again a little later.
func (l *portListener) awaitHello(br *bufio.Reader) (string, error) {
	var line []byte
	long := false
	for {
		b, err := br.ReadByte()
		if errors.Is(err, io.EOF) {
			line, long = line[:0], false
			if !l.sleep(portIdle) {
				return "", net.ErrClosed
			}
			continue
		}
		if err != nil {
			return "", err
		}
		if b != '\n' {
			if len(line) < maxPortLine {
				line = append(line, b)
			} else {
				long = true
			}
			continue
		}
		if nonce, ok := strings.CutPrefix(string(line), portHello); ok && !long && validNonce(nonce) {
			return nonce, nil
		}
		line, long = line[:0], false
	}
}

func validNonce(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// portStream joins the buffered reader (which may hold bytes read past
// the hello) with the port for writing and closing.
type portStream struct {
	r io.Reader
	w io.WriteCloser
}

func (p portStream) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p portStream) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p portStream) Close() error                { return p.w.Close() }

// PortSession is the host side of the virtio transport: one yamux session
// over a connection to the VMM's socket behind the guest's port. Each Open
// is a new connection to the agent. It is safe for concurrent use.
type PortSession struct {
	s *yamux.Session
}

// portPatience bounds the handshake when ctx has no deadline.
const portPatience = 10 * time.Second

// NewPortSession performs the host side of the handshake on conn (see the
// virtio transport above) and starts a yamux session on it. It fails when
// the agent does not answer before ctx ends (or, without a deadline,
// within 10 s); the caller should then close conn and try again on a new
// connection, since the agent may still be starting. On success the
// session owns conn.
func NewPortSession(ctx context.Context, conn net.Conn) (*PortSession, error) {
	var n [8]byte
	rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(portPatience)
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	br := bufio.NewReader(conn)
	err := portHandshake(conn, br, nonce)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%v)", cerr, err)
		} else if errors.Is(err, os.ErrDeadlineExceeded) && ok {
			// The connection's deadline is ctx's; its timer may not
			// have fired yet.
			err = fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
		}
		return nil, fmt.Errorf("agent handshake on the virtio port: %w", err)
	}
	conn.SetDeadline(time.Time{})
	s, err := yamux.Client(portStream{br, conn}, portConfig())
	if err != nil {
		return nil, err
	}
	return &PortSession{s: s}, nil
}

func portHandshake(conn net.Conn, br *bufio.Reader, nonce string) error {
	if _, err := io.WriteString(conn, portPadding+portHello+nonce+"\n"); err != nil {
		return err
	}
	want := portReady + nonce
	var line []byte
	for {
		b, err := br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the VMM closed the connection")
			}
			return err
		}
		if b != '\n' {
			if len(line) < maxPortLine {
				line = append(line, b)
			}
			continue
		}
		if string(line) == want {
			return nil
		}
		line = line[:0]
	}
}

// Open opens a new connection to the agent.
func (p *PortSession) Open() (net.Conn, error) { return p.s.Open() }

// Close ends the session, every connection on it, and the underlying
// connection.
func (p *PortSession) Close() error { return p.s.Close() }

// Closed is closed when the session has ended, by Close or because the
// guest or the VMM went away.
func (p *PortSession) Closed() <-chan struct{} { return p.s.CloseChan() }
