package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		name, in  string
		wantField string // "" with wantErr false: valid
		wantErr   bool
	}{
		{"absent", ``, "", false},
		{"null", `null`, "", false},
		{"empty object", `{}`, "", false},
		{"all forms", `{"allow":["*","example.com","*.example.org","203.0.113.7","203.0.113.0/24","api.x.com:443","[2001:db8::1]:443","2001:db8::/32","[2001:db8::/32]:443","*:80","EXAMPLE.net."],"deny":["bad.example.com"]}`, "", false},
		{"null lists", `{"allow":null,"deny":null}`, "", false},
		{"not an object", `["example.com"]`, "", true},
		{"boolean", `true`, "", true},
		{"unknown field", `{"allow":[],"block":[]}`, "block", true},
		{"list not strings", `{"allow":[1]}`, "allow", true},
		{"list not a list", `{"deny":"example.com"}`, "deny", true},
		{"empty rule", `{"allow":["ok.com",""]}`, "allow[1]", true},
		{"url", `{"allow":["https://example.com"]}`, "allow[0]", true},
		{"path", `{"allow":["example.com/x"]}`, "allow[0]", true},
		{"userinfo", `{"allow":["u@example.com"]}`, "allow[0]", true},
		{"port zero", `{"allow":["example.com:0"]}`, "allow[0]", true},
		{"port too big", `{"allow":["example.com:65536"]}`, "allow[0]", true},
		{"port not a number", `{"allow":["example.com:https"]}`, "allow[0]", true},
		{"bad cidr", `{"deny":["10.0.0.0/33"]}`, "deny[0]", true},
		{"bad name", `{"allow":["exa mple.com"]}`, "allow[0]", true},
		{"label starts with dash", `{"allow":["-x.com"]}`, "allow[0]", true},
		{"bad wildcard", `{"allow":["*.*.com"]}`, "allow[0]", true},
		{"inner wildcard", `{"allow":["a.*.com"]}`, "allow[0]", true},
		{"zone", `{"allow":["fe80::1%eth0"]}`, "allow[0]", true},
		{"unclosed bracket", `{"allow":["[2001:db8::1"]}`, "allow[0]", true},
		{"too many rules", `{"allow":[` + strings.Repeat(`"a.com",`, MaxRules) + `"a.com"]}`, "allow", true},
		{"malformed", `{"allow":`, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParsePolicy(%s) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if err == nil {
				return
			}
			var pe *PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *PolicyError", err)
			}
			if pe.Field != tt.wantField {
				t.Errorf("field = %q, want %q (%v)", pe.Field, tt.wantField, err)
			}
		})
	}
}

func TestPolicyAllows(t *testing.T) {
	pol, err := ParsePolicy([]byte(`{
		"allow": ["example.com", "*.example.org", "api.x.com:443", "203.0.113.0/24", "[2001:db8::]:8443", "*.0.113.9"],
		"deny": ["secret.example.org", "203.0.113.66", "example.com:8080"]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	pub := netip.MustParseAddr("198.51.100.1")
	tests := []struct {
		host string
		addr string
		port uint16
		want bool
	}{
		{"example.com", "198.51.100.1", 80, true},
		{"example.com", "198.51.100.1", 443, true},
		{"example.com", "198.51.100.1", 8080, false}, // denied by port
		{"www.example.com", "198.51.100.1", 80, false},
		{"a.example.org", "198.51.100.1", 443, true},
		{"a.b.example.org", "198.51.100.1", 443, true},
		{"example.org", "198.51.100.1", 443, false}, // the wildcard is subdomains only
		{"secret.example.org", "198.51.100.1", 443, false},
		{"notexample.org", "198.51.100.1", 443, false},
		{"api.x.com", "198.51.100.1", 443, true},
		{"api.x.com", "198.51.100.1", 80, false},
		{"anything.test", "203.0.113.5", 80, true}, // by the address it resolves to
		{"anything.test", "203.0.113.66", 80, false},
		{"203.0.113.5", "203.0.113.5", 22, true},
		{"203.0.114.5", "203.0.114.5", 22, false},
		{"2001:db8::", "2001:db8::", 8443, true},
		{"2001:db8::", "2001:db8::", 443, false},
		{"203.0.113.9", "198.51.100.9", 80, false}, // a literal never matches a name wildcard
		{"other.com", "198.51.100.1", 80, false},
	}
	for _, tt := range tests {
		addr := netip.MustParseAddr(tt.addr)
		if got := pol.Allows(tt.host, addr, tt.port); got != tt.want {
			t.Errorf("Allows(%s, %s, %d) = %v, want %v", tt.host, tt.addr, tt.port, got, tt.want)
		}
	}
	var none Policy
	if none.Allows("example.com", pub, 80) {
		t.Error("the zero policy allows")
	}
	all, _ := ParsePolicy([]byte(`{"allow":["*"],"deny":["*:22"]}`))
	if !all.Allows("x.com", pub, 80) || all.Allows("x.com", pub, 22) {
		t.Error(`{"allow":["*"],"deny":["*:22"]} does not allow 80 and refuse 22`)
	}
}

func TestPlatformDenied(t *testing.T) {
	p := &platform{}
	for _, s := range []string{
		"10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "100.127.255.254",
		"127.0.0.1", "127.0.0.2", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "fe80::1",
		"fd00::1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "::",
	} {
		if _, denied := p.denied(netip.MustParseAddr(s)); !denied {
			t.Errorf("%s is not in the platform deny set", s)
		}
	}
	for _, s := range []string{"198.51.100.1", "8.8.8.8", "100.128.0.1", "2606:4700::1111"} {
		if why, denied := p.denied(netip.MustParseAddr(s)); denied {
			t.Errorf("%s is denied: %s", s, why)
		}
	}
	lo := &platform{loopbackOK: true}
	if _, denied := lo.denied(netip.MustParseAddr("127.0.0.1")); denied {
		t.Error("AllowLoopback does not exempt 127.0.0.1")
	}
	if _, denied := lo.denied(netip.MustParseAddr("127.0.0.2")); !denied {
		t.Error("AllowLoopback exempts 127.0.0.2 too")
	}
}
