//go:build linux

package computer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// TestSlotsUnderConcurrency: 50 concurrent starts against a limit of 10:
// exactly 10 run, the rest are told capacity {limit 10}, and no slot is
// double-booked.
func TestSlotsUnderConcurrency(t *testing.T) {
	e := newEnv(t)
	m := e.manager(func(o *Options) { o.FleetLimit = 10; o.RetryAfter = 7 * time.Second })
	ctx := context.Background()
	const n = 50
	for i := range n {
		if _, err := m.Create(ctx, CreateRequest{ID: fmt.Sprintf("c%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		started, refused []string
		other            []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("c%02d", i)
			c, err := m.Start(ctx, id, false)
			mu.Lock()
			defer mu.Unlock()
			var ce *CapacityError
			switch {
			case err == nil && c.State.State == StateRunning:
				started = append(started, id)
			case errors.As(err, &ce) && ce.Limit == 10 && ce.RetryAfter == 7*time.Second:
				refused = append(refused, id)
			default:
				other = append(other, fmt.Errorf("%s: %+v, %w", id, c, err))
			}
		}()
	}
	wg.Wait()
	if len(started) != 10 || len(refused) != 40 || len(other) != 0 {
		t.Fatalf("started %d, refused %d, other %v; want 10 and 40", len(started), len(refused), other)
	}
	slots, err := e.st.ComputerSlots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(started)
	if !slices.Equal(slots, started) {
		t.Errorf("slot holders %v, started %v", slots, started)
	}
	sandboxes := e.sandboxes()
	owners := map[string]bool{}
	for _, s := range sandboxes {
		if s.Owner.Kind != vm.OwnerComputer {
			t.Errorf("sandbox %s has owner %v", s.ID, s.Owner)
		}
		owners[s.Owner.ID] = true
	}
	if len(sandboxes) != 10 || len(owners) != 10 {
		t.Errorf("%d sandboxes for %d Computers, want 10 for 10", len(sandboxes), len(owners))
	}
	// A running Computer re-reserves for free, even with the fleet full.
	if c, err := m.Start(ctx, started[0], false); err != nil || c.State.State != StateRunning {
		t.Errorf("Start(running) = %+v, %v", c, err)
	}
	// Release is idempotent and frees exactly one slot.
	for range 2 {
		if err := m.Stop(ctx, started[0]); err != nil {
			t.Fatal(err)
		}
	}
	if slots, _ := e.st.ComputerSlots(ctx); len(slots) != 9 {
		t.Errorf("%d slots after one stop, want 9", len(slots))
	}
	if _, err := m.Start(ctx, refused[0], false); err != nil {
		t.Errorf("Start after a slot freed: %v", err)
	}
}

// TestQueue: with wait, a start on a full fleet is queued with a visible
// position, first in first out, persisted across a restart, and started as
// slots free.
func TestQueue(t *testing.T) {
	e := newEnv(t)
	opt := func(o *Options) { o.FleetLimit = 1 }
	m := e.manager(opt)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := m.Create(ctx, CreateRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Start(ctx, "a", false); err != nil {
		t.Fatal(err)
	}
	pos := func(c Computer) string {
		if c.State.Position == nil {
			return c.State.State
		}
		return fmt.Sprintf("%s#%d", c.State.State, *c.State.Position)
	}
	for i, id := range []string{"b", "c"} {
		c, err := m.Start(ctx, id, true)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := pos(c), fmt.Sprintf("queued#%d", i+1); got != want {
			t.Errorf("Start(%s, wait) = %s, want %s", id, got, want)
		}
	}
	// Waiting again keeps the place.
	if c, _ := m.Start(ctx, "c", true); pos(c) != "queued#2" {
		t.Errorf("second Start(c, wait) = %s", pos(c))
	}
	// A start that does not wait cannot overtake the queue.
	var ce *CapacityError
	if _, err := m.Start(ctx, "d", false); !errors.As(err, &ce) || ce.Limit != 1 {
		t.Errorf("Start(d) = %v, want capacity", err)
	}
	if err := m.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// Even after the slot freed, d is behind b and c.
	if _, err := m.Start(ctx, "d", false); !errors.As(err, &ce) {
		t.Errorf("Start(d) with queued starts ahead = %v, want capacity", err)
	}
	m.drainQueue(ctx)
	got := map[string]string{}
	for _, id := range []string{"a", "b", "c", "d"} {
		c, err := m.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got[id] = pos(c)
	}
	want := map[string]string{"a": "sleeping", "b": "running", "c": "queued#1", "d": "sleeping"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after draining: %v, want %v", got, want)
	}
	if life := lifecycle(facts(t, m, "c")); !slices.Contains(life, "queued/start") {
		t.Errorf("c's lifecycle = %v, want a queued fact", life)
	}

	// A restart keeps the queue.
	e.st.Close()
	e.open()
	m2 := e.manager(opt)
	if c, _ := m2.Get(ctx, "c"); pos(c) != "queued#1" {
		t.Errorf("c after restart = %s", pos(c))
	}
	if err := m2.Stop(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	m2.drainQueue(ctx)
	if c, _ := m2.Get(ctx, "c"); pos(c) != "running" {
		t.Errorf("c after b stopped = %s", pos(c))
	}
	// Stopping a queued Computer takes it out of the queue.
	if c, _ := m2.Start(ctx, "d", true); pos(c) != "queued#1" {
		t.Errorf("Start(d, wait) = %s", pos(c))
	}
	if err := m2.Stop(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if q, _ := e.st.ComputerQueue(ctx); len(q) != 0 {
		t.Errorf("queue after stopping d = %v", q)
	}
}

// TestHostCapacity: without a fixed limit the fleet has the registry's
// sum of maxActive − reservedHeadroom, and each on-box-vm host takes at
// most its own.
func TestHostCapacity(t *testing.T) {
	e := newEnv(t)
	m := e.manager(func(o *Options) { o.HostID = "h1"; o.VMDriver = "process" })
	ctx := context.Background()
	if err := m.SetHostCapacity(ctx, "h1", HostCapacity{MaxActive: 3, ReservedHeadroom: 1}); err != nil {
		t.Fatal(err)
	}
	if err := m.SetHostCapacity(ctx, "h2", HostCapacity{MaxActive: 2, ReservedHeadroom: 0}); err != nil {
		t.Fatal(err)
	}
	hs, err := m.HostCapacities(ctx)
	if err != nil || len(hs) != 2 || hs["h1"] != (HostCapacity{MaxActive: 3, ReservedHeadroom: 1}) {
		t.Errorf("HostCapacities = %v, %v", hs, err)
	}
	vmOnly := []Backing{{Kind: KindVM, HostID: "h1"}}
	for _, id := range []string{"v1", "v2", "v3"} {
		if _, err := m.Create(ctx, CreateRequest{ID: id, Backings: vmOnly}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"v1", "v2"} {
		if _, err := m.Start(ctx, id, false); err != nil {
			t.Fatalf("Start(%s): %v", id, err)
		}
	}
	var ce *CapacityError
	if _, err := m.Start(ctx, "v3", false); !errors.As(err, &ce) || ce.Limit != 4 {
		t.Errorf("Start(v3) on a full host = %v, want capacity (fleet limit 2+2)", err)
	}
	// Asked to start on a full host, a create fails and leaves nothing
	// behind: no record, no workspace, the id free for a retry.
	if _, err := m.Create(ctx, CreateRequest{ID: "v4", Backings: vmOnly, Start: true}); !errors.As(err, &ce) {
		t.Errorf("Create(v4, start) on a full host = %v, want capacity", err)
	}
	if _, err := m.Get(ctx, "v4"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(v4) after its failed create+start = %v, want not found", err)
	}
	if _, err := os.Stat(m.workspace("v4")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("v4's workspace outlived its failed create+start: %v", err)
	}
	// The host is full but the fleet is not: a Computer that can fall back
	// to the process backing runs there.
	if _, err := m.Create(ctx, CreateRequest{ID: "p1", Backings: []Backing{{Kind: KindVM, HostID: "h1"}, {Kind: KindProcess}}, Start: true}); err != nil {
		t.Errorf("Create(p1) with a fallback: %v", err)
	}
	if c, _ := m.Get(ctx, "p1"); c.Active != (Backing{Kind: KindProcess}) {
		t.Errorf("p1 runs on %+v, want process", c.Active)
	}
	// Queued behind a full host, it starts when the host has room.
	if c, err := m.Start(ctx, "v3", true); err != nil || c.State.State != StateQueued {
		t.Errorf("Start(v3, wait) = %+v, %v", c.State, err)
	}
	if err := m.Stop(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	m.drainQueue(ctx)
	if c, _ := m.Get(ctx, "v3"); c.State.State != StateRunning {
		t.Errorf("v3 after v1 stopped: %+v", c.State)
	}
}

// TestFleetHostID: in a fleet, an on-box-vm backing naming this host's
// fleet id runs here, as one naming "local" does; one naming another host
// does not.
func TestFleetHostID(t *testing.T) {
	e := newEnv(t)
	m := e.manager(func(o *Options) { o.FleetHostID = "web-1"; o.VMDriver = "process" })
	ctx := context.Background()
	here := Backing{Kind: KindVM, HostID: "web-1"}
	c, err := m.Create(ctx, CreateRequest{ID: "mine", Backings: []Backing{here}, Start: true})
	if err != nil || c.State.State != StateRunning || c.Active != here {
		t.Fatalf("on-box-vm{web-1} on host web-1: %+v, %v; want it running there", c, err)
	}
	if _, err := m.Create(ctx, CreateRequest{ID: "theirs", Backings: []Backing{{Kind: KindVM, HostID: "web-2"}}, Start: true}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not this host") {
		t.Errorf("on-box-vm{web-2} on host web-1: %v; want not this host", err)
	}
}
