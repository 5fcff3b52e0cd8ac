package main

import (
	"os"
	"testing"

	"github.com/berth-dev/berth/internal/hostnet/netnstest"
)

// TestMain runs the tests in a network namespace of their own as root
// (netnstest), so berth serve's host setup makes its bridge and rules
// there, not on the host.
//
// With beBerth set, the binary is berth instead: the fleet tests run it in
// their hosts' namespaces. Run as "agent" it is berth's agent, which the
// process driver of such a berth starts (os.Executable() agent) with an
// environment of its own.
func TestMain(m *testing.M) {
	if os.Getenv(testRole) == "app" {
		testApp()
	}
	if os.Getenv(beBerth) == "1" || len(os.Args) > 1 && os.Args[1] == "agent" {
		main()
	}
	os.Exit(netnstest.Main(m))
}
