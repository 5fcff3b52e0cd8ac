package spec

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Upstream parses one static upstream, "host:port" (plain HTTP) or
// "https://host[:port]" (TLS, port 443 by default), and returns the
// address to dial as host:port with the host lowercased and the port in
// canonical decimal. IPv6 hosts go in brackets. Paths, queries, userinfo
// and schemes other than https are refused, since the proxy would ignore
// them.
func Upstream(s string) (addr string, tls bool, err error) {
	bad := func(format string, args ...any) (string, bool, error) {
		return "", false, fmt.Errorf("upstream %q: "+format, append([]any{s}, args...)...)
	}
	if s == "" {
		return "", false, fmt.Errorf("upstream is empty: want host:port or https://host[:port]")
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return bad("contains spaces or control characters")
		}
	}
	rest := s
	if i := strings.Index(s, "://"); i >= 0 {
		if scheme := strings.ToLower(s[:i]); scheme != "https" {
			return bad("scheme %q is not supported: write host:port for plain HTTP or https://host[:port] for TLS", s[:i])
		}
		tls = true
		rest = s[i+3:]
	}
	switch {
	case strings.Contains(rest, "@"):
		return bad("must not contain userinfo")
	case strings.ContainsAny(rest, "/?#"):
		return bad("must not have a path, query or fragment")
	case rest == "":
		return bad("has no host")
	}
	var host, port string
	switch {
	case tls && !hasPort(rest):
		host, port = rest, "443"
		if strings.HasPrefix(rest, "[") {
			host = rest[1 : len(rest)-1]
		}
	default:
		host, port, err = net.SplitHostPort(rest)
		if err != nil {
			if !tls && !strings.Contains(rest, ":") {
				return bad("missing port: want host:port or https://host[:port]")
			}
			return bad("want host:port (IPv6 addresses in brackets): %v", err)
		}
	}
	if msg := upstreamHostProblem(host); msg != "" {
		return bad("%s", msg)
	}
	if strings.HasPrefix(rest, "[") != strings.Contains(host, ":") {
		return bad("brackets are for IPv6 addresses, and IPv6 addresses need them")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strings.HasPrefix(port, "+") || strings.HasPrefix(port, "-") {
		return bad("port %q is not a number in 1..65535", port)
	}
	return net.JoinHostPort(strings.ToLower(host), strconv.Itoa(n)), tls, nil
}

// hasPort reports whether an https authority names a port.
func hasPort(hostport string) bool {
	if strings.HasPrefix(hostport, "[") {
		return !strings.HasSuffix(hostport, "]")
	}
	return strings.Contains(hostport, ":")
}

func upstreamHostProblem(h string) string {
	if h == "" {
		return "has no host"
	}
	if strings.Contains(h, ":") {
		if ip := net.ParseIP(h); ip == nil {
			return fmt.Sprintf("host %q is not a valid IPv6 address", h)
		}
		return ""
	}
	for i := 0; i < len(h); i++ {
		if !hostByte(h[i]) {
			return fmt.Sprintf("host %q has invalid character %q", h, h[i])
		}
	}
	if h[0] == '.' || strings.Contains(h, "..") {
		return fmt.Sprintf("host %q has an empty label", h)
	}
	return ""
}

// hostByte reports the characters a hostname may contain. Underscore is
// allowed because internal DNS names use it.
func hostByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_'
}
