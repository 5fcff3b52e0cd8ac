// Command berth is the berth gateway (`berth serve`) and its command-line
// client (every other subcommand).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/berth-dev/berth/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "serve" {
		os.Exit(serve(ctx, args[1:]))
	}
	os.Exit(cli.Run(ctx, args, os.Stdin, os.Stdout, os.Stderr))
}
