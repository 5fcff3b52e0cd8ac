package fleet

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// recordingWorkspace is a Workspace that records the pool's calls, in
// order, with the driver's Starts and Stops between them.
type recordingWorkspace struct {
	mu     sync.Mutex
	events []string
}

func (w *recordingWorkspace) add(e string) {
	w.mu.Lock()
	w.events = append(w.events, e)
	w.mu.Unlock()
}

func (w *recordingWorkspace) log() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events)
}

func (w *recordingWorkspace) has(e string) bool { return slices.Contains(w.log(), e) }

func (w *recordingWorkspace) Seed(_ context.Context, spec *vm.Spec) error {
	w.add("seed " + spec.Name)
	spec.Workspace = "/ws/" + spec.Name
	return nil
}
func (w *recordingWorkspace) Stopped(_ context.Context, id string)   { w.add("stopped " + id) }
func (w *recordingWorkspace) Suspended(_ context.Context, id string) { w.add("suspended " + id) }

// TestWorkspaceHooks: the pool seeds each new replica's workspace before
// its Start (which gets Spec.Workspace), and tells the workspace of every
// replica it stops — evicted, retired by a template change — after the
// driver's Stop, and of one it suspends for idleness after the Suspend.
// These are the pool's workspace call sites (create, stopAll, reap, Evict).
func TestWorkspaceHooks(t *testing.T) {
	ws := &recordingWorkspace{}
	fake := vmfake.New(vmfake.Options{
		BeforeStart: func(_ context.Context, spec vm.Spec) error {
			ws.add("start " + spec.Name + " " + spec.Workspace)
			return nil
		},
		BeforeStop: func(_ context.Context, id string) { ws.add("stop " + id) },
	})
	defer fake.Close()
	m := New(Options{Driver: fake, Tick: 5 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	runManager(t, m)
	cfg := Config{
		Deployment: "d", Driver: "process", Key: "k1",
		Template:  vm.Spec{Command: "serve"},
		Policy:    autoscale.Policy{Min: 1, Max: 1, Target: 1, ColdStartTimeout: time.Minute, DrainTimeout: time.Second},
		Backends:  newDataPlane(),
		Workspace: ws,
	}
	p := m.Ensure(cfg)
	ready := func(not ...string) string {
		var id string
		waitUntil(t, "a ready replica", func() bool {
			for _, r := range p.Status().Replicas {
				if r.Phase == "ready" && !slices.Contains(not, r.ID) {
					id = r.ID
					return true
				}
			}
			return false
		})
		return id
	}
	r1 := ready()
	if l := ws.log(); len(l) < 2 || l[0] != "seed "+r1 || l[1] != "start "+r1+" /ws/"+r1 {
		t.Fatalf("create: %q", l)
	}
	// Evicted: stopped, then the workspace told.
	if _, err := p.Evict(t.Context(), r1, true); err != nil {
		t.Fatal(err)
	}
	// (The next replica may be created meanwhile: the workspace, not the
	// pool, makes its seed wait for r1's capture.)
	if l := ws.log(); slices.Index(l, "stop "+r1) < 0 || slices.Index(l, "stopped "+r1) < slices.Index(l, "stop "+r1) {
		t.Errorf("evict: %q", l)
	}
	r2 := ready(r1)
	// A template change retires r2 (it drains, is reaped and stopped).
	cfg.Key = "k2"
	m.Ensure(cfg)
	waitUntil(t, "r2's workspace told", func() bool { return ws.has("stopped " + r2) })
	l := ws.log()
	if i, j := slices.Index(l, "stop "+r2), slices.Index(l, "stopped "+r2); i < 0 || j < i {
		t.Errorf("retire: %q", l)
	}
	r3 := ready(r1, r2)
	if !ws.has("seed " + r3) {
		t.Errorf("the new template's replica was not seeded: %q", ws.log())
	}

	// Idle with idle_action retain: suspended, then the workspace told.
	cfg.Policy.Min, cfg.Policy.ScaleToZeroAfter, cfg.Retain = 0, time.Millisecond, true
	m.Ensure(cfg)
	waitUntil(t, "r3 suspended", func() bool { return ws.has("suspended " + r3) })
	if ws.has("stopped " + r3) {
		t.Errorf("a suspended replica was reported stopped: %q", ws.log())
	}
}
