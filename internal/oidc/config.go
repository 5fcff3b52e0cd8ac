package oidc

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// GoogleIssuer is the issuer of the `google` provider, and of a [Config]
// that names none.
const GoogleIssuer = "https://accounts.google.com"

// Config is one relying party: an issuer and the client berth is registered
// as there.
type Config struct {
	// Issuer is the OpenID Provider's issuer URL, exactly as its discovery
	// document and its ID tokens spell it. "" means [GoogleIssuer].
	Issuer       string
	ClientID     string
	ClientSecret string
	// Google marks the `google` provider: allowed_domains are matched
	// against the hd claim, and the authorization request asks Google to
	// let the person choose an account (prompt=select_account). Its issuer
	// must be Google's ([CheckConfig]), since hd is trusted only from Google.
	Google bool
}

// IssuerURL is the issuer c signs in with: c.Issuer, or [GoogleIssuer].
func (c Config) IssuerURL() string {
	if c.Issuer == "" {
		return GoogleIssuer
	}
	return c.Issuer
}

// FieldError is a configuration problem, naming the field (as the wire
// types spell it) it is in.
type FieldError struct {
	Field   string // e.g. "issuer", "client_id", "allowed_domains[2]"
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// CheckConfig validates c without reaching the network: the issuer must be
// an absolute https:// URL with no credentials, query or fragment (http://
// only on a loopback address: localhost, 127.0.0.0/8, ::1), client_id is
// required, the google provider's issuer is Google's (or a test's on
// loopback), and client_secret is required for the google provider (Google
// registers web applications as confidential clients; another issuer may
// register berth as a public client, which PKCE protects). The error is a
// [*FieldError].
func CheckConfig(c Config) error {
	if err := checkURL("issuer", c.IssuerURL()); err != nil {
		return err
	}
	if strings.TrimSpace(c.ClientID) == "" {
		return &FieldError{"client_id", "required: the client ID berth is registered with at the identity provider"}
	}
	if strings.ContainsFunc(c.ClientID, isControl) {
		return &FieldError{"client_id", "contains a control character"}
	}
	if c.Google && c.IssuerURL() != GoogleIssuer && !loopbackURL(c.IssuerURL()) {
		// The google provider trusts the hd claim for allowed_domains;
		// only Google's is trusted so (a loopback issuer is a test's).
		return &FieldError{"issuer", fmt.Sprintf("the google provider signs in with %s, not %q", GoogleIssuer, c.Issuer)}
	}
	if c.Google && c.ClientSecret == "" {
		return &FieldError{"client_secret", "required for the google provider"}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// checkURL applies the issuer's rule to a URL: https, or http on loopback.
func checkURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return &FieldError{field, fmt.Sprintf("%q is not an absolute URL", raw)}
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !IsLoopback(u.Hostname()) {
			return &FieldError{field, fmt.Sprintf("%q must be https:// (http:// only on a loopback address)", raw)}
		}
	default:
		return &FieldError{field, fmt.Sprintf("%q must be https://", raw)}
	}
	if u.User != nil {
		return &FieldError{field, fmt.Sprintf("%q must not carry credentials", u.Redacted())}
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#") {
		return &FieldError{field, fmt.Sprintf("%q must have no query or fragment", raw)}
	}
	return nil
}

func loopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && IsLoopback(u.Hostname())
}

// IsLoopback reports whether host (a name or an address, without a port) is
// localhost or a loopback address.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckAllowLists validates a gate's allow-lists statically: at least one
// entry in all (an empty allow-list would admit no one, so it is refused
// rather than kept), each domain a bare domain (a leading "@" tolerated) or
// "*", each email an address with one "@". The error is a [*FieldError].
func CheckAllowLists(domains, emails []string) error {
	if len(domains) == 0 && len(emails) == 0 {
		return &FieldError{"allowed_domains", "allowed_domains or allowed_emails must name someone (\"*\" admits any account): an empty allow-list admits no one"}
	}
	for i, d := range domains {
		field := fmt.Sprintf("allowed_domains[%d]", i)
		d = strings.TrimSpace(d)
		if d == "*" {
			continue
		}
		d = strings.TrimPrefix(d, "@")
		switch {
		case d == "":
			return &FieldError{field, "empty"}
		case strings.ContainsAny(d, "@*/: \t") || strings.ContainsFunc(d, isControl):
			return &FieldError{field, fmt.Sprintf("%q is not a domain (write example.org, or \"*\" for any account)", domains[i])}
		case strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") || strings.Contains(d, ".."):
			return &FieldError{field, fmt.Sprintf("%q is not a domain", domains[i])}
		}
	}
	for i, e := range emails {
		field := fmt.Sprintf("allowed_emails[%d]", i)
		e = strings.TrimSpace(e)
		at := strings.LastIndexByte(e, '@')
		if at <= 0 || at == len(e)-1 || strings.Count(e, "@") != 1 || strings.ContainsAny(e, " \t") || strings.ContainsFunc(e, isControl) {
			return &FieldError{field, fmt.Sprintf("%q is not an email address", emails[i])}
		}
	}
	return nil
}
