package proxy

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/internal/route"
)

// This file is the data plane's HTTP/1.1 front end: an accept loop that serves
// plain HTTP/1.1 and 1.0 requests itself and hands every other connection to
// net/http.
//
// net/http's server was about 40% of berth's CPU per proxied request: a
// goroutine and a deadline dance per request to notice a client hanging up
// (the background read), a response writer with two layers of buffering, a
// header map cloned or built several times, a context per request. The front
// end keeps one goroutine per connection with pooled buffers, parses the head
// into one string (h1parse.go), builds the http.Request in place, and calls
// Handler.ServeHTTP with a small ResponseWriter that writes the response head
// and body straight into the connection's buffer: a small response costs one
// read and one write system call on the client side.
//
// What it does not serve it hands to the fallback http.Server, before reading
// any body but after checking the head as strictly as any other, with the
// bytes already read replayed: h2c with prior knowledge, websockets and every
// other Upgrade (but h2c, which is dropped), Expect: 100-continue, CONNECT,
// asterisk-form targets, announced request trailers, and requests routed to a
// site (whose file server relies on net/http's response writer). From that
// request on, net/http owns the connection (and the Handler's entry checks,
// entry.go, are what is left of the front end's).
//
// The request's strings (method, target, URL, header names and values, Host)
// and those of the backend's response head point into the connection's
// buffers, which the next request on the connection reuses: they are valid
// while ServeHTTP runs. What outlives the request — a map key, a log
// handler that keeps records, a goroutine — must strings.Clone what it keeps.
// That is what lets a keep-alive request cost no allocation at all
// (TestKeepAliveGETAllocs).
//
// A client hanging up is noticed the way net/http does it — a read on the
// connection while the backend works, once the request (and its body) has
// been read — but only for requests still running after watchAfter, so a
// quick exchange pays nothing for it.
//
// Over TLS (H1Options.TLSConfig) the same loop runs on the tls.Conn, without
// the raw system calls and parking; tls.go says what changes.

// H1Options configure an H1Server. Zero fields take the fallback server's
// values, and net/http's defaults when those are zero too.
type H1Options struct {
	// ReadHeaderTimeout bounds reading a request head (from its first byte,
	// or from the connection's start for its first request).
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request head; larger ones are answered 431.
	MaxHeaderBytes int
	// Log receives panics recovered while serving, at error level.
	Log *slog.Logger
	// ParkAfter is how long a kept-alive connection waits for its next
	// request before it is parked: its goroutine and buffers are given
	// up, and the connection waits in an epoll set (Linux) until the
	// client sends again, costing a few hundred bytes instead of tens of
	// kilobytes. Zero means defaultParkAfter; negative, never.
	// Connections over TLS are never parked (tls.go).
	ParkAfter time.Duration
	// TLSConfig, when set, makes every connection a TLS one (tls.go): the
	// handshake is bounded by ReadHeaderTimeout, HTTP/2 (ALPN "h2") goes
	// to the fallback server, HTTP/1.1 is served here. It must carry a
	// certificate (Certificates, GetCertificate or GetConfigForClient);
	// with no NextProtos, "h2" and "http/1.1" are offered. The server
	// keeps a copy.
	TLSConfig *tls.Config
}

// defaultParkAfter is H1Options.ParkAfter's default: longer than the gaps
// between a busy client's requests, so that parking (a few microseconds
// and two epoll_ctl calls) is paid only by connections that sit idle.
const defaultParkAfter = time.Second

// watchAfter is how long a request without a body runs before its connection
// is watched for the client hanging up (see above). A variable for tests.
var watchAfter = 50 * time.Millisecond

// lingerTime bounds the wait, before closing a connection with request bytes
// left unread, for the client to read the answer and close first: closing
// with unread data sends a reset, which can destroy the answer in flight.
const lingerTime = 500 * time.Millisecond

// H1Server serves a Handler's HTTP/1.x traffic (see above). Its Serve,
// Shutdown and Close mirror http.Server's and drive the fallback server too.
type H1Server struct {
	h          *Handler
	fallback   *http.Server
	readHeader time.Duration
	idle       time.Duration
	maxHeader  int
	log        *slog.Logger

	parkAfter time.Duration
	park      *parker      // nil: connections are not parked
	tlsConf   *tls.Config  // nil: plaintext (see tls.go)
	work      chan connJob // to an idle worker (see dispatch)

	inShutdown atomic.Bool
	mu         sync.Mutex
	listeners  map[*net.Listener]struct{}
	conns      map[*h1conn]struct{}
}

// NewH1Server returns a front end serving h, which hands what it does not
// serve itself to fallback. fallback's Handler must serve h too (wrapped as it
// likes); NewH1Server does not modify it, and H1Server.Serve runs it.
func (h *Handler) NewH1Server(fallback *http.Server, o H1Options) *H1Server {
	s := &H1Server{
		h: h, fallback: fallback,
		readHeader: o.ReadHeaderTimeout, idle: o.IdleTimeout, maxHeader: o.MaxHeaderBytes, log: o.Log,
		listeners: make(map[*net.Listener]struct{}),
		conns:     make(map[*h1conn]struct{}),
		work:      make(chan connJob),
	}
	if s.readHeader <= 0 {
		s.readHeader = fallback.ReadHeaderTimeout
		if s.readHeader <= 0 {
			s.readHeader = fallback.ReadTimeout
		}
	}
	if s.idle <= 0 {
		s.idle = fallback.IdleTimeout
		if s.idle <= 0 {
			s.idle = fallback.ReadTimeout
		}
	}
	if s.maxHeader <= 0 {
		s.maxHeader = fallback.MaxHeaderBytes
		if s.maxHeader <= 0 {
			s.maxHeader = http.DefaultMaxHeaderBytes
		}
	}
	if s.log == nil {
		s.log = h.log
	}
	s.parkAfter = cmp.Or(o.ParkAfter, defaultParkAfter)
	if o.TLSConfig != nil {
		s.tlsConf = serverTLSConfig(o.TLSConfig, fallback)
		s.parkAfter = -1 // see tls.go
	}
	if s.parkAfter > 0 && (s.idle <= 0 || s.parkAfter < s.idle) {
		s.park = newParker(s)
	}
	return s
}

// frontKey marks a request context as the front end's: a response whose
// backend broke off is then aborted (see relay).
type frontKey struct{}

// Serve accepts connections on ln until Shutdown or Close, and runs the
// fallback server on the connections handed to it. It always returns a
// non-nil error: http.ErrServerClosed after Shutdown or Close.
func (s *H1Server) Serve(ln net.Listener) error {
	if s.inShutdown.Load() {
		ln.Close()
		return http.ErrServerClosed
	}
	hl := &handoffListener{addr: ln.Addr(), ch: make(chan net.Conn), done: make(chan struct{})}
	s.mu.Lock()
	s.listeners[&ln] = struct{}{}
	s.mu.Unlock()
	go s.fallback.Serve(hl)
	defer func() {
		hl.Close()
		s.mu.Lock()
		delete(s.listeners, &ln)
		s.mu.Unlock()
	}()

	base := context.Background()
	if s.fallback.BaseContext != nil {
		base = s.fallback.BaseContext(ln)
	}
	base = context.WithValue(base, frontKey{}, s)
	var delay time.Duration
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.inShutdown.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: back off as
			// http.Server does, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Debug("accept failed; retrying", "err", err, "delay", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		c := newH1conn(s, rwc, hl, base)
		if !s.track(c) {
			rwc.Close()
			c.release(true)
			continue
		}
		s.dispatch(c, true)
	}
}

func (s *H1Server) track(c *h1conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inShutdown.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// parkedConn is a connection the parker holds (h1park_linux.go).
type parkedConn struct {
	hl      *handoffListener
	base    context.Context
	fd      int32
	expires time.Time // zero: never
}

// connJob is a connection for a worker to serve.
type connJob struct {
	c     *h1conn
	first bool
}

// workerIdle is how long a worker waits for another connection before it
// ends (and its stack goes).
const workerIdle = 500 * time.Millisecond

// dispatch serves c on a worker goroutine: an idle one if any, else a new
// one. A goroutine started per connection grows its stack from 2 KiB to
// what serving takes, copying it each time — a tenth of the CPU of a
// connection that carries one request; a worker keeps its stack from one
// connection to the next.
func (s *H1Server) dispatch(c *h1conn, first bool) {
	select {
	case s.work <- connJob{c, first}:
	default:
		go s.worker(connJob{c, first})
	}
}

func (s *H1Server) worker(j connJob) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		j.c.serve(j.first)
		t.Reset(workerIdle)
		select {
		case j = <-s.work:
		case <-t.C:
			return
		}
	}
}

// resume serves a connection the parker gave back: the client sent (or hung
// up) after it sat idle.
func (s *H1Server) resume(pc *parkedConn) {
	rwc, err := resumeConn(pc)
	if err != nil {
		return // the socket is gone (and closed)
	}
	c := newH1conn(s, rwc, pc.hl, pc.base)
	if !s.track(c) {
		rwc.Close()
		c.release(true)
		return
	}
	c.now = time.Now()
	s.dispatch(c, false)
}

func (s *H1Server) untrack(c *h1conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops accepting, closes idle connections, lets requests in progress
// finish (their connections close after the response), and shuts the fallback
// server down likewise (which covers the handed-off connections), until ctx
// ends. Connections switched to another protocol (websockets) are not waited
// for; Handler.Wait counts them.
func (s *H1Server) Shutdown(ctx context.Context) error {
	s.inShutdown.Store(true)
	s.closeListeners()
	fb := make(chan error, 1)
	go func() { fb <- s.fallback.Shutdown(ctx) }()
	const maxPoll = 500 * time.Millisecond
	poll := time.Millisecond
	t := time.NewTimer(poll)
	defer t.Stop()
	for !s.closeIdle() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			poll = min(2*poll, maxPoll)
			t.Reset(poll)
		}
	}
	return <-fb
}

// Close closes the listeners and every connection at once, the fallback
// server's included.
func (s *H1Server) Close() error {
	s.inShutdown.Store(true)
	err := s.closeListeners()
	s.mu.Lock()
	for c := range s.conns {
		c.state.Store(connClosing)
		c.raw.Close() // (not a TLS close: it may wait for the client)
	}
	s.mu.Unlock()
	if s.park != nil {
		s.park.closeAll(true)
	}
	if ferr := s.fallback.Close(); err == nil {
		err = ferr
	}
	return err
}

func (s *H1Server) closeListeners() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for ln := range s.listeners {
		if cerr := (*ln).Close(); cerr != nil && err == nil {
			err = cerr
		}
		delete(s.listeners, ln)
	}
	return err
}

// closeIdle closes the connections waiting for a request and reports whether
// none are left.
func (s *H1Server) closeIdle() bool {
	if s.park != nil {
		s.park.closeAll(false)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(connIdle, connClosing) {
			c.raw.Close()
		}
	}
	return len(s.conns) == 0
}

// Connection states, for Shutdown.
const (
	connIdle    int32 = iota // waiting for a request
	connActive               // reading or serving one
	connClosing              // being closed
)

// Watcher states (see h1conn.arm).
const (
	watchOff int32 = iota
	watchArmed
	watchReading
)

// h1conn is one client connection. Its buffers are pooled.
type h1conn struct {
	s      *H1Server
	rwc    net.Conn // raw, or tc over it
	hl     *handoffListener
	cr     connReader
	rio    rawIO // rwc's reads and writes on the fast path (rawio_linux.go)
	br     *bufio.Reader
	bw     *bufio.Writer
	p      parser
	w      h1Writer
	req    http.Request
	url    url.URL
	tmpl   *http.Request   // an empty request carrying ctx
	base   context.Context // the listener's, which ctx derives from
	ctx    context.Context
	cancel context.CancelFunc
	remote string
	peer   netip.Addr // remote's address, parsed once (Handler.clientAddr)
	state  atomic.Int32

	// raw is the accepted connection; tc is the TLS connection over it
	// (tls.go), nil on a plaintext one, and tlsp points at tlsState, its
	// state, once the handshake is done.
	raw      net.Conn
	tc       *tls.Conn
	tlsp     *tls.ConnectionState
	tlsState tls.ConnectionState

	watch        atomic.Int32
	watchPending atomic.Bool  // the watch timer is pending (see arm)
	watchFrom    atomic.Int64 // the watched request's start, since clockBase
	watchMu      sync.Mutex   // orders the watch's deadline against disarm's
	stopWatch    bool         // disarm has begun; guarded by watchMu
	watchT       *time.Timer
	watchDone    chan struct{}
	gone         bool // the watcher saw the client hang up
	// dirty means the read deadline may be one set for something else
	// than reading the next request (a watch's end, a drain), so that
	// without configured timeouts it must be cleared before reading.
	dirty    bool
	watchBuf [1]byte
	rs       respScratch // backend response heads (h1resp.go)
	look     lookup      // the current request's (see forSite)
	obs      reqObs      // the current request's, when requests are observed (observe.go)
	trace    reqTrace    // the current request's, when requests are traced (trace.go)
	// upstream is the backend connection of the exchange under way, which
	// the end of ctx aborts (see abortLink); unlinkCtx stops that watch.
	upstream  atomic.Pointer[upstreamConn]
	unlinkCtx func() bool
	// now is the request's latest clock read: when its head was read, then
	// when the backend's response came (see Handler.forward). idleAt is
	// when the idle deadline in force was set; zero when another is.
	now, idleAt time.Time
}

var connPoolH1 sync.Pool

func newH1conn(s *H1Server, rwc net.Conn, hl *handoffListener, base context.Context) *h1conn {
	c, _ := connPoolH1.Get().(*h1conn)
	if c == nil {
		c = &h1conn{
			br:        bufio.NewReaderSize(nil, 8<<10), // a head and a small body arrive in one read
			bw:        bufio.NewWriterSize(nil, 4<<10),
			watchDone: make(chan struct{}, 1),
		}
		c.watchT = time.AfterFunc(time.Hour, c.watchClient)
		c.watchT.Stop()
		c.w.c = c
		c.w.hdr = make(http.Header, 8)
	}
	c.s, c.rwc, c.raw, c.hl = s, rwc, rwc, hl
	var rw io.ReadWriter = rwc
	if s.tlsConf == nil && c.rio.init(rwc) {
		rw = &c.rio
	}
	c.cr = connReader{c: rw}
	c.br.Reset(&c.cr)
	c.bw.Reset(rw)
	c.p.maxBytes = s.maxHeader
	c.base = base
	c.ctx, c.cancel = context.WithCancel(base)
	c.unlinkCtx = context.AfterFunc(c.ctx, c.abortUpstream)
	c.tmpl = new(http.Request).WithContext(c.ctx)
	c.remote = rwc.RemoteAddr().String()
	c.peer = netip.Addr{}
	if ta, ok := rwc.RemoteAddr().(*net.TCPAddr); ok {
		c.peer = ta.AddrPort().Addr().Unmap()
	}
	c.state.Store(connIdle)
	c.gone, c.dirty = false, false
	c.idleAt = time.Time{}
	return c
}

// release returns c's buffers to the pool. Nothing may use c afterwards.
//
// pool false leaves c to the garbage collector instead of the pool.
func (c *h1conn) release(pool bool) {
	// A watch that fired already may still be running abortUpstream: c
	// is then left to the garbage collector rather than reused.
	fired := c.unlinkCtx != nil && !c.unlinkCtx()
	if c.cancel != nil {
		c.cancel()
	}
	if fired {
		return
	}
	c.s, c.rwc, c.raw, c.hl, c.cr.c = nil, nil, nil, nil, nil
	c.rio = rawIO{}
	c.tc, c.tlsp, c.tlsState = nil, nil, tls.ConnectionState{}
	c.base, c.ctx, c.cancel, c.tmpl, c.unlinkCtx = nil, nil, nil, nil, nil
	c.upstream.Store(nil)
	c.req = http.Request{}
	c.look = lookup{}
	if cap(c.p.raw) > 64<<10 {
		// A huge head's buffers are not kept for every later connection.
		c.p.raw, c.p.ends, c.p.vals = nil, nil, nil
	}
	if cap(c.rs.text) > 64<<10 {
		c.rs = respScratch{}
	}
	c.br.Reset(nil)
	c.bw.Reset(nil)
	clear(c.w.hdr)
	if pool {
		connPoolH1.Put(c)
	}
}

// abortUpstream aborts the backend connection of the exchange under way,
// if any, when the connection's context ends.
func (c *h1conn) abortUpstream() {
	if u := c.upstream.Swap(nil); u != nil {
		u.abort()
	}
}

// serve runs the connection's request loop.
//
// first is false for a connection the parker resumed: it has served
// requests before.
func (c *h1conn) serve(first bool) {
	reuse, handedOff, parked := false, false, false
	defer func() {
		if v := recover(); v != nil {
			// The connection's state is unknown: it is closed, and its
			// buffers are left to the garbage collector.
			reuse = false
			if v != http.ErrAbortHandler {
				c.s.log.Error("panic serving connection", "remote", c.remote, "panic", v, "stack", string(debug.Stack()))
			}
		}
		c.s.untrack(c)
		if !handedOff {
			c.rwc.Close()
		}
		if reuse {
			c.release(!parked) // a parked connection's memory is meant to go
		} else {
			c.cancel()
		}
	}()
	if c.s.tlsConf != nil && c.tc == nil {
		switch c.startTLS() {
		case tlsClose:
			reuse = true
			return
		case tlsHandedOff:
			reuse, handedOff = true, true
			return
		}
	}
	for ; ; first = false {
		switch c.serveOne(first) {
		case endNext:
			continue
		case endHandedOff:
			handedOff = true
		case endParked:
			handedOff, parked = true, true // the parker holds the connection now
		}
		reuse = true
		return
	}
}

// connEnd is how serveOne left a connection.
type connEnd int

const (
	endClose     connEnd = iota // to be closed
	endNext                     // it may carry another request
	endHandedOff                // net/http has it
	endParked                   // idle, held by the parker (h1park_linux.go)
)

// serveOne reads and serves one request and reports how the connection
// goes on.
func (c *h1conn) serveOne(first bool) connEnd {
	s := c.s
	if first {
		if s.readHeader > 0 {
			c.rwc.SetReadDeadline(time.Now().Add(s.readHeader))
		}
	} else if c.br.Buffered() == 0 {
		if s.park != nil {
			// The wait for the next request ends after parkAfter, when
			// the connection goes to the parker (below).
			if c.dirty || c.idleAt.IsZero() {
				c.idleAt = time.Now()
				c.rwc.SetReadDeadline(c.idleAt.Add(s.parkAfter))
			}
		} else if s.idle > 0 {
			// Setting a deadline costs three clock reads and a timer
			// update; the idle deadline in force is kept while it is
			// younger than an eighth of the timeout (c.now is the last
			// request's latest clock read), so a connection idles for
			// 7/8 to all of IdleTimeout.
			if c.dirty || c.idleAt.IsZero() || c.now.Sub(c.idleAt) > s.idle/8 {
				c.idleAt = time.Now()
				c.rwc.SetReadDeadline(c.idleAt.Add(s.idle))
			}
		} else if c.dirty {
			c.rwc.SetReadDeadline(time.Time{})
		}
		c.dirty = false
	}
	buf, err := c.br.Peek(1)
	for err != nil && !first && s.park != nil && errors.Is(err, os.ErrDeadlineExceeded) && !c.idleAt.IsZero() {
		// The park deadline: the connection goes to the parker if it has
		// been idle for parkAfter, else the deadline moves on.
		if c.state.Load() != connIdle {
			return endClose
		}
		now := time.Now()
		if now.Sub(c.now) >= s.parkAfter {
			var expires time.Time
			if s.idle > 0 {
				expires = c.now.Add(s.idle)
			}
			if s.park.park(c, expires) {
				return endParked
			}
			return endClose
		}
		c.idleAt = now
		c.rwc.SetReadDeadline(c.now.Add(s.parkAfter))
		buf, err = c.br.Peek(1)
	}
	if err != nil {
		return endClose // closed, idle timeout, or Shutdown
	}
	if !c.state.CompareAndSwap(connIdle, connActive) {
		return endClose // Shutdown closed it just now
	}
	if !first {
		// The header deadline runs from the request's first byte. A head
		// already in the buffer needs no more reads, and no deadline.
		buf, _ = c.br.Peek(c.br.Buffered())
		// (A head read alone ends the buffer: no search needed.)
		if !bytes.HasSuffix(buf, crlfcrlf) && bytes.Index(buf, crlfcrlf) < 0 {
			if s.readHeader > 0 {
				c.rwc.SetReadDeadline(time.Now().Add(s.readHeader))
				c.idleAt = time.Time{}
			} else if c.dirty || s.park != nil {
				// (The park deadline is not one for reading a head.)
				c.idleAt = time.Time{}
				c.rwc.SetReadDeadline(time.Time{})
			}
			c.dirty = false
		}
	}

	if err := c.p.readHead(c.br); err != nil {
		if he, ok := err.(*headError); ok {
			c.answerError(he)
			return endClose
		}
		if err == errHandOff {
			c.handOff()
			return endHandedOff
		}
		return endClose // the client went away or was too slow
	}
	c.now = time.Now()
	head := &c.p.head
	if c.forSite(head) {
		c.handOff()
		return endHandedOff
	}

	r := &c.req
	var body *h1Body
	if head.contentLength != 0 {
		// A request with a body gets its own Request and body reader: the
		// forwarder's body writer may still be reading when the handler
		// returns (a backend that answered early), and must not see the
		// next request's.
		r = new(http.Request)
		body = &h1Body{br: c.br, remaining: head.contentLength, onEOF: c.armAfterBody,
			conn: c.rwc, timeout: s.h.bodyTimeout, onFault: c.cancel}
		if head.contentLength < 0 {
			body.cr = &chunkedReader{br: c.br}
		}
		c.rwc.SetReadDeadline(time.Time{})
		c.dirty = body.timeout > 0
		c.idleAt = time.Time{}
	}
	*r = *c.tmpl
	r.Method = head.method
	if body == nil {
		c.url = head.url
		r.URL = &c.url
		r.Body = http.NoBody
	} else {
		u := head.url
		r.URL = &u
		r.Body = body
		r.ContentLength = head.contentLength
		if head.contentLength < 0 {
			r.TransferEncoding = []string{"chunked"}
		}
	}
	r.Proto, r.ProtoMajor, r.ProtoMinor = head.proto, 1, head.minor
	r.Header = head.header
	r.Host = head.host
	r.RemoteAddr = c.remote
	r.TLS = c.tlsp
	r.RequestURI = head.target
	r.Close = head.close

	w := &c.w
	w.reset(r, head)
	if body == nil && c.br.Buffered() == 0 {
		c.arm()
	}
	c.serveHTTP(w, r)
	if body != nil {
		if status := int(body.fault.Load()); status != 0 {
			c.answerBodyFault(w, body, status)
			return endClose
		}
	}
	if body == nil {
		c.disarm()
		if c.gone {
			return endClose // nobody to answer
		}
	}
	w.finish()
	flushed := c.bw.Flush() == nil && w.err == nil
	if body != nil {
		// The body's end is settled after the answer is out: a client
		// may wait for the answer before sending the rest (or giving up
		// on it). Until then a body writer may still use the reader, so
		// this comes before any return.
		complete := c.finishBody(body, flushed)
		c.disarm() // a watch the body's end may have started
		if !flushed || c.gone {
			return endClose
		}
		if !complete {
			c.lingerClose()
			return endClose
		}
	} else if !flushed {
		return endClose
	}
	if w.closeAfter || s.inShutdown.Load() {
		return endClose
	}
	if !c.state.CompareAndSwap(connActive, connIdle) {
		return endClose
	}
	return endNext
}

var crlfcrlf = []byte("\r\n\r\n")

// serveHTTP calls the Handler, recovering a panic as net/http does: logged
// (unless it is http.ErrAbortHandler), a 500 if nothing was sent yet, and the
// connection closed.
func (c *h1conn) serveHTTP(w *h1Writer, r *http.Request) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		c.disarm()
		w.closeAfter = true
		if v == http.ErrAbortHandler {
			panic(v) // cut the response off: the connection closes unfinished
		}
		c.s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
		if w.committed {
			panic(http.ErrAbortHandler)
		}
		clear(w.hdr)
		w.status = 0
		w.pending = w.pending[:0]
		plain(w, http.StatusInternalServerError, "internal error\n")
	}()
	c.s.h.ServeHTTP(w, r)
}

// forSite reports a request whose route leads to a site, which net/http
// serves (see above).
// The lookup is kept for the Handler (see lookup), which need not repeat it.
func (c *h1conn) forSite(head *reqHead) bool {
	l := &c.look
	l.table, l.rawHost, l.host, l.path = c.s.h.table.Load(), head.host, route.NormalizeHost(head.host), head.url.Path
	l.m, l.ok = l.table.Lookup(l.host, l.path)
	return l.ok && l.m.Rule.Redirect == nil && !l.m.Target.Maintenance && l.m.Target.Site != nil
}

// lookup is a routing table lookup the front end made for a request.
type lookup struct {
	table      *Table
	rawHost    string // the request's Host, which host normalizes
	host, path string
	m          route.Match[*Deployment]
	ok         bool
}

// handOff gives the connection to the fallback server, replaying the bytes
// read from it: the current request's head and whatever was read past it.
func (c *h1conn) handOff() {
	n := c.br.Buffered()
	replay := make([]byte, 0, len(c.p.raw)+n+1)
	replay = append(replay, c.p.raw...)
	buffered, _ := c.br.Peek(n)
	replay = append(replay, buffered...)
	if c.cr.hasPending {
		replay = append(replay, c.cr.pending)
	}
	c.rwc.SetDeadline(time.Time{})
	if c.tlsp != nil {
		// (A copy: c's state goes back to the pool.)
		st := *c.tlsp
		c.hl.push(&tlsReplayConn{replayConn{Conn: c.rwc, replay: replay}, &st})
		return
	}
	c.hl.push(&replayConn{Conn: c.rwc, replay: replay})
}

// answerBodyFault ends a request whose body broke the rules or stopped
// coming (see h1Body.fault): the answer, when none has begun, is the fault's
// status; a response under way is cut off. The connection closes either way.
func (c *h1conn) answerBodyFault(w *h1Writer, b *h1Body, status int) {
	c.finishBody(b, false)
	c.disarm()
	if w.committed {
		return // the connection closes unfinished: the client sees the cut
	}
	clear(w.hdr)
	w.status = 0
	w.pending = w.pending[:0]
	w.closeAfter = true
	msg := textBodyTimeout
	if status == http.StatusBadRequest {
		msg = textBadBody
	}
	refuse(w, status, msg)
	w.finish()
	if c.bw.Flush() == nil && w.err == nil {
		c.lingerClose()
	}
}

// answerError answers a request the parser refused, and closes.
func (c *h1conn) answerError(e *headError) {
	text := http.StatusText(e.status)
	body := "400 Bad Request: " + e.reason
	if e.status != http.StatusBadRequest {
		body = itoa3(e.status) + " " + text
	}
	bw := c.bw
	bw.WriteString(statusLine(e.status))
	bw.WriteString("Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: ")
	bw.WriteString(itoa(int64(len(body))))
	bw.WriteString("\r\n\r\n")
	bw.WriteString(body)
	if bw.Flush() == nil {
		c.lingerClose()
	}
}

// lingerClose half-closes the connection and reads (and drops) what the
// client still sends, for at most lingerTime, so that closing does not reset
// the connection under the answer just sent (see lingerTime).
func (c *h1conn) lingerClose() {
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.rwc.SetReadDeadline(time.Now().Add(lingerTime))
	io.Copy(io.Discard, c.rwc)
}

// finishBody ends the request body's use by the handler and reports whether
// it was read to its end, which keeping the connection requires. A body
// writer still blocked on the client is interrupted.
func (c *h1conn) finishBody(b *h1Body, drain bool) bool {
	b.stop.Store(true)
	if !b.mu.TryLock() {
		// A body writer is blocked reading: the backend answered
		// without the rest. Interrupt it.
		c.rwc.SetReadDeadline(aLongTimeAgo)
		c.dirty = true
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	b.onEOF = nil
	if drain && !b.eof && b.err == nil {
		// Whatever the handler left unread, within reason, is read and
		// dropped (as net/http does), so that the connection can go on.
		c.rwc.SetReadDeadline(time.Now().Add(lingerTime))
		c.dirty = true
		io.CopyN(io.Discard, readerFunc(b.readLocked), maxDrain)
	}
	b.closed = true
	return b.eof
}

// maxDrain bounds the unread request body finishBody reads to keep a
// connection (net/http's maxPostHandlerReadBytes).
const maxDrain = 256 << 10

// armAfterBody starts the hang-up watch once a request's body has been read
// to its end (by the forwarder, while the backend works), as net/http does;
// not when the client has already sent more (pipelining). It runs under the
// body's lock, which finishBody takes before disarm.
func (c *h1conn) armAfterBody() {
	if c.br.Buffered() == 0 && !c.cr.hasPending {
		c.arm()
	}
}

// arm starts the hang-up watch for a request without a body, or whose body
// has been read, counting from the request's clock read (c.now).
//
// The timer is lazy, as waitTimer is, so that a request costs no timer
// operation: it stays pending across requests, and when it fires it starts
// the watch if the request under way is old enough, waits out the rest of
// it for a younger one, or (no request) stops until the next arm.
// watchPending says the timer is pending; arm and the timer hand the job
// of re-arming it over with compare-and-swaps, so that neither misses the
// other.
func (c *h1conn) arm() {
	c.watchFrom.Store(int64(c.now.Sub(clockBase)))
	c.watch.Store(watchArmed)
	if c.watchPending.CompareAndSwap(false, true) {
		c.watchT.Reset(watchAfter)
	}
}

// clockBase anchors the watch's times (monotonic durations since it).
var clockBase = time.Now()

// disarm ends the watch: the timer is left to find no request, or the read
// it started is interrupted and waited for.
func (c *h1conn) disarm() {
	if c.watch.CompareAndSwap(watchArmed, watchOff) {
		return
	}
	if c.watch.Load() == watchOff {
		return // disarmed already (a panic's recovery does it)
	}
	c.watchMu.Lock()
	c.stopWatch = true
	c.rwc.SetReadDeadline(aLongTimeAgo)
	c.watchMu.Unlock()
	<-c.watchDone
	c.stopWatch = false
	c.watch.Store(watchOff)
	c.dirty = true
}

// watchClient runs when a request without a body outlasts watchAfter: it
// reads from the connection until the client sends something (the byte is
// kept for the next request) or hangs up (the request's context is then
// canceled, which stops the backend's work), or disarm interrupts it.
func (c *h1conn) watchClient() {
	for {
		if c.watch.Load() != watchArmed {
			// No request to watch: the timer stops, unless an arm
			// came just now and left re-arming it to this run.
			c.watchPending.Store(false)
			if c.watch.Load() != watchArmed || !c.watchPending.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		if left := watchAfter - (time.Since(clockBase) - time.Duration(c.watchFrom.Load())); left > 0 {
			c.watchT.Reset(left) // a younger request: wait out the rest
			return
		}
		if c.watch.CompareAndSwap(watchArmed, watchReading) {
			break
		}
	}
	// The timer is done; the next arm, after disarm has seen this read
	// end, starts it again.
	c.watchPending.Store(false)
	// The deadline is cleared unless disarm came first: its deadline in
	// the past must win, or this read could wait for ever.
	c.watchMu.Lock()
	if c.stopWatch {
		c.watchMu.Unlock()
		c.watchDone <- struct{}{}
		return
	}
	c.rwc.SetReadDeadline(time.Time{})
	c.watchMu.Unlock()
	n, err := c.rwc.Read(c.watchBuf[:])
	if n > 0 {
		c.cr.pending, c.cr.hasPending = c.watchBuf[0], true
	} else if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.gone = true
		c.cancel()
	}
	c.watchDone <- struct{}{}
}

// connReader reads the connection, after a byte the watcher read ahead.
type connReader struct {
	c          io.Reader
	pending    byte
	hasPending bool
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.hasPending && len(p) > 0 {
		p[0], r.hasPending = r.pending, false
		return 1, nil
	}
	return r.c.Read(p)
}

// h1Body is a request body read from the client connection. Reads and the
// end of the request (finishBody) are serialized, so a reader that outlives
// the handler never touches the connection's next request.
//
// Every read that has to wait for the client is bounded by timeout: a body
// that stops coming (a byte a minute holds a backend connection for ever
// otherwise) ends the request, as a malformed chunked body does: fault
// records the status to answer (408, 400) and onFault cancels the request,
// which stops the backend's exchange.
type h1Body struct {
	mu        sync.Mutex
	br        *bufio.Reader
	remaining int64          // Content-Length bodies: bytes left
	cr        *chunkedReader // chunked bodies: the chunk decoder; nil otherwise
	eof       bool
	closed    bool
	err       error
	onEOF     func() // called once the body has been read to its end

	conn    net.Conn
	timeout time.Duration // between reads from the client; 0: none
	onFault func()
	fault   atomic.Int32 // 408 or 400, once the body has failed so
	stop    atomic.Bool  // finishBody has begun: reads no longer set deadlines
}

func (b *h1Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

func (b *h1Body) readLocked(p []byte) (n int, err error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.eof {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Only a read that reaches the connection can wait for the client.
	timed := b.timeout > 0 && !b.stop.Load() && b.br.Buffered() == 0
	if timed {
		b.conn.SetReadDeadline(time.Now().Add(b.timeout))
		if b.stop.Load() {
			// finishBody's interrupt may have come before this
			// deadline replaced it: honor it.
			b.conn.SetReadDeadline(aLongTimeAgo)
		}
	}
	if b.cr == nil {
		if int64(len(p)) > b.remaining {
			p = p[:b.remaining]
		}
		n, err = b.br.Read(p)
		b.remaining -= int64(n)
		if b.remaining == 0 {
			b.setEOF()
			return n, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	} else {
		n, err = b.cr.Read(p)
		if err == io.EOF {
			if terr := skipTrailer(b.br); terr != nil {
				err = terr
			} else {
				b.setEOF()
			}
		}
	}
	if err != nil && err != io.EOF {
		b.err = err
		var be *bodyError
		switch {
		case b.stop.Load():
		case errors.As(err, &be):
			b.setFault(http.StatusBadRequest)
		case timed && errors.Is(err, os.ErrDeadlineExceeded):
			b.setFault(http.StatusRequestTimeout)
		}
	}
	return n, err
}

// setFault records the status the body's failure calls for, and cancels the
// request.
func (b *h1Body) setFault(status int) {
	if b.fault.CompareAndSwap(0, int32(status)) && b.onFault != nil {
		b.onFault()
	}
}

func (b *h1Body) setEOF() {
	b.eof = true
	if b.onEOF != nil {
		b.onEOF()
		b.onEOF = nil
	}
}

// Close does nothing: the front end ends the body when the handler is done.
func (b *h1Body) Close() error { return nil }

// skipTrailer reads the trailer section after a chunked body's last chunk.
// Trailer fields the client did not announce are dropped, as net/http does
// (requests announcing some are handed to net/http); they must still be well
// formed, and fit in maxTrailerBytes (net/http's limit is its buffer, 4 KiB).
func skipTrailer(br *bufio.Reader) error {
	total := 0
	for {
		line, err := br.ReadSlice('\n')
		total += len(line)
		if total > maxTrailerBytes || err == bufio.ErrBufferFull {
			return &bodyError{"request trailer too large"}
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return &bodyError{"malformed trailer: line not terminated by CRLF"}
		}
		if len(line) == 2 {
			return nil
		}
		k, v, ok := bytes.Cut(line[:len(line)-2], []byte(":"))
		if !ok || len(k) == 0 || !validToken(string(k)) || !validFieldValue(string(v)) {
			return &bodyError{"malformed trailer field"}
		}
	}
}

// bodyError is a request body that breaks the framing rules: the request is
// answered 400.
type bodyError struct{ reason string }

func (e *bodyError) Error() string { return "malformed request body: " + e.reason }

// Limits of a chunked request body's size lines. A chunk is at most 10 hex
// digits long (under 1 TiB): a longer size, however many zeros lead, is
// refused rather than waited on (ffffffffffffffff would promise 2^64 bytes).
const (
	maxChunkLine      = 4 << 10 // a size line with its extensions (net/http's buffer)
	maxChunkSizeDigit = 10
)

// chunkedReader decodes a chunked request body (RFC 9112 §7.1) as
// net/http's decoder does (FuzzParseRequest compares them), with chunk sizes
// bounded by maxChunkSize and every framing fault a *bodyError. It stops at
// the last chunk; the trailer section is the caller's (skipTrailer).
type chunkedReader struct {
	br       *bufio.Reader
	n        int64 // bytes left in the current chunk
	checkEnd bool  // the CRLF after a chunk's data is due
	excess   int64 // overhead read beyond what the data justifies
	err      error
}

func (cr *chunkedReader) Read(b []byte) (n int, err error) {
	for cr.err == nil {
		if cr.checkEnd {
			if n > 0 && cr.br.Buffered() < 2 {
				break // some data: return it rather than block
			}
			var crlf [2]byte
			if _, cr.err = io.ReadFull(cr.br, crlf[:]); cr.err != nil {
				if cr.err == io.EOF {
					cr.err = io.ErrUnexpectedEOF
				}
				break
			}
			if crlf != [2]byte{'\r', '\n'} {
				cr.err = &bodyError{"chunk data not followed by CRLF"}
				break
			}
			cr.checkEnd = false
		}
		if cr.n == 0 {
			if n > 0 && !cr.headerAvailable() {
				break // enough read: do not block on the next size line
			}
			cr.beginChunk()
			continue
		}
		if len(b) == 0 || n > 0 && cr.br.Buffered() == 0 {
			break // (data in hand: return it rather than block for more)
		}
		rbuf := b
		if int64(len(rbuf)) > cr.n {
			rbuf = rbuf[:cr.n]
		}
		var n0 int
		n0, cr.err = cr.br.Read(rbuf)
		n += n0
		b = b[n0:]
		cr.n -= int64(n0)
		if cr.n == 0 && cr.err == nil {
			cr.checkEnd = true
		} else if cr.err == io.EOF {
			cr.err = io.ErrUnexpectedEOF
		}
	}
	return n, cr.err
}

func (cr *chunkedReader) headerAvailable() bool {
	if n := cr.br.Buffered(); n > 0 {
		peek, _ := cr.br.Peek(n)
		return bytes.IndexByte(peek, '\n') >= 0
	}
	return false
}

// beginChunk reads a chunk-size line: hex digits, optional whitespace and
// extensions, CRLF.
func (cr *chunkedReader) beginChunk() {
	line, err := cr.br.ReadSlice('\n')
	if err != nil {
		switch err {
		case io.EOF:
			err = io.ErrUnexpectedEOF
		case bufio.ErrBufferFull:
			err = &bodyError{"chunk size line too long"}
		}
		cr.err = err
		return
	}
	if len(line) < 2 || bytes.IndexByte(line, '\r') != len(line)-2 {
		cr.err = &bodyError{"chunk size line not terminated by CRLF"}
		return
	}
	line = line[:len(line)-2]
	if len(line) >= maxChunkLine {
		cr.err = &bodyError{"chunk size line too long"}
		return
	}
	cr.excess += int64(len(line)) + 2
	size, _, _ := bytes.Cut(line, []byte(";"))
	for len(size) > 0 && (size[len(size)-1] == ' ' || size[len(size)-1] == '\t') {
		size = size[:len(size)-1]
	}
	if len(size) == 0 {
		cr.err = &bodyError{"empty chunk size"}
		return
	}
	if len(size) > maxChunkSizeDigit {
		cr.err = &bodyError{"chunk size too large"}
		return
	}
	var v int64
	for _, c := range size {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			cr.err = &bodyError{"invalid byte in chunk size"}
			return
		}
		v = v<<4 | int64(c)
	}
	cr.n = v
	// As net/http: 16 bytes of overhead per chunk, plus twice its data,
	// are allowed; more means a body of mostly extensions.
	cr.excess = max(cr.excess-16-2*v, 0)
	if cr.excess > 16<<10 {
		cr.err = &bodyError{"chunked encoding contains too much non-data"}
		return
	}
	if v == 0 {
		cr.err = io.EOF
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// handoffListener is the fallback server's listener: it yields the
// connections the front end hands over.
type handoffListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// push hands c to the fallback server, or closes it when that has stopped.
func (l *handoffListener) push(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

// replayConn is a handed-off connection: the bytes the front end read come
// first.
type replayConn struct {
	net.Conn
	replay []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.replay) > 0 {
		n := copy(p, c.replay)
		c.replay = c.replay[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
