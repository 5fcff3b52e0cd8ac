package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// TestMain lets the test binary be the in-sandbox agent of the process
// driver's replicas (BERTH_TEST_ROLE=agent runs `berth agent`).
func TestMain(m *testing.M) {
	switch os.Getenv("BERTH_TEST_ROLE") {
	case "agent":
		os.Exit(agent.Main(context.Background(), os.Args[1:], os.Stderr))
	case "exitapp":
		os.Exit(exitApp())
	}
	os.Exit(m.Run())
}

// gatedDriver is the real process driver whose Starts wait at a gate, so a
// test can see what the pool does while replicas are being started.
type gatedDriver struct {
	*process.Driver
	gate   chan struct{}
	starts atomic.Int32
}

func (g *gatedDriver) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	g.starts.Add(1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		return vm.Instance{}, ctx.Err()
	}
	return g.Driver.Start(ctx, spec)
}

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
	d, err := process.New(process.Options{
		Dir: t.TempDir(), AgentCommand: []string{os.Args[0]}, AgentEnv: []string{"BERTH_TEST_ROLE=agent"},
		CgroupParent: "none", Spares: new(int),
	})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedDriver{Driver: d, gate: make(chan struct{})}
	m := New(Options{Driver: g, Tick: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		close(g.gate)
		cancel()
		<-done
		m.Remove(context.Background(), "d")
		insts, _ := d.List(context.Background())
		for _, in := range insts {
			d.Stop(context.Background(), in.ID, time.Second)
		}
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
	waitUntil(t, "the first replica's Start", func() bool { return g.starts.Load() >= 1 })
	go p.Await(wctx, time.Now(), true)
	waitUntil(t, "a second replica's Start for the second waiter", func() bool { return g.starts.Load() >= 2 })
	if n := g.starts.Load(); n != 2 {
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

// exitApp serves HTTP 200 on $PORT and exits 3 once asked to (GET /exit).
func exitApp() int {
	exit := make(chan struct{})
	http.HandleFunc("/exit", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(exit)
	})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {})
	go http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), nil)
	<-exit
	return 3
}

func processDriver(t *testing.T) *process.Driver {
	t.Helper()
	d, err := process.New(process.Options{
		Dir: t.TempDir(), AgentCommand: []string{os.Args[0]}, AgentEnv: []string{"BERTH_TEST_ROLE=agent"},
		CgroupParent: "none", Spares: new(int),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		insts, _ := d.List(context.Background())
		for _, in := range insts {
			d.Stop(context.Background(), in.ID, time.Second)
		}
		d.Close()
	})
	return d
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
	d := processDriver(t)
	m := New(Options{Driver: d, Tick: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runManager(t, m)
	p := m.Ensure(Config{
		Deployment: "d", Driver: "process", Key: "k",
		Template: vm.Spec{Command: "exec env BERTH_TEST_ROLE=exitapp " + os.Args[0]},
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
	resp, err := http.Get("http://" + first.Addr + "/exit")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitUntil(t, "the pool to let the exited replica go", func() bool {
		for _, r := range p.Status().Replicas {
			if r.ID == first.ID {
				return false
			}
		}
		return true
	})
}

// checkedDriver is the real process driver whose Check fails while broken
// is set: a driver that stopped working after start-up.
type checkedDriver struct {
	*process.Driver
	broken atomic.Bool
	starts atomic.Int32
}

func (c *checkedDriver) Check(ctx context.Context) error {
	if c.broken.Load() {
		return fmt.Errorf("test: the runtime is gone: %w", vm.ErrUnavailable)
	}
	return c.Driver.Check(ctx)
}

func (c *checkedDriver) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	c.starts.Add(1)
	return c.Driver.Start(ctx, spec)
}

// TestDriverRecheck: a driver whose re-check fails is reported unavailable
// (DriverProblem) and creates on it fail at once with that reason, without
// a Start; once it works again, so do creates.
func TestDriverRecheck(t *testing.T) {
	c := &checkedDriver{Driver: processDriver(t)}
	c.broken.Store(true)
	m := New(Options{Driver: c, Tick: time.Hour, CheckEvery: 5 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	if n := c.starts.Load(); n != 0 {
		t.Errorf("%d Starts on an unavailable driver, want 0", n)
	}
	c.broken.Store(false)
	waitUntil(t, "the driver to be available again", func() bool { return m.DriverProblem("process") == nil })
}
