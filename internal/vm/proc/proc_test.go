package proc_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm/proc"
)

func TestParseStat(t *testing.T) {
	// Fields 4 on: ppid pgrp session tty tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime priority nice threads itrealvalue
	// starttime vsize.
	tail := " 1 1234 1234 0 -1 4194304 100 0 0 0 30 12 0 0 20 0 1 0 4242 1000"
	tests := []struct {
		name string
		in   string
		want proc.Stat
		ok   bool
	}{
		{"plain", "123 (sh) S" + tail, proc.Stat{State: 'S', Session: 1234, CPUTicks: 42, StartTicks: 4242}, true},
		{"spaces and parens in comm", "123 (a) b (c) Z" + tail, proc.Stat{State: 'Z', Session: 1234, CPUTicks: 42, StartTicks: 4242}, true},
		{"no comm", "123 sh S" + tail, proc.Stat{}, false},
		{"short", "123 (sh) S 1 2 3", proc.Stat{}, false},
		{"empty", "", proc.Stat{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := proc.ParseStat([]byte(tt.in))
			if ok != tt.ok || got != tt.want {
				t.Errorf("ParseStat = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestEndOrder pins the one stop order: a suspended sandbox is thawed
// before it is asked to end (a frozen process handles no signal), and
// killed only after that.
func TestEndOrder(t *testing.T) {
	var calls []string
	gone := false
	e := proc.Ending{
		What:   "test",
		Gone:   func() bool { return gone },
		Thaw:   func() { calls = append(calls, "thaw") },
		Polite: func() error { calls = append(calls, "term"); return nil },
		Kill:   func() { calls = append(calls, "kill"); gone = true },
	}
	if _, err := proc.End(context.Background(), time.Millisecond, e); err != nil {
		t.Fatal(err)
	}
	if want := []string{"thaw", "term", "kill"}; !slices.Equal(calls, want) {
		t.Fatalf("End called %v, want %v", calls, want)
	}

	// A sandbox that is gone already is left alone.
	calls = nil
	if _, err := proc.End(context.Background(), time.Second, e); err != nil || len(calls) != 0 {
		t.Fatalf("End of a gone sandbox: %v, calls %v", err, calls)
	}

	// A polite request that fails kills at once, and End says why.
	gone, calls = false, nil
	e.Polite = func() error { calls = append(calls, "term"); return errors.New("no") }
	perr, err := proc.End(context.Background(), time.Hour, e)
	if err != nil || perr == nil || !slices.Equal(calls, []string{"thaw", "term", "kill"}) {
		t.Fatalf("End with a failing Polite: %v, %v, calls %v", perr, err, calls)
	}
}

func TestEndSurvivor(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := proc.End(ctx, 0, proc.Ending{What: "x", Gone: func() bool { return false }, Kill: func() {}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("End with a dead context = %v, want context.Canceled", err)
	}
}

// TestWait waits for a real process through its pidfd: Wait returns when
// it exits, not before, and at once for a process that is gone or whose
// pid names another process now.
func TestWait(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ps, err := proc.ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !proc.Alive(cmd.Process.Pid, ps.StartTicks) {
		t.Fatal("a running sleep is not Alive")
	}
	if proc.Alive(cmd.Process.Pid, ps.StartTicks+1) {
		t.Fatal("Alive with another start time")
	}
	// Another start time: the pid is someone else's, so it has ended.
	if err := proc.Wait(context.Background(), cmd.Process.Pid, ps.StartTicks+1); err != nil {
		t.Fatal(err)
	}
	// Not ended: Wait returns with the context.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Wait(ctx, cmd.Process.Pid, ps.StartTicks) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context = %v", err)
	}
	// Ended: Wait returns nil. The zombie is reaped by cmd.Wait.
	go func() { done <- proc.Wait(context.Background(), cmd.Process.Pid, ps.StartTicks) }()
	cmd.Process.Signal(os.Kill)
	cmd.Wait()
	if err := <-done; err != nil {
		t.Fatalf("Wait = %v", err)
	}
}
