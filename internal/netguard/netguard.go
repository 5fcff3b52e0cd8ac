// Package netguard classifies addresses berth must not send data-plane
// traffic to: link-local and cloud metadata addresses, and berth's own
// listeners. It is a leaf, so both the write-time check (package admin) and
// a dial-time check can use the same classification.
package netguard

import (
	"net/netip"
)

var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
	// metadata are the instance metadata services of the clouds berth
	// may run on that do not sit in 169.254.0.0/16: AWS's IPv6 endpoint
	// and Alibaba Cloud's.
	metadata = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, …
		netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	}
)

// IsLinkLocal reports whether ip is an IPv4 (169.254.0.0/16) or IPv6
// (fe80::/10) link-local address; IPv4-mapped IPv6 addresses count as
// their IPv4 address.
func IsLinkLocal(ip netip.Addr) bool {
	ip = ip.Unmap()
	return linkLocal4.Contains(ip) || linkLocal6.Contains(ip)
}

// IsMetadata reports whether ip is a cloud instance metadata address.
func IsMetadata(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	for _, m := range metadata {
		if ip == m {
			return true
		}
	}
	return false
}

// Forbidden says why ip is refused as an upstream unless the operator
// allows link-local upstreams ("" when it is not): it is link-local or a
// metadata address.
func Forbidden(ip netip.Addr) string {
	switch {
	case IsMetadata(ip):
		return "a cloud metadata address"
	case IsLinkLocal(ip):
		return "a link-local address"
	}
	return ""
}

// IsSelf reports whether dialing target reaches one of listeners, berth's
// own bound addresses. A listener on the unspecified address (0.0.0.0 or
// ::) with a port takes every local address with that port: loopback, the
// unspecified address itself, and local (the host's interface
// addresses). A listener on a specific address is reached at that address
// and, since dialing the unspecified address connects to the local host,
// at 0.0.0.0 or :: with its port.
func IsSelf(target netip.AddrPort, listeners []netip.AddrPort, local []netip.Addr) bool {
	ip := target.Addr().WithZone("").Unmap()
	for _, l := range listeners {
		if l.Port() != target.Port() {
			continue
		}
		la := l.Addr().WithZone("").Unmap()
		switch {
		case la == ip, ip.IsUnspecified():
			return true
		case la.IsUnspecified():
			if ip.IsLoopback() {
				return true
			}
			for _, a := range local {
				if a.WithZone("").Unmap() == ip {
					return true
				}
			}
		}
	}
	return false
}
