package fleet

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// mountDriver is the fake driver as a vm.Mounter of read-only mounts: it
// records the mounts each Start gets and starts the replica without them.
type mountDriver struct {
	*vmfake.Driver
	mu     sync.Mutex
	mounts [][]vm.Mount
}

func (d *mountDriver) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	d.mu.Lock()
	d.mounts = append(d.mounts, spec.Mounts)
	d.mu.Unlock()
	spec.Mounts = nil
	return d.Driver.Start(ctx, spec)
}

func (d *mountDriver) Abilities() []vm.Ability {
	return append(d.Driver.Abilities(), vm.CanMount)
}

func (d *mountDriver) WritableMounts() bool { return false }

func (d *mountDriver) started() [][]vm.Mount {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.mounts)
}

// TestMounter: Manager.Mounter answers from the drivers' declarations.
func TestMounter(t *testing.T) {
	fake := vmfake.New(vmfake.Options{})
	defer fake.Close()
	md := &mountDriver{Driver: fake}
	m := New(Options{Drivers: map[string]vm.Driver{"plain": fake, "mounting": md}, Log: slog.New(slog.DiscardHandler)})
	for _, tt := range []struct {
		driver             string
		attaches, writable bool
	}{{"plain", false, false}, {"mounting", true, false}, {"nosuch", false, false}} {
		if a, w := m.Mounter(tt.driver); a != tt.attaches || w != tt.writable {
			t.Errorf("Mounter(%s) = %v, %v; want %v, %v", tt.driver, a, w, tt.attaches, tt.writable)
		}
	}
}

// TestMountsAtCreate: Config.Mounts is resolved at each create and its
// answer is the replica's Spec.Mounts; an error fails the create with a
// public reason that names vm.mounts and nothing of the host.
func TestMountsAtCreate(t *testing.T) {
	fake := vmfake.New(vmfake.Options{})
	defer fake.Close()
	d := &mountDriver{Driver: fake}
	m := New(Options{Driver: d, Tick: time.Hour, Log: slog.New(slog.DiscardHandler)})
	runManager(t, m)
	want := []vm.Mount{{Source: "/var/lib/berth/mounts/ab12", Target: "/data", ReadOnly: true}}
	var fail error
	var mu sync.Mutex
	p := m.Ensure(Config{
		Deployment: "d", Driver: "process", Key: "k",
		Template: vm.Spec{Command: "exec sleep 600", Mounts: []vm.Mount{{Source: "/stale", Target: "/stale"}}},
		Policy:   autoscale.Policy{Max: 1, Target: 1, ColdStartTimeout: time.Minute},
		Backends: newDataPlane(),
		Mounts: func(context.Context) ([]vm.Mount, error) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(want), fail
		},
	})
	t.Cleanup(func() { m.Remove(context.Background(), "d") })
	wctx, stopWaiting := context.WithCancel(t.Context())
	go p.Await(wctx, time.Now(), true)
	waitUntil(t, "the replica's Start", func() bool { return len(d.started()) >= 1 })
	stopWaiting()
	if got := d.started(); len(got) != 1 || !slices.Equal(got[0], want) {
		t.Errorf("Start got mounts %v, want %v", got, want)
	}

	// A tree not pulled yet fails the create, saying so publicly only as
	// vm.mounts.
	mu.Lock()
	fail = errors.New("vm.mounts[0] (/data): /var/lib/berth/mounts/ab12 not pulled yet")
	mu.Unlock()
	m.Remove(t.Context(), "d")
	p = m.Ensure(Config{
		Deployment: "d2", Driver: "process", Key: "k",
		Template: vm.Spec{Command: "exec sleep 600"},
		Policy:   autoscale.Policy{Max: 1, Target: 1, ColdStartTimeout: time.Minute},
		Backends: newDataPlane(),
		Mounts: func(context.Context) ([]vm.Mount, error) {
			mu.Lock()
			defer mu.Unlock()
			return nil, fail
		},
	})
	t.Cleanup(func() { m.Remove(context.Background(), "d2") })
	err := p.Await(t.Context(), time.Now(), true)
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("Await with unready mounts: %v, want a StartError", err)
	}
	if !strings.Contains(se.Detail, "not pulled yet") || !strings.Contains(se.PublicMessage(), "vm.mounts") || strings.Contains(se.PublicMessage(), "/var/lib") {
		t.Errorf("detail %q, public %q", se.Detail, se.PublicMessage())
	}
	if n := len(d.started()); n != 1 {
		t.Errorf("%d Starts in all, want only the first deployment's", n)
	}
}
