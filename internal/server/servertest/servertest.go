// Package servertest starts a real berth on loopback for the tests of the
// packages above the composition root (the client, the CLI), so each of
// them does not keep its own copy of the start-and-stop dance.
package servertest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/server"
)

// Start runs a berth with opts and returns its admin URL. What opts leaves
// empty is filled in: loopback proxy and admin addresses on free ports, a
// 5 s drain timeout, a silent log and a data directory of the test's own.
// At cleanup, before (when not nil) runs against the admin URL, then the
// server stops; an error from its Run fails the test.
func Start(t testing.TB, opts server.Options, before func(url string)) string {
	t.Helper()
	if opts.ProxyAddr == "" {
		opts.ProxyAddr = "127.0.0.1:0"
	}
	if opts.AdminAddr == "" {
		opts.AdminAddr = "127.0.0.1:0"
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	s, err := server.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + s.AdminAddr()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		if before != nil {
			before(url)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return url
}
