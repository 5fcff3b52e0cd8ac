// Package hostnet is the host side of guest networking for berth's
// isolating drivers: one Linux bridge (berth0 by default) holding the
// gateway address of a guest subnet, and per replica either a veth pair
// whose far end is eth0 in the container's network namespace (container
// driver) or a tap device (VM drivers). Every replica gets one address of
// the subnet, so berth routes to guest_ip:vm.port the same way for every
// isolating driver.
//
// Addresses are allocated in a state directory shared by all drivers and
// berth processes on the host:
//
//	<StateDir>/ip/<addr>   holds the replica id (created O_EXCL: the lock)
//	<StateDir>/id/<id>     holds the address (the lookup)
//
// so an allocation survives a berth restart and re-adopted replicas keep
// their address, with no lock file and no database write on the start path.
//
// Bridge ports are isolated from each other (bridge_slave isolated on):
// replicas reach the gateway, not one another. Guest egress (forwarding and
// NAT to the outside) is off unless Config.Egress is set; Setup then adds
// the MASQUERADE rule, and otherwise a FORWARD DROP rule for traffic from
// the bridge to anywhere else. The host's interfaces and rules are changed
// only by Prepare (Setup) and Teardown: `berth host setup`, and berth serve
// as root at start-up unless --no-host-setup, prepare them.
//
// Replicas are plugged in over netlink (no command on the start path);
// Setup, Teardown and taps use iproute2's ip, and iptables for the egress
// rules.
package hostnet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Defaults of Config.
const (
	DefaultBridge = "berth0"
	DefaultSubnet = "10.213.0.0/16"
)

// Config is the guest network of a host.
type Config struct {
	Bridge   string       // the bridge's name; DefaultBridge when empty
	Subnet   netip.Prefix // guest addresses; the first host address is the gateway
	Egress   bool         // let guests reach beyond the host (forwarding and NAT)
	StateDir string       // allocation directory, e.g. <data-dir>/net
}

// ConfigFromEnv reads the guest network settings berth serve and `berth
// host setup` share: BERTH_BRIDGE, BERTH_GUEST_SUBNET (CIDR) and
// BERTH_GUEST_EGRESS (1/true/yes/on), with StateDir <dataDir>/net.
func ConfigFromEnv(dataDir string) (Config, error) {
	c := Config{Bridge: os.Getenv("BERTH_BRIDGE"), StateDir: filepath.Join(dataDir, "net")}
	subnet := os.Getenv("BERTH_GUEST_SUBNET")
	if subnet == "" {
		subnet = DefaultSubnet
	}
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return Config{}, fmt.Errorf("hostnet: BERTH_GUEST_SUBNET %q: %w", subnet, err)
	}
	c.Subnet = p
	switch strings.ToLower(os.Getenv("BERTH_GUEST_EGRESS")) {
	case "", "0", "false", "no", "off":
	case "1", "true", "yes", "on":
		c.Egress = true
	default:
		return Config{}, fmt.Errorf("hostnet: BERTH_GUEST_EGRESS %q: want on or off", os.Getenv("BERTH_GUEST_EGRESS"))
	}
	return c.normalize()
}

// normalize fills defaults and checks the config.
func (c Config) normalize() (Config, error) {
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if !validIfName(c.Bridge) {
		return c, fmt.Errorf("hostnet: bridge name %q: want 1-15 letters, digits, - or _", c.Bridge)
	}
	if !c.Subnet.IsValid() {
		c.Subnet = netip.MustParsePrefix(DefaultSubnet)
	}
	c.Subnet = c.Subnet.Masked()
	if !c.Subnet.Addr().Is4() || c.Subnet.Bits() > 29 || c.Subnet.Bits() < 8 {
		return c, fmt.Errorf("hostnet: guest subnet %s: want an IPv4 prefix from /8 to /29", c.Subnet)
	}
	return c, nil
}

func validIfName(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Gateway is the bridge's address: the subnet's first host address.
func (c Config) Gateway() netip.Addr { return c.Subnet.Addr().Next() }

// GatewayPrefix is the gateway with the subnet's length, as the bridge
// holds it.
func (c Config) GatewayPrefix() netip.Prefix { return netip.PrefixFrom(c.Gateway(), c.Subnet.Bits()) }

// run runs a command and returns its error with its output.
func run(ctx context.Context, stdin string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Step is one action of Prepare: what it looked at, and whether it
// changed it or found it in place.
type Step struct {
	What    string // e.g. "bridge berth0"
	Detail  string // e.g. "created", "present"
	Changed bool   // false: already in place, nothing done
}

// Setup is Prepare without a report.
func Setup(ctx context.Context, c Config) error { return Prepare(ctx, c, nil) }

// Prepare makes the host ready for guests: loopback up (a fresh network
// namespace has it down), the bridge with the gateway address, the egress
// rules Config.Egress asks for, then the bridge up. It is idempotent, and
// reports each step to report (nil: none), changed or already in place.
// It works in whatever network namespace berth runs in, and says so when
// that is not pid 1's.
//
// Where egress is off and cannot be blocked, the bridge is left down (so
// Check fails and no driver gives guests a network) and the error says
// so: guests never get a network wider than configured.
func Prepare(ctx context.Context, c Config, report func(Step)) error {
	if report == nil {
		report = func(Step) {}
	}
	c, err := c.normalize()
	if err != nil {
		return err
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("hostnet: needs ip (Debian package iproute2): %w", err)
	}
	if self, err := os.Readlink("/proc/self/ns/net"); err == nil && self != initNetns {
		report(Step{What: "network namespace", Detail: "berth runs in " + self + ", not the host's initial one: the bridge, its rules and IPv4 forwarding are made in this namespace only"})
	}
	if err := loopbackUp(report); err != nil {
		return err
	}
	br := "bridge " + c.Bridge
	if linkExists(ctx, c.Bridge) {
		report(Step{What: br, Detail: "present"})
	} else {
		if err := run(ctx, "", "ip", "link", "add", c.Bridge, "type", "bridge"); err != nil && !linkExists(ctx, c.Bridge) {
			return fmt.Errorf("hostnet: creating the bridge: %w", err)
		}
		report(Step{What: br, Detail: "created", Changed: true})
	}
	if err := fixMAC(ctx, c.Bridge, report); err != nil {
		return err
	}
	addr := br + " address " + c.GatewayPrefix().String()
	if hasAddr(ctx, c.Bridge, c.GatewayPrefix()) {
		report(Step{What: addr, Detail: "present"})
	} else {
		if err := run(ctx, "", "ip", "addr", "add", c.GatewayPrefix().String(), "dev", c.Bridge); err != nil && !hasAddr(ctx, c.Bridge, c.GatewayPrefix()) {
			return fmt.Errorf("hostnet: addressing the bridge: %w", err)
		}
		report(Step{What: addr, Detail: "added", Changed: true})
	}
	if err := keepCarrier(ctx, c, report); err != nil {
		return err
	}
	up := func() error {
		if linkUp(ctx, c.Bridge) {
			report(Step{What: br, Detail: "up"})
			return nil
		}
		if err := run(ctx, "", "ip", "link", "set", c.Bridge, "up"); err != nil {
			return fmt.Errorf("hostnet: %w", err)
		}
		report(Step{What: br, Detail: "brought up", Changed: true})
		waitCarrier(ctx, c.Bridge, report)
		return nil
	}
	if err := egress(ctx, c, report); err != nil {
		if c.Egress {
			// Guests still get the host-only network they need.
			if uerr := up(); uerr != nil {
				return uerr
			}
			return fmt.Errorf("%w; %w", err, ErrNoEgress)
		}
		if linkUp(ctx, c.Bridge) {
			run(ctx, "", "ip", "link", "set", c.Bridge, "down")
		}
		return fmt.Errorf("%w; bridge %s is kept down, so no guest gets a network while its egress cannot be blocked", err, c.Bridge)
	}
	return up()
}

// fixMAC gives the bridge a MAC address of its own (one derived from its
// name, locally administered). A bridge whose address was never set takes
// the lowest of its ports' addresses, so it changed whenever the guest
// veth holding the lowest one left: every other guest's ARP entry for the
// gateway then named a MAC nobody had, and their replies were lost until
// the entry aged out — requests in flight to the replicas that stayed hung
// for seconds whenever one replica was stopped (seen as rollouts' drains
// timing out). Once set, the bridge keeps it whatever its ports.
func fixMAC(ctx context.Context, bridge string, report func(Step)) error {
	what := "bridge " + bridge + " MAC address"
	sum := sha256.Sum256([]byte("berth bridge " + bridge))
	mac := net.HardwareAddr{0x02, sum[0], sum[1], sum[2], sum[3], sum[4]}
	if ifc, err := net.InterfaceByName(bridge); err == nil && bytes.Equal(ifc.HardwareAddr, mac) {
		report(Step{What: what, Detail: mac.String()})
		return nil
	}
	if err := run(ctx, "", "ip", "link", "set", bridge, "address", mac.String()); err != nil {
		return fmt.Errorf("hostnet: setting the bridge's MAC address: %w", err)
	}
	report(Step{What: what, Detail: "set to " + mac.String(), Changed: true})
	return nil
}

// waitCarrier waits, for at most carrierWait, until a bridge just brought
// up has carrier: the kernel turns it on a moment after the link is up
// (its link watcher runs deferred), and until then it drops what the
// bridge sends, so the first guest would lose its first packets.
func waitCarrier(ctx context.Context, bridge string, report func(Step)) {
	path := "/sys/class/net/" + bridge + "/carrier"
	t := time.NewTimer(carrierWait)
	defer t.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == "1" {
			return
		}
		select {
		case <-tick.C:
		case <-t.C:
			report(Step{What: "bridge " + bridge + " carrier", Detail: "not on after " + carrierWait.String() + "; guests may lose their first packets"})
			return
		case <-ctx.Done():
			return
		}
	}
}

// carrierWait bounds waitCarrier.
const carrierWait = 3 * time.Second

// keeperName is the bridge port that keeps bridge's carrier on, and
// keeperPeerName its veth peer.
func keeperName(bridge string) string     { return ifName("bk", bridge) }
func keeperPeerName(bridge string) string { return ifName("bq", bridge) }

// keepCarrier gives the bridge a port of its own that is always up: a veth
// pair on the host, one end on the bridge (isolated, like the guests'),
// the other up and unused. A bridge without a forwarding port has no
// carrier, and the kernel drops what it sends until the carrier change
// has been processed (link watch), which for a bridge it does at most
// once a second: so with every deployment at zero, the first packet to
// the first replica's new veth (the ARP request before its SYN) was
// dropped, and its connection waited a second for the retry.
func keepCarrier(ctx context.Context, c Config, report func(Step)) error {
	name, peer := keeperName(c.Bridge), keeperPeerName(c.Bridge)
	what := "bridge " + c.Bridge + " carrier port " + name
	if linkExists(ctx, name) && linkUp(ctx, name) && linkUp(ctx, peer) {
		report(Step{What: what, Detail: "present"})
		return nil
	}
	steps := [][]string{
		{"ip", "link", "add", name, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", name, "master", c.Bridge},
		{"ip", "link", "set", "dev", name, "type", "bridge_slave", "isolated", "on"},
		{"ip", "link", "set", peer, "up"},
		{"ip", "link", "set", name, "up"},
	}
	if linkExists(ctx, name) {
		steps = steps[1:]
	}
	for _, st := range steps {
		if err := run(ctx, "", st[0], st[1:]...); err != nil {
			return fmt.Errorf("hostnet: the bridge's carrier port: %w", err)
		}
	}
	report(Step{What: what, Detail: "added", Changed: true})
	return nil
}

// ErrNoEgress marks a Prepare that made the guest network but could not
// give guests the egress Config.Egress asks for.
var ErrNoEgress = errors.New("guests get the host-only network, without egress")

// initNetns is the initial network namespace as /proc/self/ns/net names
// it (the kernel's PROC_NET_INIT_INO).
const initNetns = "net:[4026531833]"

// loopbackUp brings lo up where it is down, as in a fresh network
// namespace: berth's admin API and process replicas listen on 127.0.0.1.
func loopbackUp(report func(Step)) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("hostnet: loopback: %w", err)
	}
	if lo.Attrs().Flags&net.FlagUp != 0 {
		report(Step{What: "loopback lo", Detail: "up"})
		return nil
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("hostnet: bringing loopback lo up: %w", err)
	}
	report(Step{What: "loopback lo", Detail: "was down, brought up", Changed: true})
	return nil
}

// rules are the iptables rules of a config: those Egress adds and the one
// that blocks egress otherwise.
func rules(c Config) (allow [][]string, block []string) {
	src := c.Subnet.String()
	allow = [][]string{
		{"-t", "nat", "POSTROUTING", "-s", src, "!", "-o", c.Bridge, "-j", "MASQUERADE"},
		{"-t", "filter", "FORWARD", "-i", c.Bridge, "!", "-o", c.Bridge, "-j", "ACCEPT"},
		{"-t", "filter", "FORWARD", "-o", c.Bridge, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"},
	}
	block = []string{"-t", "filter", "FORWARD", "-i", c.Bridge, "!", "-o", c.Bridge, "-j", "DROP"}
	return allow, block
}

// iptables runs op (-C, -A, -I, -D) on a rule written as table, chain,
// match...
func iptables(ctx context.Context, op string, rule []string) error {
	args := append([]string{"-w", rule[0], rule[1], op, rule[2]}, rule[3:]...)
	return run(ctx, "", "iptables", args...)
}

// ipForward is IPv4 forwarding's switch, per network namespace.
const ipForward = "/proc/sys/net/ipv4/ip_forward"

// egress installs the rules of c.Egress and removes those of its opposite,
// reporting each rule it finds, adds or removes.
func egress(ctx context.Context, c Config, report func(Step)) error {
	allow, block := rules(c)
	if _, err := exec.LookPath("iptables"); err != nil {
		if c.Egress {
			return fmt.Errorf("hostnet: guest egress needs iptables (Debian package iptables): %w", err)
		}
		// Without iptables nothing forwards unless the host does already.
		if b, err := os.ReadFile(ipForward); err == nil && strings.TrimSpace(string(b)) == "1" {
			return errors.New("hostnet: this host forwards IPv4 and iptables is missing, so guest egress cannot be blocked; install iptables (Debian package iptables)")
		}
		report(Step{What: "guest egress off", Detail: "no iptables, and IPv4 forwarding is off: nothing leaves the bridge"})
		return nil
	}
	rule := func(r []string) string { return "iptables " + strings.Join(r, " ") }
	remove := func(r []string) {
		n := 0
		for iptables(ctx, "-D", r) == nil {
			n++
		}
		if n > 0 {
			report(Step{What: rule(r), Detail: fmt.Sprintf("removed (%d)", n), Changed: true})
		}
	}
	if c.Egress {
		remove(block)
		for _, r := range allow {
			if iptables(ctx, "-C", r) == nil {
				report(Step{What: rule(r), Detail: "present"})
				continue
			}
			if err := iptables(ctx, "-A", r); err != nil {
				return fmt.Errorf("hostnet: %w", err)
			}
			report(Step{What: rule(r), Detail: "appended", Changed: true})
		}
		if b, err := os.ReadFile(ipForward); err == nil && strings.TrimSpace(string(b)) == "1" {
			report(Step{What: "IPv4 forwarding", Detail: "on"})
			return nil
		}
		if err := os.WriteFile(ipForward, []byte("1"), 0); err != nil {
			return fmt.Errorf("hostnet: enabling IPv4 forwarding for guest egress: %w", err)
		}
		report(Step{What: "IPv4 forwarding", Detail: "enabled", Changed: true})
		return nil
	}
	for _, r := range allow {
		remove(r)
	}
	if iptables(ctx, "-C", block) == nil {
		report(Step{What: rule(block), Detail: "present"})
		return nil
	}
	if err := iptables(ctx, "-I", block); err != nil {
		return fmt.Errorf("hostnet: blocking guest egress: %w", err)
	}
	report(Step{What: rule(block), Detail: "inserted", Changed: true})
	return nil
}

// Teardown removes the bridge and the rules Setup added. Replicas'
// interfaces on the bridge go with it.
func Teardown(ctx context.Context, c Config) error {
	c, err := c.normalize()
	if err != nil {
		return err
	}
	if _, err := exec.LookPath("iptables"); err == nil {
		allow, block := rules(c)
		for _, r := range append(allow, block) {
			for iptables(ctx, "-D", r) == nil {
			}
		}
	}
	if linkExists(ctx, keeperName(c.Bridge)) {
		// Its peer goes with it.
		if err := run(ctx, "", "ip", "link", "del", keeperName(c.Bridge)); err != nil {
			return fmt.Errorf("hostnet: %w", err)
		}
	}
	if linkExists(ctx, c.Bridge) {
		if err := run(ctx, "", "ip", "link", "del", c.Bridge); err != nil {
			return fmt.Errorf("hostnet: %w", err)
		}
	}
	return nil
}

// Check reports what keeps guests from having a network on this host, or
// nil: a missing ip command, bridge, gateway address, or a bridge that is
// down.
func Check(ctx context.Context, c Config) error {
	c, err := c.normalize()
	if err != nil {
		return err
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("ip (Debian package iproute2) is not installed")
	}
	if !linkExists(ctx, c.Bridge) {
		return fmt.Errorf("bridge %s does not exist (berth host setup creates it)", c.Bridge)
	}
	if !hasAddr(ctx, c.Bridge, c.GatewayPrefix()) {
		return fmt.Errorf("bridge %s lacks the gateway address %s (berth host setup adds it)", c.Bridge, c.GatewayPrefix())
	}
	if !linkUp(ctx, c.Bridge) {
		return fmt.Errorf("bridge %s is down (berth host setup brings it up)", c.Bridge)
	}
	return nil
}

func linkExists(ctx context.Context, name string) bool {
	return exec.CommandContext(ctx, "ip", "link", "show", "dev", name).Run() == nil
}

// linkUp reports whether the interface is administratively up.
func linkUp(ctx context.Context, name string) bool {
	out, err := exec.CommandContext(ctx, "ip", "-o", "link", "show", "dev", name).Output()
	return err == nil && (strings.Contains(string(out), ",UP") || strings.Contains(string(out), "<UP"))
}

func hasAddr(ctx context.Context, dev string, p netip.Prefix) bool {
	out, err := exec.CommandContext(ctx, "ip", "-o", "-4", "addr", "show", "dev", dev).Output()
	return err == nil && strings.Contains(string(out), " "+p.String()+" ")
}

// Network allocates guest addresses and plugs replicas into the bridge.
// It is safe for concurrent use, and several Networks (in one berth or
// across restarts) may share a StateDir.
type Network struct {
	c    Config
	mu   sync.Mutex
	next netip.Addr // where the next allocation starts looking
}

// New returns a Network over c. The bridge must exist (Setup, or Check to
// ask); New does not change the host's interfaces.
func New(c Config) (*Network, error) {
	c, err := c.normalize()
	if err != nil {
		return nil, err
	}
	if c.StateDir == "" {
		return nil, errors.New("hostnet: Config.StateDir is required")
	}
	for _, d := range []string{"ip", "id"} {
		if err := os.MkdirAll(filepath.Join(c.StateDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("hostnet: %w", err)
		}
	}
	return &Network{c: c}, nil
}

// Config returns the network's configuration, defaults filled in.
func (n *Network) Config() Config { return n.c }

// validID reports whether id can name a file: replica ids are
// berth-<deployment>-<hex>, so this only guards against misuse.
func validID(id string) bool {
	if id == "" || len(id) > 200 || id[0] == '.' {
		return false
	}
	for _, r := range id {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// Lookup returns the address allocated to id.
func (n *Network) Lookup(id string) (netip.Addr, bool) {
	if !validID(id) {
		return netip.Addr{}, false
	}
	b, err := os.ReadFile(filepath.Join(n.c.StateDir, "id", id))
	if err != nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(strings.TrimSpace(string(b)))
	return a, err == nil
}

// ErrExhausted means every address of the subnet is allocated.
var ErrExhausted = errors.New("hostnet: no free guest address")

// Allocate returns id's address, allocating one the first time.
func (n *Network) Allocate(id string) (netip.Addr, error) {
	if !validID(id) {
		return netip.Addr{}, fmt.Errorf("hostnet: %q is not a replica id", id)
	}
	if a, ok := n.Lookup(id); ok {
		return a, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	first := n.c.Gateway().Next()
	start := n.next
	if !start.IsValid() || !n.c.Subnet.Contains(start) {
		start = first
	}
	a := start
	for {
		if n.usable(a) {
			f, err := os.OpenFile(filepath.Join(n.c.StateDir, "ip", a.String()), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err == nil {
				_, err = f.WriteString(id + "\n")
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err == nil {
					err = writeFile(filepath.Join(n.c.StateDir, "id", id), a.String()+"\n")
				}
				if err != nil {
					os.Remove(filepath.Join(n.c.StateDir, "ip", a.String()))
					return netip.Addr{}, fmt.Errorf("hostnet: %w", err)
				}
				n.next = a.Next()
				return a, nil
			}
			if !errors.Is(err, fs.ErrExist) {
				return netip.Addr{}, fmt.Errorf("hostnet: %w", err)
			}
		}
		a = a.Next()
		if !n.c.Subnet.Contains(a) {
			a = first
		}
		if a == start {
			return netip.Addr{}, fmt.Errorf("%w in %s", ErrExhausted, n.c.Subnet)
		}
	}
}

// usable reports whether a may be a guest's: not the gateway, not the
// network or broadcast address.
func (n *Network) usable(a netip.Addr) bool {
	if a == n.c.Gateway() || a == n.c.Subnet.Addr() {
		return false
	}
	b := a.As4()
	host := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	mask := uint32(1)<<(32-n.c.Subnet.Bits()) - 1
	return host&mask != mask
}

func writeFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Release frees id's address. Releasing an id without one is not an error.
func (n *Network) Release(id string) error {
	a, ok := n.Lookup(id)
	if !ok {
		return nil
	}
	ipFile := filepath.Join(n.c.StateDir, "ip", a.String())
	if b, err := os.ReadFile(ipFile); err == nil && strings.TrimSpace(string(b)) == id {
		if err := os.Remove(ipFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("hostnet: %w", err)
		}
	}
	if err := os.Remove(filepath.Join(n.c.StateDir, "id", id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hostnet: %w", err)
	}
	return nil
}

// Allocated lists the ids that hold an address.
func (n *Network) Allocated() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(n.c.StateDir, "id"))
	if err != nil {
		return nil, fmt.Errorf("hostnet: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".tmp") {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// ifName derives a 15-byte interface name from a replica id: prefix and 12
// hex digits of the id's SHA-256, so names are unique without depending on
// how long deployment ids are.
func ifName(prefix, id string) string {
	sum := sha256.Sum256([]byte(id))
	return prefix + hex.EncodeToString(sum[:])[:15-len(prefix)]
}

// VethName is the host end of a replica's veth pair.
func VethName(id string) string { return ifName("bv", id) }

// TapName is a replica's tap device.
func TapName(id string) string { return ifName("bt", id) }

// AttachVeth plugs the network namespace of process pid (a container's
// init, not yet running its app) into the bridge; see AttachVethAt.
func (n *Network) AttachVeth(ctx context.Context, id string, pid int) (netip.Addr, error) {
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("hostnet: attaching %s: %w", id, err)
	}
	defer ns.Close()
	return n.attach(id, ns)
}

// AttachVethAt plugs the network namespace bound at path (NewNetns) into
// the bridge: a veth pair whose host end is VethName(id) on the bridge and
// whose other end is eth0 in the namespace with id's address, a default
// route via the gateway, and lo up. It returns the address. A leftover
// host end of the same id is replaced. It talks netlink directly (no ip
// command on the start path).
func (n *Network) AttachVethAt(ctx context.Context, id, path string) (netip.Addr, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("hostnet: attaching %s: %w", id, err)
	}
	defer ns.Close()
	return n.attach(id, ns)
}

func (n *Network) attach(id string, ns netns.NsHandle) (netip.Addr, error) {
	addr, err := n.Allocate(id)
	if err != nil {
		return netip.Addr{}, err
	}
	fail := func(what string, err error) (netip.Addr, error) {
		return netip.Addr{}, fmt.Errorf("hostnet: attaching %s: %s: %w", id, what, err)
	}
	br, err := netlink.LinkByName(n.c.Bridge)
	if err != nil {
		return fail("bridge "+n.c.Bridge, err)
	}
	veth := VethName(id)
	if old, err := netlink.LinkByName(veth); err == nil {
		// A leftover of a replica of the same id (berth died in Stop).
		netlink.LinkDel(old)
	}
	la := netlink.NewLinkAttrs()
	la.Name, la.MasterIndex = veth, br.Attrs().Index
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}); err != nil {
		return fail("creating the veth pair", err)
	}
	host, err := netlink.LinkByName(veth)
	if err == nil {
		err = netlink.LinkSetIsolated(host, true)
	}
	if err == nil {
		err = netlink.LinkSetUp(host)
	}
	if err != nil {
		netlink.LinkDel(host)
		return fail("the host end", err)
	}
	if err := configureGuest(ns, netip.PrefixFrom(addr, n.c.Subnet.Bits()), n.c.Gateway()); err != nil {
		netlink.LinkDel(host)
		return fail("the guest end", err)
	}
	waitForwarding(host.Attrs().Index)
	return addr, nil
}

// forwardingWait bounds how long attach waits for the bridge to forward
// to a new veth.
const forwardingWait = time.Second

// waitForwarding waits (up to forwardingWait) until the bridge port with
// index idx forwards frames. The bridge enables a port once the kernel
// has processed its carrier coming up, which it does from a work queue
// (link watch) after the guest end is up: until then the bridge floods
// nothing to it, so an ARP request for the guest sent at once (by the
// first request to a replica just started) is lost, and the kernel asks
// again only a second later. A port that does not get there in time is
// left to its users.
func waitForwarding(idx int) {
	deadline := time.Now().Add(forwardingWait)
	for wait := 20 * time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		if ok, err := portForwarding(idx); ok || err != nil || time.Now().After(deadline) {
			return
		}
		// In the kernel: a Go timer under a millisecond fires about a
		// millisecond late in an otherwise idle process.
		ts := unix.NsecToTimespec(int64(wait))
		unix.Nanosleep(&ts, nil)
	}
}

// brForwarding is the state of a bridge port that forwards frames
// (BR_STATE_FORWARDING).
const brForwarding = 3

// portForwarding reports whether the bridge port with index idx is in the
// forwarding state, from the kernel's bridge port information
// (IFLA_PROTINFO's IFLA_BRPORT_STATE, which package netlink does not
// decode).
func portForwarding(idx int) (bool, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	req.AddData(nl.NewIfInfomsg(unix.AF_BRIDGE))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, 0)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return false, err
	}
	for _, m := range msgs {
		ans := nl.DeserializeIfInfomsg(m)
		if int(ans.Index) != idx {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[ans.Len():])
		if err != nil {
			return false, err
		}
		for _, a := range attrs {
			if a.Attr.Type != unix.IFLA_PROTINFO|unix.NLA_F_NESTED {
				continue
			}
			infos, err := nl.ParseRouteAttr(a.Value)
			if err != nil {
				return false, err
			}
			for _, info := range infos {
				if info.Attr.Type == nl.IFLA_BRPORT_STATE && len(info.Value) > 0 {
					return info.Value[0] == brForwarding, nil
				}
			}
		}
	}
	return false, nil
}

// NewNetns creates a network namespace and binds it at path (a file that
// must not exist), so a runtime can put a container into it and berth can
// plug it in before the container runs. RemoveNetns undoes it.
func NewNetns(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("hostnet: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// The namespace is made on a locked thread, which goes back to its
		// own namespace afterwards. If it cannot, it stays locked and ends
		// with this goroutine, so no other goroutine ever runs in the new
		// namespace. (Going back matters: a locked goroutine that ends on
		// the main thread wedges that thread rather than end it, and
		// /proc/self/ns/net, the process's namespace to anyone looking,
		// would then name a replica's.)
		runtime.LockOSThread()
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		orig, err := os.Open(self)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening the thread's namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		err = unix.Mount(self, path, "", unix.MS_BIND, "")
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		if err != nil {
			errc <- fmt.Errorf("binding the namespace: %w", err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return fmt.Errorf("hostnet: new network namespace: %w", err)
	}
	return nil
}

// RemoveNetns unbinds and removes a namespace made by NewNetns; the kernel
// frees it (and the veth end inside) once no process is in it. A path that
// is gone is fine.
func RemoveNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("hostnet: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hostnet: %w", err)
	}
	return nil
}

// configureGuest sets up eth0 and lo in the network namespace ns.
func configureGuest(ns netns.NsHandle, addr netip.Prefix, gw netip.Addr) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return err
	}
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	ipnet := &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), 32)}
	if err := h.AddrAdd(eth, &netlink.Addr{IPNet: ipnet}); err != nil {
		return err
	}
	if err := h.LinkSetUp(eth); err != nil {
		return err
	}
	return h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw.AsSlice()})
}

// DetachVeth removes id's veth pair (if its namespace still holds it) and
// frees its address.
func (n *Network) DetachVeth(ctx context.Context, id string) error {
	if l, err := netlink.LinkByName(VethName(id)); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			if _, gone := netlink.LinkByName(VethName(id)); gone == nil {
				return fmt.Errorf("hostnet: %w", err)
			}
		}
	}
	return n.Release(id)
}

// CreateTap makes id's tap device on the bridge for a VM driver and
// returns it, the guest's address in CIDR notation, the gateway and a MAC
// address derived from the id (locally administered, unicast). ctx bounds
// the ip commands.
func (n *Network) CreateTap(ctx context.Context, id string) (tap, guestIP, hostIP, mac string, err error) {
	addr, err := n.Allocate(id)
	if err != nil {
		return "", "", "", "", err
	}
	tap = TapName(id)
	if linkExists(ctx, tap) {
		run(ctx, "", "ip", "link", "del", tap)
	}
	script := fmt.Sprintf("tuntap add dev %s mode tap\n"+
		"link set %s master %s\n"+
		"link set dev %s type bridge_slave isolated on\n"+
		"link set %s up\n", tap, tap, n.c.Bridge, tap, tap)
	if err := run(ctx, script, "ip", "-batch", "-"); err != nil {
		run(ctx, "", "ip", "link", "del", tap)
		return "", "", "", "", fmt.Errorf("hostnet: tap for %s: %w", id, err)
	}
	sum := sha256.Sum256([]byte(id))
	mac = fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", sum[0], sum[1], sum[2], sum[3], sum[4])
	return tap, netip.PrefixFrom(addr, n.c.Subnet.Bits()).String(), n.c.Gateway().String(), mac, nil
}

// DeleteTap removes id's tap device and frees its address. A tap that is
// gone is not an error. ctx bounds the ip commands.
func (n *Network) DeleteTap(ctx context.Context, id string) error {
	tap := TapName(id)
	if linkExists(ctx, tap) {
		if err := run(ctx, "", "ip", "link", "del", tap); err != nil && linkExists(ctx, tap) {
			return fmt.Errorf("hostnet: %w", err)
		}
	}
	return n.Release(id)
}
