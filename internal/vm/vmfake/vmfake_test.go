package vmfake

import (
	"context"
	"errors"
	"strings"
	"testing/synctest"
	"time"

	"testing"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// TestConformance runs the drivers' conformance suite on the fake.
func TestConformance(t *testing.T) {
	vmtest.RunDriverTests(t, func(t *testing.T) vm.Driver {
		d := New(Options{})
		t.Cleanup(d.Close)
		return d
	}, vmtest.Options{
		App:        "serve",
		EnvApp:     "serve-env",
		Reopen:     func(t *testing.T, old vm.Driver) vm.Driver { return old.(*Driver).Reopen() },
		LeaseCheck: 20 * time.Millisecond,
	})
}

// TestInBubble: with Options.Addr the fake runs inside a synctest bubble:
// BootDelay and sleep run on the bubble's clock, Exit and Crash end a
// replica with what they say, Lose and Find hide and show it, and Stop
// records it.
func TestInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := New(Options{Addr: "127.0.0.1:1", BootDelay: time.Minute})
		defer d.Close()
		start := time.Now()
		a, err := d.Start(ctx, vm.Spec{Name: vm.Name("app", 1), Deployment: "app", Command: "sleep 30; echo booted; serve"})
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != time.Minute {
			t.Errorf("Start took %s of bubble time, want BootDelay (1m)", got)
		}
		if a.Addr != "127.0.0.1:1" || a.State != vm.StateRunning {
			t.Errorf("Start = %+v, want running at Options.Addr", a)
		}
		time.Sleep(29 * time.Second)
		synctest.Wait()
		if lines, _ := d.Logs(ctx, a.ID, 10); len(lines) != 0 {
			t.Errorf("logs before the sleep ended: %+v", lines)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if lines, _ := d.Logs(ctx, a.ID, 10); len(lines) != 1 || lines[0].Text != "booted" {
			t.Errorf("logs after the sleep: %+v, want [booted]", lines)
		}

		if err := d.Exit(a.ID, 7); err != nil {
			t.Fatal(err)
		}
		got, err := d.Inspect(ctx, a.ID)
		if err != nil || got.State != vm.StateExited || got.ExitCode == nil || *got.ExitCode != 7 {
			t.Errorf("after Exit(7): %+v, %v", got, err)
		}

		b, err := d.Start(ctx, vm.Spec{Name: vm.Name("app", 2), Deployment: "app"})
		if err != nil {
			t.Fatal(err)
		}
		d.Lose(b.ID)
		if _, err := d.Inspect(ctx, b.ID); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Inspect of a lost replica: %v, want ErrNotFound", err)
		}
		if list, _ := d.List(ctx); len(list) != 1 {
			t.Errorf("List with one replica lost: %+v, want only the exited one", list)
		}
		d.Find(b.ID)
		if err := d.Crash(b.ID, "host on fire"); err != nil {
			t.Fatal(err)
		}
		got, _ = d.Inspect(ctx, b.ID)
		if got.State != vm.StateFailed || got.ExitCode != nil || !strings.Contains(got.Reason, "host on fire") {
			t.Errorf("after Crash: %+v", got)
		}
		if d.Stopped(b.ID) {
			t.Error("Stopped before Stop")
		}
		if err := d.Stop(ctx, b.ID, time.Second); err != nil {
			t.Fatal(err)
		}
		if !d.Stopped(b.ID) || d.Starts() != 2 {
			t.Errorf("Stopped %v, Starts %d; want true, 2", d.Stopped(b.ID), d.Starts())
		}
	})
}

// TestStartErrors: BeforeStart's error is Start's, a boot cut short by
// Start's context fails it, and a failed setup hook ends the replica with
// its status before the command runs.
func TestStartErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		d := New(Options{Addr: "127.0.0.1:1", BeforeStart: func(_ context.Context, s vm.Spec) error {
			if s.Deployment == "bad" {
				return boom
			}
			return nil
		}})
		defer d.Close()
		if _, err := d.Start(t.Context(), vm.Spec{Name: vm.Name("bad", 1), Deployment: "bad"}); !errors.Is(err, boom) {
			t.Errorf("Start: %v, want BeforeStart's error", err)
		}
		spec := vm.Spec{Name: vm.Name("app", 1), Deployment: "app", SetupHooks: []string{"exit 4"}, Command: "echo never; serve"}
		if _, err := d.Start(t.Context(), spec); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got, _ := d.Inspect(t.Context(), spec.Name)
		if got.State != vm.StateExited || got.ExitCode == nil || *got.ExitCode != 4 || strings.Contains(got.Reason, "never") {
			t.Errorf("after a failing hook: %+v", got)
		}

		slow := New(Options{Addr: "127.0.0.1:1", BootDelay: time.Hour})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := slow.Start(ctx, vm.Spec{Name: vm.Name("app", 2), Deployment: "app"}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Start cut short: %v, want DeadlineExceeded", err)
		}
		if list, _ := slow.List(t.Context()); len(list) != 0 {
			t.Errorf("a Start cut short left %+v", list)
		}
	})
}

// TestSuspendFreezes: a suspended replica's commands write nothing and its
// sleeps do not end until Resume; then it carries on where it was.
func TestSuspendFreezes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := New(Options{Addr: "127.0.0.1:1"})
		defer d.Close()
		in, err := d.Start(ctx, vm.Spec{Name: vm.Name("app", 1), Deployment: "app", Command: "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 1; done"})
		if err != nil {
			t.Fatal(err)
		}
		count := func() int {
			lines, err := d.Logs(ctx, in.ID, 1000)
			if err != nil {
				t.Fatal(err)
			}
			return len(lines)
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if n := count(); n != 3 {
			t.Fatalf("%d lines after 2.5s, want 3", n)
		}
		if err := d.Suspend(ctx, in.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := count(); n != 3 {
			t.Errorf("a suspended replica wrote %d more lines", n-3)
		}
		if _, err := d.Resume(ctx, in.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		lines, _ := d.Logs(ctx, in.ID, 1)
		if len(lines) != 1 || lines[0].Text != "tick-3" {
			t.Errorf("after Resume the last line is %+v, want tick-3 (the loop carries on)", lines)
		}
	})
}

// TestWaitAndCheck: Wait returns when a replica ends (at the bubble's
// time of its exit), with ErrNotFound once it is stopped; SetUnavailable
// fails Check and Start with vm.ErrUnavailable until it is cleared.
func TestWaitAndCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := New(Options{Addr: "127.0.0.1:1"})
		defer d.Close()
		in, err := d.Start(ctx, vm.Spec{Name: vm.Name("app", 1), Deployment: "app", Command: "sleep 5; echo bye; exit 9"})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got, err := d.Wait(ctx, in.ID)
		if err != nil || got.State != vm.StateExited || got.ExitCode == nil || *got.ExitCode != 9 || !strings.Contains(got.Reason, "bye") {
			t.Fatalf("Wait = %+v, %v", got, err)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Errorf("Wait returned after %s of bubble time, want 5s", waited)
		}

		run, err := d.Start(ctx, vm.Spec{Name: vm.Name("app", 2), Deployment: "app"})
		if err != nil {
			t.Fatal(err)
		}
		res := make(chan error, 1)
		go func() { _, err := d.Wait(ctx, run.ID); res <- err }()
		synctest.Wait()
		if err := d.Stop(ctx, run.ID, time.Second); err != nil {
			t.Fatal(err)
		}
		if err := <-res; !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Wait of a replica stopped meanwhile: %v, want ErrNotFound", err)
		}
		if _, err := d.Wait(ctx, run.ID); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Wait of a stopped replica: %v, want ErrNotFound", err)
		}

		if err := d.Check(ctx); err != nil {
			t.Fatalf("Check: %v", err)
		}
		d.SetUnavailable(errors.New("libvirtd is gone"))
		if err := d.Check(ctx); !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), "libvirtd is gone") {
			t.Errorf("Check of an unavailable driver: %v", err)
		}
		if _, err := d.Start(ctx, vm.Spec{Name: vm.Name("app", 3), Deployment: "app"}); !errors.Is(err, vm.ErrUnavailable) {
			t.Errorf("Start on an unavailable driver: %v", err)
		}
		d.SetUnavailable(nil)
		if err := d.Check(ctx); err != nil {
			t.Errorf("Check once available again: %v", err)
		}
	})
}

// TestBooting: during its boot delay a replica is listed as starting (as
// the drivers list a replica their Start has claimed), its name cannot be
// started twice, and a Stop or Exit meanwhile ends the boot: Start fails,
// the stopped one is gone and the exited one stays listed as exited.
func TestBooting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := New(Options{Addr: "127.0.0.1:1", BootDelay: time.Minute})
		defer d.Close()
		for i, end := range []func(id string) error{
			func(id string) error { return d.Stop(ctx, id, time.Second) },
			func(id string) error { return d.Exit(id, 4) },
		} {
			spec := vm.Spec{Name: vm.Name("app", uint64(i)), Deployment: "app"}
			started := make(chan error, 1)
			go func() { _, err := d.Start(ctx, spec); started <- err }()
			time.Sleep(time.Second)
			synctest.Wait()
			in, err := d.Inspect(ctx, spec.Name)
			if err != nil || in.State != vm.StateStarting {
				t.Fatalf("during the boot: %+v, %v; want it starting", in, err)
			}
			if _, err := d.Start(ctx, spec); err == nil {
				t.Error("a second Start of a booting replica succeeded")
			}
			if err := end(spec.Name); err != nil {
				t.Fatal(err)
			}
			if err := <-started; err == nil {
				t.Error("Start succeeded for a replica ended while booting")
			}
			in, err = d.Inspect(ctx, spec.Name)
			switch i {
			case 0:
				if !errors.Is(err, vm.ErrNotFound) {
					t.Errorf("stopped while booting: %+v, %v; want it gone", in, err)
				}
			case 1:
				if err != nil || in.State != vm.StateExited || in.ExitCode == nil || *in.ExitCode != 4 {
					t.Errorf("exited while booting: %+v, %v", in, err)
				}
			}
		}
	})
}
