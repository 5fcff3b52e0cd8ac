package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/internal/web"
)

// This file is what every request meets before routing, whichever code parsed
// it (the HTTP/1.1 front end, net/http's HTTP/1 or its HTTP/2): the methods and
// upgrades berth refuses or drops, the request trailers it never forwards, and
// for requests net/http parsed, the body read timeout and the framing rules
// the front end's parser (h1parse.go) applies itself.

// DefaultBodyReadTimeout is how long a request body may go without a byte
// before the request is ended (Options.BodyReadTimeout).
const DefaultBodyReadTimeout = 30 * time.Second

// errorEnvelope is the JSON error body, as the admin API writes it.
type errorEnvelope struct {
	Error string `json:"error"`
}

// refuse answers a request berth does not serve with the JSON envelope.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	web.WriteJSON(w, status, errorEnvelope{Error: msg})
}

// Texts of the entry refusals.
const (
	textTrace       = "method TRACE is not allowed: berth does not echo requests"
	textBodyTimeout = "request body timeout: no byte of the body arrived for too long"
	textBadBody     = "malformed request body"
)

// allowed is the Allow header of the TRACE refusal (RFC 9110 §15.5.6): the
// methods berth forwards.
const allowed = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// admit applies the entry rules to r. It returns false when it answered the
// request itself. It may change r's header and trailer (dropping what is never
// forwarded).
func (h *Handler) admit(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodTrace {
		// TRACE echoes the request, credentials and cookies included,
		// back to whoever can make a client send it (RFC 9110 §9.3.8
		// says a proxy should not forward those); no deployment setting
		// allows it.
		w.Header().Set("Allow", allowed)
		refuse(w, http.StatusMethodNotAllowed, textTrace)
		return false
	}
	if uv := r.Header["Upgrade"]; len(uv) > 0 && listedIn(uv, "h2c") {
		stripH2C(r.Header)
	}
	if len(r.Trailer) > 0 {
		filterTrailer(r.Trailer)
	}
	return true
}

// stripH2C removes the h2c token from an Upgrade header (the field goes when
// nothing else is left), and HTTP2-Settings: berth does not switch a
// connection to cleartext HTTP/2 mid-request, and must never let a backend do
// it, which would turn the client's connection into a tunnel to that backend
// that no routing rule or later request check sees. The request is served as
// the HTTP/1.1 request it also is (a server may ignore Upgrade, RFC 9110
// §7.8). Websocket upgrades are untouched.
func stripH2C(hdr http.Header) {
	var keep []string
	for _, v := range hdr["Upgrade"] {
		for v != "" {
			var item string
			item, v, _ = strings.Cut(v, ",")
			if item = strings.TrimSpace(item); item != "" && !strings.EqualFold(item, "h2c") {
				keep = append(keep, item)
			}
		}
	}
	if len(keep) == 0 {
		delete(hdr, "Upgrade")
	} else {
		hdr["Upgrade"] = []string{strings.Join(keep, ", ")}
	}
	delete(hdr, "Http2-Settings")
}

// trailerAllowed reports a request trailer field that may be forwarded: not
// framing or routing (Host, Content-Length, Transfer-Encoding, Trailer), not
// hop-by-hop, not one of the X-Forwarded-* fields berth writes itself. A
// trailer merged into a header by a backend must not change how it reads the
// request, or where it thinks the request came from.
func trailerAllowed(k string) bool {
	switch k {
	case "Host", "Content-Length", "Content-Type", "Content-Encoding", "Content-Range", "Expect", "Authorization", "Cookie":
		return false
	}
	return !hopByHop(k) && !forwardedHeader(k)
}

// filterTrailer drops the trailer fields that are never forwarded
// (trailerAllowed).
func filterTrailer(t http.Header) {
	for k := range t {
		if !trailerAllowed(k) {
			delete(t, k)
		}
	}
}

// entryState is the per-request state of a request net/http parsed with a
// body: its body reader with the read timeout, and the response writer that
// tells whether the answer has begun.
type entryState struct {
	statusWriter
	body     io.ReadCloser
	rc       *http.ResponseController
	r        *http.Request
	timeout  time.Duration
	cancel   context.CancelFunc
	fault    atomic.Int32 // the status the body's failure calls for: 408 or 400
	reading  sync.Mutex   // held by a body read
	mu       sync.Mutex   // guards deadline and done, not the reads
	deadline bool         // a read deadline is set
	done     bool         // the handler returned: the deadline is not touched again
}

// guardBody serves r, read by net/http with a body, through h.route with the
// body read timeout: a body that goes timeout without a byte ends the request
// (408 if nothing was answered yet, else the connection or stream is cut), and
// the backend's request is canceled. A body net/http finds malformed ends it
// the same way with 400. A chunked HTTP/1 request also closes its connection
// after the answer: net/http accepts a request with both Transfer-Encoding
// and Content-Length (it drops the latter), which RFC 9112 §6.3 requires
// closing after.
func (h *Handler) guardBody(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 {
		w.Header().Set("Connection", "close")
	}
	parent := r.Context()
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	st := &entryState{timeout: h.bodyTimeout, cancel: cancel}
	st.statusWriter.ResponseWriter = w
	st.body = r.Body
	st.rc = http.NewResponseController(w)
	r = r.WithContext(ctx)
	r.Body = readCloser{st}
	st.r = r
	h.route(&st.statusWriter, r)
	if parent.Err() != nil {
		// net/http cancels the request when a read of the connection
		// fails, before the failed read returns: the backend's exchange
		// may have ended before the body reader could record why. That
		// read is returning; wait for it.
		st.reading.Lock()
		st.reading.Unlock()
	}
	// A deadline left from a body not read to its end stays: net/http
	// reads (and drops) what is left before the connection goes on,
	// and that must not wait longer for the client than a read would.
	st.mu.Lock()
	st.done = true
	st.mu.Unlock()
	status := int(st.fault.Load())
	if status == 0 {
		return
	}
	if st.status != 0 && st.status != 499 {
		panic(http.ErrAbortHandler) // the answer has begun: cut it off
	}
	w.Header().Set("Connection", "close")
	msg := textBodyTimeout
	if status == http.StatusBadRequest {
		msg = textBadBody
	}
	refuse(w, status, msg)
}

// readCloser hides entryState's other methods from the body's users.
type readCloser struct{ st *entryState }

func (b readCloser) Read(p []byte) (int, error) { return b.st.read(p) }
func (b readCloser) Close() error               { return b.st.body.Close() }

func (st *entryState) read(p []byte) (int, error) {
	if st.timeout > 0 {
		st.mu.Lock()
		if st.done {
			// A body writer that outlived the handler (the backend
			// answered early): the response, and its deadline, are
			// net/http's again.
			st.mu.Unlock()
			return 0, http.ErrBodyReadAfterClose
		}
		st.deadline = st.rc.SetReadDeadline(time.Now().Add(st.timeout)) == nil
		st.mu.Unlock()
	}
	st.reading.Lock()
	n, err := st.body.Read(p)
	defer st.reading.Unlock()
	switch {
	case err == nil:
	case err == io.EOF:
		if t := st.r.Trailer; len(t) > 0 {
			filterTrailer(t) // net/http has merged what the client sent
		}
		st.mu.Lock()
		if st.deadline && !st.done {
			// net/http reads the connection after the body (to notice
			// the client hanging up); the body's deadline must not end
			// that read.
			st.rc.SetReadDeadline(time.Time{})
			st.deadline = false
		}
		st.mu.Unlock()
	case errors.Is(err, os.ErrDeadlineExceeded):
		// (net/http cancels the request's context on any read error
		// of the connection, so this comes first.)
		st.fail(http.StatusRequestTimeout)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, http.ErrBodyReadAfterClose), st.r.Context().Err() != nil:
		// The client went away mid-body, the handler is done, or the
		// request was canceled: nobody to answer.
	default:
		st.fail(http.StatusBadRequest)
	}
	return n, err
}

// fail records the body's failure and cancels the request, which stops the
// backend's exchange (the forwarder then answers nothing; guardBody does).
func (st *entryState) fail(status int) {
	st.fault.CompareAndSwap(0, int32(status))
	st.cancel()
}
