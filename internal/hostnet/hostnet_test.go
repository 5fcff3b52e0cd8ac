package hostnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { os.Exit(netnstest.Main(m)) }

func newNet(t *testing.T, subnet string) *Network {
	t.Helper()
	n, err := New(Config{Bridge: "btest0", Subnet: netip.MustParsePrefix(subnet), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAllocate(t *testing.T) {
	n := newNet(t, "10.9.0.0/29") // .1 gateway, .2-.6 guests, .7 broadcast
	var got []string
	for i := range 5 {
		a, err := n.Allocate("r" + strconv.Itoa(i))
		if err != nil {
			t.Fatalf("Allocate %d: %v", i, err)
		}
		got = append(got, a.String())
	}
	if want := "10.9.0.2 10.9.0.3 10.9.0.4 10.9.0.5 10.9.0.6"; strings.Join(got, " ") != want {
		t.Errorf("allocated %v, want %s", got, want)
	}
	if _, err := n.Allocate("r5"); !errors.Is(err, ErrExhausted) {
		t.Errorf("sixth Allocate: %v, want ErrExhausted", err)
	}
	// Idempotent per id, and kept across a new Network (a berth restart).
	n2, err := New(n.Config())
	if err != nil {
		t.Fatal(err)
	}
	if a, err := n2.Allocate("r3"); err != nil || a.String() != "10.9.0.5" {
		t.Errorf("re-Allocate(r3) = %v, %v; want 10.9.0.5", a, err)
	}
	if err := n2.Release("r1"); err != nil {
		t.Fatal(err)
	}
	if a, err := n.Allocate("new"); err != nil || a.String() != "10.9.0.3" {
		t.Errorf("Allocate after a release = %v, %v; want the freed 10.9.0.3", a, err)
	}
	if err := n.Release("never"); err != nil {
		t.Errorf("Release of an id without an address: %v", err)
	}
	ids, err := n.Allocated()
	if err != nil || len(ids) != 5 {
		t.Errorf("Allocated = %v, %v; want 5 ids", ids, err)
	}
	for _, bad := range []string{"", "../x", "a/b", ".hidden"} {
		if _, err := n.Allocate(bad); err == nil {
			t.Errorf("Allocate(%q) succeeded", bad)
		}
	}
}

func TestAllocateConcurrently(t *testing.T) {
	dir := t.TempDir()
	c := Config{Subnet: netip.MustParsePrefix("10.9.0.0/24"), StateDir: dir}
	// Two Networks over one directory, as two berth processes would be.
	a, _ := New(c)
	b, _ := New(c)
	var wg sync.WaitGroup
	addrs := make([]netip.Addr, 100)
	for i := range addrs {
		n := a
		if i%2 == 1 {
			n = b
		}
		wg.Go(func() {
			var err error
			if addrs[i], err = n.Allocate("r" + strconv.Itoa(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i, addr := range addrs {
		if j, dup := seen[addr]; dup {
			t.Errorf("r%d and r%d share %s", i, j, addr)
		}
		seen[addr] = i
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		env map[string]string
		ok  bool
	}{
		{map[string]string{}, true},
		{map[string]string{"BERTH_GUEST_SUBNET": "10.50.0.0/24", "BERTH_GUEST_EGRESS": "on", "BERTH_BRIDGE": "br-x"}, true},
		{map[string]string{"BERTH_GUEST_SUBNET": "nope"}, false},
		{map[string]string{"BERTH_GUEST_SUBNET": "10.0.0.0/30"}, false},
		{map[string]string{"BERTH_GUEST_SUBNET": "fd00::/64"}, false},
		{map[string]string{"BERTH_GUEST_EGRESS": "maybe"}, false},
		{map[string]string{"BERTH_BRIDGE": "a-bridge-name-too-long"}, false},
	} {
		for _, k := range []string{"BERTH_GUEST_SUBNET", "BERTH_GUEST_EGRESS", "BERTH_BRIDGE"} {
			t.Setenv(k, tc.env[k])
		}
		c, err := ConfigFromEnv("/data")
		if (err == nil) != tc.ok {
			t.Errorf("ConfigFromEnv with %v: %v, want ok %v", tc.env, err, tc.ok)
			continue
		}
		if err != nil {
			continue
		}
		if c.StateDir != "/data/net" || c.Bridge == "" {
			t.Errorf("ConfigFromEnv with %v = %+v", tc.env, c)
		}
		if tc.env["BERTH_GUEST_EGRESS"] == "on" && !c.Egress {
			t.Error("BERTH_GUEST_EGRESS=on did not turn egress on")
		}
	}
	c, _ := Config{Subnet: netip.MustParsePrefix("10.7.3.9/16")}.normalize()
	if c.Gateway().String() != "10.7.0.1" || c.GatewayPrefix().String() != "10.7.0.1/16" {
		t.Errorf("gateway of 10.7.3.9/16 = %s (%s), want 10.7.0.1", c.Gateway(), c.GatewayPrefix())
	}
	if VethName("berth-a-0123456789ab") == VethName("berth-a-0123456789ac") || len(VethName("x")) != 15 || len(TapName("x")) != 15 {
		t.Error("interface names are not unique 15-byte names")
	}
}

// TestVeth plugs a namespace into a bridge in the test's own network
// namespace and talks to a listener inside it.
func TestVeth(t *testing.T) {
	netnstest.Require(t)
	ctx := t.Context()
	n := newNet(t, "10.9.0.0/24")
	if err := Check(ctx, n.Config()); err == nil {
		t.Fatal("Check passed before Setup")
	}
	if err := Setup(ctx, n.Config()); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { Teardown(context.Background(), n.Config()) })
	if err := Setup(ctx, n.Config()); err != nil {
		t.Fatalf("second Setup: %v", err)
	}
	if err := Check(ctx, n.Config()); err != nil {
		t.Fatalf("Check after Setup: %v", err)
	}
	if out, err := exec.Command("iptables", "-w", "-C", "FORWARD", "-i", "btest0", "!", "-o", "btest0", "-j", "DROP").CombinedOutput(); err != nil {
		t.Errorf("egress is off but the FORWARD DROP rule is missing: %v: %s", err, out)
	}

	// A process in a network namespace of its own plays the container.
	guest := exec.Command("unshare", "--net", "sleep", "600")
	if err := guest.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { guest.Process.Kill(); guest.Wait() })
	waitNetns(t, guest.Process.Pid)
	const id = "berth-veth-0123456789ab"
	addr, err := n.AttachVeth(ctx, id, guest.Process.Pid)
	if err != nil {
		t.Fatalf("AttachVeth: %v", err)
	}
	if !n.Config().Subnet.Contains(addr) || addr == n.Config().Gateway() {
		t.Errorf("address %s is not a guest address of %s", addr, n.Config().Subnet)
	}
	// The bridge forwards to the guest when AttachVeth returns: an ARP
	// request sent at once reaches it (else it is retried a second later).
	if l, err := netlink.LinkByName(VethName(id)); err != nil {
		t.Error(err)
	} else if ok, err := portForwarding(l.Attrs().Index); !ok || err != nil {
		t.Errorf("the guest's bridge port after AttachVeth: forwarding %v, %v", ok, err)
	}
	// Serve inside the guest namespace, answer from the test.
	srv := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(guest.Process.Pid)+"/ns/net", "busybox", "nc", "-l", "-p", "7000", "-e", "echo", "hello from the guest")
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Skip("busybox (Debian package busybox-static) is missing")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var got string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, 7000).String(), time.Second)
		if err == nil {
			b := make([]byte, 64)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			k, _ := c.Read(b)
			c.Close()
			got = string(b[:k])
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(got, "hello from the guest") {
		t.Errorf("read %q from the guest, want its greeting", got)
	}
	if err := n.DetachVeth(ctx, id); err != nil {
		t.Fatalf("DetachVeth: %v", err)
	}
	if linkExists(ctx, VethName(id)) {
		t.Error("the veth survived DetachVeth")
	}
	if _, ok := n.Lookup(id); ok {
		t.Error("the address survived DetachVeth")
	}

	tap, gip, hip, mac, err := n.CreateTap(ctx, "berth-tap-0123456789ab")
	if err != nil {
		t.Fatalf("CreateTap: %v", err)
	}
	if !linkExists(ctx, tap) || !strings.Contains(gip, "/24") || hip != "10.9.0.1" || len(mac) != 17 {
		t.Errorf("CreateTap = %s %s %s %s", tap, gip, hip, mac)
	}
	if err := n.DeleteTap(ctx, "berth-tap-0123456789ab"); err != nil || linkExists(ctx, tap) {
		t.Errorf("DeleteTap: %v (tap left: %v)", err, linkExists(ctx, tap))
	}
	if err := n.DeleteTap(ctx, "berth-tap-0123456789ab"); err != nil {
		t.Errorf("second DeleteTap: %v", err)
	}

	// Egress on swaps the DROP rule for NAT.
	on := n.Config()
	on.Egress = true
	if err := Setup(ctx, on); err != nil {
		t.Fatalf("Setup with egress: %v", err)
	}
	if exec.Command("iptables", "-w", "-t", "nat", "-C", "POSTROUTING", "-s", "10.9.0.0/24", "!", "-o", "btest0", "-j", "MASQUERADE").Run() != nil {
		t.Error("egress on, but no MASQUERADE rule")
	}
	if exec.Command("iptables", "-w", "-C", "FORWARD", "-i", "btest0", "!", "-o", "btest0", "-j", "DROP").Run() == nil {
		t.Error("egress on, but the DROP rule is still there")
	}
	if err := Teardown(ctx, on); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if linkExists(ctx, "btest0") {
		t.Error("the bridge survived Teardown")
	}
}

// waitNetns waits until pid has left the test's network namespace.
func waitNetns(t *testing.T, pid int) {
	self, _ := os.Readlink("/proc/self/ns/net")
	for range 500 {
		l, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net"))
		if err == nil && l != self {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the guest never entered its network namespace")
}

// TestNewNetnsLeavesThreads checks that NewNetns makes a namespace of its
// own and leaves every thread of the process in the namespace it was in,
// the main thread included (which a locked goroutine ending on it would
// wedge there for good).
func TestNewNetnsLeavesThreads(t *testing.T) {
	netnstest.Require(t)
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			p := filepath.Join(dir, "ns"+strconv.Itoa(i))
			if err := NewNetns(p); err != nil {
				t.Error(err)
				return
			}
			defer RemoveNetns(p)
			var st, hs unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				t.Error(err)
				return
			}
			if err := unix.Stat("/proc/self/ns/net", &hs); err != nil || st.Ino == hs.Ino {
				t.Errorf("namespace %s is the host's (%v)", p, err)
			}
		})
	}
	wg.Wait()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ns, err := os.Readlink(filepath.Join("/proc/self/task", task.Name(), "ns/net"))
		if err != nil {
			continue // the thread ended
		}
		if ns != host {
			t.Errorf("thread %s is in %s, want the process's %s", task.Name(), ns, host)
		}
	}
}

// prepare runs Prepare and returns its steps.
func prepare(t *testing.T, c Config) []Step {
	t.Helper()
	var steps []Step
	if err := Prepare(t.Context(), c, func(s Step) { steps = append(steps, s) }); err != nil {
		t.Fatalf("Prepare(egress %v): %v (steps %v)", c.Egress, err, steps)
	}
	return steps
}

// TestPrepareIdempotent runs Prepare twice for each egress setting in the
// tests' own network namespace: the second run changes nothing, reports
// every step as in place, and leaves the very same rule set (no rule
// appended twice).
func TestPrepareIdempotent(t *testing.T) {
	netnstest.Require(t)
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables is missing")
	}
	fw, err := os.ReadFile(ipForward)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(ipForward, fw, 0) })
	c := Config{Bridge: "bidem0", Subnet: netip.MustParsePrefix("10.9.8.0/24"), StateDir: t.TempDir()}
	t.Cleanup(func() { Teardown(context.Background(), c) })
	for _, egress := range []bool{false, true, false} {
		c.Egress = egress
		first := prepare(t, c)
		if !slices.ContainsFunc(first, func(s Step) bool { return s.Changed }) {
			t.Errorf("egress %v: the first Prepare changed nothing: %v", egress, first)
		}
		once := netnstest.Rules(t)
		second := prepare(t, c)
		if twice := netnstest.Rules(t); twice != once {
			t.Errorf("egress %v: the rules after two Prepares differ from those after one:\n%s\nvs\n%s", egress, twice, once)
		}
		for _, s := range second {
			if s.Changed {
				t.Errorf("egress %v: the second Prepare changed %s: %s", egress, s.What, s.Detail)
			}
		}
		var details []string
		for _, s := range second {
			details = append(details, s.What+": "+s.Detail)
		}
		got := strings.Join(details, "\n")
		for _, want := range []string{"bridge bidem0: present", "bridge bidem0 address 10.9.8.1/24: present", "bridge bidem0: up", "loopback lo: up", "network namespace: berth runs in net:["} {
			if !strings.Contains(got, want) {
				t.Errorf("egress %v: second Prepare's steps lack %q:\n%s", egress, want, got)
			}
		}
		wantRule := "iptables -t filter FORWARD -i bidem0 ! -o bidem0 -j DROP: present"
		if egress {
			wantRule = "iptables -t nat POSTROUTING -s 10.9.8.0/24 ! -o bidem0 -j MASQUERADE: present"
		}
		if !strings.Contains(got, wantRule) {
			t.Errorf("egress %v: second Prepare's steps lack %q:\n%s", egress, wantRule, got)
		}
		n := 0
		for l := range strings.Lines(once) {
			if strings.HasPrefix(l, "-A ") && strings.Contains(l, "bidem0") {
				n++
			}
		}
		if egress && n != 3 || !egress && n != 1 {
			t.Errorf("egress %v: %d rules name the bridge:\n%s", egress, n, once)
		}
	}
}

// TestPrepareFailsClosed: with egress off, forwarding on and no iptables
// to block it, Prepare fails and keeps the bridge down, so Check refuses
// it and no driver gives guests a network that reaches beyond the host.
func TestPrepareFailsClosed(t *testing.T) {
	netnstest.Require(t)
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("ip is missing")
	}
	fw, err := os.ReadFile(ipForward)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(ipForward, fw, 0) })
	c := Config{Bridge: "bclosed0", Subnet: netip.MustParsePrefix("10.9.7.0/24"), StateDir: t.TempDir()}
	t.Cleanup(func() { Teardown(context.Background(), c) })
	if err := Setup(t.Context(), c); err != nil { // the bridge up, as a previous run left it
		t.Fatal(err)
	}
	if err := os.WriteFile(ipForward, []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(ipPath, filepath.Join(bin, "ip")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin) // ip, and no iptables
	err = Prepare(t.Context(), c, nil)
	if err == nil || !strings.Contains(err.Error(), "kept down") {
		t.Fatalf("Prepare without iptables on a forwarding host: %v; want an error saying the bridge is kept down", err)
	}
	if err := Check(t.Context(), c); err == nil || !strings.Contains(err.Error(), "down") {
		t.Errorf("Check after the failure: %v; want the bridge down", err)
	}
}

// TestPrepareFreshNetns runs Prepare, egress on, in a network namespace
// fresh from unshare (as berth serve started by `unshare -n` would run):
// loopback starts down and is brought up, IPv4 forwarding is enabled in
// that namespace only, and the steps say it is not the initial namespace.
func TestPrepareFreshNetns(t *testing.T) {
	netnstest.Require(t)
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables is missing")
	}
	if os.Getenv("HOSTNET_TEST_FRESH") == "" {
		before, err := os.ReadFile(ipForward)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("unshare", "--net", os.Args[0], "-test.run=^TestPrepareFreshNetns$", "-test.v")
		cmd.Env = append(os.Environ(), "HOSTNET_TEST_FRESH=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestPrepareFreshNetns") {
			t.Fatalf("in a fresh network namespace: %v\n%s", err, out)
		}
		if after, _ := os.ReadFile(ipForward); string(after) != string(before) {
			t.Errorf("IPv4 forwarding outside the fresh namespace went from %q to %q", before, after)
		}
		return
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil || lo.Flags&net.FlagUp != 0 {
		t.Fatalf("lo in a fresh namespace: %v, flags %v; want it down", err, lo)
	}
	c := Config{Bridge: "bfresh0", Subnet: netip.MustParsePrefix("10.9.4.0/24"), Egress: true, StateDir: t.TempDir()}
	var got []string
	for _, s := range prepare(t, c) {
		got = append(got, s.What+": "+s.Detail)
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"loopback lo: was down, brought up", "IPv4 forwarding: enabled", "bridge bfresh0: created", "network namespace: berth runs in net:["} {
		if !strings.Contains(all, want) {
			t.Errorf("steps lack %q:\n%s", want, all)
		}
	}
	if b, _ := os.ReadFile(ipForward); strings.TrimSpace(string(b)) != "1" {
		t.Errorf("ip_forward = %q after Prepare with egress", b)
	}
	if l, err := net.InterfaceByName("lo"); err != nil || l.Flags&net.FlagUp == 0 {
		t.Errorf("lo after Prepare: %v, %v; want up", l, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on loopback after Prepare: %v", err)
	}
	ln.Close()
}

// TestBridgeCarrier: after Setup, the bridge has carrier with no guest
// attached (its own always-up port; without one the kernel drops what the
// bridge sends for up to a second after the first guest's veth comes up),
// the port is on the bridge, isolated, and Teardown removes it with its
// peer.
func TestBridgeCarrier(t *testing.T) {
	netnstest.Require(t)
	ctx := t.Context()
	c := Config{Bridge: "bcar0", Subnet: netip.MustParsePrefix("10.9.7.0/24"), StateDir: t.TempDir()}
	if err := Setup(ctx, c); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { Teardown(context.Background(), c) })
	out, err := exec.Command("ip", "-o", "link", "show", "dev", "bcar0").CombinedOutput()
	if err != nil || strings.Contains(string(out), "NO-CARRIER") || !strings.Contains(string(out), "state UP") {
		t.Errorf("the bridge with no guest: %s %v; want carrier, state UP", out, err)
	}
	out, err = exec.Command("ip", "-d", "-o", "link", "show", "dev", keeperName("bcar0")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "master bcar0") || !strings.Contains(string(out), "isolated on") {
		t.Errorf("the carrier port: %s %v; want on bcar0, isolated", out, err)
	}
	if err := Teardown(ctx, c); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bcar0", keeperName("bcar0"), keeperPeerName("bcar0")} {
		if exec.Command("ip", "link", "show", "dev", name).Run() == nil {
			t.Errorf("%s is left after Teardown", name)
		}
	}
}

// TestBridgeMACStable: the bridge keeps its MAC address when a port with a
// lower one joins and leaves (the gateway's MAC must not change under the
// guests that stay when one replica's veth goes).
func TestBridgeMACStable(t *testing.T) {
	netnstest.Require(t)
	ctx := t.Context()
	c := Config{Bridge: "bmac0", Subnet: netip.MustParsePrefix("10.9.6.0/24"), StateDir: t.TempDir()}
	if err := Setup(ctx, c); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { Teardown(context.Background(), c) })
	mac := func() string {
		ifc, err := net.InterfaceByName("bmac0")
		if err != nil {
			t.Fatal(err)
		}
		return ifc.HardwareAddr.String()
	}
	before := mac()
	for _, args := range [][]string{
		{"link", "add", "tmac0", "type", "veth", "peer", "name", "tmac1"},
		{"link", "set", "tmac0", "address", "02:00:00:00:00:01"}, // lower than any derived one
		{"link", "set", "tmac0", "master", "bmac0"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	joined := mac()
	if out, err := exec.Command("ip", "link", "del", "tmac0").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if left := mac(); joined != before || left != before {
		t.Errorf("bridge MAC %s, %s with a lower port, %s after it left; want it fixed", before, joined, left)
	}
}
