package egress

import (
	"net/netip"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/netguard"
)

// platformBlocks are the address blocks no policy can open: private,
// shared and special-purpose space, where the host's neighbours, its cloud
// metadata service (169.254.169.254) and the host itself live.
var platformBlocks = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",          // "this network"
		"10.0.0.0/8",         // RFC 1918
		"100.64.0.0/10",      // CGNAT (RFC 6598)
		"127.0.0.0/8",        // loopback
		"169.254.0.0/16",     // link-local, cloud metadata
		"172.16.0.0/12",      // RFC 1918
		"192.0.0.0/24",       // IETF protocol assignments
		"192.168.0.0/16",     // RFC 1918
		"198.18.0.0/15",      // benchmarking
		"224.0.0.0/4",        // multicast
		"240.0.0.0/4",        // reserved, broadcast
		"::/128",             // unspecified
		"::1/128",            // loopback
		"64:ff9b::/96",       // NAT64: would reach any IPv4 address above
		"64:ff9b:1::/48",     // local-use NAT64
		"2002::/16",          // 6to4: embeds an IPv4 address
		"fc00::/7",           // unique local
		"fe80::/10",          // link-local
		"ff00::/8",           // multicast
		"100::/64",           // discard
		"2001:db8::/32",      // documentation
		"::ffff:0:0/96",      // IPv4-mapped (unmapped before the check anyway)
		"::ffff:0:0:0/96",    // IPv4-translated
		"2001::/32",          // Teredo: embeds an IPv4 address
		"2001:10::/28",       // ORCHID
		"2001:20::/28",       // ORCHIDv2
		"3fff::/20",          // documentation
		"5f00::/16",          // SRv6 SIDs
		"fec0::/10",          // site-local (deprecated)
		"ff02::/16",          // link-local multicast
		"::/96",              // IPv4-compatible (deprecated)
		"192.88.99.0/24",     // 6to4 relay anycast
		"255.255.255.255/32", // broadcast
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// blockedPorts are destination ports no policy can open: SMTP, so that
// no Computer sends mail directly.
var blockedPorts = map[uint16]string{25: "SMTP (port 25) is closed to Computers"}

// platform is the platform deny set: the blocks above plus the host's own
// addresses, re-read at most once a minute (interfaces come and go).
type platform struct {
	loopbackOK bool // tests: 127.0.0.1 is exempt

	mu     sync.Mutex
	own    map[netip.Addr]bool
	readAt time.Time
}

// hostAddrsEvery is how often the host's own addresses are re-read.
const hostAddrsEvery = time.Minute

// denied reports whether a is in the platform deny set, and why.
func (p *platform) denied(a netip.Addr) (string, bool) {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return "not an address", true
	}
	if p.loopbackOK && a == netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
		return "", false
	}
	for _, b := range platformBlocks {
		if b.Contains(a) {
			return "address " + a.String() + " is in " + b.String() + ", which Computers may not reach", true
		}
	}
	if p.isOwn(a) {
		return "address " + a.String() + " is this host's own", true
	}
	return "", false
}

func (p *platform) isOwn(a netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); p.own == nil || now.Sub(p.readAt) >= hostAddrsEvery {
		p.own, p.readAt = netguard.HostAddrs(), now
	}
	return p.own[a]
}
