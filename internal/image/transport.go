package image

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/netguard"
)

// Timeouts of registry traffic. A pull may take long, but no single step
// may stall: the connect, the TLS handshake, the wait for a response's
// headers, and every read of a body (idleRead, the longest a read may see
// no byte) are bounded.
const (
	dialTimeout   = 10 * time.Second
	headerTimeout = 60 * time.Second
	idleRead      = 60 * time.Second
)

// registryTransport is the HTTP transport of every registry request. What
// a pull may reach is the operator's choice, not the tenant's who names the
// image: link-local and cloud metadata addresses are refused always, and
// loopback, unspecified and plain-HTTP registries only for the hosts in
// insecure (RegistryOptions.Insecure). The check is made at dial time, after
// name resolution, so a name resolving to 169.254.169.254 is refused too, as
// is a redirect to one.
func registryTransport(roots *x509.CertPool, insecure []string) http.RoundTripper {
	allowed := func(hostport string) bool {
		host, _, err := net.SplitHostPort(hostport)
		if err != nil {
			host = hostport
		}
		return slices.Contains(insecure, hostport) || slices.Contains(insecure, host)
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		open := allowed(addr)
		d := &net.Dialer{Timeout: dialTimeout, Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("registry address %q: not an IP address and port", address)
			}
			a := ap.Addr().Unmap()
			if why := netguard.Forbidden(a); why != "" {
				return fmt.Errorf("registry %s refused: %s is %s", addr, a, why)
			}
			if !open && (a.IsLoopback() || a.IsUnspecified()) {
				return fmt.Errorf("registry %s refused: %s is a loopback address (allow it with --registry-allow-insecure %s)", addr, a, addr)
			}
			return nil
		}}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &idleConn{Conn: c}, nil
	}
	tr := &http.Transport{
		// No proxy from the environment: it would dial for us, past the
		// checks above.
		Proxy: nil, DialContext: dial,
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: dialTimeout, ResponseHeaderTimeout: headerTimeout,
		MaxIdleConnsPerHost: 8, IdleConnTimeout: 90 * time.Second, ForceAttemptHTTP2: true,
	}
	return schemeGuard{tr, allowed}
}

// schemeGuard refuses plain HTTP to hosts the operator did not list:
// go-containerregistry falls back to http for loopback and RFC 1918
// registries by itself.
type schemeGuard struct {
	rt      http.RoundTripper
	allowed func(string) bool
}

func (g schemeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.EqualFold(req.URL.Scheme, "http") && !g.allowed(req.URL.Host) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("registry %s: plain HTTP refused (allow it with --registry-allow-insecure %s)", req.URL.Host, req.URL.Host)
	}
	return g.rt.RoundTrip(req)
}

// idleConn bounds every read: a registry that stops sending mid-blob fails
// the pull after idleRead instead of holding it forever.
type idleConn struct{ net.Conn }

func (c *idleConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(idleRead))
	return c.Conn.Read(b)
}
