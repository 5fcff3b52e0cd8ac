package netguard

import (
	"net"
	"net/netip"
	"testing"
)

func TestIsLinkLocalOrMetadata(t *testing.T) {
	for s, want := range map[string]bool{
		"169.254.169.254":        true,
		"169.254.0.1":            true,
		"::ffff:169.254.169.254": true,
		"fe80::1":                true,
		"fe80::1%eth0":           true,
		"100.100.100.200":        true,
		"fd00:ec2::254":          true,
		"127.0.0.1":              false,
		"10.0.0.1":               false,
		"100.100.100.201":        false,
		"::1":                    false,
		"2001:db8::1":            false,
	} {
		if got := IsLinkLocalOrMetadata(netip.MustParseAddr(s)); got != want {
			t.Errorf("IsLinkLocalOrMetadata(%s) = %v, want %v", s, got, want)
		}
	}
}

func TestSelfContains(t *testing.T) {
	var nilSelf *Self
	if nilSelf.Contains(netip.MustParseAddrPort("127.0.0.1:1")) {
		t.Error("a nil Self contains an address")
	}
	var s Self
	if s.Contains(netip.MustParseAddrPort("127.0.0.1:9090")) {
		t.Error("an empty Self contains an address")
	}
	s.Add(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9090}, &net.TCPAddr{IP: net.IPv4zero, Port: 6188})
	s.AddAddrPort(netip.MustParseAddrPort("[::1]:7000"))
	var host netip.Addr // a non-loopback interface address, if the host has one
	for a := range HostAddrs() {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			host = a
			break
		}
	}
	tests := map[string]bool{
		"127.0.0.1:9090":          true,
		"[::ffff:127.0.0.1]:9090": true,
		"0.0.0.0:9090":            true,  // connects to loopback
		"127.0.0.2:9090":          false, // nobody listens there
		"127.0.0.1:9091":          false,
		"127.0.0.1:6188":          true, // 0.0.0.0:6188 listens on every address
		"127.9.9.9:6188":          true,
		"[::1]:6188":              true,
		"0.0.0.0:6188":            true,
		"8.8.8.8:6188":            false,
		"[::1]:7000":              true,
		"127.0.0.1:7000":          false,
	}
	if host.IsValid() {
		tests[netip.AddrPortFrom(host, 6188).String()] = true
		tests[netip.AddrPortFrom(host, 9090).String()] = false
	}
	for s2, want := range tests {
		if got := s.Contains(netip.MustParseAddrPort(s2)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", s2, got, want)
		}
	}
}
func TestForbidden(t *testing.T) {
	for _, c := range []struct {
		ip   string
		want bool
	}{
		{"169.254.169.254", true}, {"169.254.1.2", true}, {"::ffff:169.254.169.254", true},
		{"fe80::1", true}, {"fd00:ec2::254", true}, {"100.100.100.200", true},
		{"127.0.0.1", false}, {"10.0.0.1", false}, {"100.100.100.201", false}, {"fd00:ec2::253", false}, {"8.8.8.8", false},
	} {
		if got := Forbidden(netip.MustParseAddr(c.ip)) != ""; got != c.want {
			t.Errorf("Forbidden(%s) = %v, want %v", c.ip, got, c.want)
		}
	}
}
