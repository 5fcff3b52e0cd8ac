package hop

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"

	"github.com/berth-dev/berth/internal/fleet/fleetca"
	"github.com/berth-dev/berth/internal/web"
)

// Transport is the client side of the hop: an http.RoundTripper that
// dials the peer a request's context names (WithPeer) with this host's
// certificate, trusting the fleet CA only and the peer's certificate only
// for its host id, and keeps reusable connections per peer.
type Transport struct {
	c   Config
	log *slog.Logger

	mu    sync.Mutex
	peers map[peerKey]*http.Transport
}

type peerKey struct{ id, addr string }

// NewTransport makes the hop client of cfg.
func NewTransport(cfg Config) (*Transport, error) {
	c, err := cfg.check()
	if err != nil {
		return nil, err
	}
	return &Transport{c: c, log: slog.Default(), peers: make(map[peerKey]*http.Transport)}, nil
}

type peerCtxKey struct{}

// WithPeer names the peer host (its fleet id) a request's context sends
// it to through Transport; the request URL's host is the peer's hop
// address.
func WithPeer(ctx context.Context, peerID string) context.Context {
	return context.WithValue(ctx, peerCtxKey{}, peerID)
}

// RoundTrip sends req to the peer WithPeer named, at req.URL.Host, over
// https.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	id, _ := req.Context().Value(peerCtxKey{}).(string)
	if err := fleetca.ValidHostID(id); err != nil {
		closeBody(req)
		return nil, fmt.Errorf("hop: peer: %w (name it with hop.WithPeer)", err)
	}
	if req.URL.Scheme != "https" || req.URL.Host == "" {
		closeBody(req)
		return nil, fmt.Errorf("hop: the request URL %q: want https://PEER-HOP-ADDRESS", req.URL.Redacted())
	}
	ht := t.transport(id, req.URL.Host)
	resp, err := ht.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	// A connection made before the peer's revocation serves no further
	// request.
	if rerr := t.c.checkRevoked(resp.TLS); rerr != nil {
		resp.Body.Close()
		ht.CloseIdleConnections()
		return nil, rerr
	}
	return resp, nil
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

func (t *Transport) transport(id, addr string) *http.Transport {
	k := peerKey{id, addr}
	t.mu.Lock()
	defer t.mu.Unlock()
	if ht := t.peers[k]; ht != nil {
		return ht
	}
	d := &net.Dialer{Timeout: t.c.DialTimeout}
	ht := &http.Transport{
		DialContext:           d.DialContext,
		TLSClientConfig:       t.c.ClientTLS(id),
		Protocols:             protocols(t.c.HTTP2),
		ForceAttemptHTTP2:     t.c.HTTP2,
		TLSHandshakeTimeout:   t.c.TLSHandshakeTimeout,
		ResponseHeaderTimeout: t.c.ResponseHeaderTimeout,
		IdleConnTimeout:       t.c.IdleTimeout,
		MaxIdleConnsPerHost:   64,
		HTTP2:                 &http.HTTP2Config{SendPingTimeout: t.c.ReadHeaderTimeout, PingTimeout: t.c.ReadHeaderTimeout},
	}
	t.peers[k] = ht
	return ht
}

// CloseIdleConnections closes the idle connections to every peer.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ht := range t.peers {
		ht.CloseIdleConnections()
	}
}

// ErrLoop is what Forward refuses a request that came over the hop with:
// it is served by this host's replicas or not at all.
var ErrLoop = errors.New("hop: the request came over the hop and is not hopped again")

// Forwarder relays requests to peer hosts over a Transport.
type Forwarder struct {
	t   *Transport
	log *slog.Logger
	rp  *httputil.ReverseProxy
}

// rewriteToPeer is the part of a forwarded request's rewrite both
// forwarders share: to the peer's hop listener over https, the Host kept,
// X-Forwarded-For extended with the client's address.
func rewriteToPeer(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme, pr.Out.URL.Host = "https", pr.In.URL.Host
	pr.Out.Host = pr.In.Host
	if prior := pr.In.Header.Values("X-Forwarded-For"); len(prior) > 0 {
		pr.Out.Header["X-Forwarded-For"] = prior
	}
	pr.SetXForwarded()
}

// NewForwarder makes a Forwarder over t; log (default slog.Default())
// receives the failed relays.
func NewForwarder(t *Transport, log *slog.Logger) *Forwarder {
	if log == nil {
		log = slog.Default()
	}
	f := &Forwarder{t: t, log: log}
	f.rp = &httputil.ReverseProxy{
		Transport: t,
		Rewrite: func(pr *httputil.ProxyRequest) {
			rewriteToPeer(pr)
			pr.Out.Header.Del(Header)
			pr.Out.Header.Del(AdminHeader)
			pr.Out.Header.Del(ClientHeader)
			pr.Out.Header.Del(UngatedHeader)
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			id, _ := r.Context().Value(peerCtxKey{}).(string)
			web.WriteError(f.log, w, r, &web.Error{Status: http.StatusBadGateway, Code: "hop_failed", Message: "bad gateway: host " + id + " did not answer over the hop", Err: err})
		},
	}
	return f
}

// Forward relays r to peer host peerID at its hop address peerAddr
// (host:port) and writes the peer's answer to w: method, path, query,
// Host, the body streamed both ways, protocol upgrades (websockets), and
// X-Forwarded-For with the client's address appended. A request that
// itself came over the hop is refused with a 502 (ErrLoop), in the JSON
// error envelope.
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request, peerID, peerAddr string) {
	if origin, ok := Origin(r.Context()); ok {
		web.WriteError(f.log, w, r, &web.Error{Status: http.StatusBadGateway, Code: "hop_loop",
			Message: "bad gateway: the request came over the hop from host " + origin + " and this host serves it only from its own replicas",
			Err:     ErrLoop})
		return
	}
	if err := fleetca.ValidHostID(peerID); err != nil {
		web.WriteError(f.log, w, r, &web.Error{Status: http.StatusBadGateway, Code: "hop_failed", Message: "bad gateway: peer", Err: err})
		return
	}
	if _, _, err := net.SplitHostPort(peerAddr); err != nil {
		web.WriteError(f.log, w, r, &web.Error{Status: http.StatusBadGateway, Code: "hop_failed", Message: "bad gateway: host " + peerID + "'s hop address", Err: err})
		return
	}
	// The request body streams to the peer while its answer streams
	// back (HTTP/1 servers otherwise drain the body first; HTTP/2's
	// streams are duplex anyway).
	http.NewResponseController(w).EnableFullDuplex()
	out := r.WithContext(WithPeer(r.Context(), peerID))
	u := *r.URL
	u.Host = peerAddr
	out.URL = &u
	f.rp.ServeHTTP(w, out)
}

// ClientTLS is the TLS client configuration of a hop to peer host id:
// TLS 1.3, this host's certificate, the fleet CA as the only root, the
// server dialed by its host id, and its certificate's common name checked
// to be id as well. It sets no NextProtos: the caller offers the
// protocols it speaks.
func (c Config) ClientTLS(id string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.Cert},
		RootCAs:      c.CAs,
		// crypto/tls verifies the chain and that the certificate names
		// id; the peer's CN must be id as well.
		ServerName: id,
		VerifyConnection: func(cs tls.ConnectionState) error {
			got, err := peerID(&cs)
			if err != nil {
				return err
			}
			if got != id {
				return fmt.Errorf("hop: dialed host %s, the certificate is host %s's", id, got)
			}
			return c.checkRevoked(&cs)
		},
	}
}
