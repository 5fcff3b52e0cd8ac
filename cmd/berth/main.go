// Command berth is the berth gateway (`berth serve`) and its command-line
// client (every other subcommand).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/cli"
	"github.com/berth-dev/berth/internal/demo"
	"github.com/berth-dev/berth/internal/fleet/fleetca"
	"github.com/berth-dev/berth/internal/hostcheck"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case "serve":
			os.Exit(serve(ctx, args[1:], os.Stderr))
		case "demo-app":
			// What the demo deployment's replicas run.
			os.Exit(demo.RunApp(ctx, os.Stderr))
		case "agent":
			// The in-sandbox agent: runs inside each replica.
			os.Exit(agent.Main(ctx, args[1:], os.Stderr))
		case "fleet":
			// Sets this machine up for a fleet (its CA, certificates and
			// fleet.json in the data dir); join asks the first host.
			os.Exit(fleetca.Main(ctx, args[1:], os.Stdout, os.Stderr))
		case "host":
			if len(args) > 1 && (args[1] == "cordon" || args[1] == "drain" || args[1] == "uncordon") {
				break // a host of the server's fleet: the CLI's
			}
			// Checks and prepares this machine; needs no server.
			os.Exit(hostcheck.Main(ctx, args[1:], driverOptions(), os.Stdout, os.Stderr))
		}
	}
	os.Exit(cli.Run(ctx, args, os.Stdin, os.Stdout, os.Stderr))
}
