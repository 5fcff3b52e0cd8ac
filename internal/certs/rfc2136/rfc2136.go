// Package rfc2136 is a libdns provider that changes a zone by DNS UPDATE
// (RFC 2136) signed with TSIG (RFC 8945): the provider berth's certificate
// manager uses to answer ACME DNS-01 challenges for wildcard certificates.
//
// It speaks to one primary server (BIND, Knot, PowerDNS, ...) over TCP.
// AppendRecords adds records without touching the others of their RRset
// (a wildcard order puts two TXT values on one name); DeleteRecords removes
// exactly the records given. The zone the UPDATE is addressed to is the
// configured one, or else the one the server itself answers a SOA query
// for, so the zone a public resolver believes in does not matter.
//
// [Parse] reads the flag form:
//
//	rfc2136://<tsig-key-name>:<base64-secret>@<host>[:<port>]?alg=hmac-sha256&zone=example.com.
package rfc2136

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/libdns/libdns"
	"github.com/miekg/dns"
)

// Provider updates zones on one server. Its fields must not change once it
// is in use; it is safe for concurrent use.
type Provider struct {
	Server  string        // host:port of the primary
	KeyName string        // TSIG key name, fully qualified ("berth." )
	Secret  string        // TSIG secret, base64
	Alg     string        // TSIG algorithm, one of dns.HmacSHA1 … dns.HmacSHA512
	Zone    string        // the zone to update; "" finds it by SOA lookup at Server
	Timeout time.Duration // per exchange; 0 means 10 s
}

// DefaultTTL is the TTL of records given without one.
const DefaultTTL = 60 * time.Second

var algs = map[string]string{
	"hmac-sha1":   dns.HmacSHA1,
	"hmac-sha224": dns.HmacSHA224,
	"hmac-sha256": dns.HmacSHA256,
	"hmac-sha384": dns.HmacSHA384,
	"hmac-sha512": dns.HmacSHA512,
}

// Parse reads a provider from its URL form. Every error names the part of
// the URL that is wrong; none repeats the secret.
func Parse(spec string) (*Provider, error) {
	rest, ok := strings.CutPrefix(spec, "rfc2136://")
	if !ok {
		return nil, errors.New("rfc2136: the URL must start with rfc2136://")
	}
	authority, query, _ := strings.Cut(rest, "?") // base64 has no '?'
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return nil, errors.New("rfc2136: the URL has no <tsig-key-name>:<secret>@ before the server address")
	}
	userinfo, hostport := authority[:at], authority[at+1:]
	name, secret, ok := strings.Cut(userinfo, ":")
	if !ok {
		return nil, errors.New("rfc2136: the TSIG key is missing its secret (<tsig-key-name>:<base64-secret>@)")
	}
	name, err := url.PathUnescape(name)
	if err != nil || name == "" {
		return nil, errors.New("rfc2136: the TSIG key name is empty or badly escaped")
	}
	if _, ok := dns.IsDomainName(name); !ok {
		return nil, fmt.Errorf("rfc2136: the TSIG key name %q is not a domain name", name)
	}
	secret, err = url.PathUnescape(secret)
	if err != nil || secret == "" {
		return nil, fmt.Errorf("rfc2136: the secret of TSIG key %q is empty or badly escaped", name)
	}
	if _, err := base64.StdEncoding.DecodeString(secret); err != nil {
		return nil, fmt.Errorf("rfc2136: the secret of TSIG key %q is not base64 (standard alphabet, padded)", name)
	}
	if hostport == "" {
		return nil, errors.New("rfc2136: the server address after @ is empty")
	}
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		hostport = net.JoinHostPort(strings.Trim(hostport, "[]"), "53")
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" || port == "" {
		return nil, fmt.Errorf("rfc2136: the server address %q is not host[:port]", authority[at+1:])
	}
	p := &Provider{Server: hostport, KeyName: dns.CanonicalName(name), Secret: secret, Alg: dns.HmacSHA256}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("rfc2136: the query %q is malformed: %v", query, err)
	}
	for k, v := range q {
		switch k {
		case "alg":
			a, ok := algs[strings.ToLower(strings.TrimSuffix(v[0], "."))]
			if !ok {
				return nil, fmt.Errorf("rfc2136: alg=%s is not a TSIG algorithm berth knows (hmac-sha1, hmac-sha224, hmac-sha256, hmac-sha384, hmac-sha512)", v[0])
			}
			p.Alg = a
		case "zone":
			if _, ok := dns.IsDomainName(v[0]); !ok || v[0] == "" {
				return nil, fmt.Errorf("rfc2136: zone=%s is not a domain name", v[0])
			}
			p.Zone = dns.CanonicalName(v[0])
		case "timeout":
			d, err := time.ParseDuration(v[0])
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("rfc2136: timeout=%s is not a positive duration (e.g. 10s)", v[0])
			}
			p.Timeout = d
		default:
			return nil, fmt.Errorf("rfc2136: unknown parameter %q (known: alg, zone, timeout)", k)
		}
	}
	return p, nil
}

// String describes p without its secret.
func (p *Provider) String() string {
	return fmt.Sprintf("rfc2136://%s@%s (zone %s)", p.KeyName, p.Server, cmpOr(p.Zone, "by SOA lookup"))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// AppendRecords adds recs, named relative to zone, and returns them.
func (p *Provider) AppendRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	return p.update(ctx, zone, recs, false)
}

// DeleteRecords removes recs, named relative to zone, and returns them.
// Records that are not there are not an error (UPDATE removal is
// idempotent).
func (p *Provider) DeleteRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	return p.update(ctx, zone, recs, true)
}

func (p *Provider) update(ctx context.Context, zone string, recs []libdns.Record, remove bool) ([]libdns.Record, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	rrs := make([]dns.RR, 0, len(recs))
	for _, rec := range recs {
		rr, err := toRR(rec.RR(), zone)
		if err != nil {
			return nil, err
		}
		rrs = append(rrs, rr)
	}
	target := p.Zone
	if target == "" {
		var err error
		if target, err = p.findZone(ctx, rrs[0].Header().Name); err != nil {
			return nil, err
		}
	}
	for _, rr := range rrs {
		if !dns.IsSubDomain(target, rr.Header().Name) {
			return nil, fmt.Errorf("rfc2136: %s is not in zone %s", rr.Header().Name, target)
		}
	}
	m := new(dns.Msg)
	m.SetUpdate(target)
	if remove {
		m.Remove(rrs)
	} else {
		m.Insert(rrs)
	}
	r, err := p.exchange(ctx, m, true)
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		op := "add to"
		if remove {
			op = "remove from"
		}
		return nil, fmt.Errorf("rfc2136: %s refused the UPDATE to %s zone %s: %s", p.Server, op, target, dns.RcodeToString[r.Rcode])
	}
	out := make([]libdns.Record, 0, len(recs))
	for _, rec := range recs {
		rr := rec.RR()
		if rr.TTL == 0 {
			rr.TTL = DefaultTTL
		}
		if parsed, err := rr.Parse(); err == nil {
			out = append(out, parsed)
		} else {
			out = append(out, rr)
		}
	}
	return out, nil
}

func toRR(r libdns.RR, zone string) (dns.RR, error) {
	name := dns.CanonicalName(libdns.AbsoluteName(r.Name, dns.Fqdn(zone)))
	ttl := r.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	hdr := dns.RR_Header{Name: name, Class: dns.ClassINET, Ttl: uint32(ttl / time.Second)}
	if strings.EqualFold(r.Type, "TXT") {
		hdr.Rrtype = dns.TypeTXT
		return &dns.TXT{Hdr: hdr, Txt: splitTXT(r.Data)}, nil
	}
	rr, err := dns.NewRR(fmt.Sprintf("%s %d IN %s %s", name, hdr.Ttl, r.Type, r.Data))
	if err != nil || rr == nil {
		return nil, fmt.Errorf("rfc2136: record %s %s %q: %v", name, r.Type, r.Data, err)
	}
	return rr, nil
}

// splitTXT cuts a TXT value into the 255-byte strings the wire carries.
func splitTXT(s string) []string {
	var out []string
	for len(s) > 255 {
		out = append(out, s[:255])
		s = s[255:]
	}
	return append(out, s)
}

// findZone asks the server for the SOA of name and its parents, nearest
// first, and returns the first zone it is authoritative for.
func (p *Provider) findZone(ctx context.Context, name string) (string, error) {
	for off, end := 0, false; !end; off, end = dns.NextLabel(name, off) {
		q := name[off:]
		m := new(dns.Msg)
		m.SetQuestion(q, dns.TypeSOA)
		m.RecursionDesired = false
		r, err := p.exchange(ctx, m, false)
		if err != nil {
			return "", err
		}
		if r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
			continue
		}
		for _, rr := range r.Answer {
			if soa, ok := rr.(*dns.SOA); ok && r.Authoritative {
				return dns.CanonicalName(soa.Hdr.Name), nil
			}
		}
	}
	return "", fmt.Errorf("rfc2136: %s is authoritative for no zone holding %s (set zone= in the provider URL)", p.Server, name)
}

func (p *Provider) exchange(ctx context.Context, m *dns.Msg, sign bool) (*dns.Msg, error) {
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	c := &dns.Client{Net: "tcp", Timeout: timeout}
	if sign {
		c.TsigSecret = map[string]string{p.KeyName: p.Secret}
		m.SetTsig(p.KeyName, p.Alg, 300, time.Now().Unix())
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, _, err := c.ExchangeContext(ctx, m, p.Server)
	if err != nil {
		return nil, fmt.Errorf("rfc2136: %s: %w", p.Server, err)
	}
	return r, nil
}
