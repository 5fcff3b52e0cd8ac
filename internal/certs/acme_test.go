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
	m3 := e.newManager(t, dir, func(o *Options) { o.Directory = strings.TrimSuffix(e.directory, "/dir") + "/other/dir" })
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
