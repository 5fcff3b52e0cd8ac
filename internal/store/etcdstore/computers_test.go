package etcdstore

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestComputersSuite runs the Computers suite shared with the SQLite store
// on a real etcd member, each subtest under a prefix of its own.
func TestComputersSuite(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	var n atomic.Int64
	storetest.RunComputers(t, func(t *testing.T) storetest.ComputersBackend {
		s, err := Open(t.Context(), cli, fmt.Sprintf("/computers/%d/", n.Add(1)), "h1")
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
	checkLayout(t, cli, "/computers/", "computers", "computerqueueseq", "computerfacts", "computerfactseq", "computerports")
}

// TestReserveSeesHolderChange: a holder's record changed (its active
// backing) between the reservation's read and its commit makes the
// reservation decide again, so a per-host count it made cannot be stale.
// (SQLite serialises the two writes; here the change is made from inside
// fn, between the read and the commit, on the first run only.)
func TestReserveSeesHolderChange(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s, err := Open(t.Context(), c.Client(t), "", "h1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, id := range []string{"holder", "c"} {
		if _, err := s.CreateComputer(ctx, store.Computer{ID: id, Backings: "[]", State: "sleeping"}); err != nil {
			t.Fatal(err)
		}
	}
	limit := store.SlotLimit{Fixed: 10}
	if _, _, err := s.ReserveComputerSlot(ctx, "holder", limit, func(*store.Computer, store.ActiveOn) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var counts []int
	res, _, err := s.ReserveComputerSlot(ctx, "c", limit, func(_ *store.Computer, on store.ActiveOn) error {
		n, err := on("H")
		if err != nil {
			return err
		}
		counts = append(counts, n)
		if len(counts) == 1 {
			if _, err := s.UpdateComputer(ctx, "holder", func(h *store.Computer) error { h.Active = "H"; return nil }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || !res.Reserved {
		t.Fatalf("reserve: %+v, %v", res, err)
	}
	if !slices.Equal(counts, []int{0, 1}) {
		t.Errorf("activeOn(H) over the runs = %v, want [0 1]: the holder's change must be seen", counts)
	}
}

// TestComputerWritesMany: usage writes over more intervals than one etcd
// transaction takes, and a write with more facts than one takes.
func TestComputerWritesMany(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s, err := Open(t.Context(), c.Client(t), "", "h1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const n = 2*maxTxnOps + 5
	var acks []store.UsageAck
	for i := range n {
		id := fmt.Sprintf("r%04d", i)
		if err := s.OpenUsage(ctx, store.UsageInterval{RuntimeID: id, ComputerID: "c", StartedAt: 0}); err != nil {
			t.Fatal(err)
		}
		acks = append(acks, store.UsageAck{RuntimeID: id, ObservedAt: 100})
	}
	p, err := s.PendingUsage(ctx, 100, 0, -1)
	if err != nil || len(p) != n {
		t.Fatalf("PendingUsage over %d intervals: %d, %v", n, len(p), err)
	}
	for _, u := range p {
		if u.ObservedAt != 100 {
			t.Fatalf("interval %s observed at %d, want 100", u.RuntimeID, u.ObservedAt)
		}
	}
	if err := s.AcknowledgeUsage(ctx, acks); err != nil {
		t.Fatalf("AcknowledgeUsage of %d: %v", n, err)
	}
	if p, err := s.PendingUsage(ctx, 100, 0, -1); err != nil || len(p) != 0 {
		t.Errorf("pending after acknowledging all: %d, %v", len(p), err)
	}
	facts := make([]store.NewComputerFact, maxFactsPerWrite+1)
	if _, err := s.CreateComputer(ctx, store.Computer{ID: "c"}, facts...); err == nil || !strings.Contains(err.Error(), "facts") {
		t.Errorf("CreateComputer with %d facts = %v, want an error naming the facts", len(facts), err)
	}
	if _, err := s.CreateComputer(ctx, store.Computer{ID: ""}); err == nil || !strings.Contains(err.Error(), "id") {
		t.Errorf("CreateComputer with no id = %v, want an error naming the id", err)
	}
	if _, err := s.Computer(ctx, "c"); err == nil {
		t.Error("a refused CreateComputer stored the Computer")
	}
}
