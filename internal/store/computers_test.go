package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// factLog returns the facts of Computer id as "seq:body".
func factLog(t *testing.T, s *Store, id string) []string {
	t.Helper()
	fs, err := s.ComputerFacts(context.Background(), id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%d:%s", f.Seq, f.Body))
	}
	return out
}

func fact(body string) NewComputerFact {
	return NewComputerFact{At: 1000, Body: []byte(body)}
}

// TestComputerWritesWithFacts checks that the facts given to a Computer
// write are appended in its transaction, numbered in line with
// AppendComputerFact, and only when the write happens.
func TestComputerWritesWithFacts(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	if _, err := s.CreateComputer(ctx, Computer{ID: "c", Backings: "[]", State: "sleeping"}, fact(`"create"`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateComputer(ctx, Computer{ID: "c", Backings: "[]", State: "sleeping"}, fact(`"again"`)); !errors.Is(err, ErrConflict) {
		t.Fatalf("CreateComputer(existing) = %v, want ErrConflict", err)
	}
	if seq, ok, err := s.AppendComputerFact(ctx, "c", "", 1000, []byte(`"appended"`), true); err != nil || !ok || seq != 2 {
		t.Fatalf("AppendComputerFact = %d, %v, %v; want seq 2", seq, ok, err)
	}

	// Reservations: only one that reserves appends.
	if _, err := s.CreateComputer(ctx, Computer{ID: "other", Backings: "[]", State: "sleeping"}); err != nil {
		t.Fatal(err)
	}
	one := SlotLimit{Fixed: 1}
	nop := func(*Computer, ActiveOn) error { return nil }
	if res, _, err := s.ReserveComputerSlot(ctx, "other", one, nop); err != nil || !res.Reserved {
		t.Fatalf("reserving the only slot: %+v, %v", res, err)
	}
	if res, _, err := s.ReserveComputerSlot(ctx, "c", one, nop, fact(`"full"`)); err != nil || res.Reserved {
		t.Fatalf("reserving with no slot free: %+v, %v; want not reserved", res, err)
	}
	if _, err := s.ReleaseComputerSlot(ctx, "other", func(*Computer) {}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if _, _, err := s.ReserveComputerSlot(ctx, "c", one, func(*Computer, ActiveOn) error { return boom }, fact(`"aborted"`)); !errors.Is(err, boom) {
		t.Fatalf("reservation whose fn fails = %v, want boom", err)
	}
	res, got, err := s.ReserveComputerSlot(ctx, "c", one, func(c *Computer, _ ActiveOn) error {
		c.State, c.RuntimeID = "starting", "rt1"
		return nil
	}, fact(`"starting"`))
	if err != nil || !res.Reserved || got.State != "starting" {
		t.Fatalf("ReserveComputerSlot = %+v, %+v, %v; want reserved, starting", res, got, err)
	}

	// The runtime: unknown Computer and failing fn write nothing.
	u := UsageInterval{RuntimeID: "rt1", ComputerID: "c", Backing: `{"kind":"process"}`, StartedAt: 5000}
	running := func(c *Computer) error { c.State = "running"; return nil }
	if _, err := s.OpenComputerRuntime(ctx, UsageInterval{RuntimeID: "rt0", ComputerID: "nope", StartedAt: 1}, running, fact(`"lost"`)); !errors.Is(err, ErrNotFound) {
		t.Errorf("OpenComputerRuntime(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.OpenComputerRuntime(ctx, u, func(*Computer) error { return boom }, fact(`"aborted"`)); !errors.Is(err, boom) {
		t.Errorf("OpenComputerRuntime whose fn fails = %v, want boom", err)
	}
	if open, err := s.OpenUsages(ctx); err != nil || len(open) != 0 {
		t.Fatalf("intervals after failed OpenComputerRuntime = %+v, %v; want none", open, err)
	}
	if c, _ := s.Computer(ctx, "c"); c.State != "starting" {
		t.Errorf("state after failed OpenComputerRuntime = %q, want starting", c.State)
	}
	got, err = s.OpenComputerRuntime(ctx, u, running, fact(`"running"`))
	if err != nil || got.State != "running" || got.RuntimeID != "rt1" {
		t.Fatalf("OpenComputerRuntime = %+v, %v; want running rt1", got, err)
	}
	if c, _ := s.Computer(ctx, "c"); c.State != "running" {
		t.Errorf("stored state = %q, want running", c.State)
	}
	// Idempotent interval: a second open keeps the first start.
	if _, err := s.OpenComputerRuntime(ctx, UsageInterval{RuntimeID: "rt1", ComputerID: "c", Backing: u.Backing, StartedAt: 9000}, running); err != nil {
		t.Fatal(err)
	}
	open, err := s.OpenUsages(ctx)
	want := []UsageInterval{{RuntimeID: "rt1", ComputerID: "c", Backing: u.Backing, StartedAt: 5000, ObservedAt: 5000}}
	if err != nil || !cmp.Equal(open, want) {
		t.Errorf("OpenUsages = %+v, %v; want %+v", open, err, want)
	}

	wantLog := []string{`1:"create"`, `2:"appended"`, `3:"starting"`, `4:"running"`}
	if diff := cmp.Diff(wantLog, factLog(t, s, "c")); diff != "" {
		t.Errorf("facts of c (-want +got):\n%s", diff)
	}
	if seq, err := s.LastComputerFactSeq(ctx, "c"); err != nil || seq != 4 {
		t.Errorf("LastComputerFactSeq = %d, %v; want 4", seq, err)
	}
	if fs := factLog(t, s, "nope"); len(fs) != 0 {
		t.Errorf("facts of an unknown Computer: %v", fs)
	}
}

// TestNewComputerFactDedupe checks that a fact given to a write with a
// dedupe key is dropped when that key was appended before.
func TestNewComputerFactDedupe(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	f := NewComputerFact{Dedupe: "k", At: 1, Body: []byte(`"once"`)}
	if _, err := s.CreateComputer(ctx, Computer{ID: "c", Backings: "[]", State: "sleeping"}, f, f); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenComputerRuntime(ctx, UsageInterval{RuntimeID: "r", ComputerID: "c", StartedAt: 1},
		func(*Computer) error { return nil }, f, fact(`"other"`)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{`1:"once"`, `2:"other"`}, factLog(t, s, "c")); diff != "" {
		t.Errorf("facts (-want +got):\n%s", diff)
	}
}
