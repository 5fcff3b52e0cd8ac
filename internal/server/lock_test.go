package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// holdLock is the lockholder role: it takes dir's instance lock, says so
// on stdout, and holds it until the process dies.
func holdLock(dir string) int {
	if _, err := lockDataDir(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	select {}
}

func newOn(t *testing.T, dir string) (*Server, error) {
	t.Helper()
	return New(context.Background(), Options{DataDir: dir, ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", Log: slog.New(slog.DiscardHandler)})
}

// runAndStop runs s with a cancelled context, which drains at once and
// releases what New took (listeners, store, instance lock).
func runAndStop(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestLockOneServerPerDataDir: a second server on a data dir in use is
// refused, naming the holder's pid, before it loads anything; once the
// first stops, the dir is free again.
func TestLockOneServerPerDataDir(t *testing.T) {
	dir := t.TempDir()
	first, err := newOn(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	second, err := newOn(t, dir)
	if err == nil {
		runAndStop(t, second)
		t.Fatal("a second server on the same data dir started")
	}
	want := fmt.Sprintf("data dir %s is in use by pid %d", dir, os.Getpid())
	if !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second New: %v; want ErrDataDirInUse saying %q", err, want)
	}
	runAndStop(t, first)
	third, err := newOn(t, dir)
	if err != nil {
		t.Fatalf("New after the first stopped: %v", err)
	}
	runAndStop(t, third)
}

// TestLockReleasedOnKill: the lock is the kernel's, so a holder killed
// with SIGKILL (no chance to clean up) frees the data dir.
func TestLockReleasedOnKill(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BERTH_TEST_ROLE=lockholder", "BERTH_TEST_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("holder said %q, %v", line, err)
	}
	_, err = newOn(t, dir)
	if err == nil || !strings.Contains(err.Error(), "in use by pid "+strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("New while pid %d holds the lock: %v", cmd.Process.Pid, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	s, err := newOn(t, dir)
	if err != nil {
		t.Fatalf("New after the holder was killed: %v", err)
	}
	runAndStop(t, s)
}
