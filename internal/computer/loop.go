package computer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/inventory"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
)

// Run runs the loop until ctx ends: every Tick it records the exits of
// background processes, puts idle Computers to sleep, recycles old
// sandboxes at quiet moments and expires old facts; whenever a slot frees
// it starts queued Computers. Sandboxes keep running when Run returns: a
// new Manager re-adopts them. It returns nil when ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.o.Tick)
	defer t.Stop()
	m.drainQueue(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			m.tick(ctx)
		case <-m.kick:
			m.drainQueue(ctx)
		}
	}
}

// factExpiry is how often the retention sweep runs.
const factExpiry = time.Minute

// tick is one round of the loop; tests call it with a fake clock.
func (m *Manager) tick(ctx context.Context) {
	now := m.now()
	recs, err := m.st.Computers(ctx, "")
	if err != nil {
		m.log.Warn("computer: listing computers", "err", err)
		return
	}
	for _, rec := range recs {
		if rec.State != StateRunning {
			continue
		}
		l := m.live(rec.ID)
		if !l.mu.TryLock() {
			continue // a transition is under way: it is busy, not idle
		}
		if l.client != nil {
			m.check(ctx, l, rec, now)
		}
		l.mu.Unlock()
	}
	m.drainQueue(ctx)
	m.mu.Lock()
	expire := now.Sub(m.lastExpiry) >= factExpiry
	if expire {
		m.lastExpiry = now
	}
	m.mu.Unlock()
	if expire {
		m.expireFacts(ctx)
	}
}

// check judges one running Computer (l.mu held): activity is a held use,
// a recent operation, terminal or port traffic (Touch) or a background
// process still running inside.
func (m *Manager) check(ctx context.Context, l *live, rec store.Computer, now time.Time) {
	running, err := m.collectProcesses(ctx, l, rec.ID, false)
	if err != nil {
		// An agent that does not answer cannot vouch for activity; the
		// sandbox may have died.
		m.log.Warn("computer: listing processes", "computer", rec.ID, "err", err)
		if in, ierr := l.driver.Inspect(ctx, l.sandbox); errors.Is(ierr, vm.ErrNotFound) || (ierr == nil && in.State.Terminal()) {
			m.sleepLocked(ctx, l, rec.ID, "sandbox ended")
			return
		}
	}
	uses, last := l.activity()
	if uses > 0 || running {
		l.touch(now)
		last = now
	}
	switch {
	case now.Sub(last) >= rec.IdleTimeout:
		m.sleepLocked(ctx, l, rec.ID, "idle")
	case m.o.RecycleAfter > 0 && now.Sub(l.startedAt) >= m.o.RecycleAfter && now.Sub(last) >= m.o.QuietFor:
		m.recycleLocked(ctx, l, rec)
	}
}

// ProcessTag encodes who starts a background process as the agent's
// ProcessRequest.Tag, so that its process.exited fact carries that
// provenance.
func ProcessTag(p Provenance) string {
	b, _ := json.Marshal(p)
	return string(b)
}

func tagProvenance(tag string) Provenance {
	var p Provenance
	if json.Unmarshal([]byte(tag), &p) == nil && p.Actor != "" {
		return p
	}
	return Provenance{Actor: "unknown", Via: "process"}
}

// collectProcesses records a process.exited fact for each background
// process that ended since the last look (at most once per process: the
// fact is deduplicated in the store) and reports whether any still runs.
// With final (the sandbox is about to stop), running processes are
// recorded too, as killed: exit code and CPU time null.
func (m *Manager) collectProcesses(ctx context.Context, l *live, id string, final bool) (bool, error) {
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	procs, err := l.client.Processes(actx)
	if err != nil {
		return false, err
	}
	if l.reported == nil {
		l.reported = map[string]bool{}
	}
	now := m.now()
	running := false
	for _, p := range procs {
		if p.Running {
			running = true
			if !final {
				continue
			}
		}
		if l.reported[p.ID] {
			continue
		}
		f := Fact{Kind: FactProcessExited, ComputerID: id, RequestID: p.ID, Provenance: tagProvenance(p.Tag)}
		if p.Running {
			f.WallTimeMs = max(0, now.Sub(p.StartedAt).Milliseconds())
		} else {
			f.ExitCode, f.CPUTimeMs = p.ExitCode, p.CPUTimeMS
			if p.EndedAt != nil {
				f.WallTimeMs = max(0, p.EndedAt.Sub(p.StartedAt).Milliseconds())
			}
		}
		if _, err := m.emit(ctx, f, "process:"+p.ID, false); err != nil {
			m.log.Warn("computer: recording a process exit", "computer", id, "process", p.ID, "err", err)
			continue
		}
		l.reported[p.ID] = true
	}
	return running, nil
}

// recycleLocked replaces an old sandbox with a new one (l.mu held); the
// workspace and the slot are kept. The request is persisted first, so a
// crash midway is finished by the next start.
func (m *Manager) recycleLocked(ctx context.Context, l *live, rec store.Computer) {
	if err := m.st.RequestRecycle(ctx, store.Recycle{RuntimeID: rec.RuntimeID, ComputerID: rec.ID, Backing: rec.Active, RequestedAt: m.now().UnixMilli()}); err != nil {
		m.log.Warn("computer: requesting a recycle", "computer", rec.ID, "err", err)
		return
	}
	m.endRuntime(ctx, rec, "recycle")
	if _, err := m.admitAndLaunch(ctx, l, rec, false, "recycle", nil); err != nil {
		m.log.Warn("computer: restarting a recycled sandbox", "computer", rec.ID, "err", err)
		var ce *CapacityError
		if errors.As(err, &ce) {
			m.releaseTo(ctx, rec.ID, StateSleeping)
			m.emitLifecycle(ctx, rec.ID, State{State: StateSleeping}, "recycle")
		}
	}
	if err := m.st.FinishRecycle(ctx, rec.RuntimeID); err != nil {
		m.log.Warn("computer: finishing a recycle", "computer", rec.ID, "err", err)
	}
}

// drainQueue starts queued Computers, first first, while slots are free.
func (m *Manager) drainQueue(ctx context.Context) {
	q, err := m.st.ComputerQueue(ctx)
	if err != nil {
		m.log.Warn("computer: reading the queue", "err", err)
		return
	}
	for _, id := range q {
		if ctx.Err() != nil {
			return
		}
		l := m.live(id)
		l.mu.Lock()
		rec, err := m.st.Computer(ctx, id)
		if err != nil || rec.State != StateQueued {
			l.mu.Unlock()
			continue
		}
		_, err = m.admitAndLaunch(ctx, l, rec, false, "queue", nil)
		l.mu.Unlock()
		var ce *CapacityError
		if errors.As(err, &ce) {
			return // the head cannot start, so nobody behind it can
		}
		if err != nil {
			m.log.Warn("computer: starting a queued computer", "computer", id, "err", err)
		}
	}
}

// reconcile matches the stored Computers with the sandboxes the drivers
// run, after a berth restart.
func (m *Manager) reconcile(ctx context.Context) error {
	recs, err := m.st.Computers(ctx, "")
	if err != nil {
		return fmt.Errorf("computer: %w", err)
	}
	inv := m.o.Inventory
	if inv == nil {
		inv = inventory.New(m.o.Drivers, inventory.Options{Log: m.log, StopGrace: m.o.StopGrace})
	}
	if err := inv.List(ctx); err != nil {
		return fmt.Errorf("computer: %w", err)
	}
	found := map[string]map[string]vm.Instance{}
	for _, f := range inv.Register(vm.OwnerComputer, m.Claims) {
		if found[f.Driver] == nil {
			found[f.Driver] = map[string]vm.Instance{}
		}
		found[f.Driver][f.Instance.ID] = f.Instance
	}
	claimed := map[string]bool{}
	current := map[string]bool{} // runtime ids still running
	for _, rec := range recs {
		if rec.State != StateRunning && rec.State != StateStarting {
			continue
		}
		in, ok := found[rec.Driver][rec.Sandbox]
		if ok && in.State == vm.StateRunning && m.adopt(ctx, rec, in) {
			claimed[rec.Sandbox] = true
			current[rec.RuntimeID] = true
			// Its fleet slot went with the lease this berth revoked when
			// it stopped: take it again. A fleet filled meanwhile leaves it
			// running beyond the limit (it was running first).
			if fr, err := m.reserveFleet(ctx, rec.ID); err != nil || !fr.Reserved {
				m.log.Warn("computer: an adopted Computer runs without a fleet slot", "computer", rec.ID, "limit", fr.Limit, "err", err)
			}
			continue
		}
		m.log.Info("computer: sandbox gone after restart; sleeping", "computer", rec.ID, "sandbox", rec.Sandbox)
		if rec.RuntimeID != "" {
			// It ran until some time after its last checkpoint: bill up to
			// that, never beyond.
			m.closeInterval(ctx, rec, 0, "restart")
		}
		m.releaseTo(ctx, rec.ID, StateSleeping)
		m.emitLifecycle(ctx, rec.ID, State{State: StateSleeping}, "restart: sandbox gone")
	}
	m.mu.Lock()
	m.adopted = claimed
	m.mu.Unlock()
	// The sandboxes no Computer claimed are orphans. A shared inventory
	// sweeps them once every owner has registered; a private one at once.
	if m.o.Inventory == nil {
		inv.Sweep(ctx, vm.OwnerComputer)
	}
	open, err := m.st.OpenUsages(ctx)
	if err != nil {
		return fmt.Errorf("computer: %w", err)
	}
	for _, u := range open {
		if !current[u.RuntimeID] {
			if err := m.st.EndUsage(ctx, u.RuntimeID, 0); err != nil {
				return fmt.Errorf("computer: %w", err)
			}
		}
	}
	recycles, err := m.st.PendingRecycles(ctx)
	if err != nil {
		return fmt.Errorf("computer: %w", err)
	}
	for _, r := range recycles {
		if !current[r.RuntimeID] {
			if err := m.st.FinishRecycle(ctx, r.RuntimeID); err != nil {
				return fmt.Errorf("computer: %w", err)
			}
		}
	}
	// Slots of Computers that neither start nor run are stale.
	slots, err := m.st.ComputerSlots(ctx)
	if err != nil {
		return fmt.Errorf("computer: %w", err)
	}
	for _, id := range slots {
		rec, err := m.st.Computer(ctx, id)
		if err == nil && rec.State != StateRunning && rec.State != StateStarting {
			m.releaseTo(ctx, id, rec.State)
		}
	}
	return nil
}

// adopt takes over the running sandbox of rec, if its agent answers.
func (m *Manager) adopt(ctx context.Context, rec store.Computer, in vm.Instance) bool {
	d := m.o.Drivers[rec.Driver]
	ad, ok := d.(vm.AgentDialer)
	if !ok {
		return false
	}
	sandbox := rec.Sandbox
	client := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return ad.DialAgent(ctx, sandbox) })
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := waitAgent(wctx, d, sandbox, client); err != nil {
		client.Close()
		if err := d.Stop(ctx, sandbox, m.o.StopGrace); err != nil && !errors.Is(err, vm.ErrNotFound) {
			m.log.Warn("computer: stopping a sandbox whose agent is silent", "sandbox", sandbox, "err", err)
		}
		return false
	}
	now := m.now()
	// Idempotent: a crash between the sandbox's start and its interval
	// leaves no interval yet.
	if err := m.st.OpenUsage(ctx, store.UsageInterval{RuntimeID: rec.RuntimeID, ComputerID: rec.ID, Backing: rec.Active, StartedAt: now.UnixMilli()}); err != nil {
		m.log.Warn("computer: reopening a usage interval", "computer", rec.ID, "err", err)
	}
	if rec.State == StateStarting {
		if _, err := m.st.UpdateComputer(ctx, rec.ID, func(c *store.Computer) error { c.State = StateRunning; return nil }); err != nil {
			client.Close()
			return false
		}
		m.emitLifecycle(ctx, rec.ID, State{State: StateRunning}, "restart")
	}
	started := in.StartedAt
	if started.IsZero() {
		started = now
	}
	l := m.live(rec.ID)
	l.client, l.driver, l.sandbox, l.startedAt = client, d, sandbox, started
	l.touch(now)
	return true
}
