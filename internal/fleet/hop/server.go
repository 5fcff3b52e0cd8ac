package hop

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/berth-dev/berth/internal/web"
)

// ServerConfig is the hop server's: the host's Config and the local
// handler (the gateway) hopped requests go to.
type ServerConfig struct {
	Config
	Handler http.Handler
	// Admin, when set, serves the requests another host forwards to this
	// host's admin API (marked with AdminHeader by ForwardAdmin); nil
	// serves every request with Handler.
	Admin http.Handler
	// Log receives the server's errors (failed handshakes at debug);
	// default slog.Default().
	Log *slog.Logger
}

// Server is the hop listener's HTTP server.
type Server struct {
	c     Config
	id    string
	h     http.Handler
	admin http.Handler
	log   *slog.Logger
	srv   *http.Server
}

// NewServer makes the hop server of cfg: TLS 1.3 with this host's
// certificate, a client certificate of the fleet CA required, HTTP/2 and
// HTTP/1.1 keep-alive, the read timeouts of cfg.
func NewServer(cfg ServerConfig) (*Server, error) {
	c, err := cfg.Config.check()
	if err != nil {
		return nil, err
	}
	if cfg.Handler == nil {
		return nil, errors.New("hop: Handler: the local gateway is required")
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	s := &Server{c: c, id: c.HostID, h: cfg.Handler, admin: cfg.Admin, log: log}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		Protocols:         protocols(true),
		HTTP2:             &http.HTTP2Config{SendPingTimeout: c.ReadHeaderTimeout, PingTimeout: c.ReadHeaderTimeout},
		TLSConfig:         serverTLS(c),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

func serverTLS(c Config) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.Cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.CAs,
		// The client certificate's chain is verified for client auth by
		// crypto/tls; a peer id is also required of it (a fleet CA
		// certificate without the host id's SAN is refused).
		VerifyConnection: func(cs tls.ConnectionState) error {
			if _, err := peerID(&cs); err != nil {
				return err
			}
			return c.checkRevoked(&cs)
		},
	}
}

// SetBaseContext sets the base context of the requests' contexts (as
// http.Server.BaseContext); call it before Serve.
func (s *Server) SetBaseContext(f func(net.Listener) context.Context) { s.srv.BaseContext = f }

// Serve accepts TLS connections on l (a plain TCP listener) until
// Shutdown or Close; it returns http.ErrServerClosed then.
func (s *Server) Serve(l net.Listener) error { return s.srv.ServeTLS(l, "", "") }

// Shutdown stops accepting and waits for the requests in flight, until
// ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listener and every connection.
func (s *Server) Close() error { return s.srv.Close() }

// ServeHTTP authenticates the origin host from the verified client
// certificate and serves the request with the local handler, marked as
// hopped (Origin, X-Berth-Hop).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	origin, err := peerID(r.TLS)
	if err == nil {
		// A connection made before the peer's revocation is refused from
		// its next request on.
		err = s.c.checkRevoked(r.TLS)
	}
	if err != nil {
		// Through Serve, only a peer revoked since its handshake gets
		// here (the handshake refuses the others); kept as well for a
		// handler mounted elsewhere.
		web.WriteError(s.log, w, r, &web.Error{Status: http.StatusForbidden, Code: "hop_unauthenticated", Message: "hop: the peer is not an authenticated fleet host"})
		return
	}
	marked := r.Header.Get(AdminHeader)
	client := r.Header.Get(ClientHeader)
	r.Header.Del(AdminHeader)
	r.Header.Del(ClientHeader)
	r.Header.Del(Header)
	ungated := r.Header.Get(UngatedHeader) != ""
	r.Header.Del(UngatedHeader)
	r.Header.Set(Header, origin)
	ctx := WithOrigin(r.Context(), origin)
	if s.admin != nil && marked != "" && marked == origin && !web.ViaBerth(r.Header) {
		if _, _, err := net.SplitHostPort(client); err == nil {
			r.RemoteAddr = client
		}
		if ungated {
			r.Header.Set(UngatedHeader, "1")
		}
		s.admin.ServeHTTP(w, r.WithContext(WithAdmin(ctx)))
		return
	}
	s.h.ServeHTTP(w, r.WithContext(ctx))
}

type adminKey struct{}

// WithAdmin marks ctx as an admin request another host forwarded.
func WithAdmin(ctx context.Context) context.Context {
	return context.WithValue(ctx, adminKey{}, true)
}

// Admin reports whether the request of ctx is an admin request the hop
// server received from another host (ForwardAdmin's).
func Admin(ctx context.Context) bool {
	ok, _ := ctx.Value(adminKey{}).(bool)
	return ok
}
