package fleet

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// revisionServer is an HTTP server, made outside any synctest bubble, that
// every fake replica reports as its address: it answers 200 with
// x-rev: a, so a template expecting x-rev: a becomes ready and one
// expecting x-rev: b never does.
func revisionServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-rev", "a")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// events records the rollout events a manager emits.
type events struct {
	mu  sync.Mutex
	evs []RolloutEvent
}

func (e *events) add(ev RolloutEvent) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }

func (e *events) find(rev, status string) (RolloutEvent, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if ev.Revision == rev && ev.Status == status {
			return ev, true
		}
	}
	return RolloutEvent{}, false
}

func rolloutConfig(key, rev, expect string) Config {
	return Config{
		Deployment: "d", Driver: "process", Key: key, Revision: rev,
		Policy:     autoscale.Policy{Min: 2, Max: 2, Target: 10, BootTimeout: 30 * time.Second, DrainTimeout: 10 * time.Second, ColdStartTimeout: time.Minute},
		HealthPath: "/", ExpectHeader: "x-rev", ExpectValue: expect,
	}
}

// rolloutWorld runs a manager with two ready replicas of template k1
// and returns it with its pool, driver, data plane and event log.
func rolloutWorld(t *testing.T, addr string) (*Pool, *vmfake.Driver, dataPlane, *events) {
	d := vmfake.New(vmfake.Options{Addr: addr})
	evs := &events{}
	m := New(Options{Driver: d, Log: slog.New(slog.DiscardHandler), OnRollout: evs.add})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { m.Remove(context.Background(), "d"); cancel(); <-done; d.Close() })
	dp := newDataPlane()
	cfg := rolloutConfig("k1", "r1", "a")
	cfg.Backends = dp
	p := m.Ensure(cfg)
	for p.Status().Ready < 2 {
		time.Sleep(100 * time.Millisecond)
	}
	return p, d, dp, evs
}

// serving lists the data plane's members that take new requests.
func serving(dp dataPlane) []string {
	var ids []string
	for _, b := range dp.pool.Backends() {
		if !b.Draining() {
			ids = append(ids, b.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func readyIDs(p *Pool) []string {
	var ids []string
	for _, r := range p.Status().Replicas {
		if r.Phase == "ready" {
			ids = append(ids, r.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestRolloutCandidateFirst: a template change keeps the previous replicas
// serving until as many candidates are ready, with never fewer than two
// serving and never more than max_replicas + 1 replicas; then the previous
// ones drain and are stopped, and the rollout reports success.
func TestRolloutCandidateFirst(t *testing.T) {
	addr := revisionServer(t)
	synctest.Test(t, func(t *testing.T) {
		p, d, dp, evs := rolloutWorld(t, addr)
		before := readyIDs(p)
		cfg := rolloutConfig("k2", "r2", "a")
		cfg.Backends = dp
		p.m.Ensure(cfg)
		for {
			if n := len(serving(dp)); n < 2 {
				t.Fatalf("%d replicas serving during the rollout, want at least 2", n)
			}
			if st := p.Status(); len(st.Replicas)+st.Pending-countPending(st) > 3 {
				t.Fatalf("%d replicas during the rollout, want at most max_replicas+1 = 3", len(st.Replicas))
			}
			if _, ok := evs.find("r2", RolloutSucceeded); ok {
				break
			}
			if ev, ok := evs.find("r2", RolloutFailed); ok {
				t.Fatalf("rollout failed: %s", ev.Error)
			}
			time.Sleep(50 * time.Millisecond)
		}
		after := readyIDs(p)
		if len(after) != 2 {
			t.Fatalf("ready after the rollout %v, want 2", after)
		}
		for _, id := range before {
			if slices.Contains(after, id) || !d.Stopped(id) {
				t.Errorf("previous replica %s still serves or was not stopped", id)
			}
		}
		if got := serving(dp); !slices.Equal(got, after) {
			t.Errorf("data plane serves %v, want the candidates %v", got, after)
		}
		if _, ok := p.Rollout(); ok {
			t.Error("a rollout is still reported after it succeeded")
		}
	})
}

func countPending(st Status) int {
	n := 0
	for _, r := range st.Replicas {
		if r.Phase == "pending" {
			n++
		}
	}
	return n
}

// TestRolloutBadCandidateReverts: candidates that never pass their probe
// (the expected header differs) fail the rollout at boot_timeout_secs:
// the previous replicas never stop serving, the candidates are stopped,
// and the pool is back on the previous template.
func TestRolloutBadCandidateReverts(t *testing.T) {
	addr := revisionServer(t)
	synctest.Test(t, func(t *testing.T) {
		p, d, dp, evs := rolloutWorld(t, addr)
		before := readyIDs(p)
		cfg := rolloutConfig("k2", "r2", "b")
		cfg.Backends = dp
		p.m.Ensure(cfg)
		var ev RolloutEvent
		for {
			if got := serving(dp); !slices.Equal(got, before) {
				t.Fatalf("data plane serves %v during a failing rollout, want %v", got, before)
			}
			var ok bool
			if ev, ok = evs.find("r2", RolloutFailed); ok {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if ev.From != "r1" || ev.Error == "" || len(ev.Stopped) == 0 {
			t.Errorf("failure event %+v", ev)
		}
		for _, id := range ev.Stopped {
			if !d.Stopped(id) {
				t.Errorf("candidate %s was not stopped", id)
			}
		}
		if k := p.Config().Key; k != "k1" {
			t.Errorf("pool template %q after the failure, want k1", k)
		}
		time.Sleep(10 * time.Second) // a few reconciles: nothing else changes
		if got := readyIDs(p); !slices.Equal(got, before) {
			t.Errorf("ready %v after the failed rollout, want %v", got, before)
		}
	})
}

// TestRolloutFromZeroSwitches: a pool with no ready replica switches at
// once.
func TestRolloutFromZeroSwitches(t *testing.T) {
	addr := revisionServer(t)
	synctest.Test(t, func(t *testing.T) {
		d := vmfake.New(vmfake.Options{Addr: addr})
		evs := &events{}
		m := New(Options{Driver: d, Log: slog.New(slog.DiscardHandler), OnRollout: evs.add})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		defer func() { m.Remove(context.Background(), "d"); cancel(); <-done; d.Close() }()
		cfg := rolloutConfig("k1", "r1", "a")
		cfg.Policy.Min = 0
		cfg.Backends = newDataPlane()
		p := m.Ensure(cfg)
		cfg.Key, cfg.Revision = "k2", "r2"
		m.Ensure(cfg)
		synctest.Wait()
		ev, ok := evs.find("r2", RolloutSucceeded)
		if !ok || ev.Phase != PhaseSwitched || ev.ReadinessVerified {
			t.Errorf("event %+v (found %v), want an immediate switch", ev, ok)
		}
		if _, ok := p.Rollout(); ok {
			t.Error("a pool at zero reports a rollout")
		}
	})
}

// TestRolloutSuperseded: a template change during a rollout supersedes
// it: the superseded candidates stop, the new rollout falls back to the
// template the pool ran before either, and succeeds with the previous
// replicas serving until it does.
func TestRolloutSuperseded(t *testing.T) {
	addr := revisionServer(t)
	synctest.Test(t, func(t *testing.T) {
		p, d, dp, evs := rolloutWorld(t, addr)
		before := readyIDs(p)
		stuck := rolloutConfig("k2", "r2", "b") // never ready
		stuck.Backends = dp
		p.m.Ensure(stuck)
		for d.Starts() < 3 {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second)
		var stuckIDs []string
		for _, r := range p.Status().Replicas {
			if r.Phase == "pending" {
				stuckIDs = append(stuckIDs, r.ID)
			}
		}
		good := rolloutConfig("k3", "r3", "a")
		good.Backends = dp
		p.m.Ensure(good)
		if ev, ok := evs.find("r2", RolloutSuperseded); !ok || ev.From != "r1" {
			t.Fatalf("superseded event %+v (found %v)", ev, ok)
		}
		if ev, ok := evs.find("r3", RolloutRunning); !ok || ev.From != "r1" {
			t.Errorf("the new rollout falls back to %q, want r1", ev.From)
		}
		for {
			if n := len(serving(dp)); n < 2 {
				t.Fatalf("%d serving during the superseding rollout", n)
			}
			if _, ok := evs.find("r3", RolloutSucceeded); ok {
				break
			}
			if ev, ok := evs.find("r3", RolloutFailed); ok {
				t.Fatalf("failed: %s", ev.Error)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(stuckIDs) == 0 {
			t.Fatal("no superseded candidate was booting")
		}
		for _, id := range append(stuckIDs, before...) {
			if !d.Stopped(id) {
				t.Errorf("replica %s of a replaced template was not stopped", id)
			}
		}
		if k := p.Config().Key; k != "k3" || len(readyIDs(p)) != 2 {
			t.Errorf("template %s, ready %v", k, readyIDs(p))
		}
	})
}

// memRecords is an in-memory ReplicaRecords.
type memRecords struct {
	mu sync.Mutex
	m  map[string]string
}

func (r *memRecords) RecordReplica(_ context.Context, _, id, digest string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[id] = digest
	return nil
}

func (r *memRecords) ReplicaDigests(context.Context, string) (map[string]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.m), nil
}

func (r *memRecords) ForgetReplica(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, id)
	return nil
}

// TestAdoptByRecordedTemplate: a berth that stopped mid-rollout leaves
// the previous replicas and a candidate running; the next one, whose pool
// is at the previous template (the rollout was settled as failed), adopts
// the previous replicas and stops the candidate.
func TestAdoptByRecordedTemplate(t *testing.T) {
	addr := revisionServer(t)
	synctest.Test(t, func(t *testing.T) {
		d := vmfake.New(vmfake.Options{Addr: addr})
		defer d.Close()
		recs := &memRecords{m: map[string]string{}}
		run := func(m *Manager) func() {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			return func() { cancel(); <-done }
		}
		m1 := New(Options{Driver: d, Log: slog.New(slog.DiscardHandler), Records: recs})
		stop1 := run(m1)
		cfg := rolloutConfig("k1", "r1", "a")
		cfg.Backends = newDataPlane()
		p1 := m1.Ensure(cfg)
		for p1.Status().Ready < 2 {
			time.Sleep(100 * time.Millisecond)
		}
		previous := readyIDs(p1)
		bad := rolloutConfig("k2", "r2", "b")
		bad.Backends = cfg.Backends
		m1.Ensure(bad)
		for d.Starts() < 3 {
			time.Sleep(50 * time.Millisecond)
		}
		synctest.Wait()
		stop1() // berth stops; its replicas keep running
		var candidate string
		for id, dg := range recs.m {
			if dg == KeyDigest("k2") {
				candidate = id
			}
		}
		if candidate == "" || d.Stopped(candidate) {
			t.Fatalf("no running candidate recorded: %v", recs.m)
		}

		m2 := New(Options{Driver: d, Log: slog.New(slog.DiscardHandler), Records: recs})
		cfg.Backends = newDataPlane()
		p2 := m2.Ensure(cfg) // the settled spec: the previous template
		stop2 := run(m2)
		defer stop2()
		for p2.Status().Ready < 2 {
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		if got := readyIDs(p2); !slices.Equal(got, previous) {
			t.Errorf("adopted %v, want the previous replicas %v", got, previous)
		}
		if !d.Stopped(candidate) {
			t.Errorf("the candidate %s of the settled rollout was not stopped", candidate)
		}
		m2.Remove(context.Background(), "d")
	})
}

// TestRolloutFailsAfterRollingStep: with the default surge a rollout of
// two replicas is rolling; when the second candidate's create fails after
// the first served and one previous replica drained for it, the rollout
// reverts with a previous replica serving throughout, the served
// candidate drains and stops, and the pool grows back to two replicas of
// the previous template.
func TestRolloutFailsAfterRollingStep(t *testing.T) {
	addr := revisionServer(t)
	synctest.Test(t, func(t *testing.T) {
		var starts atomic.Int32
		d := vmfake.New(vmfake.Options{Addr: addr, BeforeStart: func(context.Context, vm.Spec) error {
			if starts.Add(1) == 4 {
				return errors.New("no capacity for the second candidate")
			}
			return nil
		}})
		defer d.Close()
		evs := &events{}
		m := New(Options{Driver: d, Log: slog.New(slog.DiscardHandler), OnRollout: evs.add})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		defer func() { m.Remove(context.Background(), "d"); cancel(); <-done }()
		dp := newDataPlane()
		cfg := rolloutConfig("k1", "r1", "a")
		cfg.Backends = dp
		p := m.Ensure(cfg)
		for p.Status().Ready < 2 {
			time.Sleep(100 * time.Millisecond)
		}
		before := readyIDs(p)
		next := rolloutConfig("k2", "r2", "a")
		next.Backends = dp
		m.Ensure(next)
		var ev RolloutEvent
		for {
			serve := serving(dp)
			if len(serve) == 0 {
				t.Fatal("no replica serving during the failing rollout")
			}
			var ok bool
			if ev, ok = evs.find("r2", RolloutFailed); ok {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !strings.Contains(ev.Error, "no capacity") || len(ev.Stopped) == 0 {
			t.Errorf("failure %+v", ev)
		}
		insts, _ := d.List(t.Context())
		for _, id := range ev.Stopped {
			if slices.Contains(before, id) {
				t.Errorf("a previous replica %s is listed as a stopped candidate", id)
			}
			for _, in := range insts {
				if in.ID == id && !in.State.Terminal() {
					t.Errorf("stopped candidate %s still runs (%s)", id, in.State)
				}
			}
		}
		served := 0
		for _, id := range ev.Stopped {
			if d.Stopped(id) {
				served++ // the one that served: stopped through the driver
			}
		}
		if served != 1 {
			t.Errorf("%d candidates stopped through the driver, want the one that served", served)
		}
		for p.Status().Ready < 2 {
			time.Sleep(100 * time.Millisecond)
		}
		if k := p.Config().Key; k != "k1" {
			t.Errorf("template %s after the failure", k)
		}
		for _, r := range p.Status().Replicas {
			if slices.Contains(ev.Stopped, r.ID) {
				t.Errorf("a stopped candidate %s is still in the pool", r.ID)
			}
		}
	})
}

// TestRolloutRecreate: a pool whose replicas take turns (Config.Recreate,
// a durable workspace's) switches at once on a template change: the
// previous replicas retire before any of the new template is ready, and
// the operation reports the switch, not a candidate phase.
func TestRolloutRecreate(t *testing.T) {
	addr := revisionServer(t)
	synctest.Test(t, func(t *testing.T) {
		p, d, dp, evs := rolloutWorld(t, addr)
		before := readyIDs(p)
		cfg := rolloutConfig("k2", "r2", "a")
		cfg.Backends, cfg.Recreate = dp, true
		p.m.Ensure(cfg)
		ev, ok := evs.find("r2", RolloutSucceeded)
		if !ok || ev.Phase != PhaseSwitched || !ev.PreviousStopped {
			t.Fatalf("rollout events %+v, want an immediate switch", evs.evs)
		}
		if _, ok := evs.find("r2", RolloutRunning); ok {
			t.Error("a recreate pool ran a candidate phase")
		}
		if got := serving(dp); len(got) != 0 {
			t.Errorf("previous replicas %v still take new requests after the switch", got)
		}
		for len(readyIDs(p)) < 2 {
			time.Sleep(100 * time.Millisecond)
		}
		for _, id := range before {
			if slices.Contains(readyIDs(p), id) {
				t.Errorf("previous replica %s serves after the switch", id)
			}
		}
		synctest.Wait()
		for _, id := range before {
			for !d.Stopped(id) {
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
}
