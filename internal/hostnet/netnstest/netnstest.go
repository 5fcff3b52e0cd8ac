// Package netnstest runs a test binary inside a network namespace of its
// own, so that tests which give replicas their own addresses (a bridge,
// veth pairs, taps, iptables rules) change nothing on the host's network
// and send no traffic beyond it: every guest address lives only inside the
// namespace, and the namespace goes when the tests end.
//
// A package's TestMain calls Main instead of m.Run. As root, Main creates a
// namespace berth-test-<random> (ip netns add), brings its loopback up,
// runs the same test binary with the same arguments inside it (nsenter
// --net) and deletes the namespace afterwards, whatever the outcome. Tests
// call Inside to know whether they may touch the network.
package netnstest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
)

// envName carries the namespace's name to the child test process.
const envName = "BERTH_TEST_NETNS"

// Prefix starts the name of every namespace Main creates; scripts/test
// removes leftovers of killed runs by it.
const Prefix = "berth-test-"

// Runner is what Main runs: a *testing.M, or a wrapper that cleans up
// after it.
type Runner interface{ Run() int }

// Main runs m inside a fresh network namespace when it can (root, with ip
// and nsenter), else runs m as it is; it returns the exit code.
func Main(m Runner) int {
	if os.Getenv(envName) != "" || os.Geteuid() != 0 {
		return m.Run()
	}
	ip, err1 := exec.LookPath("ip")
	nsenter, err2 := exec.LookPath("nsenter")
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "netnstest: ip or nsenter missing; running without a network namespace")
		return m.Run()
	}
	var b [4]byte
	rand.Read(b[:])
	name := Prefix + hex.EncodeToString(b[:])
	if out, err := exec.Command(ip, "netns", "add", name).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "netnstest: ip netns add %s: %v: %s\n", name, err, out)
		return 1
	}
	defer func() {
		if out, err := exec.Command(ip, "netns", "del", name).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "netnstest: ip netns del %s: %v: %s\n", name, err, out)
		}
	}()
	if out, err := exec.Command(ip, "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "netnstest: bringing lo up in %s: %v: %s\n", name, err, out)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "netnstest:", err)
		return 1
	}
	cmd := exec.Command(nsenter, append([]string{"--net=/run/netns/" + name, "--", exe}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envName+"="+name)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "netnstest:", err)
		return 1
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(sigs)
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return max(ee.ExitCode(), 1)
		}
		fmt.Fprintln(os.Stderr, "netnstest:", err)
		return 1
	}
	return 0
}

// Inside returns the name of the namespace the tests run in, or "" when
// they run in the host's (then they must not create interfaces).
func Inside() string { return os.Getenv(envName) }

// Require skips t unless it runs in a namespace of Main.
func Require(t testing.TB) string {
	t.Helper()
	name := Inside()
	if name == "" {
		t.Skip("needs root and iproute2: network tests run only inside a network namespace of their own (netnstest.Main)")
	}
	if !strings.HasPrefix(name, Prefix) {
		t.Fatalf("%s=%q is not a namespace of netnstest", envName, name)
	}
	return name
}

// Rules is every iptables rule of the filter and nat tables of the
// calling thread's network namespace, in order: what a test compares
// before and after a setup to see that it added nothing twice.
func Rules(t testing.TB) string {
	t.Helper()
	var all []string
	for _, table := range []string{"filter", "nat"} {
		out, err := exec.Command("iptables", "-w", "-t", table, "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -t %s -S: %v: %s", table, err, out)
		}
		all = append(all, string(out))
	}
	return strings.Join(all, "")
}
