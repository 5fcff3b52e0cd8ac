package fleet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// TestFenceRefusesCreate: a create whose Config.Fence fails starts no
// replica, and the request held for it is released with a StartError
// saying this host does not run the deployment; once the fence lets it,
// a replica is started.
func TestFenceRefusesCreate(t *testing.T) {
	d := vmfake.New(vmfake.Options{})
	m := New(Options{Driver: d, Tick: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		m.Remove(context.Background(), "d")
		d.Close()
	})
	var held atomic.Bool
	var fences atomic.Int64
	cfg := Config{
		Deployment: "d", Driver: "process", Key: "k",
		Template: vm.Spec{Command: "exec sleep 600"},
		Policy:   autoscale.Policy{Max: 1, Target: 1, ColdStartTimeout: time.Minute},
		Backends: newDataPlane(),
		Fence: func(context.Context) error {
			fences.Add(1)
			if !held.Load() {
				return errors.New("not held")
			}
			return nil
		},
	}
	p := m.Ensure(cfg)
	err := p.Await(context.Background(), time.Now(), true)
	var se *StartError
	if !errors.As(err, &se) || !strings.Contains(se.Reason, "does not run it now") || !strings.Contains(se.Detail, "not held") {
		t.Fatalf("Await with the fence refusing: %v, want a StartError naming the fence", err)
	}
	if n := d.Starts(); n != 0 || fences.Load() == 0 {
		t.Fatalf("%d Starts, %d fences; want none started, the fence asked", n, fences.Load())
	}
	held.Store(true)
	m.Ensure(cfg) // a spec write resets the backoff
	wctx, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	go p.Await(wctx, time.Now(), true)
	waitUntil(t, "a Start once the fence lets it", func() bool { return d.Starts() >= 1 })
}
