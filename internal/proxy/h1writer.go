package proxy

import (
	"bufio"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// h1Writer is the front end's http.ResponseWriter: it writes the response
// head and body into the connection's buffered writer, framed with the
// Content-Length the handler set, else (like net/http) a Content-Length it
// computes when the whole body is small and written before the handler
// returns, else chunked (HTTP/1.1) or until close (HTTP/1.0). It also
// implements http.Flusher, which streams need.
type h1Writer struct {
	c           *h1conn
	hdr         http.Header
	head        bool // a HEAD request: the body is never sent
	minor       int  // the request's HTTP/1.minor
	keepAlive10 bool
	closeAfter  bool // close the connection after this response

	status    int   // final status (0 until WriteHeader)
	committed bool  // head written to the buffer
	cl        int64 // body length announced, or -1
	written   int64
	chunked   bool
	pending   []byte // body held back while its length may still be computed
	err       error  // the client's failure
}

// maxPending is how much body the writer holds back to compute a length (as
// net/http's bufferBeforeChunkingSize).
const maxPending = 2048

// reset prepares w for the response to r.
func (w *h1Writer) reset(r *http.Request, head *reqHead) {
	clear(w.hdr)
	w.head = r.Method == http.MethodHead
	w.minor = head.minor
	w.keepAlive10 = head.keepAlive10
	w.closeAfter = head.close
	w.status, w.committed, w.cl, w.written, w.chunked = 0, false, -1, 0, false
	w.pending = w.pending[:0]
	w.err = nil
}

// Header returns the response header map.
func (w *h1Writer) Header() http.Header { return w.hdr }

// WriteHeader sends an informational response at once, and records a final
// status for the head written with the first byte of body (or at the end).
func (w *h1Writer) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.status != 0 {
		return // superfluous, as net/http (which logs it)
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeInterim(code)
		return
	}
	w.status = code
}

// writeInterim sends a 1xx response (not to HTTP/1.0 clients, which do not
// expect them: RFC 9110 §15.2).
func (w *h1Writer) writeInterim(code int) {
	if w.minor == 0 || w.err != nil {
		return
	}
	bw := w.c.bw
	hw := newHeadWriter(bw)
	hw.str(statusLine(code))
	for k, vv := range w.hdr {
		writeHeaderLines(&hw, k, vv)
	}
	hw.str("\r\n")
	hw.done()
	w.err = bw.Flush()
}

func (w *h1Writer) bodyAllowed() bool {
	return !w.head && w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

// Write writes body bytes.
func (w *h1Writer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bodyAllowed() {
		if w.head {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	if !w.committed {
		cl := w.announcedLength()
		if cl < 0 && len(w.pending)+len(p) <= maxPending {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		w.commitLength(false, cl)
		if len(w.pending) > 0 {
			pend := w.pending
			w.pending = w.pending[:0]
			if _, err := w.writeBody(pend); err != nil {
				return 0, err
			}
		}
	}
	return w.writeBody(p)
}

// WriteString is Write without the copy to a []byte (io.WriteString uses it).
func (w *h1Writer) WriteString(s string) (int, error) {
	if w.committed && !w.chunked && w.err == nil && w.bodyAllowed() && w.cl-w.written >= int64(len(s)) {
		n, err := w.c.bw.WriteString(s)
		w.written += int64(n)
		w.err = err
		return n, err
	}
	return w.Write([]byte(s))
}

func (w *h1Writer) writeBody(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, w.err = bw.WriteString("\r\n")
		if w.err != nil {
			return 0, w.err
		}
		w.written += int64(len(p))
		return len(p), nil
	}
	if w.cl >= 0 && w.written+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	n, err := bw.Write(p)
	w.written += int64(n)
	w.err = err
	return n, err
}

// Flush sends what was written so far, committing the head.
func (w *h1Writer) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false)
		if len(w.pending) > 0 {
			pend := w.pending
			w.pending = w.pending[:0]
			w.writeBody(pend)
		}
	}
	if w.err == nil {
		w.err = w.c.bw.Flush()
	}
}

// finish completes the response after the handler returned: the head if not
// yet written (with a computed length), the last chunk and trailers. The
// caller flushes.
func (w *h1Writer) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true)
		if len(w.pending) > 0 {
			w.writeBody(w.pending)
			w.pending = w.pending[:0]
		}
	}
	if w.chunked {
		bw := w.c.bw
		hw := newHeadWriter(bw)
		hw.str("0\r\n")
		w.writeTrailers(&hw)
		hw.str("\r\n")
		w.err = hw.done()
	}
	if w.cl >= 0 && w.written < w.cl && w.bodyAllowed() {
		w.closeAfter = true // the client waits for bytes that will not come
	}
}

// announcedLength is the Content-Length the handler set, or -1.
func (w *h1Writer) announcedLength() int64 {
	if v := w.hdr["Content-Length"]; len(v) > 0 {
		if n, ok := parseDecimal(strings.TrimSpace(v[0])); ok {
			return n
		}
	}
	return -1
}

// commit writes the response head. done means the handler has returned, so
// the pending body is the whole body.
func (w *h1Writer) commit(done bool) { w.commitLength(done, w.announcedLength()) }

// commitLength is commit, cl being announcedLength's answer.
func (w *h1Writer) commitLength(done bool, cl int64) {
	w.committed = true
	hdr := w.hdr
	hw := newHeadWriter(w.c.bw)
	hw.str(statusLine(w.status))

	if w.c.s.inShutdown.Load() {
		w.closeAfter = true
	}
	if listedIn(hdr["Connection"], "close") {
		w.closeAfter = true
	}
	w.cl = cl
	if cl < 0 {
		if v := hdr["Content-Length"]; len(v) > 0 {
			delete(hdr, "Content-Length") // not a length: it would confuse the client
		}
	}
	switch {
	case !w.bodyAllowed(), w.cl >= 0:
	case done && (len(hdr["Trailer"]) == 0 || w.minor == 0):
		// The whole body is known (trailers, though, need chunks).
		w.cl = int64(len(w.pending))
		hw.length(w.cl)
	case w.minor >= 1:
		w.chunked = true
		hw.str("Transfer-Encoding: chunked\r\n")
	default:
		w.closeAfter = true // HTTP/1.0: the body ends with the connection
	}
	if w.closeAfter {
		if w.minor >= 1 {
			hw.str("Connection: close\r\n")
		}
	} else if w.minor == 0 {
		hw.str("Connection: keep-alive\r\n")
	}
	if _, ok := hdr["Date"]; !ok {
		hw.raw(dateLine(w.c.now))
	}
	if w.c.tlsp != nil && w.c.s.h.tlsHeaders {
		w.writeTLSLines(&hw)
	}
	var declared []string
	if w.chunked {
		declared = hdr["Trailer"]
	}
	for k, vv := range hdr {
		switch k {
		case "Connection", "Transfer-Encoding", "Keep-Alive":
			continue
		case "Trailer":
			if !w.chunked {
				continue
			}
		case "Date":
			if len(vv) == 0 {
				continue // set to nil: no Date, as in net/http
			}
		}
		if strings.HasPrefix(k, http.TrailerPrefix) || (declared != nil && listedIn(declared, k)) {
			continue
		}
		writeHeaderLines(&hw, k, vv)
	}
	hw.str("\r\n")
	w.err = hw.done()
}

// writeTrailers writes the trailer fields: those announced in Trailer and
// those set with http.TrailerPrefix.
func (w *h1Writer) writeTrailers(hw *headWriter) {
	declared := w.hdr["Trailer"]
	for k, vv := range w.hdr {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			writeHeaderLines(hw, http.CanonicalHeaderKey(name), vv)
		} else if declared != nil && k != "Trailer" && listedIn(declared, k) {
			writeHeaderLines(hw, k, vv)
		}
	}
}

// writeHeaderLines writes one field, skipping a name that is not a token and
// turning line breaks in values into spaces, as net/http does: a handler's
// header can never split the response.
func writeHeaderLines(hw *headWriter, k string, vv []string) {
	if !validToken(k) {
		return
	}
	for _, v := range vv {
		if strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\n') >= 0 {
			v = strings.TrimSpace(strings.NewReplacer("\r", " ", "\n", " ").Replace(v))
		}
		hw.field(k, v)
	}
}

// headWriter writes a head into a bufio.Writer: its pieces are appended in
// the writer's free space (AvailableBuffer) and handed over with one Write
// (done), rather than a WriteString call each. A piece that does not fit
// goes through the bufio.Writer as it is, which flushes as it must. Nothing
// else may write to bw between newHeadWriter and done.
type headWriter struct {
	bw *bufio.Writer
	b  []byte
}

func newHeadWriter(bw *bufio.Writer) headWriter {
	return headWriter{bw: bw, b: bw.AvailableBuffer()}
}

// room reports whether n more bytes fit in the free space, first handing
// over what was appended when they do not.
func (hw *headWriter) room(n int) bool {
	if len(hw.b)+n <= cap(hw.b) {
		return true
	}
	hw.bw.Write(hw.b)
	hw.b = hw.bw.AvailableBuffer()
	return n <= cap(hw.b)
}

func (hw *headWriter) str(s string) {
	n := len(hw.b)
	if n+len(s) > cap(hw.b) {
		hw.slowStr(s)
		return
	}
	hw.b = hw.b[:n+len(s)]
	copy(hw.b[n:], s)
}

func (hw *headWriter) slowStr(s string) {
	if !hw.room(len(s)) {
		hw.bw.WriteString(s)
		hw.b = hw.bw.AvailableBuffer()
		return
	}
	hw.b = append(hw.b, s...)
}

func (hw *headWriter) raw(p []byte) {
	if !hw.room(len(p)) {
		hw.bw.Write(p)
		hw.b = hw.bw.AvailableBuffer()
		return
	}
	hw.b = append(hw.b, p...)
}

func (hw *headWriter) char(c byte) {
	if !hw.room(1) {
		hw.bw.WriteByte(c)
		hw.b = hw.bw.AvailableBuffer()
		return
	}
	hw.b = append(hw.b, c)
}

// field writes "k: v\r\n".
func (hw *headWriter) field(k, v string) {
	n := len(hw.b)
	end := n + len(k) + len(v) + 4
	if end > cap(hw.b) {
		hw.slowStr(k)
		hw.slowStr(": ")
		hw.slowStr(v)
		hw.slowStr("\r\n")
		return
	}
	b := hw.b[:end]
	n += copy(b[n:], k)
	b[n], b[n+1] = ':', ' '
	copy(b[n+2:], v)
	b[end-2], b[end-1] = '\r', '\n'
	hw.b = b
}

// maxAddrLen bounds an address's text, zone aside (see addr).
const maxAddrLen = len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255")

// addr writes a's text (netip.Addr.AppendTo).
func (hw *headWriter) addr(a netip.Addr) {
	if !hw.room(maxAddrLen + len(a.Zone()) + 1) {
		hw.str(a.String())
		return
	}
	hw.b = a.AppendTo(hw.b)
}

// addrField writes an address-valued field without formatting the address
// into a string first.
func (hw *headWriter) addrField(k string, a netip.Addr) {
	hw.str(k)
	hw.str(": ")
	hw.addr(a)
	hw.str("\r\n")
}

// length writes a Content-Length field.
func (hw *headWriter) length(n int64) {
	if !hw.room(len("Content-Length: \r\n") + 20) {
		hw.field("Content-Length", strconv.FormatInt(n, 10))
		return
	}
	hw.b = append(hw.b, "Content-Length: "...)
	hw.b = strconv.AppendInt(hw.b, n, 10)
	hw.b = append(hw.b, "\r\n"...)
}

// done hands the appended bytes to bw and returns its error, if any.
func (hw *headWriter) done() error {
	_, err := hw.bw.Write(hw.b)
	hw.b = nil
	return err
}

// statusLines holds the status line of every code with a reason phrase.
var statusLines = func() (t [600]string) {
	for code := 100; code < len(t); code++ {
		if text := http.StatusText(code); text != "" {
			t[code] = "HTTP/1.1 " + itoa3(code) + " " + text + "\r\n"
		}
	}
	return t
}()

// statusLine is net/http's status line for code.
func statusLine(code int) string {
	if code < len(statusLines) && statusLines[code] != "" {
		return statusLines[code]
	}
	return "HTTP/1.1 " + itoa3(code) + " status code " + strconv.Itoa(code) + "\r\n"
}

// itoa3 formats a status code in three digits.
func itoa3(code int) string {
	return string([]byte{byte('0' + code/100%10), byte('0' + code/10%10), byte('0' + code%10)})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// cachedDate is the Date field of the current second, shared by every
// response written in it.
type cachedDate struct {
	sec  int64
	line []byte
}

var dateCache atomic.Pointer[cachedDate]

// dateLine returns "Date: <now>\r\n".
func dateLine(now time.Time) []byte {
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.line
	}
	b := append([]byte("Date: "), now.UTC().AppendFormat(nil, http.TimeFormat)...)
	b = append(b, "\r\n"...)
	dateCache.Store(&cachedDate{sec: sec, line: b})
	return b
}
