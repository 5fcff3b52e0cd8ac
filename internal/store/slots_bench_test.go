package store

import (
	"context"
	"testing"
)

// BenchmarkComputerSlot is the write latency of this host's Computer slot
// in SQLite, beside etcdfleet's BenchmarkReserveRelease (the fleet's, in
// etcd): each op reserves the slot and releases it, two transactions that
// commit, with 5 of 10 slots held by others.
func BenchmarkComputerSlot(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	limit := SlotLimit{Fixed: 10}
	nop := func(*Computer, ActiveOn) error { return nil }
	for _, id := range []string{"h1", "h2", "h3", "h4", "h5", "c"} {
		if _, err := s.CreateComputer(ctx, Computer{ID: id, Backings: "[]", State: "sleeping"}); err != nil {
			b.Fatal(err)
		}
		if id != "c" {
			if _, _, err := s.ReserveComputerSlot(ctx, id, limit, nop); err != nil {
				b.Fatal(err)
			}
		}
	}
	for b.Loop() {
		if res, _, err := s.ReserveComputerSlot(ctx, "c", limit, nop); err != nil || !res.Reserved {
			b.Fatal(res, err)
		}
		if _, err := s.ReleaseComputerSlot(ctx, "c", func(*Computer) {}); err != nil {
			b.Fatal(err)
		}
	}
}
