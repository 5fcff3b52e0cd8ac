// Package fleetnet gives a test several hosts of its own: one network
// namespace per host, each joined by a veth pair to a bridge in the test's
// namespace, so berths of one fleet reach each other and the test's etcd
// members only over that bridge — and a host can be cut off from the rest
// (Partition) and let back (Heal), or have everything it runs killed at
// once (KillAll).
//
// It runs only inside a namespace of package netnstest (the test binary's
// TestMain calls netnstest.Main): the bridge, the addresses and the
// namespaces then exist nowhere on the machine's own network. Its
// namespaces are named with netnstest.Prefix, so scripts/test removes the
// leftovers of a killed run with the others.
package fleetnet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/berth-dev/berth/internal/hostnet/netnstest"
)

// Subnet is the hosts' /24: the bridge (the test's side) has .1, host i
// (from 0) has .11+i.
const Subnet = "10.88.0."

// Net is a bridge and the hosts on it.
type Net struct {
	// Bridge is the bridge's interface name in the test's namespace.
	Bridge string
	// Gateway is the bridge's address: where the test's own listeners
	// (etcd members, upstreams) bind for the hosts to reach.
	Gateway string
	Hosts   []*Host
	t       testing.TB
}

// Host is one namespace on the bridge.
type Host struct {
	// Name is the namespace's name (ip netns).
	Name string
	// IP is the host's address on the bridge.
	IP string
	// link is the veth end on the bridge's side, which Partition takes
	// down.
	link string
	t    testing.TB
}

// New makes a bridge and n hosts (n ≤ 200), torn down when the test ends.
// It skips the test outside a netnstest namespace.
func New(t testing.TB, n int) *Net {
	t.Helper()
	netnstest.Require(t)
	if n < 1 || n > 200 {
		t.Fatalf("fleetnet: %d hosts", n)
	}
	var b [3]byte
	rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	nt := &Net{Bridge: "bfl" + tag, Gateway: Subnet + "1", t: t}
	ip(t, "link", "add", nt.Bridge, "type", "bridge")
	t.Cleanup(func() { run("ip", "link", "del", nt.Bridge) })
	ip(t, "addr", "add", nt.Gateway+"/24", "dev", nt.Bridge)
	ip(t, "link", "set", nt.Bridge, "up")
	for i := range n {
		h := &Host{
			Name: fmt.Sprintf("%sfl-%s-%d", netnstest.Prefix, tag, i),
			IP:   Subnet + strconv.Itoa(11+i),
			link: fmt.Sprintf("vf%s%d", tag, i),
			t:    t,
		}
		peer := h.link + "p"
		ip(t, "netns", "add", h.Name)
		t.Cleanup(func() {
			h.KillAll()
			run("ip", "netns", "del", h.Name)
		})
		ip(t, "link", "add", h.link, "type", "veth", "peer", "name", peer)
		t.Cleanup(func() { run("ip", "link", "del", h.link) })
		ip(t, "link", "set", h.link, "master", nt.Bridge)
		ip(t, "link", "set", h.link, "up")
		ip(t, "link", "set", peer, "netns", h.Name)
		ip(t, "-n", h.Name, "link", "set", "lo", "up")
		ip(t, "-n", h.Name, "link", "set", peer, "name", "eth0")
		ip(t, "-n", h.Name, "addr", "add", h.IP+"/24", "dev", "eth0")
		ip(t, "-n", h.Name, "link", "set", "eth0", "up")
		ip(t, "-n", h.Name, "route", "add", "default", "via", nt.Gateway)
		nt.Hosts = append(nt.Hosts, h)
	}
	return nt
}

// Command is name with args, to run in the host's namespace (nsenter).
// The process is its own process group's leader, so that KillAll and the
// test's cleanup reach its children too.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + h.Name, "--", name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// DialContext dials addr from inside the host's namespace, so the test
// reaches a host even while it is partitioned (at its own loopback, or at
// its address). The socket stays in that namespace once made.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// A thread of its own, never given back to the scheduler: it is
		// left in the host's namespace, and ends with the goroutine.
		runtime.LockOSThread()
		target, err := netns.GetFromPath("/run/netns/" + h.Name)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			ch <- result{nil, err}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// Client is an HTTP client whose connections are made inside the host's
// namespace (DialContext), with a bound on every request.
func (h *Host) Client() *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{DialContext: h.DialContext, MaxIdleConnsPerHost: 16},
	}
}

// Partition cuts the host off the bridge: nothing it sends reaches the
// test, etcd or the other hosts, and nothing reaches it. Its processes
// keep running.
func (h *Host) Partition() {
	h.t.Helper()
	ip(h.t, "link", "set", h.link, "down")
}

// Heal puts a partitioned host back on the bridge.
func (h *Host) Heal() {
	h.t.Helper()
	ip(h.t, "link", "set", h.link, "up")
}

// KillAll sends SIGKILL to every process in the host's namespace, as a
// host's power failing would end them, and returns how many there were.
func (h *Host) KillAll() int {
	out, err := exec.Command("ip", "netns", "pids", h.Name).Output()
	if err != nil {
		return 0
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		// Not the test itself: a thread of DialContext's may be in the
		// namespace just then.
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

func ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("fleetnet: ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func run(name string, args ...string) { _ = exec.Command(name, args...).Run() }
