package fleetca

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/secrets"
)

// TestInitFiles: berth fleet init makes a 0700 fleet directory whose keys
// are 0600, a CA of ten years and a host certificate of one with the
// advertised address, and keeps only the id and the sealed key of the join
// token it prints, never the token;
// running it again keeps the CA and prints a new token.
func TestInitFiles(t *testing.T) {
	d := t.TempDir()
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"init", "--data-dir", d, "--advertise", "10.1.2.3:2379", "--host-id", "alpha"}, &out, &errb); code != 0 {
		t.Fatalf("init: %d %s", code, errb.String())
	}
	fd := Dir(d)
	for name, want := range map[string]os.FileMode{".": 0o700, CAKey: 0o600, HostKey: 0o600, TokensFile: 0o600, ConfigFile: 0o600} {
		st, err := os.Stat(filepath.Join(fd, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), want)
		}
	}
	ca, err := readCert(filepath.Join(fd, CACert))
	if err != nil {
		t.Fatal(err)
	}
	host, err := readCert(filepath.Join(fd, HostCert))
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.NotAfter.Sub(ca.NotBefore) < 9*365*24*time.Hour || host.NotAfter.Sub(host.NotBefore) > 366*24*time.Hour || host.Subject.CommonName != "alpha" {
		t.Fatalf("lifetimes: CA %v..%v, host %v..%v %s", ca.NotBefore, ca.NotAfter, host.NotBefore, host.NotAfter, host.Subject.CommonName)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := host.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.1.2.3", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the host certificate as etcd's server certificate at the advertised address: %v", err)
	}
	pin := Fingerprint(ca.Raw)
	s := out.String()
	i := strings.Index(s, "berth fleet join --server http://10.1.2.3:9090 --token ")
	if i < 0 || !strings.Contains(s, "--ca-sha256 "+pin) {
		t.Fatalf("init printed:\n%s", s)
	}
	tok := strings.Fields(s[i:])[6]
	tokens, _ := os.ReadFile(filepath.Join(fd, TokensFile))
	if !strings.HasPrefix(tok, "bfj_") || bytes.Contains(tokens, []byte(tok)) || !bytes.Contains(tokens, []byte(tokenID(tok))) || bytes.Contains(tokens, tokenRoot(tok)) || bytes.Contains(tokens, []byte(base64.StdEncoding.EncodeToString(tokenRoot(tok)))) {
		t.Fatalf("token %q; the file holds:\n%s", tok, tokens)
	}
	c, ok, err := LoadConfig(d)
	if err != nil || !ok || c.Member == nil || c.Member.PeerURL != "https://10.1.2.3:2380" || c.Endpoints[0] != "https://10.1.2.3:2379" {
		t.Fatalf("fleet.json: %+v %v %v", c, ok, err)
	}

	// Again: the same CA, another token; a different --advertise is refused.
	r, err := Init(InitOptions{DataDir: d})
	if err != nil || r.Created || r.Pin != pin || r.Token == tok {
		t.Fatalf("init again: %+v %v", r, err)
	}
	if _, err := Init(InitOptions{DataDir: d, Advertise: "10.9.9.9:2379"}); err == nil || !strings.Contains(err.Error(), "contradicts") {
		t.Fatalf("init again elsewhere: %v", err)
	}
	// Tokens: good once, not after expiry.
	key := testSecretKey(t, d)
	if err := spend(t, d, key, r.Token, "beta", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := spend(t, d, key, r.Token, "gamma", time.Now()); err != ErrTokenUsed {
		t.Fatalf("reuse: %v", err)
	}
	if err := spend(t, d, key, tok, "gamma", time.Now().Add(2*time.Hour)); err != ErrTokenExpired {
		t.Fatalf("expired: %v", err)
	}
	if err := spend(t, d, key, "bfj_nope", "gamma", time.Now()); err != ErrTokenInvalid {
		t.Fatalf("unknown: %v", err)
	}

	out.Reset()
	if code := Main(context.Background(), []string{"status", "--data-dir", d}, &out, &errb); code != 0 || !strings.Contains(out.String(), "ca.crt:") || !strings.Contains(out.String(), "host.crt:") || !strings.Contains(out.String(), "expires "+host.NotAfter.UTC().Format(time.RFC3339)) {
		t.Fatalf("status: %d\n%s%s", code, out.String(), errb.String())
	}
}

// TestMainUsage: init without --advertise and join without a pin fail
// with what is missing.
func TestMainUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"init", "--data-dir", t.TempDir()}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "--advertise HOST:PORT is required") {
		t.Fatalf("init: %d %s", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"join", "--data-dir", t.TempDir(), "--server", "http://127.0.0.1:1", "--token", "x"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "--ca-sha256 is required") {
		t.Fatalf("join: %d %s", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"frob"}, &out, &errb); code != 2 {
		t.Fatalf("frob: %d", code)
	}
}

// TestInitKeepsServer: the admin URL given to the first berth fleet init is
// the one the next init's join command names (a token for a further host).
func TestInitKeepsServer(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"init", "--data-dir", dir, "--advertise", "127.0.0.1:23790", "--server", "http://10.0.0.1:9090"}, &out, &errb); code != 0 {
		t.Fatalf("init: %d %s", code, errb.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"init", "--data-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("init again: %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "berth fleet join --server http://10.0.0.1:9090 --token ") {
		t.Errorf("the second init's join command: %s", out.String())
	}
}

// testSecretKey is data dir d's secret key, as berth serve loads it.
func testSecretKey(t *testing.T, d string) secrets.Key {
	t.Helper()
	k, err := LoadSecretKey("", d)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
