package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
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

// checkIdleAfter is how long a connection may sit idle before it is checked
// for a close from the backend's side before reuse. Servers close idle
// keep-alive connections on their own timers (Node after 5 s), and a request
// written into such a connection is lost; a connection reused sooner than
// this is taken as alive, so the check costs nothing under load. A variable
// for tests.
var checkIdleAfter = time.Second

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
}

// connPool holds a backend's idle connections, most recently used last: the
// hot connections are reused and the cold ones age out. Its zero value is an
// empty pool.
type connPool struct {
	mu    sync.Mutex
	idle  []*upstreamConn
	sweep *time.Timer // pending expiry of idle connections; nil when none
}

// get returns an idle connection, or nil. Connections that expired or that
// the backend closed while they sat idle are discarded.
func (p *connPool) get() *upstreamConn {
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
		if idle := time.Since(c.idleSince); idle < checkIdleAfter || (idle < idleTimeout && c.alive()) {
			return c
		}
		c.Close()
	}
}

// put returns a connection whose last response was read completely.
func (p *connPool) put(c *upstreamConn) {
	c.idleSince = time.Now()
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
	nc := c.Conn
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn() // a close shows on the socket below TLS too
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true // cannot tell; the stale-connection retry remains
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return peekAlive(rc)
}

// dialer opens connections to backends.
type dialer struct {
	net net.Dialer
	tls *tls.Config // base configuration for https backends; nil means defaults
}

func newDialer(tlsConf *tls.Config) *dialer {
	return &dialer{net: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}, tls: tlsConf}
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
		if d.tls != nil {
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
	c := &upstreamConn{
		Conn: nc,
		br:   bufio.NewReaderSize(nc, 4<<10),
		bw:   bufio.NewWriterSize(nc, 4<<10),
	}
	c.abort = func() { nc.SetDeadline(aLongTimeAgo) }
	return c, nil
}

// aLongTimeAgo is a deadline in the past: setting it makes blocked reads and
// writes on a connection return at once.
var aLongTimeAgo = time.Unix(1, 0)

// errUnexpectedUpgrade is returned when a backend switches protocols on a
// request that did not ask to.
var errUnexpectedUpgrade = errors.New("backend switched protocols without being asked")
