package fleet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// waitUntil polls cond until it holds, failing after a generous hang guard.
// It asserts an outcome, not a duration.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestStartingReplicaCountedOnce: a replica whose Start is still running
// counts once toward the pool's pending replicas. Counted twice (as a
// create in flight and as a tracked replica), a second waiter found the
// pool "already creating 2" and nothing was created for it until the next
// tick — here an hour away.
func TestStartingReplicaCountedOnce(t *testing.T) {
	gate := make(chan struct{})
	d := vmfake.New(vmfake.Options{BeforeStart: func(ctx context.Context, _ vm.Spec) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	m := New(Options{Driver: d, Tick: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		close(gate)
		cancel()
		<-done
		m.Remove(context.Background(), "d")
		d.Close()
	})
	p := m.Ensure(Config{
		Deployment: "d", Driver: "process", Key: "k",
		Template: vm.Spec{Command: "exec sleep 600"},
		Policy:   autoscale.Policy{Max: 5, Target: 1, ColdStartTimeout: time.Minute},
		Backends: newDataPlane(),
	})
	wctx, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	go p.Await(wctx, time.Now(), true)
	waitUntil(t, "the first replica's Start", func() bool { return d.Starts() >= 1 })
	go p.Await(wctx, time.Now(), true)
	waitUntil(t, "a second replica's Start for the second waiter", func() bool { return d.Starts() >= 2 })
	if n := d.Starts(); n != 2 {
		t.Errorf("%d Starts for 2 waiters, want 2", n)
	}
}

// TestCreateFailureReleasesHeldRequests: a request held for a cold start is
// released with a StartError as soon as the create fails, not after
// cold_start_timeout_secs; while the backoff lasts a request is refused at
// once; once it is over the next request is held again and triggers a new
// attempt.
func TestCreateFailureReleasesHeldRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var attempts atomic.Int32
		m := New(Options{Log: slog.New(slog.DiscardHandler)})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		defer func() { cancel(); <-done }()
		p := m.Ensure(Config{
			Deployment: "d", Driver: "process", Key: "k",
			Policy:   autoscale.Policy{Max: 1, Target: 1, ColdStartTimeout: 600 * time.Second},
			Backends: newDataPlane(),
			Env: func(ctx context.Context) (map[string]string, error) {
				attempts.Add(1)
				<-gate
				return nil, errors.New(`env_from[0]: no secret "nope" in namespace "default" (read /var/lib/berth/secrets: x)`)
			},
		})
		start := time.Now()
		got := make(chan error, 1)
		go func() { got <- p.Await(t.Context(), time.Now(), true) }()
		synctest.Wait() // held, and the create waits on the secret store
		if attempts.Load() != 1 {
			t.Fatalf("%d creates for a held request, want 1", attempts.Load())
		}
		close(gate)
		err := <-got
		var se *StartError
		if !errors.As(err, &se) {
			t.Fatalf("held request: %v, want a StartError", err)
		}
		if waited := time.Since(start); waited >= 600*time.Second {
			t.Errorf("released after %s, the whole cold-start timeout", waited)
		}
		if !strings.Contains(se.Detail, `"nope"`) || strings.Contains(se.PublicMessage(), "nope") ||
			strings.Contains(se.PublicMessage(), "/var/lib") || !strings.Contains(se.PublicMessage(), "vm.env_from") {
			t.Errorf("detail %q, public %q", se.Detail, se.PublicMessage())
		}
		if se.RetryAfter() <= 0 || se.RetryAfter() > autoscale.BackoffBase {
			t.Errorf("retry after %s", se.RetryAfter())
		}

		// In backoff: refused at once, and nothing is created.
		if err := p.Await(t.Context(), time.Now(), true); !errors.As(err, &se) {
			t.Errorf("request during the backoff: %v", err)
		}
		synctest.Wait()
		if attempts.Load() != 1 {
			t.Errorf("%d creates during the backoff", attempts.Load())
		}

		// After the backoff a request is held again and triggers a new try.
		time.Sleep(autoscale.BackoffBase)
		if err := p.Await(t.Context(), time.Now(), true); !errors.As(err, &se) {
			t.Errorf("request after the backoff: %v", err)
		}
		if attempts.Load() != 2 {
			t.Errorf("%d creates after the backoff, want 2", attempts.Load())
		}
		if st := p.Status(); st.Failures != 2 {
			t.Errorf("failures %d, want 2", st.Failures)
		}
	})
}

func runManager(t *testing.T, m *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		m.Remove(context.Background(), "d")
		cancel()
		<-done
	})
}

// TestWaiterNoticesExit: a replica whose app exits is noticed through the
// driver's Wait, not at the next reconcile tick (an hour away here): the
// pool lets it go and starts another.
func TestWaiterNoticesExit(t *testing.T) {
	d := vmfake.New(vmfake.Options{})
	t.Cleanup(d.Close)
	m := New(Options{Driver: d, Tick: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runManager(t, m)
	p := m.Ensure(Config{
		Deployment: "d", Driver: "process", Key: "k",
		Template: vm.Spec{Command: "serve"},
		Policy:   autoscale.Policy{Min: 1, Max: 1, ColdStartTimeout: time.Minute},
		Backends: newDataPlane(),
	})
	p.Poke()
	var first ReplicaView
	waitUntil(t, "a ready replica", func() bool {
		st := p.Status()
		if st.Ready == 1 {
			first = st.Replicas[0]
			return true
		}
		return false
	})
	if err := d.Exit(first.ID, 3); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the pool to let the exited replica go", func() bool {
		for _, r := range p.Status().Replicas {
			if r.ID == first.ID {
				return false
			}
		}
		return true
	})
}

// TestDriverRecheck: a driver whose re-check fails is reported unavailable
// (DriverProblem) and creates on it fail at once with that reason, without
// a Start; once it works again, so do creates.
func TestDriverRecheck(t *testing.T) {
	d := vmfake.New(vmfake.Options{})
	t.Cleanup(d.Close)
	d.SetUnavailable(errors.New("the runtime is gone"))
	m := New(Options{Driver: d, Tick: time.Hour, CheckEvery: 5 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runManager(t, m)
	waitUntil(t, "the driver to be found unavailable", func() bool { return m.DriverProblem("process") != nil })
	if err := m.DriverProblem("process"); !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), "the runtime is gone") {
		t.Fatalf("DriverProblem = %v, want the Check's error", err)
	}
	p := m.Ensure(Config{
		Deployment: "d", Driver: "process", Key: "k",
		Template: vm.Spec{Command: "exec sleep 600"},
		Policy:   autoscale.Policy{Min: 1, Max: 1, ColdStartTimeout: time.Minute},
		Backends: newDataPlane(),
	})
	p.Poke()
	waitUntil(t, "a failed create", func() bool { return p.Status().Failures > 0 })
	if n := d.Starts(); n != 0 {
		t.Errorf("%d Starts on an unavailable driver, want 0", n)
	}
	d.SetUnavailable(nil)
	waitUntil(t, "the driver to be available again", func() bool { return m.DriverProblem("process") == nil })
}

// TestPrepareFailureFailsCreate: an image that cannot be pulled
// (Config.Prepare) fails the create with the reason, releases the held
// request, and the pull runs outside the create slots.
func TestPrepareFailureFailsCreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var pulls atomic.Int32
		m := New(Options{Log: slog.New(slog.DiscardHandler)})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		defer func() { cancel(); <-done }()
		p := m.Ensure(Config{
			Deployment: "d", Driver: "process", Key: "k",
			Template: vm.Spec{Image: "registry.test/app:v1"},
			Policy:   autoscale.Policy{Max: 1, Target: 1, ColdStartTimeout: 600 * time.Second},
			Backends: newDataPlane(),
			Prepare: func(ctx context.Context, sp *vm.Spec) error {
				pulls.Add(1)
				if sp.Image != "registry.test/app:v1" {
					t.Errorf("Prepare got image %q", sp.Image)
				}
				time.Sleep(3 * time.Second) // the pull
				return errors.New("image: pull failed: registry.test/app:v1: 401 Unauthorized")
			},
		})
		err := p.Await(t.Context(), time.Now(), true)
		var se *StartError
		if !errors.As(err, &se) {
			t.Fatalf("held request: %v, want a StartError", err)
		}
		if pulls.Load() != 1 || !strings.Contains(se.Detail, "401") || !strings.Contains(se.PublicMessage(), "image") {
			t.Errorf("pulls %d, detail %q, public %q", pulls.Load(), se.Detail, se.PublicMessage())
		}
	})
}
