package netguard

import (
	"net/netip"
	"testing"
)

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

func TestIsSelf(t *testing.T) {
	ls := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9090"), netip.MustParseAddrPort("0.0.0.0:6188"), netip.MustParseAddrPort("[::]:7000")}
	local := []netip.Addr{netip.MustParseAddr("192.0.2.7")}
	for _, c := range []struct {
		target string
		want   bool
	}{
		{"127.0.0.1:9090", true}, {"0.0.0.0:9090", true}, {"[::ffff:127.0.0.1]:9090", true},
		{"127.0.0.2:9090", false}, {"127.0.0.1:9091", false},
		{"127.0.0.1:6188", true}, {"127.9.9.9:6188", true}, {"192.0.2.7:6188", true}, {"192.0.2.8:6188", false}, {"[::1]:6188", true},
		{"[::1]:7000", true}, {"192.0.2.7:7000", true}, {"10.1.1.1:7000", false},
	} {
		if got := IsSelf(netip.MustParseAddrPort(c.target), ls, local); got != c.want {
			t.Errorf("IsSelf(%s) = %v, want %v", c.target, got, c.want)
		}
	}
}
