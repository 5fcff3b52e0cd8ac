package fleet

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// TestMain lets the test binary be the in-sandbox agent of the process
// driver's replicas (BERTH_TEST_ROLE=agent runs `berth agent`).
func TestMain(m *testing.M) {
	if os.Getenv("BERTH_TEST_ROLE") == "agent" {
		os.Exit(agent.Main(context.Background(), os.Args[1:], os.Stderr))
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
