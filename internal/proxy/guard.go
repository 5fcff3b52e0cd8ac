package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/netguard"
)

// dialGuard refuses, at dial time and after name resolution, the upstream
// addresses a deployment must not reach: berth's own listeners (the admin
// API through the proxy would make every tenant an operator; the proxy
// itself would loop) and, unless the operator allows them, link-local and
// cloud metadata addresses. Checked at dial time, it also catches a DNS name
// that resolves there, whatever the spec said.
type dialGuard struct {
	self           *netguard.Self // nil: no listener is refused
	allowLinkLocal bool
}

// refusedDialError is a dial the guard refused.
type refusedDialError struct {
	addr netip.AddrPort
	why  string
}

func (e *refusedDialError) Error() string {
	return fmt.Sprintf("upstream address %s refused: %s", e.addr, e.why)
}

// isRefusedDial reports a dial the guard refused. Such a backend is not
// marked unhealthy: no probe would change the answer, and every request to it
// should say why it failed.
func isRefusedDial(err error) bool {
	var re *refusedDialError
	return errors.As(err, &re)
}

// check refuses ap when it is off limits.
func (g *dialGuard) check(ap netip.AddrPort) error {
	if g == nil {
		return nil
	}
	if why := netguard.Refuse(g.self, g.allowLinkLocal, ap); why != "" {
		if !g.self.Contains(ap) {
			why += " (--allow-link-local-upstreams allows those)"
		}
		return &refusedDialError{ap, why}
	}
	return nil
}

// control is a net.Dialer Control func: it runs for each address a dial
// tries, after resolution and before connect.
func (g *dialGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &refusedDialError{why: "not an IP address and port: " + strconv.Quote(address)}
	}
	return g.check(ap)
}

// netDialer returns the dialer for upstream connections, with the guard.
func (g *dialGuard) netDialer() net.Dialer {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if g != nil && (g.self != nil || !g.allowLinkLocal) {
		d.Control = g.control
	}
	return d
}

// hopHeader counts the berth proxies a request has passed through. Each one
// writes it (one more than it received) on every forwarded request and
// refuses a request that already passed maxHops of them: a deployment whose
// upstream leads back to berth (itself, or another berth that leads back)
// ends with 508 after a bounded number of trips instead of multiplying
// connections until descriptors or memory run out. A few hops are allowed,
// since berth behind berth is legitimate. It is not Via: some servers
// (nginx's gzip_proxied) treat any Via as a reason not to compress.
const hopHeader = "X-Berth-Hops"

// hopOriginHeader names the origin host of a request that came over the
// hop between a fleet's hosts (package fleet/hop): the hop server sets it
// for this gateway, after authenticating the peer host. It is never passed
// on to a backend, so that no public client can pose as a fleet host to
// one (the hop's Origin, in the request's context, is what berth trusts).
const hopOriginHeader = "X-Berth-Hop"

// The headers by which a fleet host marks a request it forwards to
// another host's admin API over the hop (package fleet/hop's AdminHeader,
// ClientHeader, UngatedHeader). The data plane never passes them on: the
// hop server ignores them on a request that came through a data plane
// anyway (its X-Berth-Hops), and a backend has no use for them.
const (
	hopAdminHeader   = "X-Berth-Hop-Admin"
	hopClientHeader  = "X-Berth-Hop-Client"
	hopUngatedHeader = "X-Berth-Hop-Ungated"
)

// maxHops is how many berth proxies a request may have passed before
// reaching this one.
const maxHops = 3

// textLoop is the answer to a request that went round too many berths.
const textLoop = "loop detected: the request has passed through too many berth proxies\n"

// textRefused is the answer when every upstream address was refused.
const textRefused = "bad gateway: the backend's address is not allowed (berth's own listener, or a link-local or metadata address)\n"

// textTimeout is the answer when the backend did not answer in time.
const textTimeout = "gateway timeout: the backend did not answer in time\n"

// hops returns the hop count r arrived with: the largest count among its
// X-Berth-Hops fields, 0 when absent, maxHops when unparsable as a count
// (a value berth did not write is not trusted to be small).
func hops(r *http.Request) int {
	vv := r.Header[hopHeader]
	n := 0
	for _, v := range vv {
		k, err := strconv.Atoi(v)
		if err != nil || k < 0 || k > maxHops {
			return maxHops
		}
		n = max(n, k)
	}
	return n
}

// appendHop returns the X-Berth-Hops value for a request forwarded on.
func appendHop(b []byte, r *http.Request) []byte {
	return strconv.AppendInt(b, int64(hops(r)+1), 10)
}
