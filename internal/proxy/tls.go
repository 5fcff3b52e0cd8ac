package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is what TLS changes on the data plane, whichever server reads
// the request: the HTTP/1.1 front end over TLS (H1Server with
// H1Options.TLSConfig), net/http's HTTP/2 behind it, or HTTP/3 (h3.go).
//
// A TLS connection is accepted like any other and given to a worker, which
// wraps it (tls.Server) and runs the handshake, bounded by the header
// timeout: a handshake is a client's first bytes, as a request head is on a
// plaintext connection, and a client that sends nothing is closed when it
// runs out. The accept loop never waits for a client. A failed handshake
// closes the connection, logged at debug level only (scanners make plenty).
// Then the protocol ALPN chose decides:
//
//   - "h2": the *tls.Conn goes to the fallback http.Server, whose
//     TLSNextProto serves HTTP/2 on it (net/http does not handshake again;
//     it reads NegotiatedProtocol). The fallback must serve HTTP/2 over TLS
//     (Protocols with HTTP2, and a TLSConfig offering "h2" or none);
//     NewH1Server offers "h2" only if its Protocols do.
//   - "acme-tls/1": the handshake was an ACME TLS-ALPN-01 challenge (RFC
//     8737), which the certificate GetCertificate returned answered; the
//     connection closes.
//   - anything else: HTTP/1.1, served by the front end itself as on a
//     plaintext connection, through the tls.Conn's Read and Write. The raw
//     system calls (rawio_linux.go) are not used — the TLS layer buffers
//     records, so the socket says nothing about what the front end has to
//     read — and TLS connections are never parked (h1park_linux.go) for the
//     same reason: the parker watches the socket, and a record already read
//     into the tls.Conn would wait there unseen. Everything else (deadlines,
//     the hang-up watch, body limits, hand-offs) goes through the tls.Conn,
//     whose deadlines are the socket's and whose reads survive a deadline
//     (a timeout is not a sticky error in crypto/tls).
//
// A request over TLS carries its connection state in r.TLS, so that
// X-Forwarded-Proto says https (scheme): the front end fills it once per
// connection and every request on it points at the same copy, valid while
// ServeHTTP runs (as the request's strings are). A connection handed to
// net/http for an upgrade (websockets) is a tlsReplayConn, whose
// ConnectionState net/http reads for r.TLS too.
//
// Responses over TLS get the operator's Strict-Transport-Security and
// Alt-Svc (Options.HSTS, Options.AltSvc) unless the backend sent its own;
// the front end writes them into the head (h1Writer.commit) without
// touching the header map, the other servers get them in the map before
// routing (setTLSHeaders). Plaintext requests meet the ACME HTTP-01 hook
// and the redirect to https first (plaintext).

// acmeTLSALPN is the ALPN protocol of ACME TLS-ALPN-01 challenges (RFC 8737).
const acmeTLSALPN = "acme-tls/1"

// setTLSOptions takes Options' TLS-related fields into h. A value that
// cannot be a header field value is refused with an error log (New has no
// error to return) rather than written into every response.
func (h *Handler) setTLSOptions(o Options) {
	h.challenge, h.redirectHTTPS = o.Challenge, o.RedirectHTTPS
	h.plainHook = h.challenge != nil || h.redirectHTTPS
	if o.HTTPSPort > 0 && o.HTTPSPort != 443 && o.HTTPSPort <= 65535 {
		h.httpsPort = ":" + strconv.Itoa(o.HTTPSPort)
	}
	field := func(name, v string) []string {
		switch {
		case v == "":
			return nil
		case !validFieldValue(v) || strings.TrimSpace(v) != v:
			h.log.Error("proxy: invalid header value ignored", "field", name, "value", v)
			return nil
		}
		h.tlsHeaders = true
		return []string{v}[:1:1]
	}
	h.hsts = field("Strict-Transport-Security", o.HSTS)
	h.altSvc = field("Alt-Svc", o.AltSvc)
}

// setTLSHeaders puts the TLS response fields in w's header for a server
// other than the front end. A backend's own replace them (copyHeader).
// HTTP/3 responses get no Alt-Svc: the client is there already.
func (h *Handler) setTLSHeaders(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	if h.hsts != nil {
		hdr["Strict-Transport-Security"] = h.hsts
	}
	if h.altSvc != nil && r.ProtoMajor < 3 {
		hdr["Alt-Svc"] = h.altSvc
	}
}

// writeTLSLines writes the TLS response fields the handler's header lacks
// into a front-end response head.
func (w *h1Writer) writeTLSLines(hw *headWriter) {
	h := w.c.s.h
	if _, ok := w.hdr["Strict-Transport-Security"]; !ok && h.hsts != nil {
		writeHeaderLines(hw, "Strict-Transport-Security", h.hsts)
	}
	if _, ok := w.hdr["Alt-Svc"]; !ok && h.altSvc != nil {
		writeHeaderLines(hw, "Alt-Svc", h.altSvc)
	}
}

// plaintext applies the plaintext hooks to r and reports whether one
// answered it.
func (h *Handler) plaintext(w http.ResponseWriter, r *http.Request) bool {
	if h.challenge != nil && strings.HasPrefix(r.URL.Path, ACMEChallengePrefix) && h.challenge(w, r) {
		return true
	}
	if !h.redirectHTTPS {
		return false
	}
	h.redirectToHTTPS(w, r)
	return true
}

// Texts of the https redirect.
const textNoHost = "a Host is required to redirect to https\n"

// redirectToHTTPS answers r with a 308 (the method and body are kept) to
// the same URL over https.
func (h *Handler) redirectToHTTPS(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		host = hp
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" || strings.ContainsAny(host, "/?#@\\[] \t\r\n") {
		plain(w, http.StatusBadRequest, textNoHost)
		return
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, "/") {
		p = "/"
	}
	to := "https://" + host + h.httpsPort + p
	if r.URL.RawQuery != "" {
		to += "?" + r.URL.RawQuery
	}
	w.Header().Set("Location", to)
	plain(w, http.StatusPermanentRedirect, "redirecting to "+to+"\n")
}

// serverTLSConfig is the front end's copy of conf: with no NextProtos of
// its own it offers HTTP/2 and HTTP/1.1, and never HTTP/2 when the fallback
// would not serve it (net/http's rules: HTTP2 among its Protocols, and its
// TLSNextProto set, or left for Serve to set, which it does when its
// TLSConfig is nil or offers "h2") — a client would be cut off after
// choosing it.
func serverTLSConfig(conf *tls.Config, fallback *http.Server) *tls.Config {
	conf = conf.Clone()
	h2 := fallback.Protocols == nil || fallback.Protocols.HTTP2()
	switch {
	case fallback.TLSNextProto != nil:
		h2 = h2 && fallback.TLSNextProto["h2"] != nil
	case fallback.TLSConfig != nil:
		h2 = h2 && slices.Contains(fallback.TLSConfig.NextProtos, "h2")
	}
	if len(conf.NextProtos) == 0 {
		conf.NextProtos = []string{"h2", "http/1.1"}
	}
	if !h2 {
		conf.NextProtos = slices.DeleteFunc(conf.NextProtos, func(p string) bool { return p == "h2" })
	}
	return conf
}

// tlsStart is how a TLS connection's start left it.
type tlsStart int

const (
	tlsServe     tlsStart = iota // HTTP/1.1, for the front end
	tlsClose                     // to be closed
	tlsHandedOff                 // HTTP/2: net/http has it
)

// startTLS wraps the connection in TLS and runs the handshake (see above).
func (c *h1conn) startTLS() tlsStart {
	s := c.s
	tc := tls.Server(c.raw, s.tlsConf)
	c.tc, c.rwc = tc, tc
	c.cr.c = tc
	c.bw.Reset(tc)
	if s.readHeader > 0 {
		c.raw.SetDeadline(time.Now().Add(s.readHeader))
	} else {
		// Without a header timeout the handshake still ends: a client
		// gets the default that net/http's TLS handshakes have.
		c.raw.SetDeadline(time.Now().Add(defaultHandshakeTimeout))
	}
	if err := tc.Handshake(); err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			// A plaintext request on the https port: say so, as
			// net/http does, rather than close without a word.
			re.Conn.SetWriteDeadline(time.Now().Add(lingerTime))
			re.Conn.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"))
		}
		s.log.Debug("TLS handshake failed", "remote", c.remote, "err", err)
		return tlsClose
	}
	if s.readHeader > 0 {
		c.raw.SetWriteDeadline(time.Time{}) // reads: serveOne sets the head's deadline
	} else {
		c.raw.SetDeadline(time.Time{})
	}
	c.tlsState = tc.ConnectionState()
	c.tlsp = &c.tlsState
	switch c.tlsState.NegotiatedProtocol {
	case "h2":
		c.raw.SetDeadline(time.Time{})
		c.hl.push(tc)
		return tlsHandedOff
	case acmeTLSALPN:
		return tlsClose
	}
	return tlsServe
}

// defaultHandshakeTimeout bounds a TLS handshake when the front end has no
// header timeout.
const defaultHandshakeTimeout = 10 * time.Second

// looksLikeHTTP reports a TLS record header that is the start of a plaintext
// HTTP request (net/http's tlsRecordHeaderLooksLikeHTTP).
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// tlsReplayConn is a TLS connection handed to net/http after the front end
// read from it: ConnectionState gives net/http the request's r.TLS (it asks
// connections that are not a *tls.Conn for one).
type tlsReplayConn struct {
	replayConn
	state *tls.ConnectionState
}

func (c *tlsReplayConn) ConnectionState() tls.ConnectionState { return *c.state }
