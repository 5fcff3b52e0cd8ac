package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unsafe"
)

// This file is the request-head parser of the HTTP/1.1 front end (see
// h1server.go). It is strict (RFC 9112): whatever it accepts, net/http would
// accept with the same meaning (FuzzParseRequest checks that), and whatever
// could be read two ways — both Content-Length and Transfer-Encoding, differing
// Content-Lengths, obs-fold, bare CR or LF — is refused with 400, so no request
// can be smuggled past berth to a backend that frames it differently.
// What it does not serve itself (OPTIONS *, CONNECT, HTTP/2's preface,
// upgrades, Expect, request trailers) it reports as a hand-off: the connection
// then goes to net/http, which is replayed the bytes read so far and serves the
// request as it always has. A hand-off comes only after the whole head has
// passed the same checks as any other request (the HTTP/2 preface, which has no
// fields, excepted). Absolute-form targets (http and https) and every HTTP/1.x
// version it parses itself; other major versions are answered 505.

// Limits of a request head.
const (
	defaultMaxHeaderBytes = 1 << 20 // http.Server's MaxHeaderBytes in internal/server
	maxHeaderFields       = 256     // header lines, as Apache's LimitRequestFields (100) and more
	maxTrailerBytes       = 4 << 10 // net/http's, its buffer
)

// headError is a request the front end answers itself with an error status,
// then closes the connection.
type headError struct {
	status int
	reason string
}

func (e *headError) Error() string { return strconv.Itoa(e.status) + " " + e.reason }

func badRequest(reason string) error { return &headError{http.StatusBadRequest, reason} }

var (
	errHeadTooLarge = &headError{http.StatusRequestHeaderFieldsTooLarge, "request header too large"}
	// errHandOff means the request is net/http's to serve (see above).
	errHandOff = errors.New("request handed to net/http")
)

// reqHead is one parsed request head. The strings point into the head's raw
// bytes in the parser's buffer, so parsing allocates nothing; the bytes stay
// there until the next request, for a hand-off replay and for the strings.
type reqHead struct {
	method, target, proto string
	minor                 int // HTTP/1.minor
	url                   url.URL
	header                http.Header
	host                  string
	contentLength         int64 // -1: chunked
	close                 bool  // the client asked for the connection to end after this exchange
	keepAlive10           bool  // an HTTP/1.0 client asked to keep the connection
	handOff               bool  // checked, but net/http's to serve (OPTIONS *, CONNECT)
}

// parser reads request heads. Its buffers are reused from one request to the
// next on a connection.
type parser struct {
	maxBytes int      // head size limit
	raw      []byte   // the head as read
	ends     []int    // end offset (after CRLF) of each line in raw
	vals     []string // backing array of the header values
	head     reqHead
}

// readHead reads and parses one request head from br. An io.EOF before any
// byte means the client closed an idle connection. Other errors are a
// *headError (answer it), errHandOff, or the connection's read error.
func (p *parser) readHead(br *bufio.Reader) error {
	p.raw = p.raw[:0]
	p.ends = p.ends[:0]
	limit := p.maxBytes
	if limit <= 0 {
		limit = defaultMaxHeaderBytes
	}
	if n := p.scanBuffered(br, limit); n > 0 {
		br.Discard(n)
		return p.parse()
	}
	for {
		line, err := br.ReadSlice('\n')
		if len(p.raw)+len(line) > limit {
			return errHeadTooLarge
		}
		p.raw = append(p.raw, line...)
		if err == bufio.ErrBufferFull {
			continue // a line longer than the buffer: keep reading it
		}
		if err != nil {
			if err == io.EOF && len(p.raw) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		start := 0
		if len(p.ends) > 0 {
			start = p.ends[len(p.ends)-1]
		}
		p.ends = append(p.ends, len(p.raw))
		if len(p.ends) > maxHeaderFields+2 {
			return errHeadTooLarge
		}
		if l := len(p.raw) - start; l == 1 || l == 2 && p.raw[start] == '\r' {
			// An empty line: the end of the head (or, as the first
			// line, an empty line before a request; see parse). A
			// bare LF ends it too, to be refused by parse rather
			// than waited on.
			break
		}
	}
	return p.parse()
}

// scanBuffered is readHead's loop for a head already whole in br's buffer
// (the usual case), read from it with one copy rather than a ReadSlice and
// an append a line. It returns the head's length, to be discarded from br,
// or 0 — nothing read, p.raw and p.ends empty — when the head is not whole
// in the buffer or breaks a limit, which the loop then reads (or refuses)
// as ever.
func (p *parser) scanBuffered(br *bufio.Reader, limit int) int {
	buf, _ := br.Peek(br.Buffered())
	for start := 0; ; {
		nl := bytes.IndexByte(buf[start:], '\n')
		end := start + nl + 1
		if nl < 0 || end > limit || len(p.ends) == maxHeaderFields+2 {
			p.ends = p.ends[:0]
			return 0
		}
		p.ends = append(p.ends, end)
		if l := end - start; l == 1 || l == 2 && buf[start] == '\r' {
			p.raw = append(p.raw, buf[:end]...)
			return end
		}
		start = end
	}
}

// parse parses p.raw, whose lines end at p.ends, into p.head.
func (p *parser) parse() error {
	// The head's strings share p.raw's bytes, which stay as they are
	// until the next head is read on this connection: after the handler
	// returned (see H1Server on what that asks of handlers).
	text := unsafe.String(unsafe.SliceData(p.raw), len(p.raw))
	h := &p.head
	hdr := h.header
	if hdr == nil {
		hdr = make(http.Header, 8)
	} else {
		clear(hdr)
	}
	*h = reqHead{header: hdr}
	// Every line ends with CRLF; a bare CR or LF anywhere is refused.
	start := 0
	for _, end := range p.ends {
		if end-start < 2 || text[end-2] != '\r' {
			return badRequest("line not terminated by CRLF")
		}
		if strings.IndexByte(text[start:end-2], '\r') >= 0 {
			return badRequest("bare CR in request head")
		}
		start = end
	}
	if p.ends[0] == 2 {
		// RFC 9112 §2.2 lets a server skip empty lines before the
		// request line; net/http does not (it answers 400), and neither
		// does berth.
		return badRequest("empty line before the request line")
	}
	if err := h.parseRequestLine(text[:p.ends[0]-2]); err != nil {
		return err
	}
	if h.proto == "HTTP/2.0" {
		return errHandOff // the HTTP/2 preface (h2c with prior knowledge)
	}

	// Header fields. The values share one backing array, as in
	// net/textproto.
	n := len(p.ends) - 2
	if cap(p.vals) < n {
		p.vals = make([]string, n)
	}
	vals := p.vals[:n]
	var f fieldsSeen
	var keys newKeys
	start = p.ends[0]
	for _, end := range p.ends[1 : len(p.ends)-1] {
		line := text[start : end-2]
		start = end
		if line[0] == ' ' || line[0] == '\t' {
			return badRequest("obsolete line folding in header")
		}
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return badRequest("malformed header line")
		}
		key, ok := canonicalKey(line[:colon])
		if !ok {
			return badRequest("invalid header name")
		}
		v := trimOWS(line[colon+1:])
		if !validFieldValue(v) {
			return badRequest("invalid header value")
		}
		// The fields checkFields asks about are noted here, which spares
		// it a map lookup for each. Host and Transfer-Encoding never stay
		// in the map (checkFields deletes them, or refuses the request),
		// and a repeated Content-Length only once (it must be the same).
		switch key {
		case "Host":
			f.hosts++
			f.host = v
			continue
		case "Content-Length":
			f.cls++
			if f.cls > 1 {
				f.clDiffer = f.clDiffer || v != f.cl
				continue
			}
			f.cl = v
		case "Transfer-Encoding":
			f.tes++
			f.te = v
			continue
		case "Upgrade":
			f.has |= hasUpgrade
		case "Expect":
			f.has |= hasExpect
		case "Trailer":
			f.has |= hasTrailer
		case "Connection":
			f.has |= hasConnection
		case "Pragma":
			f.has |= hasPragma
		case "Cache-Control":
			f.has |= hasCacheControl
		}
		var vv []string
		if !keys.isNew(key) {
			vv = hdr[key]
		}
		if vv == nil && len(vals) > 0 {
			// The common case: one value per key.
			vals[0] = v
			hdr[key] = vals[:1:1]
			vals = vals[1:]
		} else {
			hdr[key] = append(vv, v)
		}
	}
	return h.checkFields(&f)
}

// newKeys tells the first keys of a head from their repeats without a map
// lookup each: it remembers the first few keys (a head's usual number), and
// beyond those knows nothing.
type newKeys struct {
	n    int
	keys [8]string
}

// isNew reports a key certainly not seen before, remembering it.
func (s *newKeys) isNew(k string) bool {
	if s.n == len(s.keys) {
		return false // unknown: the map says
	}
	for _, seen := range s.keys[:s.n] {
		if seen == k {
			return false
		}
	}
	s.keys[s.n] = k
	s.n++
	return true
}

// fieldsSeen is what parse noted of the fields checkFields asks about.
type fieldsSeen struct {
	hosts, cls, tes int
	host, cl, te    string // the (first) Host, Content-Length; the last Transfer-Encoding
	clDiffer        bool   // a repeated Content-Length differs from the first
	has             uint8  // has* bits: fields present in the map
}

const (
	hasUpgrade uint8 = 1 << iota
	hasExpect
	hasTrailer
	hasConnection
	hasPragma
	hasCacheControl
)

// parseRequestLine parses "method SP request-target SP HTTP-version".
func (h *reqHead) parseRequestLine(line string) error {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return badRequest("malformed request line")
	}
	if !validToken(method) {
		return badRequest("invalid method")
	}
	switch {
	case proto == "HTTP/1.1":
		h.minor = 1
	case proto == "HTTP/1.0":
		h.minor = 0
	case len(proto) == 8 && strings.HasPrefix(proto, "HTTP/") && proto[6] == '.' &&
		isDigit(proto[5]) && isDigit(proto[7]):
		if proto[5] == '1' {
			// HTTP/1.2 and the like: HTTP/1.1 semantics, as net/http
			// reads them (RFC 9110 §2.5).
			h.minor = int(proto[7] - '0')
			break
		}
		if proto == "HTTP/2.0" && method == "PRI" && target == "*" {
			h.method, h.target, h.proto = method, target, proto
			return nil // the HTTP/2 preface: parse hands it off
		}
		return &headError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
	default:
		return badRequest("malformed HTTP version")
	}
	if !validURI(target) {
		return badRequest("invalid request target")
	}
	h.method, h.target, h.proto = method, target, proto
	switch {
	case method == http.MethodConnect, target == "*":
		// authority-form (CONNECT), asterisk-form (OPTIONS *): rare,
		// and net/http's to answer once the fields are checked.
		h.handOff = true
		return nil
	case target[0] == '/':
		return h.parseTarget()
	default:
		return h.parseAbsolute()
	}
}

// parseAbsolute parses an absolute-form target (RFC 9112 §3.2.2), as a proxy
// would receive it: an http or https URI whose authority is the request's
// Host (the Host field is then ignored, as net/http does). Other schemes are
// refused: berth serves no other.
func (h *reqHead) parseAbsolute() error {
	scheme, _, ok := strings.Cut(h.target, "://")
	if !ok || !strings.EqualFold(scheme, "http") && !strings.EqualFold(scheme, "https") {
		return badRequest("unsupported request target")
	}
	u, err := url.ParseRequestURI(h.target)
	if err != nil || u.Host == "" || u.Opaque != "" || u.User != nil || !validHost(u.Host) {
		return badRequest("invalid request target")
	}
	h.url = *u
	return nil
}

// parseTarget fills h.url from an origin-form target as url.ParseRequestURI
// would. Targets whose path needs no escaping (nearly all of them) are split
// without allocating; the rest go through url.ParseRequestURI itself.
func (h *reqHead) parseTarget() error {
	t := h.target
	path, query, hasQuery := strings.Cut(t, "?")
	if (!hasQuery || query != "") && plainPath(path) {
		h.url = url.URL{Path: path, RawQuery: query}
		return nil
	}
	u, err := url.ParseRequestURI(t)
	if err != nil {
		return badRequest("invalid request target")
	}
	h.url = *u
	return nil
}

// plainPath reports a path that url.URL.EscapedPath would give back as it is,
// and that contains no escapes: url.ParseRequestURI leaves RawPath empty and
// Path equal to it.
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c >= 0x80 || !pathChars[c] {
			return false
		}
	}
	return true
}

var pathChars = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-_.~$&+,/:;=@" {
		t[c] = true
	}
	return t
}()

// checkFields applies the rules about specific fields once all are read:
// Host, body framing, and the features handed to net/http.
func (h *reqHead) checkFields(f *fieldsSeen) error {
	hdr := h.header
	switch {
	case f.hosts > 1:
		return badRequest("too many Host headers")
	case f.hosts == 1:
		h.host = f.host
		if !validHost(h.host) {
			return badRequest("malformed Host header")
		}
	case h.minor >= 1:
		return badRequest("missing required Host header")
	}
	if h.url.Host != "" {
		h.host = h.url.Host // absolute-form: the target's authority wins
	}

	// Body framing (RFC 9112 §6). Anything ambiguous is an error: a
	// backend or another proxy might read it the other way.
	switch {
	case f.tes > 0 && f.cls > 0:
		return badRequest("both Transfer-Encoding and Content-Length")
	case f.tes > 0:
		if h.minor == 0 {
			return badRequest("Transfer-Encoding in an HTTP/1.0 request")
		}
		if f.tes > 1 || !strings.EqualFold(f.te, "chunked") {
			return badRequest("unsupported transfer encoding")
		}
		h.contentLength = -1
	case f.cls > 0:
		if f.clDiffer {
			return badRequest("differing Content-Length values")
		}
		n, ok := parseDecimal(f.cl)
		if !ok {
			return badRequest("bad Content-Length")
		}
		h.contentLength = n // (one value in the map: as net/http deduplicates)
	}

	// Upgrade: h2c is dropped, with its settings: it would switch the
	// connection to a protocol berth does not route, and a backend that
	// took it would turn the connection into a tunnel past the routing
	// (see StripH2CUpgrade). The request goes on as HTTP/1.1.
	if f.has&hasUpgrade != 0 {
		if listedIn(hdr["Upgrade"], "h2c") {
			stripH2C(hdr)
		}
		if len(hdr["Upgrade"]) > 0 {
			return errHandOff
		}
	}
	// What net/http serves instead: protocol switches (above),
	// 100-continue (and other expectations), trailers announced by the
	// client, and the request line's hand-offs.
	if h.handOff || f.has&(hasExpect|hasTrailer) != 0 {
		return errHandOff
	}

	var conn []string
	if f.has&hasConnection != 0 {
		conn = hdr["Connection"]
	}
	if h.minor == 0 {
		h.keepAlive10 = listedIn(conn, "keep-alive")
		h.close = !h.keepAlive10 || listedIn(conn, "close")
	} else {
		h.close = listedIn(conn, "close")
	}
	// As net/http does (RFC 9111 §5.4): Pragma: no-cache without
	// Cache-Control means Cache-Control: no-cache.
	if f.has&hasPragma != 0 && f.has&hasCacheControl == 0 {
		if pv := hdr["Pragma"]; len(pv) > 0 && pv[0] == "no-cache" {
			hdr["Cache-Control"] = []string{"no-cache"}
		}
	}
	return nil
}

// parseDecimal parses a Content-Length: digits only, at most 2^63-1.
func parseDecimal(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + uint64(s[i]-'0')
	}
	return int64(n), n <= math.MaxInt64
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// trimOWS trims optional whitespace (SP, HTAB) around a field value.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// validFieldValue reports a field value without control characters other
// than HTAB (httpguts.ValidHeaderFieldValue's rule). Eight bytes at a time
// while none is below 0x20 or DEL; byte by byte from a word that has one.
func validFieldValue(s string) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for len(s) >= 8 {
		x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		del := x ^ (0x7f * ones)
		// Nonzero exactly when some byte is below 0x20, or is 0x7f (a
		// zero in del): a borrow starts only at such a byte.
		if ((x-0x20*ones)&^x|(del-ones)&^del)&highs != 0 {
			break
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// canonicalKey returns the canonical form of a header name
// (textproto.CanonicalMIMEHeaderKey's), and false for a name that is not a
// token. A name already canonical, or one of the common ones, costs no
// allocation.
func canonicalKey(k string) (string, bool) {
	upper := true
	canonical := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 0x80 || !tokenChars[c] {
			return "", false
		}
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			canonical = false
		}
		upper = c == '-'
	}
	if canonical {
		return k, true
	}
	var stack [64]byte
	var b []byte
	if len(k) <= len(stack) {
		b = stack[:len(k)]
	} else {
		b = make([]byte, len(k))
	}
	upper = true
	for i := 0; i < len(k); i++ {
		c := k[i]
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
		upper = c == '-'
	}
	if s, ok := commonKeys[string(b)]; ok {
		return s, true
	}
	return string(b), true
}

// commonKeys interns the canonical names clients send most.
var commonKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Authorization",
		"Cache-Control", "Connection", "Content-Length", "Content-Type", "Cookie", "Host",
		"If-Modified-Since", "If-None-Match", "Origin", "Pragma", "Referer", "Te",
		"Transfer-Encoding", "Upgrade", "User-Agent", "X-Forwarded-For", "X-Forwarded-Host",
		"X-Forwarded-Proto", "X-Request-Id", "Traceparent", "Sec-Fetch-Mode", "Sec-Fetch-Site",
		"Sec-Fetch-Dest", "Sec-Ch-Ua", "Sec-Ch-Ua-Mobile", "Sec-Ch-Ua-Platform", "Priority",
		"Upgrade-Insecure-Requests", "Expect", "Trailer", "Range", "If-Range", "Dnt",
	} {
		m[k] = k
	}
	return m
}()

// validHost reports a Host value made of the bytes httpguts.ValidHostHeader
// allows.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 0x80 || !hostChars[c] {
			return false
		}
	}
	return true
}

var hostChars = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!$%&'()*+,-.:;=[]_~" {
		t[c] = true
	}
	return t
}()
