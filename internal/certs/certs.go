// Package certs is berth's certificate manager: the certificates the HTTPS
// listener presents, issued and renewed over ACME with certmagic, or a
// static pair (app-lb.md §3.8).
//
// # What certmagic does, and what berth does
//
// certmagic is the ACME client (accounts, orders, the HTTP-01, TLS-ALPN-01
// and DNS-01 solvers), the storage layout and its locks, and the in-memory
// certificate cache that handshakes read (with OCSP stapling). berth decides
// what to order and when, because its rules are not certmagic's:
//
//   - Orders are the routed hosts (SetHosts) and the configured wildcard
//     bases. A base is one order for base + *.base over DNS-01 (certmagic
//     orders one name per certificate, so berth builds that CSR itself and
//     stores the result in certmagic's layout); a host a wildcard covers
//     (the base or one label under it) is not ordered separately. Every
//     other host is ordered alone and validated over HTTP-01
//     (ServeHTTPChallenge on the plaintext listener) or TLS-ALPN-01
//     (answered by TLSConfig's GetCertificate).
//   - Run issues what is missing and renews what is due when a third of a
//     certificate's lifetime remains (certmagic's DefaultRenewalWindowRatio,
//     1/3, computed with berth's clock). ACME Renewal Information is off:
//     berth schedules renewals itself.
//   - A failed order backs the name off for 1 min, doubling to 6 h. The
//     backoff is stored through the certmagic.Storage (berth/backoff/...),
//     so it survives a restart and is shared when the storage is; Pending
//     reports it. Renewal failures are counted for the metrics too.
//   - A handshake for a routed host that has no certificate yet may issue
//     one on demand (certmagic OnDemand), but its DecisionFunc admits only
//     hosts of the current SetHosts set that no wildcard covers and that are
//     not backing off; an on-demand attempt is never retried inside the
//     handshake.
//
// certmagic's own maintenance never renews here (its configuration is an
// on-demand one, which its maintenance skips); it refreshes OCSP staples,
// of managed certificates and of the static pair alike. (One exception is
// certmagic's: a staple that says Revoked makes it renew the certificate
// itself, for the first of its names only.)
//
// # Serving
//
// GetCertificate serves the issued certificate of a routed name, else the
// static pair, else fails the handshake. A name that is not routed now gets
// the static pair or the failure whatever it was before, even if a
// certificate for it is still stored, so SNI is no oracle for which hosts a
// deployment once routed. A renewed certificate replaces the old one in the
// cache: new handshakes get it, established connections keep theirs.
//
// # Storage
//
// Everything goes through a certmagic.Storage: by default a file storage in
// Options.Dir (directories 0700, files 0600; certmagic's lock files, which
// exist only while an order runs and hold a timestamp, are created 0644
// inside those 0700 directories), wrapped so that every value
// whose key ends in ".key" (certificate private keys and the ACME account
// key) is sealed with the secret key (secrets.Key.Seal, AAD = the storage
// key). certmagic keys certificates and accounts by issuer (the directory
// URL), so changing the ACME directory neither reuses the other CA's
// certificates nor its account.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/mail"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/libdns/libdns"
	"github.com/mholt/acmez/v3"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/secrets"
)

// The flag names berth's option errors are written with.
const (
	FlagDir       = "--acme-dir"
	FlagEmail     = "--acme-email"
	FlagDirectory = "--acme-directory"
	FlagWildcard  = "--acme-wildcard"
	FlagDNS       = "--acme-dns"
	FlagTLSCert   = "--tls-cert"
	FlagTLSKey    = "--tls-key"
)

// Backoff of a name whose order failed: BackoffBase after the first
// failure, doubling, at most BackoffMax.
const (
	BackoffBase = time.Minute
	BackoffMax  = 6 * time.Hour
)

// RenewalWindowRatio is the part of a certificate's lifetime left when it
// is renewed: certmagic's default, a third.
const RenewalWindowRatio = certmagic.DefaultRenewalWindowRatio

// Options configure a Manager.
type Options struct {
	// Dir holds the ACME state when Storage is nil: <data-dir>/acme,
	// created 0700, files 0600.
	Dir string
	// Storage holds certificates, keys, ACME accounts, locks and berth's
	// backoff; nil is a file storage in Dir. Values whose key ends in ".key"
	// are sealed with Key either way.
	Storage certmagic.Storage
	// Key seals private keys at rest (required when ACME is on).
	Key secrets.Key
	// Email is the ACME account's contact; ACME is on when it is set.
	Email string
	// Directory is the ACME directory URL; "" is Let's Encrypt production.
	Directory string
	// CARoots are trusted for the ACME directory's HTTPS; nil: system roots.
	CARoots *x509.CertPool
	// Wildcards are bases ordered as base + *.base over DNS-01.
	Wildcards []string
	// DNS answers DNS-01 challenges (required with Wildcards).
	DNS DNSProvider
	// StaticCert and StaticKey are PEM files of the fallback certificate
	// (both or neither).
	StaticCert, StaticKey string
	// HTTPPort and TLSPort are the ports of berth's plaintext and TLS
	// listeners, which answer HTTP-01 (ServeHTTPChallenge) and TLS-ALPN-01
	// (TLSConfig). certmagic's own challenge answerers try these ports,
	// find them taken and leave the answering to berth; 0 lets certmagic
	// bind :80 or :443 itself while a challenge is pending, when nothing
	// else holds them.
	HTTPPort, TLSPort int
	Log               *slog.Logger

	// For tests.
	now            func() time.Time // berth's clock for renewal and backoff
	noHTTP01       bool             // offer pebble only TLS-ALPN-01
	noTLSALPN01    bool             // offer pebble only HTTP-01
	dnsResolvers   []string         // resolvers for DNS-01 zone lookup and propagation checks
	dnsPropTimeout time.Duration
}

// DNSProvider changes DNS records for DNS-01: the libdns interfaces
// certmagic's DNS01Solver takes.
type DNSProvider interface {
	libdns.RecordAppender
	libdns.RecordDeleter
}

// HostState is a routed host that has no certificate, and why.
type HostState struct {
	Host string
	// State is "pending" (to be ordered), "backoff" (its last order failed;
	// next attempt at RetryAt) or "wildcard-pending" (a wildcard covers it
	// and has no certificate yet; the fields are the wildcard's).
	State     string
	RetryAt   time.Time // zero if none
	LastError string
	Failures  int
}

// Manager holds berth's certificates. Safe for concurrent use.
type Manager struct {
	log       *slog.Logger
	now       func() time.Time
	acme      bool
	wildcards []string // bases, lower-case

	storage   certmagic.Storage
	cache     *certmagic.Cache
	cfg       *certmagic.Config
	httpIss   *certmagic.ACMEIssuer // exact hosts: HTTP-01 and TLS-ALPN-01
	dnsIss    *certmagic.ACMEIssuer // wildcard bases: DNS-01; nil without wildcards
	issuerKey string
	static    *staticPair
	nudge     chan struct{}
	stopCache func() // once: stops certmagic's maintenance goroutine

	mu            sync.Mutex
	hosts         map[string]bool     // routed now
	failures      map[string]*failure // by order label: host or wildcard base
	renewFailures map[string]int      // by order label, since start
	held          map[string]bool     // order keys reconcile last saw, to drop certificates of orders gone
}

type staticPair struct {
	hash  string
	cert  tls.Certificate
	leaf  *x509.Certificate
	names []string
}

const staticTag = "berth-static"

// New checks o and returns a Manager; it loads the static pair and the
// persisted backoff, but orders nothing until Run.
func New(o Options) (*Manager, error) {
	m := &Manager{
		log: o.Log, now: o.now, acme: o.Email != "",
		nudge: make(chan struct{}, 1), hosts: map[string]bool{},
		failures: map[string]*failure{}, renewFailures: map[string]int{}, held: map[string]bool{},
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.now == nil {
		m.now = time.Now
	}
	if err := m.check(&o); err != nil {
		return nil, err
	}
	if !m.Enabled() {
		return m, nil
	}
	storage := o.Storage
	if storage == nil {
		if err := os.MkdirAll(o.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("%s: %w", FlagDir, err)
		}
		if err := os.Chmod(o.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("%s: %w", FlagDir, err)
		}
		storage = &certmagic.FileStorage{Path: o.Dir}
	}
	m.storage = &sealedStorage{Storage: storage, key: o.Key}
	zl := zapLogger(m.log)
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return m.cfg, nil },
		Logger:           zl,
	})
	m.stopCache = sync.OnceFunc(m.cache.Stop)
	cfg := certmagic.Config{
		Storage:            m.storage,
		Logger:             zl,
		DisableARI:         true,
		RenewalWindowRatio: RenewalWindowRatio,
	}
	if m.acme {
		// On demand only for what berth routes; and because the
		// configuration is on-demand, certmagic's maintenance leaves
		// renewals to Run.
		cfg.OnDemand = &certmagic.OnDemandConfig{DecisionFunc: m.decide}
		cfg.OnEvent = m.onEvent
		cfg.ShouldEmitFunc = func(event string) bool { return event == "cert_failed" || event == "cert_obtained" }
	}
	m.cfg = certmagic.New(m.cache, cfg)
	if m.acme {
		tmpl := certmagic.ACMEIssuer{
			CA: o.Directory, Email: o.Email, Agreed: true, TrustedRoots: o.CARoots,
			DisableHTTPChallenge: o.noHTTP01, DisableTLSALPNChallenge: o.noTLSALPN01,
			AltHTTPPort: o.HTTPPort, AltTLSALPNPort: o.TLSPort, Logger: zl,
		}
		m.httpIss = certmagic.NewACMEIssuer(m.cfg, tmpl)
		m.issuerKey = m.httpIss.IssuerKey()
		m.cfg.Issuers = []certmagic.Issuer{onceIssuer{m.httpIss}}
		if len(m.wildcards) > 0 {
			tmpl.DNS01Solver = &certmagic.DNS01Solver{DNSManager: certmagic.DNSManager{
				DNSProvider: o.DNS, Resolvers: o.dnsResolvers, PropagationTimeout: o.dnsPropTimeout, Logger: zl,
			}}
			m.dnsIss = certmagic.NewACMEIssuer(m.cfg, tmpl)
		}
		if err := m.loadFailures(context.Background()); err != nil {
			m.stopCache()
			return nil, err
		}
	}
	if o.StaticCert != "" {
		if err := m.loadStatic(o.StaticCert, o.StaticKey); err != nil {
			m.stopCache()
			return nil, err
		}
	}
	return m, nil
}

// check validates and normalises o, naming the flag of what is wrong.
func (m *Manager) check(o *Options) error {
	switch {
	case o.StaticCert != "" && o.StaticKey == "":
		return fmt.Errorf("%s: required with %s (the static certificate's private key)", FlagTLSKey, FlagTLSCert)
	case o.StaticKey != "" && o.StaticCert == "":
		return fmt.Errorf("%s: required with %s (the static certificate the key belongs to)", FlagTLSCert, FlagTLSKey)
	}
	if o.StaticCert != "" {
		m.static = &staticPair{} // loaded after the cache exists
	}
	if !m.acme {
		// the directory (a flag with a default) is unused; wildcards
		// without ACME would silently never be issued
		if len(o.Wildcards) > 0 {
			return fmt.Errorf("%s: wildcards need ACME (set %s to enable it)", FlagWildcard, FlagEmail)
		}
	} else {
		if a, err := mail.ParseAddress(o.Email); err != nil || a.Address != o.Email {
			return fmt.Errorf("%s: %q is not an email address", FlagEmail, o.Email)
		}
		if o.Directory == "" {
			o.Directory = certmagic.LetsEncryptProductionCA
		}
		u, err := url.Parse(o.Directory)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %v", FlagDirectory, err)
		case u.Scheme != "https" || u.Host == "":
			return fmt.Errorf("%s: %q is not an https:// URL", FlagDirectory, o.Directory)
		}
		if o.Key == (secrets.Key{}) {
			return errors.New("certs: the secret key is zero; it seals the ACME private keys")
		}
		for _, w := range o.Wildcards {
			base := strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(strings.TrimSpace(w)), "*."), ".")
			if !validName(base) || !strings.Contains(base, ".") {
				return fmt.Errorf("%s: %q is not a domain name with at least two labels (a wildcard base: example.com orders example.com and *.example.com)", FlagWildcard, w)
			}
			if !slices.Contains(m.wildcards, base) {
				m.wildcards = append(m.wildcards, base)
			}
		}
		if len(m.wildcards) > 0 && o.DNS == nil {
			return fmt.Errorf("%s: required with %s (wildcards are validated over DNS-01)", FlagDNS, FlagWildcard)
		}
	}
	if m.Enabled() && o.Storage == nil && o.Dir == "" {
		return fmt.Errorf("%s: required (where ACME state and OCSP staples are kept)", FlagDir)
	}
	return nil
}

// validName reports whether s is a lower-case DNS name of LDH labels.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func (m *Manager) loadStatic(certFile, keyFile string) error {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("%s: %w", FlagTLSCert, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("%s: %w", FlagTLSKey, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%s, %s: %w", FlagTLSCert, FlagTLSKey, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return fmt.Errorf("%s: %w", FlagTLSCert, err)
		}
		pair.Leaf = leaf
	}
	// through certmagic's cache, so that its maintenance staples OCSP
	// where the certificate names a responder
	hash, err := m.cfg.CacheUnmanagedTLSCertificate(context.Background(), pair, []string{staticTag})
	if err != nil {
		return fmt.Errorf("%s: %w", FlagTLSCert, err)
	}
	names := slices.Clone(leaf.DNSNames)
	if len(names) == 0 && leaf.Subject.CommonName != "" {
		names = []string{leaf.Subject.CommonName}
	}
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	*m.static = staticPair{hash: hash, cert: pair, leaf: leaf, names: names}
	return nil
}

// Enabled reports whether there is anything to serve over HTTPS: ACME is on
// or a static pair is configured.
func (m *Manager) Enabled() bool { return m.acme || m.static != nil }

// TLSConfig returns a new TLS configuration for the HTTPS listener: TLS 1.2
// and up with AEAD suites only, certificates chosen by SNI, and ALPN h2,
// http/1.1 and acme-tls/1 (a connection that negotiates acme-tls/1 is a
// TLS-ALPN-01 validation: its handshake is the whole answer, close it).
// Session tickets use Go's automatic key rotation, whose keys belong to the
// returned Config: use one Config per listener, so tickets resume.
func (m *Manager) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		CipherSuites: []uint16{ // TLS 1.2; TLS 1.3's are all AEAD and not configurable
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
		GetCertificate: m.getCertificate,
		NextProtos:     []string{"h2", "http/1.1", acmez.ACMETLS1Protocol},
	}
}

// errNoCertificate is the one handshake failure for a name berth has no
// certificate for, whatever the reason, so the failure says nothing about
// the name.
var errNoCertificate = errors.New("certs: no certificate for this server name")

func (m *Manager) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if m.acme && hello.Conn != nil && len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmez.ACMETLS1Protocol {
		// a TLS-ALPN-01 validation: certmagic answers from its challenge memory
		return m.cfg.GetCertificate(hello)
	}
	name := normalize(hello.ServerName)
	if m.acme && name != "" && m.routed(name) {
		if c, ok := m.serving(name); ok {
			if m.static == nil || m.now().Before(c.Leaf.NotAfter) {
				return &c.Certificate, nil
			}
		} else if hello.Conn != nil && m.decide(hello.Context(), name) == nil {
			// on demand: certmagic loads it from storage or orders it
			// (its logging needs the connection; a QUIC hello may have none)
			c, err := m.cfg.GetCertificate(hello)
			if err == nil && c != nil && len(c.Certificate) > 0 {
				return c, nil
			}
			m.log.Debug("certs: on-demand certificate failed", "host", name, "err", err)
		}
	}
	if c, ok := m.staticCert(); ok {
		return c, nil
	}
	return nil, errNoCertificate
}

func normalize(host string) string { return strings.TrimSuffix(strings.ToLower(host), ".") }

func (m *Manager) routed(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hosts[name]
}

// serving returns the issued certificate that serves name: the wildcard's
// when one covers it, else name's own.
func (m *Manager) serving(name string) (certmagic.Certificate, bool) {
	if base, ok := m.covering(name); ok {
		return m.cached(wildcardOrder(base))
	}
	return m.cached(hostOrder(name))
}

func (m *Manager) staticCert() (*tls.Certificate, bool) {
	if m.static == nil {
		return nil, false
	}
	for _, n := range m.static.names[:min(1, len(m.static.names))] {
		for _, c := range m.cache.AllMatchingCertificates(n) {
			if c.Hash() == m.static.hash {
				return &c.Certificate, true // with the staple certmagic keeps fresh
			}
		}
	}
	return &m.static.cert, true
}

// ServeHTTPChallenge answers an ACME HTTP-01 validation request
// (GET /.well-known/acme-challenge/<token>) for a token of an order in
// progress, here or, with shared storage, on a peer. It reports whether it
// answered; otherwise the request is the caller's to route.
func (m *Manager) ServeHTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	if !m.acme {
		return false
	}
	return m.httpIss.HandleHTTPChallenge(w, r)
}

// SetHosts replaces the set of routed hosts (lower-case, no port) and
// nudges Run to order what is new. It does not block.
func (m *Manager) SetHosts(hosts []string) {
	set := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		if h = normalize(h); h != "" {
			set[h] = true
		}
	}
	m.mu.Lock()
	m.hosts = set
	m.mu.Unlock()
	select {
	case m.nudge <- struct{}{}:
	default:
	}
}

// Run orders and renews certificates until ctx ends, then returns nil.
func (m *Manager) Run(ctx context.Context) error {
	if !m.Enabled() {
		<-ctx.Done()
		return nil
	}
	defer m.stopCache()
	if !m.acme {
		<-ctx.Done()
		return nil
	}
	for {
		next := m.reconcile(ctx)
		wait := min(max(next.Sub(m.now()), time.Second), time.Hour)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-m.nudge:
		case <-t.C:
		}
		t.Stop()
	}
}

// Certs lists every certificate held, one entry per name: the issued
// certificates of the current orders and the static pair's names, sorted
// by host.
func (m *Manager) Certs() []apitype.CertStatus {
	var out []apitype.CertStatus
	add := func(names []string, leaf *x509.Certificate) {
		for _, n := range names {
			out = append(out, apitype.CertStatus{
				Host:         n,
				NotAfter:     leaf.NotAfter.UTC().Format(time.RFC3339),
				Issuer:       issuerName(leaf),
				NeedsRenewal: m.needsRenewal(leaf),
			})
		}
	}
	for _, h := range m.heldCerts() {
		add(h.cert.Leaf.DNSNames, h.cert.Leaf)
	}
	if m.static != nil {
		add(m.static.names, m.static.leaf)
	}
	slices.SortStableFunc(out, func(a, b apitype.CertStatus) int { return strings.Compare(a.Host, b.Host) })
	if out == nil {
		out = []apitype.CertStatus{}
	}
	return out
}

func issuerName(leaf *x509.Certificate) string {
	if leaf.Issuer.CommonName != "" {
		return leaf.Issuer.CommonName
	}
	return leaf.Issuer.String()
}

// Pending lists the routed hosts that have no issued certificate, sorted.
// Without ACME nothing is ever pending.
func (m *Manager) Pending() []HostState {
	if !m.acme {
		return nil
	}
	m.mu.Lock()
	hosts := make([]string, 0, len(m.hosts))
	for h := range m.hosts {
		hosts = append(hosts, h)
	}
	m.mu.Unlock()
	slices.Sort(hosts)
	now := m.now()
	var out []HostState
	for _, h := range hosts {
		o, state := hostOrder(h), "pending"
		if base, ok := m.covering(h); ok {
			o, state = wildcardOrder(base), "wildcard-pending"
		}
		if _, ok := m.cached(o); ok {
			continue
		}
		s := HostState{Host: h, State: state}
		if state == "pending" && !orderable(h) {
			s.LastError = errNotOrderable
		} else if f := m.failure(o.label); f != nil {
			s.LastError, s.Failures = f.LastError, f.Failures
			if now.Before(f.RetryAt) {
				s.RetryAt = f.RetryAt
				if state == "pending" {
					s.State = "backoff"
				}
			}
		}
		out = append(out, s)
	}
	return out
}
