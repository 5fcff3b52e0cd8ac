// Command guest is the berth binary's part inside the kvm driver's test
// guests, built statically by the test: with "agent ..." it is the agent
// (the guest's init); with BERTH_KVM_GUEST_ROLE=app or envapp it is an app
// the conformance suite starts.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		os.Exit(agent.Main(context.Background(), os.Args[2:], os.Stderr))
	}
	switch os.Getenv("BERTH_KVM_GUEST_ROLE") {
	case "app":
		os.Exit(vmtest.ServeApp("", false))
	case "envapp":
		os.Exit(vmtest.ServeApp("", true))
	}
	fmt.Fprintln(os.Stderr, "guest: want agent ARGS or BERTH_KVM_GUEST_ROLE=app|envapp")
	os.Exit(2)
}
