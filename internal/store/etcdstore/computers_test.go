package etcdstore

import (
	"fmt"
	"slices"
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
		s, err := Open(t.Context(), cli, fmt.Sprintf("/computers/%d/", n.Add(1)))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

// TestReserveSeesHolderChange: a holder's record changed (its active
// backing) between the reservation's read and its commit makes the
// reservation decide again, so a per-host count it made cannot be stale.
// (SQLite serialises the two writes; here the change is made from inside
// fn, between the read and the commit, on the first run only.)
func TestReserveSeesHolderChange(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s, err := Open(t.Context(), c.Client(t), "")
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
