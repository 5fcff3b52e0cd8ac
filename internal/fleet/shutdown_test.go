package fleet

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
)

// slowDriver is an in-memory driver whose Starts fail (after waiting at
// release when blockStart is set, whatever their context says) and whose
// Stops wait at release: a driver slow to answer while berth shuts down.
type slowDriver struct {
	blockStart bool
	release    chan struct{}
	entered    chan string // "start", "stop"; sends never block
}

func (d *slowDriver) enter(what string) {
	select {
	case d.entered <- what:
	default:
	}
}

func (d *slowDriver) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	d.enter("start")
	if d.blockStart {
		<-d.release
	}
	return vm.Instance{}, errors.New("no replica today")
}

func (d *slowDriver) Stop(ctx context.Context, id string, grace time.Duration) error {
	d.enter("stop")
	<-d.release
	return nil
}

func (d *slowDriver) Inspect(context.Context, string) (vm.Instance, error) {
	return vm.Instance{}, vm.ErrNotFound
}

func (d *slowDriver) List(context.Context) ([]vm.Instance, error) { return nil, nil }

// TestRunWaitsForPoolTasks checks that Manager.Run returns only once the
// goroutines its pools started have ended: a create whose driver is still
// in Start, and the stop of a replica whose create failed. Before, Run
// returned with them running, and berth then closed the drivers and the
// store under them.
func TestRunWaitsForPoolTasks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		blockStart bool
		wait       string
	}{
		{"create", true, "start"},
		{"stop", false, "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := &slowDriver{blockStart: tc.blockStart, release: make(chan struct{}), entered: make(chan string, 100)}
				m := New(Options{Driver: d})
				m.Ensure(Config{Deployment: "app", Driver: "process", Key: "k", Policy: autoscale.Policy{Min: 1, Max: 1}, Backends: newDataPlane()})
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- m.Run(ctx) }()
				for got := ""; got != tc.wait; got = <-d.entered {
				}
				cancel()
				synctest.Wait()
				select {
				case err := <-done:
					t.Fatalf("Run returned (%v) while the driver's %s was in flight", err, tc.wait)
				default:
				}
				close(d.release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
