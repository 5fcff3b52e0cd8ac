package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/fleetca"
	"github.com/berth-dev/berth/internal/hostcheck"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
)

// TestTakeSecrets: berth's secrets leave its environment once read, so no
// child inherits them (issue 9: a sandbox printed BERTH_ADMIN_PASSWORD).
func TestTakeSecrets(t *testing.T) {
	t.Setenv("BERTH_ADMIN_PASSWORD", "hunter2")
	t.Setenv("BERTH_SECRET_KEY", "sealed")
	got := takeSecrets()
	if got["BERTH_ADMIN_PASSWORD"] != "hunter2" || got["BERTH_SECRET_KEY"] != "sealed" {
		t.Errorf("takeSecrets = %v", got)
	}
	for _, name := range secretEnv {
		if v, ok := os.LookupEnv(name); ok {
			t.Errorf("%s=%q is still in berth's environment", name, v)
		}
	}
	out, err := exec.Command("env").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "hunter2") || strings.Contains(string(out), "sealed") {
		t.Errorf("a child of berth inherits its secrets:\n%s", out)
	}
}

// lineWriter collects what berth serve writes and signals when a line
// containing want has been written.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// runServe runs berth serve with args on loopback until it listens, stops
// it and returns what it logged.
func runServe(t *testing.T, dataDir string, args ...string) string {
	t.Helper()
	w, stop := startServe(t, dataDir, args...)
	stop()
	return w.String()
}

// startServe runs berth serve with args on loopback until it listens, and
// returns what it logs and stop, which ends it and fails the test unless
// it exits 0 (at cleanup if not before).
func startServe(t *testing.T, dataDir string, args ...string) (*lineWriter, func()) {
	t.Helper()
	w := &lineWriter{want: "berth listening", seen: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	code := make(chan int, 1)
	go func() {
		code <- serve(ctx, append([]string{"--proxy-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--egress-addr", "off", "--data-dir", dataDir}, args...), w)
	}()
	select {
	case <-w.seen:
	case c := <-code:
		t.Fatalf("berth serve exited %d before listening:\n%s", c, w)
	case <-time.After(stallAfter):
		t.Fatalf("berth serve did not listen within %v:\n%s\n%s", stallAfter, w, berthStacks())
	}
	stopped := false
	stop := func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case c := <-code:
			if c != 0 {
				t.Fatalf("berth serve exited %d:\n%s", c, w)
			}
		case <-time.After(stallAfter):
			t.Fatalf("berth serve did not stop within %v of its context ending:\n%s\n%s", stallAfter, w, berthStacks())
		}
	}
	t.Cleanup(stop)
	return w, stop
}

// stallAfter bounds each wait on berth serve, so that a hang fails with
// what serve was doing rather than at the test binary's timeout, whose
// dump of every goroutine is too long to read in CI's output.
const stallAfter = 3 * time.Minute

// berthStacks is the innermost frame of berth's own code in each
// goroutine, with the goroutine's state: short enough to read in a
// failure message.
func berthStacks() string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out strings.Builder
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		head, rest, _ := strings.Cut(g, "\n")
		for l := range strings.Lines(rest) {
			if strings.Contains(l, "github.com/berth-dev/berth/") && !strings.Contains(l, "cmd/berth.berthStacks") {
				fmt.Fprintf(&out, "%s %s", head, strings.TrimSpace(l)+"\n")
				break
			}
		}
	}
	return out.String()
}

// fakeCgroups gives berth serve's host setup a hybrid cgroup layout in a
// temporary directory whose unified hierarchy has the hugetlb controller,
// and a mount that only takes it out of there: the test must not change
// the host's cgroup layout.
func fakeCgroups(t *testing.T) {
	t.Helper()
	root := t.TempDir()
	controllers := filepath.Join(root, "unified", "cgroup.controllers")
	if err := os.MkdirAll(filepath.Dir(controllers), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(controllers, []byte("hugetlb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostCgroups = hostcheck.Cgroups{Root: root, Mount: func(ctl, dir string) error {
		return os.WriteFile(controllers, nil, 0o644)
	}}
	t.Cleanup(func() { hostCgroups = hostcheck.Cgroups{} })
}

// TestServeHostSetup: berth serve as root prepares the host before opening
// its drivers, each step on a log line of its own, a cgroup layout change
// as a warning; restarted, it finds everything in place and changes
// nothing (the same rules, no warning).
func TestServeHostSetup(t *testing.T) {
	netnstest.Require(t)
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables is missing")
	}
	t.Setenv("BERTH_BRIDGE", "bserve0")
	t.Setenv("BERTH_GUEST_SUBNET", "10.9.5.0/24")
	cfg, err := hostnet.ConfigFromEnv(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostnet.Teardown(context.Background(), cfg) })
	fakeCgroups(t)
	dataDir := t.TempDir()
	first := runServe(t, dataDir)
	for _, want := range []string{
		`level=INFO msg="host setup: bridge bserve0: created" changed=true`,
		`level=INFO msg="host setup: bridge bserve0 address 10.9.5.1/24: added" changed=true`,
		`level=INFO msg="host setup: iptables -t filter FORWARD -i bserve0 ! -o bserve0 -j DROP: inserted" changed=true`,
		`level=WARN msg="host setup changed the host's cgroup layout: mounted a cgroup v1 hierarchy for the hugetlb controller at ` + filepath.Join(hostCgroups.Root, "hugetlb"),
		`level=INFO msg="host setup done"`,
	} {
		if !strings.Contains(first, want) {
			t.Errorf("the first serve's log lacks %s:\n%s", want, first)
		}
	}
	if strings.Index(first, "host setup done") > strings.Index(first, "berth listening") {
		t.Errorf("host setup finished after berth listened:\n%s", first)
	}
	rulesOnce, err := exec.Command("iptables-save").Output()
	if err != nil {
		t.Fatal(err)
	}
	second := runServe(t, dataDir)
	for _, want := range []string{
		`level=INFO msg="host setup: bridge bserve0: present" changed=false`,
		`level=INFO msg="host setup: iptables -t filter FORWARD -i bserve0 ! -o bserve0 -j DROP: present" changed=false`,
		`level=INFO msg="host setup: cgroup layout: hybrid, and the unified hierarchy`,
	} {
		if !strings.Contains(second, want) {
			t.Errorf("the restarted serve's log lacks %s:\n%s", want, second)
		}
	}
	if strings.Contains(second, "changed=true") || strings.Contains(second, "level=WARN msg=\"host setup") || strings.Contains(second, "level=ERROR") {
		t.Errorf("the restarted serve changed the host or failed:\n%s", second)
	}
	rulesTwice, err := exec.Command("iptables-save").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strip(rulesTwice) != strip(rulesOnce) {
		t.Errorf("the rules after a restart differ:\n%s\nvs\n%s", rulesTwice, rulesOnce)
	}
}

// strip drops iptables-save's comment and counter lines.
func strip(b []byte) string {
	var keep []string
	for l := range strings.Lines(string(b)) {
		if !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, ":") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}

// TestServeNoHostSetup: --no-host-setup, and BERTH_NO_HOST_SETUP=1, keep
// berth serve from touching the host: one line says so, and no bridge is
// made.
func TestServeNoHostSetup(t *testing.T) {
	netnstest.Require(t)
	t.Setenv("BERTH_BRIDGE", "bnosetup0")
	fakeCgroups(t)
	for _, c := range []struct {
		name string
		env  string
		args []string
	}{{"flag", "", []string{"--no-host-setup"}}, {"env", "1", nil}} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("BERTH_NO_HOST_SETUP", c.env)
			got := runServe(t, t.TempDir(), c.args...)
			if !strings.Contains(got, `level=INFO msg="host setup skipped: --no-host-setup (BERTH_NO_HOST_SETUP)"`) || strings.Contains(got, "host setup:") || strings.Contains(got, "host setup done") {
				t.Errorf("log:\n%s\nwant only the line saying host setup is skipped", got)
			}
			if exec.Command("ip", "link", "show", "dev", "bnosetup0").Run() == nil {
				t.Error("berth serve --no-host-setup made the bridge")
			}
		})
	}
}

// TestServeRefusesBadGuestNetwork: a guest network setting that does not
// parse stops berth serve at once (exit 2, naming it), before it prepares
// the host or opens a driver, instead of serving without the network.
func TestServeRefusesBadGuestNetwork(t *testing.T) {
	t.Setenv("BERTH_GUEST_SUBNET", "not-a-subnet")
	var stderr strings.Builder
	code := serve(t.Context(), []string{"--proxy-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--egress-addr", "off", "--data-dir", t.TempDir(), "--no-host-setup"}, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "BERTH_GUEST_SUBNET") || !strings.Contains(stderr.String(), "not-a-subnet") {
		t.Errorf("serve with BERTH_GUEST_SUBNET=not-a-subnet = %d, %q; want 2 naming it", code, stderr.String())
	}
}

// TestServeRefusesBadOTLPEndpoint: an --otlp-endpoint (or trace flag) that
// does not parse stops berth serve at once, naming the flag.
func TestServeRefusesBadOTLPEndpoint(t *testing.T) {
	for _, args := range [][]string{
		{"--otlp-endpoint", "collector"},
		{"--otlp-endpoint", "http://127.0.0.1:4318"},
		{"--otlp-endpoint", "127.0.0.1:4318", "--trace-sample", "2"},
	} {
		var stderr strings.Builder
		code := serve(t.Context(), append([]string{"--proxy-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--egress-addr", "off", "--data-dir", t.TempDir(), "--no-host-setup"}, args...), &stderr)
		flag := args[0]
		if len(args) > 2 {
			flag = args[2]
		}
		if code != 2 || !strings.Contains(stderr.String(), "berth serve: "+flag) {
			t.Errorf("serve %q = %d, %q; want 2 naming %s", args, code, stderr.String(), flag)
		}
	}
}

// TestServeRefusesFleetFlags: a malformed or unknown --store is refused,
// and so are fleet flags without a fleet and contradictory ones, at once,
// exit 2, naming what is wrong.
func TestServeRefusesFleetFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "etcd://127.0.0.1"}, "is not host:port"},
		{[]string{"--store", "postgres://x"}, "unknown store backend"},
		{[]string{"--fleet-slots", "3"}, "need a fleet: give --etcd ENDPOINTS or --etcd-dev"},
		{[]string{"--host-id", "a"}, "need a fleet"},
		{[]string{"--etcd-ca", "/x.pem"}, "need a fleet"},
		{[]string{"--etcd-dev", "--etcd", "http://127.0.0.1:2379"}, "either it or --etcd, not both"},
		{[]string{"--etcd", "http://127.0.0.1:2379", "--etcd-cert", "/c.pem"}, "--etcd-cert and --etcd-key go together"},
		{[]string{"--etcd", "http://127.0.0.1:2379", "--host-id", "a/b"}, "--host-id"},
		{[]string{"--fleet-listen", "127.0.0.1:0"}, "--fleet-listen needs a fleet"},
		{[]string{"--etcd", "http://127.0.0.1:2379", "--fleet-listen", "127.0.0.1:0"}, "--fleet-listen needs the fleet CA and this host's certificate"},
		{[]string{"--etcd", "http://127.0.0.1:2379", "--etcd-ca", "/ca.pem", "--etcd-cert", "/c.pem", "--etcd-key", "/k.pem", "--fleet-listen", "nope"}, "--fleet-listen \"nope\": want HOST:PORT"},
	} {
		var stderr strings.Builder
		code := serve(t.Context(), append([]string{"--proxy-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--egress-addr", "off", "--data-dir", t.TempDir(), "--no-host-setup"}, c.args...), &stderr)
		if code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("serve %q = %d, %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestServeRefusesDevOverFleetConfig: a data dir berth fleet init set up
// runs its fleet from fleet.json; --etcd-dev contradicts it: exit 2.
func TestServeRefusesDevOverFleetConfig(t *testing.T) {
	dir := t.TempDir()
	var out, errb strings.Builder
	if code := fleetca.Main(t.Context(), []string{"init", "--data-dir", dir, "--advertise", "127.0.0.1:1"}, &out, &errb); code != 0 {
		t.Fatalf("fleet init: %d %s", code, errb.String())
	}
	var stderr strings.Builder
	code := serve(t.Context(), []string{"--proxy-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--egress-addr", "off", "--data-dir", dir, "--no-host-setup", "--etcd-dev"}, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--etcd-dev contradicts") || !strings.Contains(stderr.String(), "fleet.json") {
		t.Fatalf("serve --etcd-dev over fleet.json = %d, %q", code, stderr.String())
	}
}
