// Package bindtest runs a private BIND 9 (named) on a loopback port for
// tests: one primary zone that accepts TSIG-signed DNS UPDATEs, with every
// name in it (and the apex) resolving to 127.0.0.1, so it serves both as the
// DNS-01 challenge zone and as the resolver pebble validates HTTP-01 and
// TLS-ALPN-01 names with. named runs in the test's temporary directory with
// its own configuration, never as the system service.
package bindtest

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/berth-dev/berth/internal/syncbuf"
)

// Named is where Debian's bind9 package puts named.
const Named = "/usr/sbin/named"

// Server is a running named.
type Server struct {
	Addr    string // 127.0.0.1:<port>, UDP and TCP
	Zone    string // fully qualified, lower-case
	KeyName string // TSIG key allowed to update TXT records in Zone
	Secret  string // its base64 secret (hmac-sha256)
}

// URL is the provider URL of package rfc2136 for s.
func (s *Server) URL() string {
	return fmt.Sprintf("rfc2136://%s:%s@%s?alg=hmac-sha256&zone=%s", s.KeyName, s.Secret, s.Addr, s.Zone)
}

// Binary returns named's path, skipping t when it is not installed and the
// test cannot install it (not root); as root, scripts/test installs bind9,
// so a missing named fails.
func Binary(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(Named); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("%s is not installed (Debian package bind9; scripts/test installs it when run as root)", Named)
		}
		t.Fatalf("%s is missing: install bind9 (scripts/test does)", Named)
	}
	return Named
}

// Start runs named serving zone until the test ends. extra are more lines
// of the zone file (names relative to the zone).
func Start(t testing.TB, zone string, extra ...string) *Server {
	t.Helper()
	bin := Binary(t)
	zone = dns.CanonicalName(zone)
	dir := t.TempDir()
	secret := make([]byte, 32)
	rand.Read(secret)
	s := &Server{Zone: zone, KeyName: "berth-test.", Secret: base64.StdEncoding.EncodeToString(secret)}
	// the port is free when chosen, but another test may take it before
	// named binds it: then named exits, and it is started again
	for attempt := 1; ; attempt++ {
		err := s.start(t, bin, dir, extra)
		if err == nil {
			return s
		}
		if attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("named did not start (attempt %d): %v", attempt, err)
	}
}

func (s *Server) start(t testing.TB, bin, dir string, extra []string) error {
	port := FreePort(t)
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	zone := s.Zone
	zoneFile := filepath.Join(dir, "zone.db")
	writeFile(t, zoneFile, fmt.Sprintf(`$TTL 60
@	IN SOA ns.%[1]s hostmaster.%[1]s 1 3600 600 86400 60
@	IN NS ns.%[1]s
@	IN A 127.0.0.1
*	IN A 127.0.0.1
ns	IN A 127.0.0.1
`, zone)+strings.Join(extra, "\n")+"\n")
	os.Remove(zoneFile + ".jnl")
	conf := filepath.Join(dir, "named.conf")
	writeFile(t, conf, fmt.Sprintf(`options {
	directory "%[1]s";
	pid-file "%[1]s/named.pid";
	session-keyfile "%[1]s/session.key";
	managed-keys-directory "%[1]s";
	listen-on port %[2]d { 127.0.0.1; };
	listen-on-v6 { none; };
	recursion no;
	dnssec-validation no;
	notify no;
};
controls { };
key "%[3]s" { algorithm hmac-sha256; secret "%[4]s"; };
zone "%[5]s" {
	type primary;
	file "%[6]s";
	update-policy { grant %[3]s zonesub TXT; };
};
`, dir, port, s.KeyName, s.Secret, zone, zoneFile))

	cmd := exec.Command(bin, "-g", "-4", "-n", "1", "-c", conf)
	d := StartDaemon(t, cmd)
	exited, logs, stop := d.Exited, d.Logs, d.Stop
	deadline := time.Now().Add(15 * time.Second)
	for {
		m := new(dns.Msg)
		m.SetQuestion(zone, dns.TypeSOA)
		c := &dns.Client{Net: "tcp", Timeout: time.Second}
		if r, _, err := c.Exchange(m, s.Addr); err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			t.Cleanup(stop)
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("named exited (%v):\n%s", d.Err, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("named did not answer on %s within 15 s:\n%s", s.Addr, logs.String())
		}
	}
}

// TXT returns the TXT values of name as s answers them.
func (s *Server) TXT(t testing.TB, name string) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeTXT)
	c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, s.Addr)
	if err != nil {
		t.Fatalf("query TXT %s: %v", name, err)
	}
	var out []string
	for _, rr := range r.Answer {
		if txt, ok := rr.(*dns.TXT); ok {
			out = append(out, strings.Join(txt.Txt, ""))
		}
	}
	return out
}

// Daemon is a test's server process (named, pebble): its output in Logs,
// Exited closed (and Err set) once it has ended, Stop to kill it and wait.
type Daemon struct {
	Logs   *syncbuf.Buffer
	Exited chan struct{}
	Err    error // cmd.Wait's, once Exited is closed
	cmd    *exec.Cmd
}

// StartDaemon starts cmd with its output collected and SIGKILL as its
// parent-death signal, so it is gone with a killed test binary.
func StartDaemon(t testing.TB, cmd *exec.Cmd) *Daemon {
	t.Helper()
	d := &Daemon{Logs: &syncbuf.Buffer{}, Exited: make(chan struct{}), cmd: cmd}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = d.Logs, d.Logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", filepath.Base(cmd.Path), err)
	}
	go func() { d.Err = cmd.Wait(); close(d.Exited) }()
	return d
}

// Stop kills the process and waits for it.
func (d *Daemon) Stop() {
	d.cmd.Process.Kill()
	<-d.Exited
}

// FreePort returns a loopback port free for both TCP and UDP just now.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", l.Addr().String())
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no loopback port free for both TCP and UDP")
	return 0
}

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
