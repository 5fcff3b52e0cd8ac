package certs

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestIssueHTTP01: SetHosts nudges Run, which orders a certificate for each
// routed host over HTTP-01 (ServeHTTPChallenge on the plaintext listener);
// the TLS listener then serves each host its own certificate, chained to
// pebble's root; Certs lists them and Pending is empty. The state on disk
// is sealed and private; a restart loads the same certificates, and
// another ACME directory reuses none of them.
func TestIssueHTTP01(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	dir := t.TempDir()
	m := e.newManager(t, dir, func(o *Options) { o.noTLSALPN01 = true })
	ctx := testCtx(t)
	stop := run(t, ctx, m)
	hosts := []string{"a.example.test", "b.example.test"}
	m.SetHosts(hosts)
	for len(m.Certs()) < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("no certificates within the test's deadline; pending %+v", m.Pending())
		case <-time.After(20 * time.Millisecond):
		}
	}
	serials := map[string]string{}
	for _, h := range hosts {
		leaf := e.dial(t, h)
		if !slices.Equal(leaf.DNSNames, []string{h}) {
			t.Errorf("%s was served a certificate for %v", h, leaf.DNSNames)
		}
		serials[h] = leaf.SerialNumber.String()
	}
	certs := m.Certs()
	if len(certs) != 2 || certs[0].Host != hosts[0] || certs[1].Host != hosts[1] {
		t.Fatalf("Certs() = %+v", certs)
	}
	for _, c := range certs {
		if c.Issuer == "" || c.NeedsRenewal {
			t.Errorf("cert status %+v", c)
		}
		if _, err := time.Parse(time.RFC3339, c.NotAfter); err != nil {
			t.Errorf("not_after %q: %v", c.NotAfter, err)
		}
	}
	if p := m.Pending(); len(p) != 0 {
		t.Errorf("Pending() = %+v after issuance", p)
	}
	if got := metricValue(t, m, "berth_cert_expiry_seconds", "a.example.test"); got < float64(time.Now().Unix()) {
		t.Errorf("berth_cert_expiry_seconds{a} = %v", got)
	}
	stop()

	checkPrivate(t, filepath.Join(dir, "acme"))
	// the account is the configured email's
	if accts, _ := filepath.Glob(filepath.Join(dir, "acme", "acme", "*", "users", "ops@example.test", "ops.key")); len(accts) != 1 {
		all, _ := filepath.Glob(filepath.Join(dir, "acme", "acme", "*", "users", "*"))
		t.Errorf("the ACME account is not stored under its email: %v", all)
	}

	// a restart finds them in storage and orders nothing
	m2 := e.newManager(t, dir, nil)
	m2.SetHosts(hosts)
	m2.reconcile(ctx)
	for _, h := range hosts {
		if got := e.dial(t, h).SerialNumber.String(); got != serials[h] {
			t.Errorf("after a restart %s has serial %s, want the stored %s", h, got, serials[h])
		}
	}

	// another directory: its storage keys differ, nothing is reused
	m3 := e.newManager(t, dir, func(o *Options) { o.Directory = strings.TrimSuffix(e.pebble.Directory, "/dir") + "/other/dir" })
	m3.SetHosts(hosts)
	m3.reconcile(ctx) // its orders fail (no such directory)
	if c := m3.Certs(); len(c) != 0 {
		t.Errorf("with another directory Certs() = %+v, want none", c)
	}
	if p := m3.Pending(); len(p) != 2 || p[0].State != "backoff" {
		t.Errorf("with another directory Pending() = %+v", p)
	}
}

// checkPrivate: no private key in plaintext anywhere under dir, files 0600,
// directories 0700.
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	keys := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		if d.IsDir() && fi.Mode().Perm() != 0o700 || !d.IsDir() && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", path, fi.Mode().Perm())
		}
		if !d.IsDir() {
			b, _ := os.ReadFile(path)
			if strings.Contains(string(b), "PRIVATE KEY") {
				t.Errorf("%s holds a plaintext private key", path)
			}
			if strings.HasSuffix(path, ".key") {
				keys++
			}
		}
		return nil
	})
	if keys < 2 { // the account's and at least one certificate's
		t.Errorf("found %d .key files under %s", keys, dir)
	}
}

// TestIssueTLSALPN01: with HTTP-01 not offered, the order is validated over
// TLS-ALPN-01, answered by TLSConfig's GetCertificate on the TLS listener.
func TestIssueTLSALPN01(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	m := e.newManager(t, "", func(o *Options) { o.noHTTP01 = true })
	ctx := testCtx(t)
	m.SetHosts([]string{"alpn.example.test"})
	m.reconcile(ctx)
	if p := m.Pending(); len(p) != 0 {
		t.Fatalf("Pending() = %+v", p)
	}
	if leaf := e.dial(t, "alpn.example.test"); !slices.Equal(leaf.DNSNames, []string{"alpn.example.test"}) {
		t.Fatalf("served %v", leaf.DNSNames)
	}
}

// TestWildcardDNS01: a wildcard base is one order for base + *.base over
// DNS-01, its TXT records put in (and afterwards taken out of) a real named
// by the RFC 2136 provider; the hosts it covers (the base, one label under
// it) are served the wildcard certificate and are not ordered separately,
// while a host it does not cover gets its own certificate over HTTP-01.
func TestWildcardDNS01(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	dnsp, err := ParseDNS(e.dns.URL())
	if err != nil {
		t.Fatal(err)
	}
	m := e.newManager(t, "", func(o *Options) {
		o.Wildcards = []string{"w.example.test"}
		o.DNS = dnsp
	})
	ctx := testCtx(t)
	m.SetHosts([]string{"x.w.example.test", "w.example.test", "deep.x.w.example.test"})
	p := m.Pending()
	if len(p) != 3 || p[0].Host != "deep.x.w.example.test" || p[0].State != "pending" ||
		p[1].State != "wildcard-pending" || p[2].State != "wildcard-pending" {
		t.Fatalf("Pending() before issuance = %+v", p)
	}
	if got := m.orders(); len(got) != 2 || !got[0].wildcard || got[1].label != "deep.x.w.example.test" {
		t.Fatalf("orders = %+v, want the wildcard and the host two labels under it", got)
	}
	m.reconcile(ctx)
	if p := m.Pending(); len(p) != 0 {
		t.Fatalf("Pending() = %+v", p)
	}
	for _, h := range []string{"x.w.example.test", "w.example.test"} {
		if leaf := e.dial(t, h); !sameNames(leaf.DNSNames, []string{"*.w.example.test", "w.example.test"}) {
			t.Errorf("%s was served %v, want the wildcard certificate", h, leaf.DNSNames)
		}
	}
	if leaf := e.dial(t, "deep.x.w.example.test"); !slices.Equal(leaf.DNSNames, []string{"deep.x.w.example.test"}) {
		t.Errorf("deep.x.w.example.test was served %v", leaf.DNSNames)
	}
	var hosts []string
	for _, c := range m.Certs() {
		hosts = append(hosts, c.Host)
	}
	if want := []string{"*.w.example.test", "deep.x.w.example.test", "w.example.test"}; !slices.Equal(hosts, want) {
		t.Errorf("Certs() hosts = %v, want %v", hosts, want)
	}
	if v := e.dns.TXT(t, "_acme-challenge.w.example.test"); len(v) != 0 {
		t.Errorf("challenge TXT records left behind: %q", v)
	}
}

// TestRenewal: when berth's clock enters the last third of the
// certificate's lifetime, Certs says it needs renewal and the next
// reconcile renews it; new handshakes get the new certificate, and a
// connection established before keeps working.
func TestRenewal(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	clock := newClock()
	m := e.newManager(t, "", func(o *Options) { o.now = clock.Now; o.noTLSALPN01 = true })
	ctx := testCtx(t)
	m.SetHosts([]string{"renew.example.test"})
	m.reconcile(ctx)
	old := e.dial(t, "renew.example.test")
	held, err := tlsDial(e, "renew.example.test")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	clock.Add(renewAt(old).Sub(clock.Now()) - time.Hour)
	if c := m.Certs(); c[0].NeedsRenewal {
		t.Fatalf("needs renewal an hour before its window: %+v", c)
	}
	m.reconcile(ctx)
	if got := e.dial(t, "renew.example.test"); !got.Equal(old) {
		t.Fatal("renewed before its window")
	}
	clock.Add(2 * time.Hour)
	if c := m.Certs(); !c[0].NeedsRenewal {
		t.Fatalf("does not need renewal in its window: %+v", c)
	}
	m.reconcile(ctx)
	renewed := e.dial(t, "renew.example.test")
	if renewed.Equal(old) {
		t.Fatal("the old certificate is still served after renewal")
	}
	// the new certificate's lifetime starts at the CA's (real) now, which
	// the clock has run ahead of: back to it, it is not due
	clock.Set(time.Now())
	if c := m.Certs(); len(c) != 1 || c[0].NeedsRenewal || c[0].NotAfter != renewed.NotAfter.UTC().Format(time.RFC3339) {
		t.Errorf("after renewal Certs() = %+v", c)
	}
	if err := httpGet(held, "renew.example.test"); err != nil {
		t.Errorf("the connection established before the renewal: %v", err)
	}
}

// TestRevokeAndReplace: a revoked certificate (certmagic's RevokeCert) is
// revoked at the CA, leaves storage and the cache, and the next reconcile
// orders its replacement.
func TestRevokeAndReplace(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	m := e.newManager(t, "", func(o *Options) { o.noTLSALPN01 = true })
	ctx := testCtx(t)
	m.SetHosts([]string{"revoke.example.test"})
	m.reconcile(ctx)
	old := e.dial(t, "revoke.example.test")
	if err := m.revoke(ctx, hostOrder("revoke.example.test"), 4); err != nil {
		t.Fatal(err)
	}
	if st := e.pebble.CertStatus(t, old.SerialNumber); st != "Revoked" {
		t.Fatalf("pebble says the revoked certificate is %q", st)
	}
	if p := m.Pending(); len(p) != 1 || p[0].State != "pending" {
		t.Fatalf("after revocation Pending() = %+v", p)
	}
	m.reconcile(ctx)
	if got := e.dial(t, "revoke.example.test"); got.SerialNumber.Cmp(old.SerialNumber) == 0 {
		t.Fatal("the revoked certificate is still served")
	}
}

// TestBackoff: a failed order backs the host off for 1 min, then 2 min (no
// attempt in between), reported by Pending and the metrics, refused by
// the on-demand decision; the backoff survives a new Manager over the same
// directory, and clears on success.
func TestBackoff(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	clock := newClock()
	dir := t.TempDir()
	opts := func(o *Options) { o.now = clock.Now; o.noTLSALPN01 = true }
	m := e.newManager(t, dir, opts)
	ctx := testCtx(t)
	const host = "down.elsewhere.test" // not in named's zone: validation fails
	m.SetHosts([]string{host})
	t0 := clock.Now()
	m.reconcile(ctx)
	p := m.Pending()
	if len(p) != 1 || p[0].State != "backoff" || p[0].Failures != 1 || !p[0].RetryAt.Equal(t0.Add(time.Minute).UTC()) || p[0].LastError == "" {
		t.Fatalf("after one failure Pending() = %+v", p)
	}
	if err := m.decide(ctx, host); err == nil {
		t.Error("the on-demand decision admits a host that is backing off")
	}
	clock.Add(59 * time.Second)
	m.reconcile(ctx) // still backing off: no attempt
	if p := m.Pending(); p[0].Failures != 1 {
		t.Fatalf("ordered during the backoff: %+v", p)
	}
	clock.Add(2 * time.Second)
	t1 := clock.Now()
	m.reconcile(ctx)
	p = m.Pending()
	if p[0].Failures != 2 || !p[0].RetryAt.Equal(t1.Add(2*time.Minute).UTC()) {
		t.Fatalf("after two failures Pending() = %+v", p)
	}
	if v := metricValue(t, m, "berth_cert_consecutive_failures", host); v != 2 {
		t.Errorf("berth_cert_consecutive_failures = %v", v)
	}

	m2 := e.newManager(t, dir, opts) // a restart
	m2.SetHosts([]string{host})
	if p2 := m2.Pending(); len(p2) != 1 || p2[0] != p[0] {
		t.Fatalf("after a restart Pending() = %+v, want %+v", p2, p)
	}

	// routed elsewhere now, to a name that validates: success clears it
	m2.recordSuccess(host)
	if m2.failure(host) != nil {
		t.Fatal("success left the backoff")
	}
	m3 := e.newManager(t, dir, opts)
	m3.SetHosts([]string{host})
	if p := m3.Pending(); len(p) != 1 || p[0].State != "pending" || p[0].Failures != 0 {
		t.Fatalf("the cleared backoff came back after a restart: %+v", p)
	}
}

// TestOnDemand: the first handshake for a routed host that has no
// certificate yet gets one issued on the spot (certmagic OnDemand, admitted
// by the DecisionFunc); a failed on-demand order is recorded as berth's
// backoff, which then keeps further handshakes from ordering.
func TestOnDemand(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	m := e.newManager(t, "", func(o *Options) { o.noTLSALPN01 = true })
	m.SetHosts([]string{"od.example.test", "od.elsewhere.test"}) // no Run: only handshakes order
	if leaf := e.dial(t, "od.example.test"); !slices.Equal(leaf.DNSNames, []string{"od.example.test"}) {
		t.Fatalf("served %v", leaf.DNSNames)
	}
	if c := m.Certs(); len(c) != 1 || c[0].Host != "od.example.test" {
		t.Errorf("Certs() = %+v", c)
	}
	if _, err := tlsDial(e, "od.elsewhere.test"); err == nil { // not in named's zone: validation fails
		t.Fatal("a handshake for a host whose order fails succeeded")
	}
	p := m.Pending()
	if len(p) != 1 || p[0].Host != "od.elsewhere.test" || p[0].State != "backoff" || p[0].Failures != 1 {
		t.Fatalf("after a failed on-demand order Pending() = %+v", p)
	}
	if m.decide(t.Context(), "od.elsewhere.test") == nil {
		t.Error("on demand admits the host that is backing off")
	}
}
