package guard

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/web"
)

// Limits (app-lb §6.3). Lengths are in characters (Unicode code points).
const (
	MaxRules         = 256
	MaxPattern       = 256 // client, deployment, path_prefix, path_contains
	MaxHost          = 253
	MaxUserAgent     = 128
	MaxNote          = 256
	MaxMethod        = 16
	MaxExpiresInSecs = 10 * 365 * 24 * 60 * 60 // ten years
)

// ErrEmptyMatch refuses a rule without a condition. Its message is
// app-lb's, verbatim.
var ErrEmptyMatch = errors.New("a rule needs at least one condition — an empty match would apply to every request to the data plane")

func invalid(field, format string, args ...any) error {
	return &web.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Normalize checks spec and returns it normalized as §6.3 says: every
// string trimmed (an empty one is an absent condition), the action
// defaulted to block, host lowercased, method uppercased, the user-agent
// pattern lowercased (ASCII; it matches case-insensitively), client in
// canonical form (an address, or a masked CIDR; an IPv4-mapped IPv6 one
// as IPv4). Path patterns stay as given: they match case-sensitively.
// A refusal is a *web.FieldError naming the field, or ErrEmptyMatch.
func Normalize(spec apitype.RuleSpec) (apitype.RuleSpec, error) {
	out := apitype.RuleSpec{ExpiresInSecs: spec.ExpiresInSecs}
	switch a := apitype.RuleAction(strings.TrimSpace(string(spec.Action))); a {
	case "", apitype.RuleBlock:
		out.Action = apitype.RuleBlock
	case apitype.RuleAllow:
		out.Action = a
	default:
		return apitype.RuleSpec{}, invalid("action", "must be %q or %q, got %q", apitype.RuleBlock, apitype.RuleAllow, spec.Action)
	}
	m := spec.Match
	var err error
	field := func(name, v string, limit int) string {
		v = strings.TrimSpace(v)
		if err != nil {
			return v
		}
		if n := utf8.RuneCountInString(v); n > limit {
			err = invalid("match."+name, "at most %d characters, got %d", limit, n)
		} else if i := strings.IndexFunc(v, isControl); i >= 0 {
			err = invalid("match."+name, "must not contain control characters (found %q)", v[i:i+1])
		}
		return v
	}
	out.Match = apitype.RuleMatch{
		Client:            field("client", m.Client, MaxPattern),
		Host:              strings.ToLower(field("host", m.Host, MaxHost)),
		Deployment:        field("deployment", m.Deployment, MaxPattern),
		PathPrefix:        field("path_prefix", m.PathPrefix, MaxPattern),
		PathContains:      field("path_contains", m.PathContains, MaxPattern),
		Method:            upperASCII(field("method", m.Method, MaxMethod)),
		UserAgentContains: lowerASCII(field("user_agent_contains", m.UserAgentContains, MaxUserAgent)),
	}
	if err != nil {
		return apitype.RuleSpec{}, err
	}
	if c := out.Match.Client; c != "" {
		p, err := parseClient(c)
		if err != nil {
			return apitype.RuleSpec{}, err
		}
		out.Match.Client = clientString(p)
	}
	if meth := out.Match.Method; meth != "" && strings.IndexFunc(meth, notToken) >= 0 {
		return apitype.RuleSpec{}, invalid("match.method", "%q is not an HTTP method", meth)
	}
	if out.Match == (apitype.RuleMatch{}) {
		return apitype.RuleSpec{}, ErrEmptyMatch
	}
	out.Note = strings.TrimSpace(spec.Note)
	if n := utf8.RuneCountInString(out.Note); n > MaxNote {
		return apitype.RuleSpec{}, invalid("note", "at most %d characters, got %d", MaxNote, n)
	}
	if err := checkExpiry(spec.ExpiresInSecs); err != nil {
		return apitype.RuleSpec{}, err
	}
	return out, nil
}

// checkExpiry refuses an expires_in_secs that is not positive or is
// beyond MaxExpiresInSecs; nil (permanent) passes.
func checkExpiry(secs *int64) error {
	switch {
	case secs == nil:
		return nil
	case *secs <= 0:
		return invalid("expires_in_secs", "must be a positive number of seconds, got %d (omit it, or send null, for a permanent rule)", *secs)
	case *secs > MaxExpiresInSecs:
		return invalid("expires_in_secs", "at most %d (ten years), got %d (omit it, or send null, for a permanent rule)", MaxExpiresInSecs, *secs)
	}
	return nil
}

// parseClient reads an address (a host prefix) or a CIDR, v4 or v6; an
// IPv4-mapped IPv6 one becomes IPv4, since clients are compared unmapped.
func parseClient(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, invalid("match.client", "%q is not an IP address or CIDR (e.g. 203.0.113.9, 203.0.113.0/24, 2001:db8::/32)", s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return p, invalid("match.client", "%q is not an IP address or CIDR (e.g. 203.0.113.9, 203.0.113.0/24, 2001:db8::/32)", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// clientString is a client prefix's canonical text: a bare address for a
// host prefix.
func clientString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// notToken reports a rune that may not appear in an HTTP method (RFC 9110
// tchar).
func notToken(r rune) bool {
	switch {
	case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		return false
	case r < utf8.RuneSelf && strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		return false
	}
	return true
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; c >= 'A' && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func upperASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'a' && c <= 'z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; c >= 'a' && c <= 'z' {
					b[j] = c - ('a' - 'A')
				}
			}
			return string(b)
		}
	}
	return s
}

// ID is the id of a rule of action matching m (both normalized): the first
// 12 hex digits of the SHA-256 of the action and each match field, each
// prefixed by its length, so the same conditions always have the same id
// and no two field splits collide. The note and the expiry are not part
// of it.
func ID(action apitype.RuleAction, m apitype.RuleMatch) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range [...]string{string(action), m.Client, m.Host, m.Deployment, m.PathPrefix, m.PathContains, m.Method, m.UserAgentContains} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil)[:6])
}

// Summary phrases m's conditions, in app-lb's words and order: "from <c>,
// to <dep>, host <h>, method <m>, path under <p>, path containing <p>,
// user-agent containing <u>" (only the conditions present).
func Summary(m apitype.RuleMatch) string {
	var parts []string
	for _, p := range [...]struct{ label, v string }{
		{"from ", m.Client}, {"to ", m.Deployment}, {"host ", m.Host}, {"method ", m.Method},
		{"path under ", m.PathPrefix}, {"path containing ", m.PathContains}, {"user-agent containing ", m.UserAgentContains},
	} {
		if p.v != "" {
			parts = append(parts, p.label+p.v)
		}
	}
	return strings.Join(parts, ", ")
}

// matcher is a normalized match compiled for the request path.
type matcher struct {
	client                                                 netip.Prefix // valid iff a client condition
	host, deployment, method, pathPrefix, pathContains, ua string       // ua lowercased, method uppercased
	uaAnchor                                               int          // uaAnchor(ua)
}

// compile builds the matcher of a normalized match.
func compile(m apitype.RuleMatch) (matcher, error) {
	c := matcher{host: m.Host, deployment: m.Deployment, method: m.Method,
		pathPrefix: m.PathPrefix, pathContains: m.PathContains, ua: m.UserAgentContains, uaAnchor: uaAnchor(m.UserAgentContains)}
	if m.Client != "" {
		p, err := parseClient(m.Client)
		if err != nil {
			return matcher{}, err
		}
		c.client = p
	}
	return c, nil
}

// match reports whether a request matches every condition. client is
// unmapped (an invalid one matches no client condition); host lowercase
// without port; method as sent. It allocates nothing.
func (m *matcher) match(client netip.Addr, host, deployment, method, path, ua string) bool {
	return (!m.client.IsValid() || m.client.Contains(client)) &&
		(m.host == "" || host == m.host) &&
		(m.deployment == "" || deployment == m.deployment) &&
		(m.method == "" || equalFoldASCII(method, m.method)) &&
		(m.pathPrefix == "" || strings.HasPrefix(path, m.pathPrefix)) &&
		(m.pathContains == "" || strings.Contains(path, m.pathContains)) &&
		(m.ua == "" || containsFoldASCII(ua, m.ua, m.uaAnchor))
}

func toLowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// equalFoldASCII compares s with upper (uppercase ASCII) ignoring ASCII
// case.
func equalFoldASCII(s, upper string) bool {
	if len(s) != len(upper) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}

// uaAnchor is the byte of a lowercased pattern containsFoldASCII looks
// for first: its first byte that is not a letter (so one exact IndexByte
// finds the candidates), else its first byte.
func uaAnchor(lower string) int {
	for i := 0; i < len(lower); i++ {
		if c := lower[i]; c < 'a' || c > 'z' {
			return i
		}
	}
	return 0
}

// containsFoldASCII reports whether s contains lower (ASCII-lowercased,
// non-empty) ignoring ASCII case; other bytes compare exactly. k is
// uaAnchor(lower): candidates are found with strings.IndexByte (vector
// code) on that byte, in both cases if it is a letter, and checked whole.
func containsFoldASCII(s, lower string, k int) bool {
	n := len(lower)
	if n > len(s) {
		return false
	}
	a := lower[k]
	last := len(s) - n + k // the last offset the anchor can be at
	if a < 'a' || a > 'z' {
		for i := k; i <= last; i++ {
			j := strings.IndexByte(s[i:last+1], a)
			if j < 0 {
				return false
			}
			i += j
			if equalLowerASCII(s[i-k:i-k+n], lower) {
				return true
			}
		}
		return false
	}
	up := a - ('a' - 'A')
	nl, nu := -2, -2 // the next offsets ≥ i of a and up; -1: none left
	for i := k; i <= last; i++ {
		if nl < i && nl != -1 {
			if nl = strings.IndexByte(s[i:last+1], a); nl >= 0 {
				nl += i
			}
		}
		if nu < i && nu != -1 {
			if nu = strings.IndexByte(s[i:last+1], up); nu >= 0 {
				nu += i
			}
		}
		switch {
		case nl == -1 && nu == -1:
			return false
		case nu == -1 || nl != -1 && nl < nu:
			i = nl
		default:
			i = nu
		}
		if equalLowerASCII(s[i-k:i-k+n], lower) {
			return true
		}
	}
	return false
}

// equalLowerASCII compares s with lower (ASCII-lowercased, as long as s)
// ignoring ASCII case.
func equalLowerASCII(s, lower string) bool {
	for i := 0; i < len(lower); i++ {
		if toLowerASCII(s[i]) != lower[i] {
			return false
		}
	}
	return true
}
