package main

import (
	"os"
	"testing"

	"github.com/berth-dev/berth/internal/hostnet/netnstest"
)

// TestMain runs the tests in a network namespace of their own as root
// (netnstest), so berth serve's host setup makes its bridge and rules
// there, not on the host.
func TestMain(m *testing.M) { os.Exit(netnstest.Main(m)) }
