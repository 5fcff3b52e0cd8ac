package certs

import (
	"fmt"
	"strings"

	"github.com/berth-dev/berth/internal/certs/rfc2136"
)

// ParseDNS reads the DNS-01 provider of a flag value. The one provider is
// RFC 2136 (DNS UPDATE with TSIG):
//
//	rfc2136://<tsig-key-name>:<base64-secret>@<host>[:<port>]?alg=hmac-sha256&zone=example.com.
//
// Errors name the flag and the part that is wrong.
func ParseDNS(spec string) (DNSProvider, error) {
	scheme, _, ok := strings.Cut(spec, "://")
	if !ok {
		return nil, fmt.Errorf("%s: %q is not a provider URL (rfc2136://<tsig-key-name>:<base64-secret>@<host>:<port>?alg=hmac-sha256&zone=<zone>)", FlagDNS, redact(spec))
	}
	switch scheme {
	case "rfc2136":
		p, err := rfc2136.Parse(spec)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", FlagDNS, err)
		}
		return p, nil
	}
	return nil, fmt.Errorf("%s: unknown DNS provider %q (berth has rfc2136)", FlagDNS, scheme)
}

// redact hides what could be a secret in a malformed spec.
func redact(spec string) string {
	if i := strings.LastIndex(spec, "@"); i >= 0 {
		return "…@" + spec[i+1:]
	}
	if len(spec) > 12 {
		return spec[:12] + "…"
	}
	return spec
}
