// Package hop is the authenticated, encrypted hop between the hosts of a
// fleet: a request arriving at host A for a replica on host B goes to B's
// hop listener over mutual TLS with fleet CA certificates (TLS 1.3, each
// side's host certificate, the server dialed by its host id), and B's
// local gateway serves it from its own replicas.
//
// The server (NewServer) authenticates the origin host from its verified
// client certificate and hands the request to the local handler marked as
// hopped: Origin reads the authenticated origin from the request's
// context, and the X-Berth-Hop header carries it on to the replica. Only
// the hop server sets either; Public strips a client's own X-Berth-Hop on
// the public listener. A hopped request is never hopped again (Forward
// answers 502 instead), so two hosts that each think the other holds the
// replica cannot bounce a request between them.
//
// A host also forwards requests on a Computer another host holds to that
// host's admin API (AdminForwarder, ServerConfig.Admin), marked with
// AdminHeader: the hop server honours the mark only when it names the
// authenticated peer and the request did not pass through a data plane;
// the receiving host authenticates the original caller itself.
//
// The client side is Transport (NewTransport), an http.RoundTripper that
// keeps reusable connections per peer, and Forward, a reverse proxy over
// it.
package hop

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/berth-dev/berth/internal/fleet/fleetca"
)

// Header is the request header that names the origin host of a hopped
// request, set by the hop server after authenticating the origin.
const Header = "X-Berth-Hop"

// AdminHeader marks a request a fleet host forwards to another host's
// admin API (ForwardAdmin): its value is the forwarding host's id. The
// hop server dispatches a request to its admin handler only when the
// header names the authenticated peer and the request did not pass
// through a data plane (no X-Berth-Hops, no Via naming berth); it strips
// the header (and ClientHeader) from every other request. Public strips
// both from the public listener's requests, and Forward from what the
// data plane relays.
const AdminHeader = "X-Berth-Hop-Admin"

// ClientHeader carries the original client's address of a request
// forwarded to another host's admin API, which the receiving host takes
// as the request's RemoteAddr (its brake counts failed credentials per
// client, not per forwarding host).
const ClientHeader = "X-Berth-Hop-Client"

// UngatedHeader, on a request ForwardAdmin sends, says the forwarding
// host's admin API has no operator password (so its callers without a
// credential are local to it). A host whose own admin API has none
// admits a forwarded caller without a credential only then.
const UngatedHeader = "X-Berth-Hop-Ungated"

// Default timeouts.
const (
	DefaultReadHeaderTimeout     = 10 * time.Second
	DefaultIdleTimeout           = 90 * time.Second
	DefaultDialTimeout           = 5 * time.Second
	DefaultTLSHandshakeTimeout   = 5 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
)

// Config is a host's side of the hop.
type Config struct {
	// HostID is this host's fleet id; default the certificate's common
	// name. The certificate must be for it (fleetca.CheckHostCert).
	HostID string
	// Cert is this host's certificate and key, issued by the fleet CA
	// (berth fleet init or join).
	Cert tls.Certificate
	// CAs holds the fleet CA: the only issuer of the peers' certificates.
	CAs *x509.CertPool
	// HTTP2 has the client offer h2 (ALPN) as well as HTTP/1.1. By
	// default the client speaks HTTP/1.1 over keep-alive connections,
	// which BenchmarkHop measured faster one request at a time (on
	// loopback, p50 +4 µs over a direct GET against +14 µs for h2). The
	// server accepts both.
	HTTP2 bool
	// Revoked, when set, holds the serials the fleet CA revoked (its
	// CRL, as the hosts read it from etcd): a peer certificate among them
	// is refused on both sides at the handshake. It is consulted at every
	// new connection, so a CRL set later applies to the next ones.
	Revoked *fleetca.Revocations

	// Server: the read timeouts (defaults above).
	ReadHeaderTimeout, IdleTimeout time.Duration
	// Client: the timeouts of a dial, a TLS handshake and the wait for
	// a response's head (defaults above).
	DialTimeout, TLSHandshakeTimeout, ResponseHeaderTimeout time.Duration
}

// ConfigFromFiles reads the fleet CA (caFile) and this host's certificate
// and key, as fleet.json names them, and checks the certificate serves the
// hop for hostID ("" takes the certificate's common name).
func ConfigFromFiles(caFile, certFile, keyFile, hostID string) (Config, error) {
	pool, err := fleetca.LoadCAPool(caFile)
	if err != nil {
		return Config{}, fmt.Errorf("hop: %w", err)
	}
	pair, id, err := fleetca.LoadHostCert(certFile, keyFile, hostID)
	if err != nil {
		return Config{}, fmt.Errorf("hop: %w", err)
	}
	return Config{HostID: id, Cert: pair, CAs: pool}, nil
}

// check fills the defaults and refuses a configuration the hop cannot
// run with.
func (c Config) check() (Config, error) {
	if c.CAs == nil {
		return c, errors.New("hop: CAs: the fleet CA is required")
	}
	if len(c.Cert.Certificate) == 0 {
		return c, errors.New("hop: Cert: this host's certificate is required")
	}
	leaf := c.Cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Cert.Certificate[0]); err != nil {
			return c, fmt.Errorf("hop: Cert: %w", err)
		}
		c.Cert.Leaf = leaf
	}
	if c.HostID == "" {
		c.HostID = leaf.Subject.CommonName
	}
	if err := fleetca.ValidHostID(c.HostID); err != nil {
		return c, fmt.Errorf("hop: HostID: %w", err)
	}
	if err := fleetca.CheckHostCert(leaf, c.HostID); err != nil {
		return c, fmt.Errorf("hop: Cert: %w", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.CAs, KeyUsages: fleetca.HostUsages}); err != nil {
		return c, fmt.Errorf("hop: Cert: not a certificate of the fleet CA: %w", err)
	}
	for _, d := range []struct {
		p   *time.Duration
		def time.Duration
	}{
		{&c.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&c.IdleTimeout, DefaultIdleTimeout},
		{&c.DialTimeout, DefaultDialTimeout}, {&c.TLSHandshakeTimeout, DefaultTLSHandshakeTimeout},
		{&c.ResponseHeaderTimeout, DefaultResponseHeaderTimeout},
	} {
		if *d.p < 0 {
			return c, errors.New("hop: a timeout is negative")
		}
		if *d.p == 0 {
			*d.p = d.def
		}
	}
	return c, nil
}

func protocols(h2 bool) *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(h2)
	return p
}

// checkRevoked refuses a verified peer certificate whose serial the
// fleet CA revoked.
func (c Config) checkRevoked(cs *tls.ConnectionState) error {
	if c.Revoked == nil || cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	leaf := cs.VerifiedChains[0][0]
	if c.Revoked.Revoked(leaf) {
		return fmt.Errorf("hop: the certificate of host %s (serial %s) is revoked", leaf.Subject.CommonName, leaf.SerialNumber)
	}
	return nil
}

// peerID is the host id a verified peer certificate authenticates: its
// common name, which must also be among its subject alternative names
// (fleetca issues both; a certificate of the fleet CA without, issued
// before the hop, is refused).
func peerID(cs *tls.ConnectionState) (string, error) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", errors.New("no verified peer certificate")
	}
	leaf := cs.VerifiedChains[0][0]
	id := leaf.Subject.CommonName
	if err := fleetca.ValidHostID(id); err != nil {
		return "", err
	}
	if err := fleetca.CheckHostCert(leaf, id); err != nil {
		return "", err
	}
	return id, nil
}

type originKey struct{}

// Origin is the authenticated origin host of a request the hop server
// received; ok is false for any other request (a public client's, even
// one that sent an X-Berth-Hop header).
func Origin(ctx context.Context) (id string, ok bool) {
	id, ok = ctx.Value(originKey{}).(string)
	return id, ok
}

// WithOrigin marks ctx as a hopped request's from origin. Only the hop
// server, after authenticating origin, and tests call it.
func WithOrigin(ctx context.Context, origin string) context.Context {
	return context.WithValue(ctx, originKey{}, origin)
}

// StripForged removes X-Berth-Hop from a request that did not come over
// the hop, and the admin marker (AdminHeader, ClientHeader) from every
// request: the public listener's clients cannot pose as a peer host, nor
// reach a host's admin API through the data plane.
func StripForged(r *http.Request) {
	if _, ok := Origin(r.Context()); !ok {
		r.Header.Del(Header)
	}
	r.Header.Del(AdminHeader)
	r.Header.Del(ClientHeader)
	r.Header.Del(UngatedHeader)
}

// Public wraps the public listener's handler with StripForged.
func Public(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		StripForged(r)
		h.ServeHTTP(w, r)
	})
}
