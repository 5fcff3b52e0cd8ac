package fleet

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// slowDriver returns the fake driver whose Starts fail (after waiting at
// release when blockStart is set, whatever their context says) and whose
// Stops wait at release: a driver slow to answer while berth shuts down.
// Each Start and Stop sends "start" or "stop" on entered, never blocking.
func slowDriver(blockStart bool, release chan struct{}, entered chan string) *vmfake.Driver {
	enter := func(what string) {
		select {
		case entered <- what:
		default:
		}
	}
	return vmfake.New(vmfake.Options{
		BeforeStart: func(context.Context, vm.Spec) error {
			enter("start")
			if blockStart {
				<-release
			}
			return errors.New("no replica today")
		},
		BeforeStop: func(context.Context, string) {
			enter("stop")
			<-release
		},
	})
}

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
				release, entered := make(chan struct{}), make(chan string, 100)
				d := slowDriver(tc.blockStart, release, entered)
				m := New(Options{Driver: d})
				m.Ensure(Config{Deployment: "app", Driver: "process", Key: "k", Policy: autoscale.Policy{Min: 1, Max: 1}, Backends: newDataPlane()})
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- m.Run(ctx) }()
				for got := ""; got != tc.wait; got = <-entered {
				}
				cancel()
				synctest.Wait()
				select {
				case err := <-done:
					t.Fatalf("Run returned (%v) while the driver's %s was in flight", err, tc.wait)
				default:
				}
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
