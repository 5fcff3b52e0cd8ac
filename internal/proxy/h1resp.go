package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"unsafe"
)

// This file reads backends' response heads on the fast path without
// allocating: the head is parsed where it lies in the connection's buffer,
// copied once into scratch space, and the *http.Response, its header map and
// its body reader are the connection's own, reused by each exchange in turn.
// Only heads that are whole in the buffer and plain are read this way —
// a final status, Content-Length or chunked framing (or no body), fields
// that are tokens with clean values on CRLF-terminated lines. Anything else
// (1xx, a head split across reads, obs-fold, bare LF, Trailer announcements,
// framing to be resolved) goes to http.ReadResponse, exactly as before, so
// the fast path changes no answer, only its cost.
//
// Lifetime. The response's strings point into scratch bytes that are
// overwritten by a later exchange. When the client side is the front end,
// the scratch is the client connection's (respScratch in h1conn): the
// strings then live until that connection's next request, which is as long
// as the request's own (see parser.parse). Otherwise (net/http's server, a
// direct ServeHTTP call) each response gets fresh scratch, as it did before.

// respScratch holds a response head's text and its header values.
type respScratch struct {
	text []byte
	vals []string
}

// scratchFor returns the scratch to read w's backend response into: the
// front end connection's, or nil for fresh space.
func scratchFor(w http.ResponseWriter) *respScratch {
	if fw, ok := w.(*h1Writer); ok {
		return &fw.c.rs
	}
	return nil
}

// respState is an upstream connection's reusable response.
type respState struct {
	resp    http.Response
	hdr     http.Header
	lenBody lengthBody
	chBody  chunkedBody
	// What fastResponse saw of resp's fields, which spares relay a map
	// lookup each: whether there is a Connection field, and the first
	// Content-Type. (The forwarder adds neither to resp.Header.)
	hasConn     bool
	contentType string
}

// readResponse reads the final response head to r from c, relaying nothing:
// the caller handles interim responses (which come from the slow path).
func (c *upstreamConn) readResponse(r *http.Request, rs *respScratch) (*http.Response, error) {
	if resp, ok := c.fastResponse(r, rs); ok {
		return resp, nil
	}
	return http.ReadResponse(c.br, r)
}

// fastResponse parses a plain response head that is whole in c's buffer
// (see above). ok false means nothing was consumed and the slow path must
// read it.
func (c *upstreamConn) fastResponse(r *http.Request, rs *respScratch) (_ *http.Response, ok bool) {
	buf, _ := c.br.Peek(c.br.Buffered())
	headLen := headEnd(buf)
	if headLen < 0 {
		return nil, false
	}
	// One copy of the head: field names are canonicalized in it, and the
	// strings point into it.
	var raw []byte
	if rs != nil {
		rs.text = append(rs.text[:0], buf[:headLen]...)
		raw = rs.text
	} else {
		raw = make([]byte, headLen)
		copy(raw, buf)
	}
	eol := bytes.IndexByte(raw, '\n')
	if eol < 1 || raw[eol-1] != '\r' {
		return nil, false
	}
	status, minor, ok := parseStatusLine(raw[:eol-1])
	if !ok || status < 200 {
		return nil, false // 1xx (and 101) and the odd ones: the slow path
	}

	st := &c.rs
	if st.hdr == nil {
		st.hdr = make(http.Header, 8)
	} else {
		clear(st.hdr)
	}
	hdr := st.hdr
	var vals []string
	if rs != nil {
		vals = rs.vals[:0]
	} else {
		vals = make([]string, 0, 8)
	}
	var keys newKeys
	var cl int64 = -1
	var chunked, hasTE, connClose, connKeepAlive, hasConn, hasCT bool
	var contentType string
	for pos := eol + 1; pos < headLen-2; {
		nl := bytes.IndexByte(raw[pos:], '\n')
		lineEnd := pos + nl
		if raw[lineEnd-1] != '\r' {
			return nil, false // bare LF
		}
		line := raw[pos : lineEnd-1]
		pos = lineEnd + 1
		if len(line) == 0 || line[0] == ' ' || line[0] == '\t' || bytes.IndexByte(line, '\r') >= 0 {
			return nil, false // obs-fold, bare CR
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !canonicalizeKey(line[:colon]) {
			return nil, false
		}
		key := unsafe.String(&line[0], colon)
		v := line[colon+1:]
		for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
			v = v[1:]
		}
		for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
			v = v[:len(v)-1]
		}
		var value string
		if len(v) > 0 {
			value = unsafe.String(&v[0], len(v))
		}
		if !validFieldValue(value) {
			return nil, false
		}
		switch key {
		case "Content-Length":
			n, ok := parseDecimal(value)
			if !ok || cl >= 0 && n != cl {
				return nil, false // net/http's to refuse
			}
			if cl >= 0 {
				continue // an identical repeat: deduplicated, as net/http does
			}
			cl = n
		case "Transfer-Encoding":
			if hasTE || !strings.EqualFold(value, "chunked") {
				return nil, false
			}
			hasTE, chunked = true, true
		case "Trailer":
			return nil, false // announced trailers: net/http sets them up
		case "Content-Type":
			if !hasCT {
				hasCT, contentType = true, value
			}
		case "Connection":
			hasConn = true
			connClose = connClose || listedIn([]string{value}, "close")
			connKeepAlive = connKeepAlive || listedIn([]string{value}, "keep-alive")
		}
		var vv []string
		if !keys.isNew(key) {
			vv = hdr[key]
		}
		if vv == nil {
			vals = append(vals, value)
			hdr[key] = vals[len(vals)-1 : len(vals) : len(vals)]
		} else {
			hdr[key] = append(vv, value)
		}
	}
	if rs != nil {
		rs.vals = vals[:0]
	}
	if chunked && (cl >= 0 || minor == 0) {
		return nil, false // both, or HTTP/1.0 (which has no chunks): net/http's rules decide
	}
	noBody := r.Method == http.MethodHead || status == http.StatusNoContent || status == http.StatusNotModified
	if !noBody && !chunked && cl < 0 {
		return nil, false // until close: rare, and net/http's to frame
	}
	c.br.Discard(headLen)
	st.hasConn, st.contentType = hasConn, contentType

	resp := &st.resp
	*resp = http.Response{
		StatusCode: status,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: minor,
		Header: hdr, Request: r, ContentLength: cl,
	}
	if minor == 0 {
		resp.Proto = "HTTP/1.0"
		resp.Close = !connKeepAlive || connClose
	} else {
		resp.Close = connClose
	}
	switch {
	case noBody:
		// A HEAD response's length is the one it announces (-1 when
		// chunked or none); 204 and 304 have none.
		resp.Body = http.NoBody
		if r.Method != http.MethodHead {
			resp.ContentLength = 0
		}
		if chunked {
			delete(hdr, "Transfer-Encoding")
		}
	case chunked:
		delete(hdr, "Transfer-Encoding")
		resp.TransferEncoding = chunkedTE
		resp.ContentLength = -1
		st.chBody = chunkedBody{cr: chunkedReader{br: c.br}, resp: resp}
		resp.Body = &st.chBody
	case cl == 0:
		resp.Body = http.NoBody
	default:
		st.lenBody = lengthBody{br: c.br, n: cl}
		resp.Body = &st.lenBody
	}
	return resp, true
}

// headEnd returns the length of the head at the start of buf, through the
// empty line that ends it (as bytes.Index(buf, "\r\n\r\n")+4), or -1 when
// it does not end in buf or a line before its end lacks its CR (the slow
// path's to read). It goes line by line: a head's lines are few, and each
// one is a single IndexByte.
func headEnd(buf []byte) int {
	for pos := 0; ; {
		nl := bytes.IndexByte(buf[pos:], '\n')
		if nl < 1 || buf[pos+nl-1] != '\r' {
			return -1
		}
		if nl == 1 && pos > 0 {
			return pos + 2 // an empty line, after the status line
		}
		pos += nl + 1
	}
}

var chunkedTE = []string{"chunked"}

var errLongTrailer = errors.New("suspiciously long trailer after chunked body")

// parseStatusLine parses "HTTP/1.x SSS[ reason]".
func parseStatusLine(line []byte) (status, minor int, ok bool) {
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' ||
		(line[7] != '0' && line[7] != '1') || (len(line) > 12 && line[12] != ' ') {
		return 0, 0, false
	}
	d := line[9:12]
	if !isDigit(d[0]) || !isDigit(d[1]) || !isDigit(d[2]) || d[0] == '0' {
		return 0, 0, false
	}
	return int(d[0]-'0')*100 + int(d[1]-'0')*10 + int(d[2]-'0'), int(line[7] - '0'), true
}

// canonicalizeKey rewrites a header name in place to its canonical form
// (textproto.CanonicalMIMEHeaderKey's) and reports whether it is a token.
func canonicalizeKey(k []byte) bool {
	upper := true
	for i, c := range k {
		if c >= 0x80 || !tokenChars[c] {
			return false
		}
		if upper && 'a' <= c && c <= 'z' {
			k[i] = c - ('a' - 'A')
		} else if !upper && 'A' <= c && c <= 'Z' {
			k[i] = c + ('a' - 'A')
		}
		upper = c == '-'
	}
	return true
}

// lengthBody is a Content-Length response body.
type lengthBody struct {
	br *bufio.Reader
	n  int64 // bytes left
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.br.Read(p)
	b.n -= int64(n)
	if b.n == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }

// chunkedBody is a chunked response body; its trailer fields, if any, go
// to the response's Trailer, as net/http's reader puts them.
type chunkedBody struct {
	cr   chunkedReader
	resp *http.Response
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	n, err := b.cr.Read(p)
	if err == io.EOF {
		if terr := readTrailer(b.cr.br, b.resp); terr != nil {
			b.cr.err = terr
			return n, terr
		}
	}
	return n, err
}

func (b *chunkedBody) Close() error { return nil }

// readTrailer reads the trailer section after the last chunk into
// resp.Trailer, as net/http's body reader does (with its reader: trailers
// are rare, and read alike).
func readTrailer(br *bufio.Reader, resp *http.Response) error {
	b, err := br.Peek(2)
	if len(b) == 2 && b[0] == '\r' && b[1] == '\n' {
		br.Discard(2)
		return nil
	}
	if len(b) < 2 {
		return io.ErrUnexpectedEOF
	}
	if err != nil {
		return err
	}
	// The section must end within the buffer (net/http's bound on it).
	for n := 4; ; n++ {
		b, err := br.Peek(n)
		if bytes.HasSuffix(b, crlfcrlf) {
			break
		}
		if err != nil {
			return errLongTrailer
		}
	}
	hdr, err := textproto.NewReader(br).ReadMIMEHeader()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if len(hdr) > 0 && resp.Trailer == nil {
		resp.Trailer = make(http.Header, len(hdr))
	}
	for k, vv := range hdr {
		resp.Trailer[k] = append(resp.Trailer[k], vv...)
	}
	return nil
}
