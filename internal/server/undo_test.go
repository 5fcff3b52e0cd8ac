package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
)

// TestNewUndoesOnFailure fails New at its last step (the admin listener's
// address is taken) and checks that what it had opened is closed again:
// the data directory's lock and store (a second New over it starts) and
// the proxy listener (its address can be bound again).
func TestNewUndoesOnFailure(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr := free.Addr().String()
	free.Close()

	dir := filepath.Join(t.TempDir(), "data")
	o := Options{ProxyAddr: proxyAddr, AdminAddr: taken.Addr().String(), DataDir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	testOptions(&o)
	if s, err := New(context.Background(), o); err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.Run(ctx)
		t.Fatal("New succeeded on a taken admin address")
	}
	ln, err := net.Listen("tcp", proxyAddr)
	if err != nil {
		t.Fatalf("the failed New left its proxy listener open: %v", err)
	}
	ln.Close()
	o.AdminAddr = "127.0.0.1:0"
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("a New after the failed one: %v (its lock or store left open?)", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
}
