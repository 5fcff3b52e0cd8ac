package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"syscall"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/web"
)

// The data plane over TLS (Options.TLSConfig): one address, a TCP listener
// for HTTPS — the proxy's front end over TLS, which serves HTTP/1.1 itself
// and hands HTTP/2 to an http.Server of its own (or that http.Server alone
// under StdHTTP) — and a UDP socket on the same port for HTTP/3, which the
// HTTPS responses advertise in Alt-Svc. Certificates are the caller's: the
// tls.Config's GetCertificate is asked at every handshake.

// defaultProxyTLSAddr is Options.ProxyTLSAddr's default.
const defaultProxyTLSAddr = "0.0.0.0:6189"

// listenTLS binds the TLS listeners: TCP first, then UDP on the port TCP
// got. With port 0, a port whose UDP side is taken is given back and
// another one tried, a few times.
func (s *Server) listenTLS() error {
	addr := s.o.ProxyTLSAddr
	if addr == "" {
		addr = defaultProxyTLSAddr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("proxy TLS listener: %w", err)
	}
	lc := &net.ListenConfig{KeepAlive: -1} // as the plaintext listener
	for attempt := 0; ; attempt++ {
		ln, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			return fmt.Errorf("proxy TLS listener: %w", err)
		}
		got := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, got))
		if err == nil {
			s.tlsLn, s.udpConn = ln, pc
			return nil
		}
		ln.Close()
		if port != "0" || attempt == 4 || !errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("proxy HTTP/3 socket: %w", err)
		}
	}
}

// serveTLS makes the TLS servers (see above).
func (s *Server) serveTLS() {
	o := s.o
	conf := o.TLSConfig.Clone()
	if len(conf.NextProtos) == 0 {
		conf.NextProtos = []string{"h2", "http/1.1"}
	}
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	s.tlsSrv = &http.Server{
		Handler:           web.Recover(o.Log, s.proxy),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		Protocols:         protos,
		TLSConfig:         conf,
		// As the plaintext server's HTTP/2 (see New).
		HTTP2:    &http.HTTP2Config{SendPingTimeout: o.ReadHeaderTimeout, PingTimeout: o.ReadHeaderTimeout},
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
	}
	if o.StdHTTP {
		s.tlsFront = stdTLS{s.tlsSrv}
	} else {
		s.tlsFront = s.proxy.NewH1Server(s.tlsSrv, proxy.H1Options{Log: o.Log, TLSConfig: conf})
	}
	s.h3 = s.proxy.NewH3Server(o.TLSConfig, proxy.H3Options{Log: o.Log})
}

// stdTLS serves a listener with net/http over TLS (StdHTTP).
type stdTLS struct{ *http.Server }

func (s stdTLS) Serve(ln net.Listener) error { return s.ServeTLS(ln, "", "") }
