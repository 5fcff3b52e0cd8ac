package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// This file serves the Handler over HTTP/3 (RFC 9114) with quic-go's
// http3.Server: the same routing, entry checks and forwarder as the other
// front ends (the forwarder sees an http.ResponseWriter that flushes, as
// net/http's HTTP/2 one), r.TLS set by quic-go from the QUIC handshake, so
// X-Forwarded-Proto says https. What it does not do:
//
//   - CONNECT, extended (RFC 9220, websockets over HTTP/3) or not, is
//     answered 501: the websocket path splices HTTP/1.1 connections, and
//     clients fall back to HTTP/1.1 or HTTP/2 for websockets.
//   - 0-RTT is off: early data can be replayed by anyone who saw it, and a
//     gateway cannot tell which of its backends' requests are idempotent.
//
// quic-go logs at most once per process, with the standard log package,
// when it cannot raise the socket's buffers to what it wants
// (net.core.rmem_max and wmem_max; as root it forces them); that is the
// operator's tuning (QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true silences
// it). The server's own log lines go to H3Options.Log, mostly at debug
// level.

// H3Options configure an H3Server. Zero fields take the defaults below.
type H3Options struct {
	// IdleTimeout closes a connection with no request for this long
	// (counting from the last one's end, whatever the QUIC layer's keep-
	// alives), and one whose peer goes silent for this long. Default
	// DefaultH3IdleTimeout.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds the QUIC handshake; default 10 s.
	HandshakeTimeout time.Duration
	// MaxStreams bounds the concurrent requests of one connection;
	// default 100.
	MaxStreams int64
	// MaxHeaderBytes bounds a request's header section; default
	// http.DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// Log receives the server's log lines (quic-go's debug lines, and
	// panics at error level); default the Handler's.
	Log *slog.Logger
}

// DefaultH3IdleTimeout is H3Options.IdleTimeout's default, QUIC's usual one.
const DefaultH3IdleTimeout = 30 * time.Second

// H3Server serves a Handler over HTTP/3.
type H3Server struct {
	srv *http3.Server
}

// NewH3Server returns an HTTP/3 server of h. tlsConf must carry a
// certificate (Certificates, GetCertificate or GetConfigForClient, which are
// kept); the server uses a copy offering ALPN "h3" alone, with TLS 1.3
// (QUIC's).
func (h *Handler) NewH3Server(tlsConf *tls.Config, o H3Options) *H3Server {
	conf := tlsConf.Clone()
	conf.NextProtos = []string{http3.NextProtoH3}
	conf.MinVersion = tls.VersionTLS13
	idle := cmp.Or(o.IdleTimeout, DefaultH3IdleTimeout)
	log := cmp.Or(o.Log, h.log)
	return &H3Server{srv: &http3.Server{
		Handler:   http.HandlerFunc(h.serveH3),
		TLSConfig: conf,
		QUICConfig: &quic.Config{
			HandshakeIdleTimeout: cmp.Or(o.HandshakeTimeout, 10*time.Second),
			MaxIdleTimeout:       idle,
			MaxIncomingStreams:   cmp.Or(o.MaxStreams, 100),
			// The control and QPACK streams, both ways, and a few
			// spare.
			MaxIncomingUniStreams: 8,
			Allow0RTT:             false,
		},
		IdleTimeout:    idle,
		MaxHeaderBytes: cmp.Or(o.MaxHeaderBytes, http.DefaultMaxHeaderBytes),
		Logger:         log,
	}}
}

// Texts of the HTTP/3 refusals.
const textH3Connect = "CONNECT is not supported over HTTP/3; websockets need HTTP/1.1 or HTTP/2"

// serveH3 is the HTTP/3 server's handler: h's, with CONNECT refused.
func (h *Handler) serveH3(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		refuse(w, http.StatusNotImplemented, textH3Connect)
		return
	}
	h.ServeHTTP(w, r)
}

// Serve serves HTTP/3 on pc until Shutdown or Close, which do not close pc
// (the caller's). It returns http.ErrServerClosed after them.
func (s *H3Server) Serve(pc net.PacketConn) error {
	if pc == nil {
		return errors.New("proxy: H3Server.Serve: no packet connection")
	}
	return s.srv.Serve(pc)
}

// Shutdown stops accepting connections, tells the clients to go (GOAWAY),
// and waits for the requests in progress until ctx ends.
func (s *H3Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes every connection at once.
func (s *H3Server) Close() error { return s.srv.Close() }
