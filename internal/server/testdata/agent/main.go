// Command agent is `berth agent` alone: TestKVMGateway builds it as the
// guests' init ($BERTH_GUEST_AGENT), with cgo where there is a C compiler
// (dynamically linked, as berth is built there), since building the agent
// alone is quicker than building all of berth.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/berth-dev/berth/internal/agent"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "agent" {
		fmt.Fprintln(os.Stderr, "usage: agent agent [flags] [-- command...]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(agent.Main(ctx, os.Args[2:], os.Stderr))
}
