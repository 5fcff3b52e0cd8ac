package certs

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
)

// order is one certificate berth wants: a routed host, or a wildcard base
// with its wildcard.
type order struct {
	label    string   // the host, or the wildcard base: what backoff and metrics are keyed by
	sans     []string // sorted
	wildcard bool
}

func hostOrder(host string) order { return order{label: host, sans: []string{host}} }

func wildcardOrder(base string) order {
	return order{label: base, sans: []string{"*." + base, base}, wildcard: true} // sorted: '*' < any letter
}

// key is where certmagic's layout stores the order's certificate: its SANs,
// sorted and joined (CertificateResource.NamesKey).
func (o order) key() string { return strings.Join(o.sans, ",") }

// covering returns the wildcard base that covers host: the base itself or
// one label under it.
func (m *Manager) covering(host string) (string, bool) {
	for _, b := range m.wildcards {
		if host == b {
			return b, true
		}
		if sub, ok := strings.CutSuffix(host, "."+b); ok && sub != "" && !strings.Contains(sub, ".") {
			return b, true
		}
	}
	return "", false
}

// orderable: a name a CA can issue for, at least two LDH labels (not an IP
// address, not a single label such as localhost).
func orderable(host string) bool {
	return validName(host) && strings.Contains(host, ".") && !certmagic.SubjectIsIP(host)
}

// errNotOrderable is the LastError Pending reports for a routed host that
// is never ordered.
const errNotOrderable = "berth does not order certificates for IP addresses, single-label or malformed names"

// orders are the wildcards and every routed host none of them covers.
func (m *Manager) orders() []order {
	var out []order
	for _, b := range m.wildcards {
		out = append(out, wildcardOrder(b))
	}
	m.mu.Lock()
	var hosts []string
	for h := range m.hosts {
		if _, ok := m.covering(h); !ok && orderable(h) {
			hosts = append(hosts, h)
		}
	}
	m.mu.Unlock()
	slices.Sort(hosts)
	for _, h := range hosts {
		out = append(out, hostOrder(h))
	}
	return out
}

// cached returns the newest certificate in certmagic's cache issued for
// exactly o's names (never the static pair).
func (m *Manager) cached(o order) (certmagic.Certificate, bool) {
	var best certmagic.Certificate
	found := false
	for _, c := range m.cache.AllMatchingCertificates(o.sans[0]) {
		if c.Leaf == nil || m.static != nil && c.Hash() == m.static.hash || !sameNames(c.Leaf.DNSNames, o.sans) {
			continue
		}
		if !found || c.Leaf.NotAfter.After(best.Leaf.NotAfter) {
			best, found = c, true
		}
	}
	return best, found
}

func sameNames(names, sorted []string) bool {
	if len(names) != len(sorted) {
		return false
	}
	n := make([]string, len(names))
	for i, s := range names {
		n[i] = strings.ToLower(s)
	}
	slices.Sort(n)
	return slices.Equal(n, sorted)
}

// keepOnly removes from the cache every other certificate for o's names
// than c, so handshakes get c (a renewal or a replacement).
func (m *Manager) keepOnly(o order, c certmagic.Certificate) {
	var stale []string
	for _, x := range m.cache.AllMatchingCertificates(o.sans[0]) {
		if x.Hash() != c.Hash() && x.Leaf != nil && sameNames(x.Leaf.DNSNames, o.sans) && (m.static == nil || x.Hash() != m.static.hash) {
			stale = append(stale, x.Hash())
		}
	}
	m.cache.Remove(stale)
}

type heldCert struct {
	order order
	cert  certmagic.Certificate
}

func (m *Manager) heldCerts() []heldCert {
	if !m.acme {
		return nil
	}
	var out []heldCert
	for _, o := range m.orders() {
		if c, ok := m.cached(o); ok {
			out = append(out, heldCert{o, c})
		}
	}
	return out
}

// needsRenewal: less than RenewalWindowRatio of leaf's lifetime is left
// by berth's clock.
func (m *Manager) needsRenewal(leaf *x509.Certificate) bool {
	lifetime := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotAfter.Sub(m.now()) < time.Duration(float64(lifetime)*RenewalWindowRatio)
}

// renewAt is when leaf enters its renewal window.
func renewAt(leaf *x509.Certificate) time.Time {
	lifetime := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotAfter.Add(-time.Duration(float64(lifetime) * RenewalWindowRatio))
}

// maxParallel bounds the orders in flight at once.
const maxParallel = 4

// orderTimeout bounds one order, challenges and all.
const orderTimeout = 5 * time.Minute

// reconcile brings the cache to the current orders: it drops the
// certificates of orders gone, loads stored ones (a restart, or a peer on
// shared storage), and orders what is missing or due unless it is backing
// off. It returns when it should run next.
func (m *Manager) reconcile(ctx context.Context) time.Time {
	orders := m.orders()
	want := make(map[string]bool, len(orders))
	for _, o := range orders {
		want[o.key()] = true
	}
	m.mu.Lock()
	var gone []order
	for k := range m.held {
		if !want[k] {
			gone = append(gone, order{sans: strings.Split(k, ",")})
		}
	}
	m.held = want
	m.mu.Unlock()
	for _, o := range gone {
		for c, ok := m.cached(o); ok; c, ok = m.cached(o) {
			m.cache.Remove([]string{c.Hash()})
		}
	}

	var wg sync.WaitGroup
	sem := make(chan struct{}, maxParallel)
	for _, o := range orders {
		c, ok := m.cached(o)
		if !ok || m.needsRenewal(c.Leaf) {
			if s, err := m.cfg.CacheManagedCertificate(ctx, o.key()); err == nil {
				m.keepOnly(o, s)
				c, ok = s, true
			} else if !errors.Is(err, fs.ErrNotExist) {
				m.log.Warn("certs: cannot load the stored certificate", "names", o.sans, "err", err)
			}
		}
		if ok && !m.needsRenewal(c.Leaf) {
			continue
		}
		if f := m.failure(o.label); f != nil && m.now().Before(f.RetryAt) {
			continue
		}
		wg.Add(1)
		go func(o order, renewal bool) {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			octx, cancel := context.WithTimeout(ctx, orderTimeout)
			defer cancel()
			start := time.Now()
			err := m.obtain(octx, o)
			switch {
			case err == nil:
				m.log.Info("certs: certificate issued", "names", o.sans, "renewal", renewal, "took", time.Since(start).Round(time.Millisecond))
				m.recordSuccess(o.label)
			case ctx.Err() != nil: // shutting down: not the name's fault
			default:
				f := m.recordFailure(o.label, renewal, err)
				m.log.Warn("certs: order failed", "names", o.sans, "renewal", renewal, "failures", f.Failures, "retry_at", f.RetryAt, "err", err)
			}
		}(o, ok)
	}
	wg.Wait()

	next := m.now().Add(time.Hour)
	for _, o := range orders {
		if c, ok := m.cached(o); ok && !m.needsRenewal(c.Leaf) {
			next = minTime(next, renewAt(c.Leaf))
		} else if f := m.failure(o.label); f != nil {
			next = minTime(next, f.RetryAt)
		}
	}
	return next
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// obtain orders o's certificate and puts it in the cache in place of any
// older one. Under certmagic's lock for the names, it first looks in
// storage, where an on-demand handshake or a peer may have put a fresh one.
func (m *Manager) obtain(ctx context.Context, o order) error {
	lock := "issue_cert_" + o.key() // certmagic's own lock name for the names
	if err := m.storage.Lock(ctx, lock); err != nil {
		return fmt.Errorf("lock %s: %w", lock, err)
	}
	defer m.storage.Unlock(context.WithoutCancel(ctx), lock)
	if c, err := m.cfg.CacheManagedCertificate(ctx, o.key()); err == nil && !m.needsRenewal(c.Leaf) {
		m.keepOnly(o, c)
		return nil
	}

	iss := m.httpIss
	if o.wildcard {
		iss = m.dnsIss
	}
	// sets the account's email (the account is created and stored under
	// it) and refuses names a public CA would
	if err := iss.PreCheck(ctx, o.sans, false); err != nil {
		return err
	}
	key, err := m.cfg.KeySource.GenerateKey()
	if err != nil {
		return err
	}
	keyPEM, err := certmagic.PEMEncodePrivateKey(key)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: o.sans}, key.(crypto.Signer))
	if err != nil {
		return err
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return err
	}
	issued, err := iss.Issue(ctx, csr)
	if err != nil {
		return err
	}
	meta, err := json.Marshal(issued.Metadata)
	if err != nil {
		return err
	}
	res, err := json.MarshalIndent(certmagic.CertificateResource{SANs: o.sans, IssuerData: meta}, "", "\t")
	if err != nil {
		return err
	}
	// certmagic's layout, so that CacheManagedCertificate (and a peer's
	// certmagic) finds it; the key first, so a certificate never sits next
	// to a key it does not belong to for long
	for _, kv := range []struct {
		k string
		v []byte
	}{
		{certmagic.StorageKeys.SitePrivateKey(m.issuerKey, o.key()), keyPEM},
		{certmagic.StorageKeys.SiteCert(m.issuerKey, o.key()), issued.Certificate},
		{certmagic.StorageKeys.SiteMeta(m.issuerKey, o.key()), res},
	} {
		if err := m.storage.Store(ctx, kv.k, kv.v); err != nil {
			return fmt.Errorf("store %s: %w", kv.k, err)
		}
	}
	c, err := m.cfg.CacheManagedCertificate(ctx, o.key())
	if err != nil {
		return fmt.Errorf("load the issued certificate: %w", err)
	}
	m.keepOnly(o, c)
	return nil
}

// revoke revokes o's certificate at the CA, deletes it from storage and
// the cache, and nudges Run to order a replacement.
func (m *Manager) revoke(ctx context.Context, o order, reason int) error {
	if err := m.cfg.RevokeCert(ctx, o.key(), reason, false); err != nil {
		return err
	}
	for c, ok := m.cached(o); ok; c, ok = m.cached(o) {
		m.cache.Remove([]string{c.Hash()})
	}
	select {
	case m.nudge <- struct{}{}:
	default:
	}
	return nil
}

// decide is certmagic's OnDemand DecisionFunc: a handshake may order a
// certificate only for a host routed now that no wildcard covers and that
// is not backing off.
func (m *Manager) decide(_ context.Context, name string) error {
	name = normalize(name)
	if !m.routed(name) {
		return errNoCertificate
	}
	if _, ok := m.covering(name); ok || !orderable(name) {
		return errNoCertificate
	}
	if f := m.failure(name); f != nil && m.now().Before(f.RetryAt) {
		return errNoCertificate
	}
	return nil
}

// onEvent records the outcome of certmagic's own (on-demand) orders;
// berth's orders do not emit events.
func (m *Manager) onEvent(_ context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	if name == "" {
		return nil
	}
	switch event {
	case "cert_obtained":
		m.recordSuccess(name)
	case "cert_failed":
		renewal, _ := data["renewal"].(bool)
		err, _ := data["error"].(error)
		if err == nil {
			err = errors.New("the order failed")
		}
		f := m.recordFailure(name, renewal, err)
		m.log.Warn("certs: on-demand order failed", "host", name, "failures", f.Failures, "retry_at", f.RetryAt, "err", err)
	}
	return nil
}

// onceIssuer is the issuer of on-demand orders: one attempt, no retries
// inside the handshake (certmagic would retry for minutes); the backoff is
// berth's.
type onceIssuer struct{ *certmagic.ACMEIssuer }

func (i onceIssuer) Issue(ctx context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	c, err := i.ACMEIssuer.Issue(ctx, csr)
	if err != nil {
		return nil, certmagic.ErrNoRetry{Err: err}
	}
	return c, nil
}
