package fleet

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// lowDriver is the fake driver as a backgrounder: it records which
// replicas it started in the background, and each Foreground with
// whether the data plane already served the replica then.
type lowDriver struct {
	*vmfake.Driver
	dp dataPlane

	mu         sync.Mutex
	background []string
	normal     []string
	fg         []string
	fgServing  []string // foregrounded when already a backend
}

func (d *lowDriver) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	d.mu.Lock()
	d.normal = append(d.normal, spec.Name)
	d.mu.Unlock()
	return d.Driver.Start(ctx, spec)
}

func (d *lowDriver) StartBackground(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	d.mu.Lock()
	d.background = append(d.background, spec.Name)
	d.mu.Unlock()
	return d.Driver.Start(ctx, spec)
}

func (d *lowDriver) Foreground(ctx context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fg = append(d.fg, id)
	if d.dp.pool != nil && d.dp.pool.Find(id) != nil {
		d.fgServing = append(d.fgServing, id)
	}
	return nil
}

func (d *lowDriver) snapshot() (background, normal, fg, fgServing []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.background), slices.Clone(d.normal), slices.Clone(d.fg), slices.Clone(d.fgServing)
}

var _ backgrounder = (*lowDriver)(nil)

// TestRolloutCandidatesInBackground: the replicas a pool starts for its
// minimum start at the normal priority; a rollout's candidates start in
// the background and get the normal priority back before the data plane
// serves them; the previous replicas are never touched.
func TestRolloutCandidatesInBackground(t *testing.T) {
	addr := revisionServer(t)
	synctest.Test(t, func(t *testing.T) {
		dp := newDataPlane()
		d := &lowDriver{Driver: vmfake.New(vmfake.Options{Addr: addr}), dp: dp}
		evs := &events{}
		m := New(Options{Driver: d, Log: slog.New(slog.DiscardHandler), OnRollout: evs.add})
		runManager(t, m)
		t.Cleanup(d.Close)
		cfg := rolloutConfig("k1", "r1", "a")
		cfg.Backends = dp
		p := m.Ensure(cfg)
		for p.Status().Ready < 2 {
			time.Sleep(100 * time.Millisecond)
		}
		before := readyIDs(p)
		if bg, normal, fg, _ := d.snapshot(); len(bg) != 0 || len(fg) != 0 || !sameSet(normal, before) {
			t.Fatalf("first replicas: background %v, normal %v, foregrounded %v; want %v started normally", bg, normal, fg, before)
		}

		cfg = rolloutConfig("k2", "r2", "a")
		cfg.Backends = dp
		m.Ensure(cfg)
		for {
			if _, ok := evs.find("r2", RolloutSucceeded); ok {
				break
			}
			if ev, ok := evs.find("r2", RolloutFailed); ok {
				t.Fatalf("rollout failed: %s", ev.Error)
			}
			time.Sleep(50 * time.Millisecond)
		}
		after := readyIDs(p)
		bg, normal, fg, fgServing := d.snapshot()
		if !sameSet(bg, after) || len(after) != 2 {
			t.Errorf("started in the background %v, want the candidates %v", bg, after)
		}
		if !sameSet(normal, before) {
			t.Errorf("started normally %v, want only the first replicas %v", normal, before)
		}
		if !sameSet(fg, after) {
			t.Errorf("foregrounded %v, want the candidates %v", fg, after)
		}
		if len(fgServing) != 0 {
			t.Errorf("%v were foregrounded after the data plane served them", fgServing)
		}
	})
}

// TestColdStartNotInBackground: a scale from zero, which a request waits
// for, starts at the normal priority, and nothing is foregrounded.
func TestColdStartNotInBackground(t *testing.T) {
	addr := revisionServer(t)
	synctest.Test(t, func(t *testing.T) {
		dp := newDataPlane()
		d := &lowDriver{Driver: vmfake.New(vmfake.Options{Addr: addr}), dp: dp}
		m := New(Options{Driver: d, Log: slog.New(slog.DiscardHandler)})
		runManager(t, m)
		t.Cleanup(d.Close)
		cfg := rolloutConfig("k1", "r1", "a")
		cfg.Policy.Min, cfg.Policy.Max = 0, 2
		cfg.Backends = dp
		p := m.Ensure(cfg)
		if err := p.Await(t.Context(), time.Now(), true); err != nil {
			t.Fatalf("cold start: %v", err)
		}
		bg, normal, fg, _ := d.snapshot()
		if len(bg) != 0 || len(normal) != 1 || len(fg) != 0 {
			t.Errorf("cold start: background %v, normal %v, foregrounded %v; want one normal start", bg, normal, fg)
		}
	})
}

// TestSlowCandidateForegrounded: a candidate still booting at half its
// boot_timeout_secs gets the normal priority back (a busy host slows a
// rollout, it does not fail it), and not before.
func TestSlowCandidateForegrounded(t *testing.T) {
	addr := revisionServer(t)
	synctest.Test(t, func(t *testing.T) {
		dp := newDataPlane()
		d := &lowDriver{Driver: vmfake.New(vmfake.Options{Addr: addr}), dp: dp}
		evs := &events{}
		m := New(Options{Driver: d, Log: slog.New(slog.DiscardHandler), OnRollout: evs.add})
		runManager(t, m)
		t.Cleanup(d.Close)
		cfg := rolloutConfig("k1", "r1", "a")
		cfg.Backends = dp
		p := m.Ensure(cfg)
		for p.Status().Ready < 2 {
			time.Sleep(100 * time.Millisecond)
		}
		// Candidates expecting x-rev: b never pass their probe.
		cfg = rolloutConfig("k2", "r2", "b")
		cfg.Backends = dp
		m.Ensure(cfg)
		start := time.Now()
		for {
			if bg, _, _, _ := d.snapshot(); len(bg) > 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(cfg.Policy.BootTimeout/2 - 5*time.Second - time.Since(start))
		if _, _, fg, _ := d.snapshot(); len(fg) != 0 {
			t.Fatalf("foregrounded %v well before half the boot timeout", fg)
		}
		for {
			if _, _, fg, _ := d.snapshot(); len(fg) > 0 {
				break
			}
			if _, ok := evs.find("r2", RolloutFailed); ok {
				t.Fatal("the rollout failed before its candidate was foregrounded")
			}
			time.Sleep(100 * time.Millisecond)
		}
		bg, _, fg, _ := d.snapshot()
		if !slices.Contains(bg, fg[0]) {
			t.Errorf("foregrounded %s, which was not started in the background (%v)", fg[0], bg)
		}
		if since := time.Since(start); since < cfg.Policy.BootTimeout/2 {
			t.Errorf("foregrounded after %s, before half the boot timeout (%s)", since, cfg.Policy.BootTimeout)
		}
	})
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
