package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Limits of the per-backend pool of idle upstream connections. They match
// NewTransport's MaxIdleConnsPerHost and IdleConnTimeout.
const (
	maxIdlePerBackend = 1024
	idleTimeout       = 90 * time.Second
)

// upstreamConn is one persistent HTTP/1.1 connection to a backend, with its
// buffers. It is used by one request at a time.
type upstreamConn struct {
	net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	// abort unblocks every read and write on the connection, for good. It
	// is made once per connection: it runs when a request's context ends.
	abort func()
	// peek checks the socket (below TLS) before reuse; nil when the
	// connection has no socket to check.
	peek *peeker
	wait waitTimer // bounds the wait for each response head
	rs   respState // the response being read (h1resp.go)
	rio  rawIO     // the socket's reads and writes (rawio_linux.go)
	// unchecked: taken from the pool without the check of its socket,
	// which the request's own first read does instead (connPool.get).
	unchecked bool
}

// errStaleIdle: an idle connection taken from the pool without its check
// (connPool.get) was closed by the backend, or holds bytes nobody asked for,
// which its first read found before the request was written. Nothing was
// sent: any request may go elsewhere.
var errStaleIdle = errors.New("idle backend connection closed or sent unasked bytes")

// connPool holds a backend's idle connections, most recently used last: the
// hot connections are reused and the cold ones age out. Its zero value is an
// empty pool.
type connPool struct {
	mu    sync.Mutex
	idle  []*upstreamConn
	sweep *time.Timer // pending expiry of idle connections; nil when none
}

// get returns an idle connection, or nil. Connections that expired, that the
// backend closed while they sat idle, or on which the backend sent anything
// unasked (a body on a HEAD response, a second response: it would be taken
// for the answer to the next client's request) are discarded. The check is
// one non-blocking peek at the socket, on every reuse: a connection reused
// a microsecond after its last response may still have unasked bytes behind
// it.
//
// With deferCheck (a request without a body is coming), a connection whose
// writes can be held (rawIO.holdWrite) skips the peek: the request's first
// read makes the same check just before its head is written, a system call
// fewer (await).
func (p *connPool) get(now time.Time, deferCheck bool) *upstreamConn {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if now.Sub(c.idleSince) >= idleTimeout {
			c.Close()
			continue
		}
		if deferCheck && c.br.Buffered() == 0 && c.rio.canHold() {
			c.unchecked = true
			return c
		}
		if c.alive() {
			return c
		}
		c.Close()
	}
}

// put returns a connection whose last response was read exactly to its end.
// Bytes already buffered beyond it mean the backend sent more than it was
// asked for: the connection is closed instead.
func (p *connPool) put(c *upstreamConn, now time.Time) {
	if c.br.Buffered() > 0 {
		c.Close()
		return
	}
	c.idleSince = now
	p.mu.Lock()
	if len(p.idle) >= maxIdlePerBackend {
		old := p.idle[0]
		copy(p.idle, p.idle[1:])
		p.idle[len(p.idle)-1] = c
		p.mu.Unlock()
		old.Close()
		return
	}
	p.idle = append(p.idle, c)
	if p.sweep == nil {
		p.sweep = time.AfterFunc(idleTimeout, p.expire)
	}
	p.mu.Unlock()
}

// expire closes the connections idle for longer than idleTimeout and
// re-arms itself while any remain, so that a backend that is no longer in any
// routing table does not keep its connections (and the backend's sockets)
// open forever.
func (p *connPool) expire() {
	now := time.Now()
	var dead []*upstreamConn
	p.mu.Lock()
	i := 0
	for i < len(p.idle) && now.Sub(p.idle[i].idleSince) >= idleTimeout {
		i++
	}
	dead = append(dead, p.idle[:i]...)
	p.idle = append(p.idle[:0], p.idle[i:]...)
	clear(p.idle[len(p.idle):cap(p.idle)])
	if len(p.idle) > 0 {
		p.sweep = time.AfterFunc(idleTimeout-now.Sub(p.idle[0].idleSince), p.expire)
	} else {
		p.sweep = nil
	}
	p.mu.Unlock()
	for _, c := range dead {
		c.Close()
	}
}

// closeIdle closes every idle connection.
func (p *connPool) closeIdle() {
	p.mu.Lock()
	dead := p.idle
	p.idle = nil
	if p.sweep != nil {
		p.sweep.Stop()
		p.sweep = nil
	}
	p.mu.Unlock()
	for _, c := range dead {
		c.Close()
	}
}

// alive reports whether an idle connection is still open: nothing may arrive
// between responses, so stray bytes, EOF or an error all mean the connection
// is unusable. (A read with an expired deadline would not do: the poller
// reports the deadline without trying the read.)
func (c *upstreamConn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if tc, ok := c.Conn.(*tls.Conn); ok && !tlsQuiet(tc, c.br) {
		return false
	}
	if c.peek == nil {
		return true // cannot tell; the stale-connection retry remains
	}
	return c.peek.check()
}

// tlsQuiet reports whether a TLS connection holds no data beyond what br
// has consumed: records that arrived with the last response (Go's TLS
// servers send small records, and the client reads several from the socket
// at once) wait inside tls.Conn, where neither br nor a peek at the socket
// sees them. A read with an expired deadline decrypts those and returns at
// once (data, or the deadline); the deadline is cleared again, which is safe
// while the connection is idle and no request's abort can be set on it.
func tlsQuiet(tc *tls.Conn, br *bufio.Reader) bool {
	tc.SetReadDeadline(aLongTimeAgo)
	_, err := br.Peek(1)
	tc.SetReadDeadline(time.Time{})
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// rawConn returns the socket below nc (and below TLS: a close or stray
// bytes show there too), or nil.
func rawConn(nc net.Conn) syscall.RawConn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// dialer opens connections to backends.
type dialer struct {
	net net.Dialer
	tls *tls.Config // base configuration for https backends; nil means defaults
}

func newDialer(tlsConf *tls.Config, g *dialGuard) *dialer {
	return &dialer{net: g.netDialer(), tls: tlsConf}
}

// dial connects to b. Errors from the TCP connect are *net.OpError with Op
// "dial" (see isConnectError), which makes the request eligible to go to
// another backend; a failed TLS handshake is not, as with http.Transport.
func (d *dialer) dial(ctx context.Context, b *Backend) (*upstreamConn, error) {
	nc, err := d.net.DialContext(ctx, "tcp", b.Addr)
	if err != nil {
		return nil, err
	}
	if b.TLS {
		host, _, err := net.SplitHostPort(b.Addr)
		if err != nil {
			host = b.Addr
		}
		var cfg *tls.Config
		if b.TLSConfig != nil {
			cfg = b.TLSConfig.Clone()
		} else if d.tls != nil {
			cfg = d.tls.Clone()
		} else {
			cfg = new(tls.Config)
		}
		if cfg.ServerName == "" {
			cfg.ServerName = host
		}
		// This client speaks HTTP/1.1 only.
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	c := &upstreamConn{Conn: nc}
	var rw io.ReadWriter = nc
	if c.rio.init(nc) {
		rw = &c.rio
	}
	c.br = bufio.NewReaderSize(rw, 4<<10)
	c.bw = bufio.NewWriterSize(rw, 8<<10) // a head and a small body leave in one write
	if rc := rawConn(nc); rc != nil {
		c.peek = newPeeker(rc)
	}
	c.abort = func() { nc.SetDeadline(aLongTimeAgo) }
	c.wait.abort = c.abort
	return c, nil
}

// aLongTimeAgo is a deadline in the past: setting it makes blocked reads and
// writes on a connection return at once.
var aLongTimeAgo = time.Unix(1, 0)

// waitTimer bounds the wait for a response head (Options.
// UpstreamResponseTimeout). The wait starts when the request head is sent,
// restarts while the request body is still being written, and ends when the
// response head is in; when the deadline passes first the connection is
// aborted for good and the request answers 504. There is one per connection,
// used by each request in turn.
//
// The timer is lazy, so that a request costs a clock read and no timer
// operation: it stays armed across requests and, when it fires, either finds
// the current wait past its deadline, re-arms itself for the rest of it, or
// (the connection idle) stops until the next wait.
type waitTimer struct {
	abort func()

	mu       sync.Mutex
	t        *time.Timer
	d        time.Duration
	deadline time.Time // of the current wait; zero when none
	armed    bool      // t is pending
	expired  bool      // the current wait passed its deadline
}

// start begins a wait of d (none when d <= 0) at now.
func (w *waitTimer) start(d time.Duration, now time.Time) {
	if d <= 0 {
		return
	}
	w.mu.Lock()
	w.d, w.deadline, w.expired = d, now.Add(d), false
	if !w.armed {
		w.armed = true
		if w.t == nil {
			w.t = time.AfterFunc(d, w.fire)
		} else {
			w.t.Reset(d)
		}
	}
	w.mu.Unlock()
}

// extend restarts the current wait: the request is still making progress.
func (w *waitTimer) extend() {
	now := time.Now()
	w.mu.Lock()
	if !w.deadline.IsZero() && !w.expired {
		w.deadline = now.Add(w.d)
	}
	w.mu.Unlock()
}

// stop ends the current wait and reports whether it had expired.
func (w *waitTimer) stop() (expired bool) {
	w.mu.Lock()
	w.deadline = time.Time{}
	expired = w.expired
	w.mu.Unlock()
	return expired
}

func (w *waitTimer) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	if w.deadline.IsZero() || w.expired {
		return // idle: the next wait arms the timer again
	}
	if left := time.Until(w.deadline); left > 0 {
		w.armed = true
		w.t.Reset(left)
		return
	}
	w.expired = true
	w.abort()
}

// errUpstreamTimeout means the backend sent no response head within the
// response timeout.
var errUpstreamTimeout = errors.New("backend did not answer within the upstream response timeout")

// errUnexpectedUpgrade is returned when a backend switches protocols on a
// request that did not ask to.
var errUnexpectedUpgrade = errors.New("backend switched protocols without being asked")
