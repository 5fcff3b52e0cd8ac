package proxy

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// This file is the data plane's fast path: a purpose-built HTTP/1.1 forwarder
// used for every request to a backend except protocol upgrades (websockets),
// and except when Options.Transport asks for a specific RoundTripper.
//
// httputil.ReverseProxy over http.Transport costs 100–150 µs of CPU per small
// request on a 2-vCPU machine. Much of it is bookkeeping that a proxy does not
// need: the outbound request is a deep copy of the inbound one, the transport
// hands every request and response between the handler goroutine and a
// per-connection read loop and write loop, and each hop re-parses and
// re-validates headers. The forwarder instead writes the request head straight
// into a pooled connection's buffer, reads the response in the handler's own
// goroutine, and copies it out with a pooled buffer. What it keeps from
// ReverseProxy, and the tests pin: hop-by-hop header removal (RFC 9110 §7.6.1)
// in both directions, X-Forwarded-* rules (see rewrite), 1xx forwarding,
// immediate flushing of streams (text/event-stream or unknown length),
// trailers, request bodies streamed in both framings, aborting the client's
// response when the backend's breaks, and retries on connect failure.

// forward serves r from one of d's backends.
//
// Clock reads cost 150–200 ns on some virtual machines, and a request needs
// many timestamps; the fast path takes two (start, from the front end when
// it serves the request, and when the response head is in) and a third only
// for a response that streamed, and passes them down.
//
// hop is the hop count r arrived with (hops), which the forwarded request
// carries one more of.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, d *Deployment, start time.Time, hop int) {
	status, end, failed, abort := h.exchange(w, r, d, start, hop)
	if h.tracer != nil {
		if t := traceOf(w, r); t != nil {
			t.status = status // (499 is written nowhere)
		}
	}
	if d.Metrics != nil {
		d.Metrics.Observe(status, end.Sub(start), failed)
	}
	if abort {
		// The backend's response broke off after its head was sent: the
		// only honest signal left is to cut the client's connection, as
		// ReverseProxy does.
		panic(http.ErrAbortHandler)
	}
}

// exchange picks a backend, retrying on another one when a connection cannot
// be made (nothing has been sent then, so any request is safe to send
// elsewhere), and relays the request. A deployment with a Holder lets the
// request wait for a first backend (cold start), as pickTransport does.
// failed means no backend response was obtained; abort means the client's
// response must be cut off.
func (h *Handler) exchange(w http.ResponseWriter, r *http.Request, d *Deployment, now time.Time, hop int) (status int, end time.Time, failed, abort bool) {
	ctx := r.Context()
	var tried [maxAttempts]*Backend
	var err error = errNoBackend
	var heldSince time.Time
	var t *reqTrace
	var span trace.Span // the hold's, then each attempt's
	if h.tracer != nil {
		t = traceOf(w, r)
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		b := d.Pool.acquire(tried[:attempt], now)
		for b == nil && (attempt == 0 || d.Forwarded) && d.Hold != nil {
			first := heldSince.IsZero()
			if first {
				heldSince = now
				if t != nil {
					span = t.childAt("hold", now)
				}
			}
			if herr := d.Hold.Await(ctx, heldSince, first); herr != nil {
				err = errColdStart
				if refusal(herr) != nil {
					err = herr
				}
				break
			}
			now = time.Now()
			b = d.Pool.acquire(nil, now)
		}
		if span != nil && attempt == 0 && !heldSince.IsZero() {
			t.holdDone(span, heldSince, b, err)
		}
		if b == nil {
			break
		}
		tried[attempt] = b
		if t != nil {
			span = t.attempt(r.Header, r.Method, b, attempt)
		}
		c, reused := b.conns.get(now, r.Body == nil || r.Body == http.NoBody), true
		if c == nil {
			reused = false
			if c, err = h.dial.dial(ctx, b); err != nil {
				if t != nil {
					attemptDone(span, 0, true, err)
				}
				b.releaseAt(time.Now())
				if isConnectError(err) && ctx.Err() == nil {
					if !isRefusedDial(err) {
						b.SetHealthy(false)
					}
					continue
				}
				break
			}
		}
		status, end, failed, abort = h.relay(w, r, d, b, c, reused, heldSince, now, hop)
		if t != nil {
			attemptDone(span, status, failed, nil)
		}
		b.releaseAt(end)
		return status, end, failed, abort
	}
	return h.fail(w, r, d, err), time.Now(), true, false
}

// fail answers a request that got no backend response and returns the status
// to record. It matches errorHandler.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, d *Deployment, err error) int {
	switch {
	case errors.Is(err, errNoBackend):
		plain(w, http.StatusServiceUnavailable, textNoBackend)
		return http.StatusServiceUnavailable
	case r.Context().Err() != nil || errors.Is(err, context.Canceled):
		return 499 // the client went away; nobody is listening for an answer
	case isRefusedDial(err):
		h.log.Warn("upstream dial refused", "deployment", d.ID, "host", r.Host, "err", err)
		plain(w, http.StatusBadGateway, textRefused)
		return http.StatusBadGateway
	case errors.Is(err, errUpstreamTimeout):
		h.log.Debug("backend response timed out", "host", r.Host, "path", r.URL.Path, "timeout", h.respTimeout)
		plain(w, http.StatusGatewayTimeout, textTimeout)
		return http.StatusGatewayTimeout
	case refusal(err) != nil:
		answerRefusal(w, refusal(err))
		return http.StatusServiceUnavailable
	case errors.Is(err, errColdStart):
		if d.Hold != nil {
			setRetryAfter(w, d.Hold.RetryAfter())
		}
		plain(w, http.StatusServiceUnavailable, textColdStart)
		return http.StatusServiceUnavailable
	default:
		h.log.Debug("backend request failed", "host", r.Host, "path", r.URL.Path, "err", err)
		plain(w, http.StatusBadGateway, textBadGateway)
		return http.StatusBadGateway
	}
}

// relay sends r over c (a connection to b) and copies the response to w. It
// owns c: the connection goes back to b's pool only when the exchange ended
// cleanly, and is closed otherwise.
func (h *Handler) relay(w http.ResponseWriter, r *http.Request, d *Deployment, b *Backend, c *upstreamConn, reused bool, heldSince, now time.Time, hop int) (status int, end time.Time, failed, abort bool) {
	ctx := r.Context()
	hasBody := r.Body != nil && r.Body != http.NoBody
	var resp *http.Response
	var wdone chan error // the request body writer's result
	var bodyDone bool    // the body was written before the response head was read
	var link abortLink
	for {
		// A client that goes away must not leave the backend working for
		// nobody: a past deadline unblocks whatever waits on c.
		link = linkAbort(ctx, w, c)
		var err error
		resp, wdone, err = h.send(w, r, b, c, hasBody, d.Gate != nil, now, hop)
		if err == nil {
			// A backend that answers before the whole body has reached it
			// may read what remains as its next request: the connection
			// is not reused then.
			bodyDone = bodyWritten(wdone)
			break
		}
		link.unlink()
		c.Close()
		if errors.Is(err, errStaleIdle) && ctx.Err() == nil {
			// Found before anything was sent (connPool.get): any
			// request goes on a fresh connection.
			reused = false
			if c, err = h.dial.dial(ctx, b); err != nil {
				return h.fail(w, r, d, err), time.Now(), true, false
			}
			continue
		}
		// A kept-alive connection may have been closed by the backend just
		// as it was reused, before the request arrived. An idempotent
		// request without a body is then sent once more on a fresh
		// connection, as http.Transport does (the backend may also have
		// died while handling it, so nothing else is replayed). Anything
		// else is the backend's failure.
		if !reused || hasBody || !replayable(r) || ctx.Err() != nil || !isStaleConnError(err) {
			return h.fail(w, r, d, err), time.Now(), true, false
		}
		reused = false
		if c, err = h.dial.dial(ctx, b); err != nil {
			return h.fail(w, r, d, err), time.Now(), true, false
		}
	}

	// The response head is in; from here on berth answers with the
	// backend's status.
	end = time.Now()
	if fw, ok := w.(*h1Writer); ok {
		fw.c.now = end // the Date of the response, when the backend sent none
	}
	if !heldSince.IsZero() {
		held(d, b, heldSince, resp)
	}
	hdr := w.Header()
	fast := resp == &c.rs.resp // read by fastResponse, which noted some fields
	switch {
	case !fast:
		copyHeader(hdr, resp.Header)
	case c.rs.hasConn:
		copyHeaderConn(hdr, resp.Header, resp.Header["Connection"])
	default:
		copyHeaderConn(hdr, resp.Header, nil)
	}
	if len(resp.Trailer) > 0 {
		hdr["Trailer"] = []string{joinKeys(resp.Trailer)}
	}
	hdr["X-Vm-Id"] = b.vmIDHeader()
	status = resp.StatusCode
	w.WriteHeader(status)

	var stream bool
	if fast {
		stream = streamingType(resp, c.rs.contentType)
	} else {
		stream = streaming(resp)
	}
	ok, streamed, werr, rerr := copyBody(w, resp, stream)
	if streamed {
		end = time.Now()
		if fw, ok := w.(*h1Writer); ok {
			fw.c.now = end
		}
	}
	if ok && len(resp.Trailer) > 0 {
		for k, vv := range resp.Trailer {
			hdr[http.TrailerPrefix+k] = vv
		}
	}
	reusable := ok && link.unlink() && !resp.Close && bodyDone
	if reusable {
		b.conns.put(c, end)
	} else {
		link.unlink()
		c.Close()
	}
	if rerr != nil && werr == nil && ctx.Err() == nil {
		// The backend broke off mid-response. Cut the client off so it
		// does not take a truncated body for a whole one; outside an
		// http.Server or the front end (a direct ServeHTTP call) there is
		// no connection to cut.
		h.log.Debug("backend response broken", "host", r.Host, "path", r.URL.Path, "err", rerr)
		abort = ctx.Value(http.ServerContextKey) != nil || ctx.Value(frontKey{}) != nil
	}
	return status, end, false, abort
}

// abortLink aborts an upstream connection when the request's context ends
// (the client went away), as context.AfterFunc(ctx, c.abort) does. For the
// front end's requests, whose context is their connection's, it costs no
// allocation: the connection holds the exchange's upstream connection and
// aborts it itself (h1conn.abortUpstream).
type abortLink struct {
	fc   *h1conn
	c    *upstreamConn
	stop func() bool
}

func linkAbort(ctx context.Context, w http.ResponseWriter, c *upstreamConn) abortLink {
	if fw, ok := w.(*h1Writer); ok && ctx == fw.c.ctx {
		fw.c.upstream.Store(c)
		if ctx.Err() != nil && fw.c.upstream.CompareAndSwap(c, nil) {
			c.abort() // it ended before the link: abort now, as AfterFunc would
		}
		return abortLink{fc: fw.c, c: c}
	}
	return abortLink{stop: context.AfterFunc(ctx, c.abort)}
}

// unlink ends the link and reports whether the abort had not run, like
// the stop function of context.AfterFunc; only the first call can be true.
func (l abortLink) unlink() bool {
	if l.fc != nil {
		return l.fc.upstream.CompareAndSwap(l.c, nil)
	}
	return l.stop()
}

// send writes r's head (and, from another goroutine, its body) to c and reads
// the backend's final response head. 1xx responses are relayed on the way.
func (h *Handler) send(w http.ResponseWriter, r *http.Request, b *Backend, c *upstreamConn, hasBody, gated bool, now time.Time, hop int) (*http.Response, chan error, error) {
	chunked := hasBody && (r.ContentLength < 0 || len(r.Trailer) > 0)
	if err := h.writeHead(c.bw, r, b, peerOf(w, r), hop, hasBody, chunked, gated); err != nil {
		return nil, nil, err
	}
	c.wait.start(h.respTimeout, now)
	resp, wdone, err := h.await(w, r, c, hasBody, chunked)
	if c.wait.stop() {
		// The backend did not answer in time: c was aborted.
		return nil, wdone, errUpstreamTimeout
	}
	return resp, wdone, err
}

// await sends the request's body (if any) and waits for the final response
// head; send bounds the wait.
func (h *Handler) await(w http.ResponseWriter, r *http.Request, c *upstreamConn, hasBody, chunked bool) (*http.Response, chan error, error) {
	var wdone chan error
	if hasBody && bodyBuffered(r) {
		// The whole body is already read from the client: it leaves with
		// the head, in one write, and the backend cannot make the write
		// wait (it fits in the socket's buffer) whatever it answers.
		if err := writeBody(c, r, chunked); err != nil {
			return nil, nil, err
		}
	} else if hasBody {
		// The body is written while the response is read, as http.Transport
		// does: a backend may answer (say, 413) before reading all of it, or
		// stream its answer while it reads, and writing first would then
		// deadlock or turn its answer into a write error.
		wdone = make(chan error, 1)
		go func() { wdone <- writeBody(c, r, chunked) }()
	} else {
		if c.unchecked {
			// The pool left the idle connection's check to the first
			// read, which sends the head once the socket is found quiet.
			c.unchecked = false
			c.rio.holdWrite()
		}
		if err := c.bw.Flush(); err != nil {
			return nil, nil, err
		}
	}
	// Wait for the first byte apart: ReadResponse reports a connection
	// closed before anything arrived as io.ErrUnexpectedEOF, which would
	// hide that the request may be sent again (see isStaleConnError).
	if _, err := c.br.Peek(1); err != nil {
		return nil, wdone, err
	}
	rs := scratchFor(w)
	for {
		resp, err := c.readResponse(r, rs)
		if err != nil {
			return nil, wdone, err
		}
		code := resp.StatusCode
		if code == http.StatusSwitchingProtocols {
			return nil, wdone, errUnexpectedUpgrade
		}
		if code >= 200 {
			return resp, wdone, nil
		}
		// Interim responses (103 Early Hints, say) go to the client as they
		// come. 100 Continue does not: Expect is not forwarded, and the
		// client got its own 100 from berth's server when the body was read.
		if code != http.StatusContinue {
			hdr := w.Header()
			copyHeader(hdr, resp.Header)
			w.WriteHeader(code)
			clear(hdr) // WriteHeader does not reset the header for a 1xx
			if r.TLS != nil && h.tlsHeaders {
				if _, front := w.(*h1Writer); !front {
					h.setTLSHeaders(w, r) // cleared with the 1xx's fields (see ServeHTTP)
				}
			}
		}
	}
}

// writeHead writes the outbound request line and header to bw (unflushed).
// The request URI is r.URL's (after strip_prefix), Host is the client's, and
// X-Forwarded-* follow rewrite's rules. Everything is validated here, because
// the handler may be called with requests no http.Server would have parsed,
// and a CR or LF written through would split the request. Unless gated (the
// gate vouches for the ones left), no X-Auth-Request-* header passes. peer is
// r's socket peer (peerOf), hop the hop count it arrived with (hops).
func (h *Handler) writeHead(bw *bufio.Writer, r *http.Request, b *Backend, peer netip.Addr, hop int, hasBody, chunked, gated bool) error {
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	// url.URL.RequestURI, written in pieces to spare the concatenation.
	path, query := r.URL.Opaque, ""
	if path != "" {
		path = r.URL.RequestURI()
	} else {
		if path = r.URL.EscapedPath(); path == "" {
			path = "/"
		}
		query = r.URL.RawQuery
	}
	host := r.Host
	if host == "" {
		host = b.Addr // HTTP/1.0 without Host: name the backend, as http.Transport does
	}
	if !validToken(method) || !validURI(path) || (query != "" && !validURI(query)) || !validValue(host) {
		return errBadRequestHead
	}
	hw := newHeadWriter(bw)
	hw.str(method)
	hw.char(' ')
	hw.str(path)
	if query != "" || (r.URL.ForceQuery && r.URL.Opaque == "") {
		hw.char('?')
		hw.str(query)
	}
	hw.str(" HTTP/1.1\r\nHost: ")
	hw.str(host)
	hw.str("\r\n" + hopHeader + ": ")
	if hw.room(20) {
		hw.b = strconv.AppendInt(hw.b, int64(hop+1), 10)
	} else {
		hw.str(strconv.Itoa(hop + 1))
	}
	hw.str("\r\n")

	conn := r.Header["Connection"]
	var te []string
	for k, vv := range r.Header {
		if k == "Te" {
			te = vv // (hop-by-hop: skipped, but see below)
		}
		if hopByHop(k) || forwardedHeader(k) || k == "Content-Length" || k == "Host" || k == "Expect" ||
			(conn != nil && listedIn(conn, k)) || (!gated && authRequestHeader(k)) {
			continue
		}
		if !validToken(k) {
			return errBadRequestHead
		}
		for _, v := range vv {
			if !validValue(v) {
				return errBadRequestHead
			}
			hw.field(k, v)
		}
	}
	if te != nil && listedIn(te, "trailers") {
		// The one TE value a proxy passes on: gRPC needs it end to end.
		hw.str("Te: trailers\r\n")
	}

	proto := scheme(r)
	if h.isTrusted(peer) {
		if prior := r.Header["X-Forwarded-For"]; len(prior) > 0 {
			hw.str("X-Forwarded-For: ")
			for _, v := range prior {
				if !validValue(v) {
					return errBadRequestHead
				}
				hw.str(v)
				hw.str(", ")
			}
			hw.addr(peer)
			hw.str("\r\n")
		} else {
			hw.addrField("X-Forwarded-For", peer)
		}
		xfProto, xfHost := headerFirst(r.Header, "X-Forwarded-Proto"), headerFirst(r.Header, "X-Forwarded-Host")
		if !validValue(xfProto) || !validValue(xfHost) {
			return errBadRequestHead
		}
		hw.field("X-Forwarded-Proto", cmp.Or(xfProto, proto))
		hw.field("X-Forwarded-Host", cmp.Or(xfHost, r.Host))
	} else {
		if peer.IsValid() {
			hw.addrField("X-Forwarded-For", peer)
		}
		hw.field("X-Forwarded-Proto", proto)
		if r.Host != "" {
			hw.field("X-Forwarded-Host", r.Host)
		}
	}

	switch {
	case chunked:
		hw.str("Transfer-Encoding: chunked\r\n")
		if len(r.Trailer) > 0 {
			for k := range r.Trailer {
				if !validToken(k) {
					return errBadRequestHead
				}
			}
			hw.field("Trailer", joinKeys(r.Trailer))
		}
	case hasBody:
		hw.length(r.ContentLength)
	case r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch:
		// An empty body is still a body for these methods; say so, as
		// http.Transport does, or some servers wait for one.
		hw.str("Content-Length: 0\r\n")
	}
	hw.str("\r\n")
	return hw.done()
}

func writeField(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(v)
	bw.WriteString("\r\n")
}

// headerFirst is h.Get for a canonical key, without canonicalising it again.
func headerFirst(h http.Header, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// writeBody copies r's body to c. Each piece read is flushed at once, in
// either framing, so a streamed upload reaches the backend as it arrives (a
// body read in one piece still leaves with the head, in one write); a
// chunked body is written a chunk per read, and its trailers follow the last
// chunk. Each piece written pushes back the response timeout: the backend
// cannot be late while the request is still arriving. On failure c is
// closed, which also ends the wait for a response the backend cannot send
// without the rest of the body.
func writeBody(c *upstreamConn, r *http.Request, chunked bool) (err error) {
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := *bp
	var sent int64
	for {
		n, rerr := r.Body.Read(buf)
		if n > 0 {
			sent += int64(n)
			if chunked {
				c.bw.WriteString(strconv.FormatInt(int64(n), 16))
				c.bw.WriteString("\r\n")
				c.bw.Write(buf[:n])
				c.bw.WriteString("\r\n")
			} else {
				c.bw.Write(buf[:n])
			}
			if err = c.bw.Flush(); err != nil {
				return err
			}
			c.wait.extend()
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if chunked {
		c.bw.WriteString("0\r\n")
		for k, vv := range r.Trailer {
			for _, v := range vv {
				if !validValue(v) {
					return errBadRequestHead
				}
				writeField(c.bw, k, v)
			}
		}
		c.bw.WriteString("\r\n")
	} else if sent != r.ContentLength {
		return fmt.Errorf("request body was %d bytes, Content-Length said %d", sent, r.ContentLength)
	}
	return c.bw.Flush()
}

// bodyBuffered reports a front end request body of a known length that is
// whole in the connection's buffer, and small (maxInlineBody).
func bodyBuffered(r *http.Request) bool {
	b, ok := r.Body.(*h1Body)
	return ok && b.cr == nil && b.remaining <= maxInlineBody && b.remaining <= int64(b.br.Buffered())
}

// maxInlineBody bounds a body written in the handler's goroutine, well
// below any socket buffer.
const maxInlineBody = 64 << 10

// bodyWritten reports whether the request body (if any) was written
// completely. It does not wait: a writer still busy when the response has
// been read means the backend answered without reading it all, and the
// connection cannot be reused.
func bodyWritten(wdone chan error) bool {
	if wdone == nil {
		return true
	}
	select {
	case err := <-wdone:
		return err == nil
	default:
		return false
	}
}

// streaming reports whether every piece of the response must be flushed to
// the client as it arrives: server-sent events, and bodies of unknown length
// (which is how streams are usually sent). ReverseProxy's rule.
func streaming(resp *http.Response) bool {
	if resp.ContentLength == -1 {
		return true
	}
	return streamingType(resp, headerFirst(resp.Header, "Content-Type"))
}

// streamingType is streaming, contentType being resp's first Content-Type.
func streamingType(resp *http.Response, contentType string) bool {
	if resp.ContentLength == -1 {
		return true
	}
	ct, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// copyBody copies the response body to w with a pooled buffer, flushing after
// each piece when flush is set. ok means the body was read to its end and
// written completely; werr is the client's failure, rerr the backend's;
// streamed means it took more than one read (time passed).
func copyBody(w http.ResponseWriter, resp *http.Response, flush bool) (ok, streamed bool, werr, rerr error) {
	defer resp.Body.Close()
	if resp.Body == http.NoBody {
		return true, false, nil, nil
	}
	var flusher http.Flusher
	if flush {
		if f, isFlusher := w.(http.Flusher); isFlusher {
			flusher = f
		} else {
			flusher = responseFlusher{http.NewResponseController(w)}
		}
	}
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := *bp
	for reads := 1; ; reads++ {
		n, err := resp.Body.Read(buf)
		streamed = reads > 1
		if n > 0 {
			if _, werr = w.Write(buf[:n]); werr != nil {
				return false, streamed, werr, nil
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err == io.EOF {
			return true, streamed, nil, nil
		}
		if err != nil {
			return false, streamed, nil, err
		}
	}
}

// responseFlusher flushes through wrappers that hide http.Flusher but unwrap.
type responseFlusher struct{ rc *http.ResponseController }

func (f responseFlusher) Flush() { f.rc.Flush() }

// copyHeader copies a response header, minus hop-by-hop fields. The value
// slices are shared: src is not used again.
func copyHeader(dst, src http.Header) { copyHeaderConn(dst, src, src["Connection"]) }

// copyHeaderConn is copyHeader, conn being src's Connection values.
func copyHeaderConn(dst, src http.Header, conn []string) {
	for k, vv := range src {
		if hopByHop(k) || (conn != nil && listedIn(conn, k)) {
			continue
		}
		dst[k] = vv
	}
}

// hopByHop reports whether a canonical header key names a hop-by-hop field,
// which a proxy must not forward (RFC 9110 §7.6.1; the list http.ReverseProxy
// uses).
func hopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// forwardedHeader reports the headers berth writes itself (see rewrite, and
// hopHeader), or drops (hopOriginHeader, the hop's admin marks).
// Forwarded (RFC 7239) is dropped, as ReverseProxy's Rewrite mode does: a
// client could otherwise claim any origin in it.
func forwardedHeader(k string) bool {
	switch k {
	case "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded", hopHeader, hopOriginHeader,
		hopAdminHeader, hopClientHeader, hopUngatedHeader:
		return true
	}
	return false
}

// listedIn reports whether name appears (case-insensitively) in a
// comma-separated header such as Connection.
func listedIn(values []string, name string) bool {
	for _, v := range values {
		for v != "" {
			var item string
			item, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(item), name) {
				return true
			}
		}
	}
	return false
}

// joinKeys lists a header's keys, for a Trailer announcement.
func joinKeys(h http.Header) string {
	var sb strings.Builder
	for k := range h {
		if sb.Len() > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(k)
	}
	return sb.String()
}

// replayable reports whether a request may be sent twice: http.Transport's
// rule for idempotent methods and idempotency keys.
func replayable(r *http.Request) bool {
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return len(r.Header["Idempotency-Key"]) > 0 || len(r.Header["X-Idempotency-Key"]) > 0
}

// isStaleConnError reports an error that, on a reused connection, means the
// backend had closed it before the request arrived.
func isStaleConnError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// errBadRequestHead means the request cannot be written to a backend as it is
// (a header with a line break, a malformed method).
var errBadRequestHead = errors.New("request cannot be forwarded: malformed method, URI or header")

// validToken reports a non-empty RFC 9110 token (methods, header names).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || !tokenChars[c] {
			return false
		}
	}
	return true
}

// validValue reports a header value without control characters (HTAB is
// allowed), which could end the line or the head early.
func validValue(s string) bool { return validFieldValue(s) }

// validURI reports a request target without spaces or control characters.
func validURI(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

var tokenChars = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
