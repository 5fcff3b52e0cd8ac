// Command testagent is `berth agent` alone, the sandboxes' init in the
// tests of the drivers, the server and Computers (vmtest.BuildAgent builds
// it): building the agent alone is quicker than building all of berth, and
// those tests then depend on the agent only, not on every package of the
// berth binary.
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
		fmt.Fprintln(os.Stderr, "usage: testagent agent [flags] [-- command...]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(agent.Main(ctx, os.Args[2:], os.Stderr))
}
