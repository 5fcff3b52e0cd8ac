package etcdstore

import (
	"context"
	"testing"

	"github.com/berth-dev/berth/internal/store"
)

// BenchmarkComputerSlot is the etcd twin of package store's
// BenchmarkComputerSlot (SQLite): each op reserves Computer c's slot and
// releases it, two guarded transactions that commit (each after its
// read), with 5 of 10 slots held by others.
func BenchmarkComputerSlot(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	limit := store.SlotLimit{Fixed: 10}
	nop := func(*store.Computer, store.ActiveOn) error { return nil }
	for _, id := range []string{"h1", "h2", "h3", "h4", "h5", "c"} {
		if _, err := s.CreateComputer(ctx, store.Computer{ID: id, Backings: "[]", State: "sleeping"}); err != nil {
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
		if _, err := s.ReleaseComputerSlot(ctx, "c", func(*store.Computer) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendComputerFact is one fact append (the counter's read and
// the guarded transaction), one writer at a time.
func BenchmarkAppendComputerFact(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	if _, err := s.CreateComputer(ctx, store.Computer{ID: "c", Backings: "[]", State: "sleeping"}); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"type":"lifecycle","state":"running"}`)
	for b.Loop() {
		if _, ok, err := s.AppendComputerFact(ctx, "c", "", 1, body, true); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
