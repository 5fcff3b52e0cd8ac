// Package netguard names the addresses the data plane must not reach on a
// tenant's behalf: berth's own listeners (Self) and link-local or cloud
// metadata addresses (IsLinkLocalOrMetadata). The proxy checks them when it
// dials an upstream, after name resolution; spec validation can check the
// same at write time.
package netguard

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Metadata services that are not in a link-local block.
var (
	alibabaMetadata = netip.AddrFrom4([4]byte{100, 100, 100, 200})
	awsMetadataV6   = netip.MustParseAddr("fd00:ec2::254")
)

// IsLinkLocalOrMetadata reports whether a is link-local (169.254.0.0/16,
// fe80::/10, and their multicast counterparts) or a cloud metadata address
// (169.254.169.254 is link-local; also 100.100.100.200 and fd00:ec2::254).
// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
func IsLinkLocalOrMetadata(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	return a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a == alibabaMetadata || a == awsMetadataV6
}

// Self is the set of berth's own listening addresses. It is safe for
// concurrent use, and may be filled (Add) after the users holding it were
// built, once the listeners are bound. Its zero value is an empty set.
type Self struct {
	addrs atomic.Pointer[[]netip.AddrPort]

	mu     sync.Mutex // guards own, readAt, and serialises Add
	own    map[netip.Addr]bool
	readAt time.Time
}

// hostAddrsEvery is how often the host's interface addresses are re-read
// (interfaces come and go); they are read only for a port a listener on an
// unspecified address (0.0.0.0, ::) uses.
const hostAddrsEvery = 10 * time.Second

// Add records listening addresses: a net.Addr of a listener (net.TCPAddr),
// or anything whose String is host:port with a literal IP.
func (s *Self) Add(addrs ...net.Addr) {
	var aps []netip.AddrPort
	for _, a := range addrs {
		if a == nil {
			continue
		}
		if ta, ok := a.(*net.TCPAddr); ok {
			aps = append(aps, ta.AddrPort())
			continue
		}
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			aps = append(aps, ap)
		}
	}
	s.AddAddrPort(aps...)
}

// AddAddrPort records listening addresses given as netip.AddrPort.
func (s *Self) AddAddrPort(aps ...netip.AddrPort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next []netip.AddrPort
	if cur := s.addrs.Load(); cur != nil {
		next = append(next, *cur...)
	}
	for _, ap := range aps {
		next = append(next, netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()))
	}
	s.addrs.Store(&next)
}

// Contains reports whether a connection to ap would reach one of the
// listeners. A listener on an unspecified address (0.0.0.0:p or [::]:p) is
// reached at every local address with port p: loopback, the unspecified
// address itself (which connects locally) and the host's interface
// addresses. A nil Self contains nothing.
func (s *Self) Contains(ap netip.AddrPort) bool {
	if s == nil {
		return false
	}
	cur := s.addrs.Load()
	if cur == nil {
		return false
	}
	a := ap.Addr().Unmap().WithZone("")
	local := -1 // unknown yet: whether a is one of this host's addresses
	for _, l := range *cur {
		if l.Port() != ap.Port() {
			continue
		}
		la := l.Addr()
		if la == a {
			return true
		}
		switch {
		case la.IsUnspecified():
			if local < 0 {
				local = 0
				if a.IsLoopback() || a.IsUnspecified() || s.isHostAddr(a) {
					local = 1
				}
			}
			if local == 1 {
				return true
			}
		case a.IsUnspecified() && la.IsLoopback():
			// Connecting to 0.0.0.0 (or ::) reaches the loopback
			// interface.
			return true
		}
	}
	return false
}

// isHostAddr reports whether a is the address of one of this host's
// interfaces, from a list re-read every hostAddrsEvery.
func (s *Self) isHostAddr(a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); s.own == nil || now.Sub(s.readAt) >= hostAddrsEvery {
		s.own, s.readAt = HostAddrs(), now
	}
	return s.own[a]
}

// HostAddrs lists the addresses of this host's interfaces, unmapped and
// without zones.
func HostAddrs() map[netip.Addr]bool {
	own := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return own
	}
	for _, ad := range addrs {
		var ip net.IP
		switch v := ad.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			own[a.Unmap()] = true
		}
	}
	return own
}

// Forbidden says why a is refused as an upstream unless the operator allows
// link-local upstreams, or "" when it is not: it is a cloud metadata
// address, or link-local.
func Forbidden(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	switch {
	case a == alibabaMetadata || a == awsMetadataV6 || a == netip.AddrFrom4([4]byte{169, 254, 169, 254}):
		return "a cloud metadata address"
	case IsLinkLocalOrMetadata(a):
		return "a link-local address"
	}
	return ""
}

// Refuse says why a connection to ap must not be made, or "" when it may:
// it is one of berth's own listeners (self; the admin API would answer
// berth itself, the proxy would loop), or — unless allowLinkLocal — a
// link-local or cloud metadata address.
func Refuse(self *Self, allowLinkLocal bool, ap netip.AddrPort) string {
	if self.Contains(ap) {
		return "it is one of berth's own listeners"
	}
	if !allowLinkLocal {
		if why := Forbidden(ap.Addr()); why != "" {
			return "it is " + why
		}
	}
	return ""
}

// Client is an HTTP client for URLs a tenant or the operator names (an
// identity provider, a webhook): every connection is checked with Refuse
// at dial time, after name resolution, so a name that resolves to berth's
// own listeners or a metadata address is refused whatever the URL said.
// what names the peer in errors ("identity provider", "webhook"). No
// proxy from the environment (it would dial for us), no redirects
// followed, and timeouts on every step (timeout for the whole request).
func Client(self *Self, allowLinkLocal bool, what string, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%s address %q: not an IP address and port", what, address)
		}
		if why := Refuse(self, allowLinkLocal, ap); why != "" {
			return fmt.Errorf("%s address %s refused: %s", what, ap, why)
		}
		return nil
	}}
	tr := &http.Transport{
		Proxy: nil, DialContext: d.DialContext, TLSHandshakeTimeout: 5 * time.Second,
		ResponseHeaderTimeout: timeout, MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second,
		ForceAttemptHTTP2: true,
	}
	return &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
