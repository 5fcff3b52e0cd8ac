package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// MaxRules bounds each list of a policy.
const MaxRules = 256

// Policy is a grant's egress policy: where processes working under the
// grant may connect through the proxy. Its JSON is
//
//	{"allow": [rule, ...], "deny": [rule, ...]}
//
// (both lists optional, no other fields). A rule is a destination with an
// optional port (":443"; without one, any port):
//
//	"*"                    any host
//	"example.com"          that host name exactly (case-insensitive)
//	"*.example.org"        any subdomain of example.org, not example.org itself
//	"203.0.113.7"          that address ("[2001:db8::1]:443" with a port)
//	"203.0.113.0/24"       any address in the block ("[2001:db8::/32]:443")
//
// Name rules match the host the client asked for; address and block rules
// match the address the proxy connects to (the literal, or each address
// the name resolves to). A destination is refused when any deny rule
// matches it, else allowed when any allow rule does, else refused: the
// zero Policy (no egress field in the grant) denies everything. Whatever a
// policy allows, the platform deny set (see package doc) still applies.
type Policy struct {
	Allow []Rule
	Deny  []Rule
}

// Rule is one parsed destination of a Policy.
type Rule struct {
	// Exactly one of these is set, or none for "*".
	Name   string       // exact host name, lower case
	Suffix string       // for "*.example.org": ".example.org"
	Prefix netip.Prefix // an address is a /32 or /128
	// Port is the only port matched; 0 matches any.
	Port uint16
	text string
}

func (r Rule) String() string { return r.text }

// byAddr reports whether r matches addresses rather than names.
func (r Rule) byAddr() bool { return r.Prefix.IsValid() }

// any reports whether r is "*" (with or without a port).
func (r Rule) any() bool { return r.Name == "" && r.Suffix == "" && !r.Prefix.IsValid() }

// matchName reports whether r matches host (lower case, no trailing dot)
// on port, by name alone: an address literal matches only "*".
func (r Rule) matchName(host string, literal bool, port uint16) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	switch {
	case r.any():
		return true
	case literal:
		return false
	case r.Name != "":
		return r.Name == host
	case r.Suffix != "":
		return strings.HasSuffix(host, r.Suffix)
	}
	return false
}

// matchAddr reports whether r matches address a on port.
func (r Rule) matchAddr(a netip.Addr, port uint16) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	return r.byAddr() && a.IsValid() && r.Prefix.Contains(a.Unmap())
}

// Allows reports whether the policy lets a client reach host (as asked:
// a name, or an address literal) at address addr (what the proxy would
// connect to) on port.
func (p *Policy) Allows(host string, addr netip.Addr, port uint16) bool {
	if p == nil {
		return false
	}
	_, err := netip.ParseAddr(host)
	literal := err == nil
	for _, r := range p.Deny {
		if r.matchName(host, literal, port) || r.matchAddr(addr, port) {
			return false
		}
	}
	for _, r := range p.Allow {
		if r.matchName(host, literal, port) || r.matchAddr(addr, port) {
			return true
		}
	}
	return false
}

// mayAllow reports whether some address of host name host might be
// allowed on port: false when a deny rule names it, or when no allow rule
// could match it. The proxy asks before resolving, so a name the policy
// refuses is never looked up.
func (p *Policy) mayAllow(host string, port uint16) bool {
	if p == nil {
		return false
	}
	for _, r := range p.Deny {
		if r.matchName(host, false, port) {
			return false
		}
	}
	for _, r := range p.Allow {
		if r.matchName(host, false, port) || r.byAddr() && (r.Port == 0 || r.Port == port) {
			return true
		}
	}
	return false
}

// PolicyError is an invalid policy; Field names the offending part
// ("allow[2]", or "" for the whole value).
type PolicyError struct {
	Field string
	Msg   string
}

func (e *PolicyError) Error() string {
	if e.Field == "" {
		return "egress: " + e.Msg
	}
	return "egress." + e.Field + ": " + e.Msg
}

// ParsePolicy parses a grant's egress JSON. Empty input and null are the
// deny-all policy. Errors are *PolicyError.
func ParsePolicy(b []byte) (*Policy, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return &Policy{}, nil
	}
	if b[0] != '{' {
		return nil, &PolicyError{"", `must be an object {"allow": [...], "deny": [...]} (or absent to deny all)`}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, &PolicyError{"", "must be a JSON object: " + err.Error()}
	}
	p := &Policy{}
	for k, v := range raw {
		var dst *[]Rule
		switch k {
		case "allow":
			dst = &p.Allow
		case "deny":
			dst = &p.Deny
		default:
			return nil, &PolicyError{k, `is not a policy field; want "allow" and "deny"`}
		}
		var texts []string
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		if err := json.Unmarshal(v, &texts); err != nil {
			return nil, &PolicyError{k, "must be an array of strings"}
		}
		if len(texts) > MaxRules {
			return nil, &PolicyError{k, fmt.Sprintf("has %d rules; at most %d", len(texts), MaxRules)}
		}
		for i, t := range texts {
			r, err := ParseRule(t)
			if err != nil {
				return nil, &PolicyError{fmt.Sprintf("%s[%d]", k, i), err.Error()}
			}
			*dst = append(*dst, r)
		}
	}
	return p, nil
}

// ParseRule parses one rule of a policy (see Policy).
func ParseRule(s string) (Rule, error) {
	r := Rule{text: s}
	if s == "" {
		return r, fmt.Errorf("is empty")
	}
	if len(s) > 300 {
		return r, fmt.Errorf("is longer than 300 bytes")
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@") && !isCIDR(s) {
		return r, fmt.Errorf("%q is not a destination: want a host, *.domain, an address or a CIDR block, with an optional :port (no scheme or path)", s)
	}
	host, port, err := splitPort(s)
	if err != nil {
		return r, err
	}
	r.Port = port
	switch {
	case host == "*":
		return r, nil
	case strings.Contains(host, "/"):
		pfx, err := netip.ParsePrefix(host)
		if err != nil {
			return r, fmt.Errorf("%q is not a CIDR block", host)
		}
		if pfx.Addr().Zone() != "" {
			return r, fmt.Errorf("%q: zones are not allowed", host)
		}
		r.Prefix = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-unmapBits(pfx.Addr())).Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return r, fmt.Errorf("%q: zones are not allowed", host)
		}
		a = a.Unmap()
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
		return r, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		if !validName(rest) {
			return r, fmt.Errorf("%q is not a valid wildcard: want *.domain", host)
		}
		r.Suffix = "." + rest
		return r, nil
	}
	if !validName(name) {
		return r, fmt.Errorf("%q is not a valid host name", host)
	}
	r.Name = name
	return r, nil
}

// unmapBits is how many bits an IPv4-mapped prefix loses when unmapped.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

func isCIDR(s string) bool {
	h, _, err := splitPort(s)
	return err == nil && strings.Count(h, "/") == 1 && !strings.ContainsAny(s, "?#@")
}

// splitPort splits "host[:port]", "[v6][:port]", a bare IPv6 address or
// block (no port), and "[v6/len]:port".
func splitPort(s string) (string, uint16, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, fmt.Errorf("%q: missing ]", s)
		}
		host, rest := s[1:end], s[end+1:]
		if rest == "" {
			return host, 0, nil
		}
		p, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", 0, fmt.Errorf("%q: want [address]:port", s)
		}
		port, err := parsePort(p)
		return host, port, err
	}
	if strings.Count(s, ":") > 1 { // a bare IPv6 address or block
		return s, 0, nil
	}
	host, p, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0, nil
	}
	port, err := parsePort(p)
	return host, port, err
}

func parsePort(p string) (uint16, error) {
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q: want 1 to 65535", p)
	}
	return uint16(n), nil
}

// validName reports whether s is a DNS name: labels of letters, digits,
// '-' and '_' (no leading or trailing '-'), at most 63 bytes each, 253 in
// all.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
