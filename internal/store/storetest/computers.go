package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/internal/store"
)

// ComputersBackend is the slice of a store that keeps Computers (package
// computer's Store) and deployments' workspaces, with the deployment
// writes a workspace needs.
type ComputersBackend interface {
	CreateComputer(ctx context.Context, c store.Computer, facts ...store.NewComputerFact) (store.Computer, error)
	Computer(ctx context.Context, id string) (store.Computer, error)
	Computers(ctx context.Context, namespace string) ([]store.Computer, error)
	UpdateComputer(ctx context.Context, id string, fn func(*store.Computer) error) (store.Computer, error)
	DeleteComputer(ctx context.Context, id string) error
	ReserveComputerSlot(ctx context.Context, id string, limit store.SlotLimit, fn func(*store.Computer, store.ActiveOn) error, facts ...store.NewComputerFact) (store.SlotReservation, store.Computer, error)
	ReleaseComputerSlot(ctx context.Context, id string, fn func(*store.Computer)) (store.Computer, error)
	ComputerSlots(ctx context.Context) ([]string, error)
	EnqueueComputer(ctx context.Context, id string, fn func(*store.Computer)) (int, store.Computer, error)
	ComputerQueue(ctx context.Context) ([]string, error)
	PutComputerHost(ctx context.Context, hostID string, h store.ComputerHost) error
	ComputerHosts(ctx context.Context) (map[string]store.ComputerHost, error)
	OpenUsage(ctx context.Context, u store.UsageInterval) error
	OpenComputerRuntime(ctx context.Context, u store.UsageInterval, fn func(*store.Computer) error, facts ...store.NewComputerFact) (store.Computer, error)
	EndUsage(ctx context.Context, runtimeID string, endedAt int64) error
	OpenUsages(ctx context.Context) ([]store.UsageInterval, error)
	PendingUsage(ctx context.Context, now int64, checkpoint time.Duration, limit int) ([]store.UsageInterval, error)
	AcknowledgeUsage(ctx context.Context, acks []store.UsageAck) error
	RequestRecycle(ctx context.Context, r store.Recycle) error
	FinishRecycle(ctx context.Context, runtimeID string) error
	PendingRecycles(ctx context.Context) ([]store.Recycle, error)
	AppendComputerFact(ctx context.Context, computerID, dedupe string, at int64, body []byte, mustExist bool) (int64, bool, error)
	ComputerFacts(ctx context.Context, computerID string, after int64, limit int) ([]store.ComputerFact, error)
	LastComputerFactSeq(ctx context.Context, computerID string) (int64, error)
	DeleteComputerFactsBefore(ctx context.Context, at int64) (int64, error)
	PutComputerPort(ctx context.Context, computerID string, p store.ComputerPort) (store.ComputerPort, error)
	DeleteComputerPort(ctx context.Context, computerID string, port int) error
	ComputerPorts(ctx context.Context, computerID string) ([]store.ComputerPort, error)
	ComputerPortsSigningInWith(ctx context.Context, ns, name string) ([]string, error)

	Workspace(ctx context.Context, deployment string) (store.Workspace, bool, error)
	PutWorkspace(ctx context.Context, w store.Workspace) error
	PutDeployment(ctx context.Context, d store.Deployment, createOnly bool, ifRevision int64) (store.Deployment, error)
	DeleteDeployment(ctx context.Context, id string) error
}

// RunComputers runs the Computers suite; open returns a fresh, empty
// backend for each subtest.
func RunComputers(t *testing.T, open func(t *testing.T) ComputersBackend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, ComputersBackend)
	}{
		{"ComputerCRUD", testComputerCRUD},
		{"ComputerDeleteCascades", testComputerDeleteCascades},
		{"ComputerWritesWithFacts", testComputerWritesWithFacts},
		{"ComputerFactDedupe", testComputerFactDedupe},
		{"ComputerFacts", testComputerFacts},
		{"ComputerSlotsAndQueue", testComputerSlotsAndQueue},
		{"ComputerSlotLimitFromHosts", testComputerSlotLimitFromHosts},
		{"ComputerConcurrentLastSlots", testComputerConcurrentLastSlots},
		{"ComputerConcurrentHostCapacity", testComputerConcurrentHostCapacity},
		{"ComputerConcurrentEnqueue", testComputerConcurrentEnqueue},
		{"ComputerConcurrentFacts", testComputerConcurrentFacts},
		{"ComputerConcurrentUpdates", testComputerConcurrentUpdates},
		{"ComputerUsage", testComputerUsage},
		{"ComputerConcurrentEndUsage", testComputerConcurrentEndUsage},
		{"ComputerRecycles", testComputerRecycles},
		{"ComputerPorts", testComputerPorts},
		{"Workspaces", testWorkspaces},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func newComputer(t *testing.T, s ComputersBackend, id, ns string) store.Computer {
	t.Helper()
	c, err := s.CreateComputer(t.Context(), store.Computer{ID: id, Namespace: ns, Backings: "[]", State: "sleeping"})
	if err != nil {
		t.Fatalf("CreateComputer(%s): %v", id, err)
	}
	return c
}

func factOf(body string) store.NewComputerFact {
	return store.NewComputerFact{At: 1000, Body: []byte(body)}
}

// factLog returns the facts of Computer id as "seq:body".
func factLog(t *testing.T, s ComputersBackend, id string) []string {
	t.Helper()
	fs, err := s.ComputerFacts(t.Context(), id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%d:%s", f.Seq, f.Body))
	}
	return out
}

var nopReserve = func(*store.Computer, store.ActiveOn) error { return nil }

func testComputerCRUD(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	before := time.Now()
	in := store.Computer{ID: "b", Namespace: "ns1", Image: "img", Size: "s", IdleTimeout: 90 * time.Second,
		Backings: `[{"kind":"process"}]`, State: "sleeping", CreatedAt: time.Unix(1, 0)}
	b, err := s.CreateComputer(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "CreatedAt", b.CreatedAt, before, time.Now())
	if !b.CreatedAt.Equal(b.UpdatedAt) || b.Image != "img" || b.IdleTimeout != 90*time.Second {
		t.Errorf("created = %+v", b)
	}
	if _, err := s.CreateComputer(ctx, store.Computer{ID: "b"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateComputer(existing) = %v, want ErrConflict", err)
	}
	got, err := s.Computer(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, got); diff != "" {
		t.Errorf("Computer(b) differs from CreateComputer's result (-create +get):\n%s", diff)
	}
	for _, id := range []string{"a/x", "a", "a-x"} {
		newComputer(t, s, id, "ns2")
	}
	ids := func(ns string) []string {
		cs, err := s.Computers(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	if diff := cmp.Diff([]string{"a", "a-x", "a/x", "b"}, ids("")); diff != "" {
		t.Errorf("Computers(all), by id (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"b"}, ids("ns1")); diff != "" {
		t.Errorf("Computers(ns1) (-want +got):\n%s", diff)
	}
	if got := ids("none"); len(got) != 0 {
		t.Errorf("Computers(none) = %v", got)
	}

	u, err := s.UpdateComputer(ctx, "b", func(c *store.Computer) error {
		c.ID, c.State, c.Active = "renamed", "running", `{"kind":"process"}`
		return nil
	})
	if err != nil || u.ID != "b" || u.State != "running" || u.UpdatedAt.Before(b.UpdatedAt) || !u.CreatedAt.Equal(b.CreatedAt) {
		t.Fatalf("UpdateComputer = %+v, %v", u, err)
	}
	if got, _ := s.Computer(ctx, "b"); got.State != "running" || got.Active != `{"kind":"process"}` {
		t.Errorf("stored after update = %+v", got)
	}
	if _, err := s.Computer(ctx, "renamed"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("fn's id change renamed the Computer: %v", err)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateComputer(ctx, "b", func(c *store.Computer) error { c.State = "x"; return boom }); !errors.Is(err, boom) {
		t.Errorf("UpdateComputer with failing fn = %v, want boom", err)
	}
	if got, _ := s.Computer(ctx, "b"); got.State != "running" {
		t.Errorf("failed update wrote state %q", got.State)
	}
	if _, err := s.UpdateComputer(ctx, "nope", func(*store.Computer) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateComputer(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.DeleteComputer(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteComputer(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteComputer = %v, want ErrNotFound", err)
	}
	if _, err := s.Computer(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Computer after delete = %v, want ErrNotFound", err)
	}
	if _, err := s.Computer(ctx, "a/x"); err != nil {
		t.Errorf("deleting b touched a/x: %v", err)
	}
}

func testComputerDeleteCascades(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	for _, id := range []string{"c", "c/d", "other"} {
		newComputer(t, s, id, "")
		if _, err := s.PutComputerPort(ctx, id, store.ComputerPort{Port: 8080}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.AppendComputerFact(ctx, id, "", 1, []byte(`"f"`), true); err != nil {
			t.Fatal(err)
		}
	}
	one := store.SlotLimit{Fixed: 1}
	if res, _, err := s.ReserveComputerSlot(ctx, "c", one, nopReserve); err != nil || !res.Reserved {
		t.Fatalf("reserve c: %+v, %v", res, err)
	}
	for _, id := range []string{"c/d", "other"} {
		if _, _, err := s.EnqueueComputer(ctx, id, func(*store.Computer) {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteComputer(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteComputer(ctx, "c/d"); err != nil {
		t.Fatal(err)
	}
	if slots, err := s.ComputerSlots(ctx); err != nil || len(slots) != 0 {
		t.Errorf("slots after deleting their holder: %v, %v", slots, err)
	}
	if q, err := s.ComputerQueue(ctx); err != nil || !slices.Equal(q, []string{"other"}) {
		t.Errorf("queue after deleting c/d: %v, %v; want [other]", q, err)
	}
	for _, id := range []string{"c", "c/d"} {
		if ps, err := s.ComputerPorts(ctx, id); err != nil || len(ps) != 0 {
			t.Errorf("ports of deleted %s: %v, %v", id, ps, err)
		}
		// Facts outlive their Computer (retention deletes them), and a
		// Computer created again continues the sequence.
		if fs := factLog(t, s, id); !slices.Equal(fs, []string{`1:"f"`}) {
			t.Errorf("facts of deleted %s = %v, want kept", id, fs)
		}
	}
	if ps, err := s.ComputerPorts(ctx, "other"); err != nil || len(ps) != 1 {
		t.Errorf("ports of other: %v, %v", ps, err)
	}
	// The freed slot goes to the queue's head.
	if res, _, err := s.ReserveComputerSlot(ctx, "other", one, nopReserve); err != nil || !res.Reserved || res.Running != 1 {
		t.Errorf("reserve other after delete: %+v, %v", res, err)
	}
	newComputer(t, s, "c", "")
	if seq, ok, err := s.AppendComputerFact(ctx, "c", "", 1, []byte(`"g"`), true); err != nil || !ok || seq != 2 {
		t.Errorf("fact of recreated c = %d, %v, %v; want seq 2", seq, ok, err)
	}
	if ps, _ := s.ComputerPorts(ctx, "c"); len(ps) != 0 {
		t.Errorf("recreated c has the old ports: %v", ps)
	}
}

// testComputerWritesWithFacts: the facts given to a Computer write are
// appended in its transaction, numbered in line with AppendComputerFact,
// and only when the write happens.
func testComputerWritesWithFacts(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	if _, err := s.CreateComputer(ctx, store.Computer{ID: "c", Backings: "[]", State: "sleeping"}, factOf(`"create"`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateComputer(ctx, store.Computer{ID: "c", Backings: "[]", State: "sleeping"}, factOf(`"again"`)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateComputer(existing) = %v, want ErrConflict", err)
	}
	if seq, ok, err := s.AppendComputerFact(ctx, "c", "", 1000, []byte(`"appended"`), true); err != nil || !ok || seq != 2 {
		t.Fatalf("AppendComputerFact = %d, %v, %v; want seq 2", seq, ok, err)
	}
	if _, _, err := s.AppendComputerFact(ctx, "nope", "", 1000, []byte(`"x"`), true); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AppendComputerFact(unknown, mustExist) = %v, want ErrNotFound", err)
	}
	if seq, ok, err := s.AppendComputerFact(ctx, "ghost", "", 1000, []byte(`"x"`), false); err != nil || !ok || seq != 1 {
		t.Errorf("AppendComputerFact(unknown, !mustExist) = %d, %v, %v; want seq 1", seq, ok, err)
	}

	// Reservations: only one that reserves appends.
	newComputer(t, s, "other", "")
	one := store.SlotLimit{Fixed: 1}
	if res, _, err := s.ReserveComputerSlot(ctx, "other", one, nopReserve); err != nil || !res.Reserved {
		t.Fatalf("reserving the only slot: %+v, %v", res, err)
	}
	if res, _, err := s.ReserveComputerSlot(ctx, "c", one, nopReserve, factOf(`"full"`)); err != nil || res.Reserved || res.Running != 1 || res.Limit != 1 {
		t.Fatalf("reserving with no slot free: %+v, %v; want not reserved, 1 of 1", res, err)
	}
	if _, err := s.ReleaseComputerSlot(ctx, "other", func(*store.Computer) {}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if _, _, err := s.ReserveComputerSlot(ctx, "c", one, func(*store.Computer, store.ActiveOn) error { return boom }, factOf(`"aborted"`)); !errors.Is(err, boom) {
		t.Fatalf("reservation whose fn fails = %v, want boom", err)
	}
	if slots, _ := s.ComputerSlots(ctx); len(slots) != 0 {
		t.Errorf("failed reservation took a slot: %v", slots)
	}
	res, got, err := s.ReserveComputerSlot(ctx, "c", one, func(c *store.Computer, _ store.ActiveOn) error {
		c.State, c.RuntimeID = "starting", "rt1"
		return nil
	}, factOf(`"starting"`))
	if err != nil || !res.Reserved || got.State != "starting" {
		t.Fatalf("ReserveComputerSlot = %+v, %+v, %v; want reserved, starting", res, got, err)
	}
	if _, _, err := s.ReserveComputerSlot(ctx, "nope", one, nopReserve); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ReserveComputerSlot(unknown) = %v, want ErrNotFound", err)
	}

	// The runtime: unknown Computer and failing fn write nothing.
	u := store.UsageInterval{RuntimeID: "rt1", ComputerID: "c", Backing: `{"kind":"process"}`, StartedAt: 5000}
	running := func(c *store.Computer) error { c.State = "running"; return nil }
	if _, err := s.OpenComputerRuntime(ctx, store.UsageInterval{RuntimeID: "rt0", ComputerID: "nope", StartedAt: 1}, running, factOf(`"lost"`)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("OpenComputerRuntime(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.OpenComputerRuntime(ctx, u, func(*store.Computer) error { return boom }, factOf(`"aborted"`)); !errors.Is(err, boom) {
		t.Errorf("OpenComputerRuntime whose fn fails = %v, want boom", err)
	}
	if open, err := s.OpenUsages(ctx); err != nil || len(open) != 0 {
		t.Fatalf("intervals after failed OpenComputerRuntime = %+v, %v; want none", open, err)
	}
	if c, _ := s.Computer(ctx, "c"); c.State != "starting" {
		t.Errorf("state after failed OpenComputerRuntime = %q, want starting", c.State)
	}
	got, err = s.OpenComputerRuntime(ctx, u, running, factOf(`"running"`))
	if err != nil || got.State != "running" || got.RuntimeID != "rt1" {
		t.Fatalf("OpenComputerRuntime = %+v, %v; want running rt1", got, err)
	}
	if c, _ := s.Computer(ctx, "c"); c.State != "running" {
		t.Errorf("stored state = %q, want running", c.State)
	}
	// Idempotent interval: a second open keeps the first start.
	if _, err := s.OpenComputerRuntime(ctx, store.UsageInterval{RuntimeID: "rt1", ComputerID: "c", Backing: u.Backing, StartedAt: 9000}, running); err != nil {
		t.Fatal(err)
	}
	open, err := s.OpenUsages(ctx)
	want := []store.UsageInterval{{RuntimeID: "rt1", ComputerID: "c", Backing: u.Backing, StartedAt: 5000, ObservedAt: 5000}}
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
	if seq, err := s.LastComputerFactSeq(ctx, "nope"); err != nil || seq != 0 {
		t.Errorf("LastComputerFactSeq(unknown) = %d, %v; want 0", seq, err)
	}
	if fs := factLog(t, s, "nope"); len(fs) != 0 {
		t.Errorf("facts of an unknown Computer: %v", fs)
	}
}

// testComputerFactDedupe: a fact with a dedupe key is dropped when that
// key was appended before (in the same write too), until retention
// deletes the fact.
func testComputerFactDedupe(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	f := store.NewComputerFact{Dedupe: "k", At: 1, Body: []byte(`"once"`)}
	if _, err := s.CreateComputer(ctx, store.Computer{ID: "c", Backings: "[]", State: "sleeping"}, f, f); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenComputerRuntime(ctx, store.UsageInterval{RuntimeID: "r", ComputerID: "c", StartedAt: 1},
		func(*store.Computer) error { return nil }, f, factOf(`"other"`)); err != nil {
		t.Fatal(err)
	}
	if seq, ok, err := s.AppendComputerFact(ctx, "c", "k", 1, []byte(`"again"`), true); err != nil || ok || seq != 0 {
		t.Errorf("AppendComputerFact(duplicate) = %d, %v, %v; want 0, false", seq, ok, err)
	}
	if diff := cmp.Diff([]string{`1:"once"`, `2:"other"`}, factLog(t, s, "c")); diff != "" {
		t.Errorf("facts (-want +got):\n%s", diff)
	}
	if n, err := s.DeleteComputerFactsBefore(ctx, 2); err != nil || n != 1 {
		t.Fatalf("DeleteComputerFactsBefore(2) = %d, %v; want 1", n, err)
	}
	if seq, ok, err := s.AppendComputerFact(ctx, "c", "k", 5000, []byte(`"later"`), true); err != nil || !ok || seq != 3 {
		t.Errorf("AppendComputerFact(k after its fact expired) = %d, %v, %v; want 3, true", seq, ok, err)
	}
	if diff := cmp.Diff([]string{`2:"other"`, `3:"later"`}, factLog(t, s, "c")); diff != "" {
		t.Errorf("facts after retention (-want +got):\n%s", diff)
	}
}

func testComputerFacts(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	newComputer(t, s, "c", "")
	newComputer(t, s, "c/x", "")
	for i := 1; i <= 12; i++ {
		if seq, ok, err := s.AppendComputerFact(ctx, "c", "", int64(i*100), fmt.Appendf(nil, `{"n":%d}`, i), true); err != nil || !ok || seq != int64(i) {
			t.Fatalf("append %d: %d, %v, %v", i, seq, ok, err)
		}
	}
	if _, _, err := s.AppendComputerFact(ctx, "c/x", "", -5, []byte(`"neg"`), true); err != nil {
		t.Fatal(err)
	}
	fs, err := s.ComputerFacts(ctx, "c", 9, 2)
	if err != nil || len(fs) != 2 || fs[0].Seq != 10 || string(fs[1].Body) != `{"n":11}` {
		t.Errorf("ComputerFacts(after 9, limit 2) = %+v, %v", fs, err)
	}
	if fs, err := s.ComputerFacts(ctx, "c", 12, 10); err != nil || len(fs) != 0 {
		t.Errorf("ComputerFacts(after the last) = %+v, %v", fs, err)
	}
	if fs, err := s.ComputerFacts(ctx, "c", 0, 0); err != nil || len(fs) != 0 {
		t.Errorf("ComputerFacts(limit 0) = %+v, %v", fs, err)
	}
	if fs, err := s.ComputerFacts(ctx, "c", 0, 100); err != nil || len(fs) != 12 {
		t.Errorf("ComputerFacts(all) = %d facts, %v; want 12 (not those of c/x)", len(fs), err)
	}
	// Retention: facts before 500 (4 of c, the one of c/x at -5).
	if n, err := s.DeleteComputerFactsBefore(ctx, 500); err != nil || n != 5 {
		t.Errorf("DeleteComputerFactsBefore(500) = %d, %v; want 5", n, err)
	}
	if n, err := s.DeleteComputerFactsBefore(ctx, 500); err != nil || n != 0 {
		t.Errorf("DeleteComputerFactsBefore(500) again = %d, %v; want 0", n, err)
	}
	fs, err = s.ComputerFacts(ctx, "c", 0, 100)
	if err != nil || len(fs) != 8 || fs[0].Seq != 5 {
		t.Errorf("after retention: %+v, %v; want seq 5..12", fs, err)
	}
	if seq, err := s.LastComputerFactSeq(ctx, "c/x"); err != nil || seq != 1 {
		t.Errorf("LastComputerFactSeq(c/x) after all its facts expired = %d, %v; want 1", seq, err)
	}
	if seq, _, err := s.AppendComputerFact(ctx, "c/x", "", 1, []byte(`"next"`), true); err != nil || seq != 2 {
		t.Errorf("seq after retention = %d, %v; want 2 (never back)", seq, err)
	}
	// More than one transaction's worth.
	for i := range 150 {
		if _, _, err := s.AppendComputerFact(ctx, "c/x", fmt.Sprint("d", i), 1000, []byte(`"bulk"`), false); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.DeleteComputerFactsBefore(ctx, 1001); err != nil || n != 151+6 {
		t.Errorf("DeleteComputerFactsBefore(1001) = %d, %v; want 157", n, err)
	}
	if fs, _ := s.ComputerFacts(ctx, "c/x", 0, -1); len(fs) != 0 {
		t.Errorf("c/x facts left: %d", len(fs))
	}
}

func testComputerSlotsAndQueue(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c", "d"} {
		newComputer(t, s, id, "")
	}
	two := store.SlotLimit{Fixed: 2}
	if res, _, err := s.ReserveComputerSlot(ctx, "a", two, nopReserve); err != nil || !res.Reserved || res.Running != 1 || res.Limit != 2 {
		t.Fatalf("reserve a: %+v, %v", res, err)
	}
	// A holder re-reserves for free.
	if res, _, err := s.ReserveComputerSlot(ctx, "a", two, nopReserve); err != nil || !res.Reserved || res.Running != 1 {
		t.Fatalf("re-reserve a: %+v, %v", res, err)
	}
	queued := func(c *store.Computer) { c.State = "queued" }
	// c and d queue; b (not queued) cannot pass them.
	for i, id := range []string{"c", "d", "c"} {
		pos, got, err := s.EnqueueComputer(ctx, id, queued)
		if want := []int{1, 2, 1}[i]; err != nil || pos != want || got.State != "queued" {
			t.Fatalf("enqueue %s: %d, %+v, %v; want position %d", id, pos, got, err, want)
		}
	}
	if _, _, err := s.EnqueueComputer(ctx, "nope", queued); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("EnqueueComputer(unknown) = %v, want ErrNotFound", err)
	}
	if q, err := s.ComputerQueue(ctx); err != nil || !slices.Equal(q, []string{"c", "d"}) {
		t.Fatalf("queue = %v, %v; want [c d]", q, err)
	}
	if res, _, err := s.ReserveComputerSlot(ctx, "b", two, nopReserve); err != nil || res.Reserved || res.Running != 1 {
		t.Errorf("b passing the queue: %+v, %v; want refused", res, err)
	}
	// d is behind c: one slot, one ahead.
	if res, _, err := s.ReserveComputerSlot(ctx, "d", two, nopReserve); err != nil || res.Reserved {
		t.Errorf("d passing c: %+v, %v; want refused", res, err)
	}
	if res, _, err := s.ReserveComputerSlot(ctx, "c", two, nopReserve); err != nil || !res.Reserved || res.Running != 2 {
		t.Fatalf("reserve c (head of the queue): %+v, %v", res, err)
	}
	if q, _ := s.ComputerQueue(ctx); !slices.Equal(q, []string{"d"}) {
		t.Errorf("queue after c reserved = %v, want [d]", q)
	}
	if slots, err := s.ComputerSlots(ctx); err != nil || !slices.Equal(slots, []string{"a", "c"}) {
		t.Errorf("slots = %v, %v; want [a c]", slots, err)
	}
	released, err := s.ReleaseComputerSlot(ctx, "a", func(c *store.Computer) { c.State = "sleeping" })
	if err != nil || released.State != "sleeping" || released.ID != "a" {
		t.Fatalf("release a: %+v, %v", released, err)
	}
	if _, err := s.ReleaseComputerSlot(ctx, "a", func(*store.Computer) {}); err != nil {
		t.Errorf("second release: %v", err)
	}
	called := false
	if _, err := s.ReleaseComputerSlot(ctx, "nope", func(*store.Computer) { called = true }); err != nil || called {
		t.Errorf("release of unknown: %v, fn called %v; want nil, not called", err, called)
	}
	// The queue's head gets the freed slot; a re-enqueued Computer goes
	// to the end, after positions that were handed out before.
	if res, _, err := s.ReserveComputerSlot(ctx, "d", two, nopReserve); err != nil || !res.Reserved {
		t.Fatalf("reserve d: %+v, %v", res, err)
	}
	if _, err := s.ReleaseComputerSlot(ctx, "c", func(*store.Computer) {}); err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"b", "a", "c"} {
		if pos, _, err := s.EnqueueComputer(ctx, id, queued); err != nil || pos != i+1 {
			t.Errorf("enqueue %s: %d, %v; want %d", id, pos, err, i+1)
		}
	}
	if _, err := s.ReleaseComputerSlot(ctx, "b", func(*store.Computer) {}); err != nil {
		t.Fatal(err)
	}
	if pos, _, err := s.EnqueueComputer(ctx, "b", queued); err != nil || pos != 3 {
		t.Errorf("re-enqueue b: %d, %v; want 3", pos, err)
	}
	if q, _ := s.ComputerQueue(ctx); !slices.Equal(q, []string{"a", "c", "b"}) {
		t.Errorf("queue = %v, want [a c b]", q)
	}
	if slots, _ := s.ComputerSlots(ctx); !slices.Equal(slots, []string{"d"}) {
		t.Errorf("slots = %v, want [d]", slots)
	}
}

func testComputerSlotLimitFromHosts(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	if hs, err := s.ComputerHosts(ctx); err != nil || len(hs) != 0 {
		t.Fatalf("hosts of an empty store: %v, %v", hs, err)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		newComputer(t, s, id, "")
	}
	def := store.SlotLimit{Default: 1}
	if res, _, err := s.ReserveComputerSlot(ctx, "a", def, nopReserve); err != nil || !res.Reserved || res.Limit != 1 {
		t.Fatalf("reserve with the default limit: %+v, %v", res, err)
	}
	if res, _, err := s.ReserveComputerSlot(ctx, "b", def, nopReserve); err != nil || res.Reserved || res.Limit != 1 {
		t.Fatalf("over the default limit: %+v, %v", res, err)
	}
	if err := s.PutComputerHost(ctx, "h1", store.ComputerHost{MaxActive: 3, ReservedHeadroom: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutComputerHost(ctx, "h/2", store.ComputerHost{MaxActive: 5, ReservedHeadroom: 5}); err != nil {
		t.Fatal(err)
	}
	want := map[string]store.ComputerHost{"h1": {MaxActive: 3, ReservedHeadroom: 1}, "h/2": {MaxActive: 5, ReservedHeadroom: 5}}
	if hs, err := s.ComputerHosts(ctx); err != nil || !cmp.Equal(hs, want) {
		t.Errorf("ComputerHosts = %v, %v; want %v", hs, err, want)
	}
	if res, _, err := s.ReserveComputerSlot(ctx, "b", def, nopReserve); err != nil || !res.Reserved || res.Limit != 2 {
		t.Fatalf("reserve with the hosts' limit: %+v, %v; want limit 2", res, err)
	}
	if res, _, err := s.ReserveComputerSlot(ctx, "c", def, nopReserve); err != nil || res.Reserved || res.Running != 2 {
		t.Fatalf("over the hosts' limit: %+v, %v", res, err)
	}
	// Replacing a host's capacity changes the limit.
	if err := s.PutComputerHost(ctx, "h/2", store.ComputerHost{MaxActive: 5, ReservedHeadroom: 4}); err != nil {
		t.Fatal(err)
	}
	if res, _, err := s.ReserveComputerSlot(ctx, "c", def, nopReserve); err != nil || !res.Reserved || res.Limit != 3 {
		t.Fatalf("reserve after the host grew: %+v, %v", res, err)
	}
	// Fixed overrides the hosts.
	if res, _, err := s.ReserveComputerSlot(ctx, "d", store.SlotLimit{Fixed: 4}, nopReserve); err != nil || !res.Reserved || res.Limit != 4 {
		t.Fatalf("reserve with a fixed limit: %+v, %v", res, err)
	}
	// activeOn counts the other holders on a backing.
	for _, id := range []string{"a", "b"} {
		if _, err := s.UpdateComputer(ctx, id, func(c *store.Computer) error { c.Active = "H"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ReleaseComputerSlot(ctx, "b", func(*store.Computer) {}); err != nil {
		t.Fatal(err)
	}
	var n int
	if _, _, err := s.ReserveComputerSlot(ctx, "a", def, func(_ *store.Computer, on store.ActiveOn) (err error) {
		n, err = on("H")
		return err
	}); err != nil || n != 0 {
		t.Errorf("activeOn(H) for a = %d, %v; want 0 (b released, a itself not counted)", n, err)
	}
	if _, _, err := s.ReserveComputerSlot(ctx, "d", def, func(_ *store.Computer, on store.ActiveOn) (err error) {
		n, err = on("H")
		return err
	}); err != nil || n != 1 {
		t.Errorf("activeOn(H) for d = %d, %v; want 1", n, err)
	}
}

// testComputerConcurrentLastSlots: many reservers of the last slots,
// exactly as many win as there are slots.
func testComputerConcurrentLastSlots(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	const n, free = 12, 3
	newComputer(t, s, "held", "")
	limit := store.SlotLimit{Fixed: free + 1}
	if _, _, err := s.ReserveComputerSlot(ctx, "held", limit, nopReserve); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		newComputer(t, s, fmt.Sprint("c", i), "")
	}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		won []string
	)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprint("c", i)
			res, _, err := s.ReserveComputerSlot(ctx, id, limit, func(c *store.Computer, _ store.ActiveOn) error {
				c.State = "starting"
				return nil
			})
			if err != nil {
				t.Errorf("reserve %s: %v", id, err)
				return
			}
			if res.Reserved {
				mu.Lock()
				won = append(won, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slots, err := s.ComputerSlots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(won)
	if len(won) != free || !slices.Equal(slots, append(slices.Clone(won), "held")) {
		t.Errorf("%d reservers of %d free slots: won %v, slots %v", n, free, won, slots)
	}
	for _, id := range won {
		if c, _ := s.Computer(ctx, id); c.State != "starting" {
			t.Errorf("winner %s has state %q", id, c.State)
		}
	}
}

// testComputerConcurrentHostCapacity: reservers whose fn admits them only
// while no other holder is on backing H: exactly one ends on H.
func testComputerConcurrentHostCapacity(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	const n = 10
	for i := range n {
		newComputer(t, s, fmt.Sprint("c", i), "")
	}
	errFull := errors.New("host full")
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, _, err := s.ReserveComputerSlot(ctx, fmt.Sprint("c", i), store.SlotLimit{Fixed: 100}, func(c *store.Computer, on store.ActiveOn) error {
				k, err := on("H")
				if err != nil {
					return err
				}
				if k >= 1 {
					return errFull
				}
				c.Active = "H"
				return nil
			})
			if err != nil && !errors.Is(err, errFull) {
				t.Errorf("reserve: %v", err)
			}
		})
	}
	wg.Wait()
	slots, _ := s.ComputerSlots(ctx)
	cs, _ := s.Computers(ctx, "")
	onH := 0
	for _, c := range cs {
		if c.Active == "H" {
			onH++
		}
	}
	if len(slots) != 1 || onH != 1 {
		t.Errorf("one-per-host reservers: slots %v, %d Computers on H; want exactly one", slots, onH)
	}
}

// testComputerConcurrentEnqueue: concurrent enqueues get distinct
// positions 1..n, and the queue is in their order.
func testComputerConcurrentEnqueue(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	const n = 12
	for i := range n {
		newComputer(t, s, fmt.Sprintf("c%02d", i), "")
	}
	pos := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, _, err := s.EnqueueComputer(ctx, fmt.Sprintf("c%02d", i), func(c *store.Computer) { c.State = "queued" })
			if err != nil {
				t.Errorf("enqueue: %v", err)
			}
			pos[i] = p
		})
	}
	wg.Wait()
	q, err := s.ComputerQueue(ctx)
	if err != nil || len(q) != n {
		t.Fatalf("queue = %v, %v", q, err)
	}
	for i, id := range q {
		var k int
		fmt.Sscanf(id, "c%02d", &k)
		if pos[k] != i+1 {
			t.Errorf("%s is at %d in the queue but was told position %d", id, i+1, pos[k])
		}
	}
}

// testComputerConcurrentFacts: concurrent appends to one Computer get
// sequence numbers 1..n, no gap, no duplicate.
func testComputerConcurrentFacts(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	newComputer(t, s, "c", "")
	const writers, each = 6, 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seqs []int64
	)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				seq, ok, err := s.AppendComputerFact(ctx, "c", "", 1, fmt.Appendf(nil, `"%d.%d"`, w, i), true)
				if err != nil || !ok {
					t.Errorf("append: %v, %v", ok, err)
					return
				}
				mu.Lock()
				seqs = append(seqs, seq)
				mu.Unlock()
			}
		})
	}
	// And a writer with the same dedupe key from every goroutine: once.
	var dups sync.WaitGroup
	var appended int
	for range writers {
		dups.Go(func() {
			_, ok, err := s.AppendComputerFact(ctx, "c", "same", 1, []byte(`"dup"`), true)
			if err != nil {
				t.Errorf("append dedupe: %v", err)
			}
			if ok {
				mu.Lock()
				appended++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	dups.Wait()
	if appended != 1 {
		t.Errorf("a dedupe key appended %d times concurrently, want once", appended)
	}
	slices.Sort(seqs)
	fs, err := s.ComputerFacts(ctx, "c", 0, -1)
	if err != nil || len(fs) != writers*each+1 {
		t.Fatalf("facts: %d, %v; want %d", len(fs), err, writers*each+1)
	}
	for i, f := range fs {
		if f.Seq != int64(i+1) {
			t.Fatalf("fact %d has seq %d: gap or duplicate", i, f.Seq)
		}
	}
	if len(slices.Compact(seqs)) != writers*each {
		t.Errorf("duplicate seqs handed out: %v", seqs)
	}
	if last, _ := s.LastComputerFactSeq(ctx, "c"); last != writers*each+1 {
		t.Errorf("LastComputerFactSeq = %d, want %d", last, writers*each+1)
	}
}

// testComputerConcurrentUpdates: concurrent read-modify-writes of one
// Computer lose none.
func testComputerConcurrentUpdates(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	newComputer(t, s, "c", "")
	const n = 10
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := s.UpdateComputer(ctx, "c", func(c *store.Computer) error { c.Sandbox += "x"; return nil }); err != nil {
				t.Errorf("update: %v", err)
			}
		})
	}
	wg.Wait()
	if c, _ := s.Computer(ctx, "c"); len(c.Sandbox) != n {
		t.Errorf("after %d concurrent updates Sandbox = %q", n, c.Sandbox)
	}
}

func testComputerUsage(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	for _, u := range []store.UsageInterval{
		{RuntimeID: "r2", ComputerID: "c", Backing: "{}", StartedAt: 100},
		{RuntimeID: "r1", ComputerID: "c", Backing: "{}", StartedAt: 100},
		{RuntimeID: "r0", ComputerID: "d", Backing: "{}", StartedAt: 50, ObservedAt: 77, Ended: true},
		{RuntimeID: "r1", ComputerID: "x", StartedAt: 1}, // exists: left as it is
	} {
		if err := s.OpenUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(us []store.UsageInterval) []string {
		var out []string
		for _, u := range us {
			out = append(out, fmt.Sprintf("%s@%d", u.RuntimeID, u.ObservedAt))
		}
		return out
	}
	open, err := s.OpenUsages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.UsageInterval{
		{RuntimeID: "r0", ComputerID: "d", Backing: "{}", StartedAt: 50, ObservedAt: 50},
		{RuntimeID: "r1", ComputerID: "c", Backing: "{}", StartedAt: 100, ObservedAt: 100},
		{RuntimeID: "r2", ComputerID: "c", Backing: "{}", StartedAt: 100, ObservedAt: 100},
	}
	if diff := cmp.Diff(want, open); diff != "" {
		t.Errorf("OpenUsages (-want +got):\n%s", diff)
	}
	// Checkpoint: only intervals at least 60 ms old advance.
	p, err := s.PendingUsage(ctx, 150, 60*time.Millisecond, 10)
	if err != nil || !slices.Equal(ids(p), []string{"r0@150", "r1@100", "r2@100"}) {
		t.Fatalf("PendingUsage(150) = %v, %v", ids(p), err)
	}
	if p, _ := s.PendingUsage(ctx, 151, 60*time.Millisecond, 10); !slices.Equal(ids(p), []string{"r0@150", "r1@100", "r2@100"}) {
		t.Errorf("PendingUsage within the checkpoint = %v, want the same", ids(p))
	}
	if p, _ := s.PendingUsage(ctx, 151, 60*time.Millisecond, 2); len(p) != 2 {
		t.Errorf("PendingUsage limit 2 = %v", ids(p))
	}
	if p, _ := s.PendingUsage(ctx, 151, 60*time.Millisecond, 0); len(p) != 0 {
		t.Errorf("PendingUsage limit 0 = %v", ids(p))
	}
	// Acknowledge: idempotent, and an older observation undoes nothing.
	acks := []store.UsageAck{{RuntimeID: "r1", ObservedAt: 100}, {RuntimeID: "r0", ObservedAt: 150}, {RuntimeID: "nope", ObservedAt: 1}}
	for range 2 {
		if err := s.AcknowledgeUsage(ctx, acks); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AcknowledgeUsage(ctx, []store.UsageAck{{RuntimeID: "r0", ObservedAt: 50}, {RuntimeID: "r2", ObservedAt: 999}}); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.PendingUsage(ctx, 160, time.Hour, 10); !slices.Equal(ids(p), []string{"r2@100"}) {
		t.Errorf("pending after acks = %v, want [r2@100] (an ack of a later observation than stored counts for nothing)", ids(p))
	}
	// End: once, never before the checkpoint.
	if err := s.EndUsage(ctx, "r0", 120); err != nil {
		t.Fatal(err)
	}
	if err := s.EndUsage(ctx, "r0", 900); err != nil {
		t.Fatal(err)
	}
	if err := s.EndUsage(ctx, "nope", 900); err != nil {
		t.Errorf("EndUsage(unknown) = %v", err)
	}
	if err := s.EndUsage(ctx, "r1", 300); err != nil {
		t.Fatal(err)
	}
	if open, _ := s.OpenUsages(ctx); !slices.Equal(ids(open), []string{"r2@100"}) {
		t.Errorf("open after ends = %v", ids(open))
	}
	// r0 ended at its (acknowledged) checkpoint 150: settled by the next
	// acknowledgement, gone: opening it again starts afresh. r1 ended at
	// 300 is pending until that is acknowledged.
	if p, _ := s.PendingUsage(ctx, 400, time.Hour, 10); !slices.Equal(ids(p), []string{"r1@300", "r2@100"}) {
		t.Errorf("pending after ends = %v, want [r1@300 r2@100]", ids(p))
	}
	if err := s.AcknowledgeUsage(ctx, []store.UsageAck{{RuntimeID: "r1", ObservedAt: 300}}); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.PendingUsage(ctx, 400, time.Hour, 10); !slices.Equal(ids(p), []string{"r2@100"}) {
		t.Errorf("pending after the end's ack = %v", ids(p))
	}
	for _, id := range []string{"r0", "r1"} {
		if err := s.OpenUsage(ctx, store.UsageInterval{RuntimeID: id, ComputerID: "e", StartedAt: 7}); err != nil {
			t.Fatal(err)
		}
	}
	if open, _ := s.OpenUsages(ctx); !slices.Equal(ids(open), []string{"r0@7", "r1@7", "r2@100"}) {
		t.Errorf("open after reopening settled runtimes = %v", ids(open))
	}
}

// testComputerConcurrentEndUsage: checkpoints racing ends and acks never
// reopen an ended interval nor move its end.
func testComputerConcurrentEndUsage(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	const n = 8
	for i := range n {
		if err := s.OpenUsage(ctx, store.UsageInterval{RuntimeID: fmt.Sprint("r", i), ComputerID: "c", StartedAt: 0}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.EndUsage(ctx, fmt.Sprint("r", i), 1000); err != nil {
				t.Errorf("end: %v", err)
			}
		})
		wg.Go(func() {
			if _, err := s.PendingUsage(ctx, int64(10+i), 0, 100); err != nil {
				t.Errorf("pending: %v", err)
			}
		})
	}
	wg.Wait()
	if open, _ := s.OpenUsages(ctx); len(open) != 0 {
		t.Errorf("open after every end: %+v", open)
	}
	p, err := s.PendingUsage(ctx, 5000, 0, 100)
	if err != nil || len(p) != n {
		t.Fatalf("pending = %+v, %v", p, err)
	}
	for _, u := range p {
		if !u.Ended || u.ObservedAt != 1000 {
			t.Errorf("interval %s: ended %v at %d, want ended at 1000", u.RuntimeID, u.Ended, u.ObservedAt)
		}
	}
}

func testComputerRecycles(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	for _, r := range []store.Recycle{
		{RuntimeID: "r2", ComputerID: "c", Backing: "{}", RequestedAt: 10},
		{RuntimeID: "r1", ComputerID: "c", Backing: "{}", RequestedAt: 10},
		{RuntimeID: "r0", ComputerID: "d", Backing: "{}", RequestedAt: 20},
		{RuntimeID: "r1", ComputerID: "x", Backing: "{}", RequestedAt: 1}, // again: kept as first requested
	} {
		if err := s.RequestRecycle(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := s.PendingRecycles(ctx)
	want := []store.Recycle{
		{RuntimeID: "r1", ComputerID: "c", Backing: "{}", RequestedAt: 10},
		{RuntimeID: "r2", ComputerID: "c", Backing: "{}", RequestedAt: 10},
		{RuntimeID: "r0", ComputerID: "d", Backing: "{}", RequestedAt: 20},
	}
	if err != nil || !cmp.Equal(rs, want) {
		t.Errorf("PendingRecycles = %+v, %v; want %+v", rs, err, want)
	}
	for range 2 {
		if err := s.FinishRecycle(ctx, "r1"); err != nil {
			t.Fatal(err)
		}
	}
	if rs, _ := s.PendingRecycles(ctx); len(rs) != 2 || rs[0].RuntimeID != "r2" {
		t.Errorf("after finishing r1: %+v", rs)
	}
}

func testComputerPorts(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	if _, err := s.PutComputerPort(ctx, "nope", store.ComputerPort{Port: 80}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutComputerPort(unknown) = %v, want ErrNotFound", err)
	}
	newComputer(t, s, "c", "")
	newComputer(t, s, "a", "team")
	newComputer(t, s, "b", "other")
	before := time.Now()
	p, err := s.PutComputerPort(ctx, "c", store.ComputerPort{Port: 8080, SignIn: "gh"})
	if err != nil {
		t.Fatal(err)
	}
	within(t, "port CreatedAt", p.CreatedAt, before, time.Now())
	for _, x := range []struct {
		id string
		p  store.ComputerPort
	}{
		{"c", store.ComputerPort{Port: 22, Public: true}},
		{"c", store.ComputerPort{Port: 443, SignIn: "gh"}},
		{"a", store.ComputerPort{Port: 3000, SignIn: "gh"}},
		{"b", store.ComputerPort{Port: 3000, SignIn: "gh"}},
	} {
		if _, err := s.PutComputerPort(ctx, x.id, x.p); err != nil {
			t.Fatal(err)
		}
	}
	// Re-exposing replaces public and sign-in, keeps the creation time.
	if _, err := s.PutComputerPort(ctx, "c", store.ComputerPort{Port: 8080, Public: true, SignIn: "okta"}); err != nil {
		t.Fatal(err)
	}
	ps, err := s.ComputerPorts(ctx, "c")
	if err != nil || len(ps) != 3 {
		t.Fatalf("ComputerPorts = %+v, %v", ps, err)
	}
	if ps[0].Port != 22 || ps[1].Port != 443 || ps[2].Port != 8080 {
		t.Errorf("ports not by number: %+v", ps)
	}
	if got := ps[2]; !got.Public || got.SignIn != "okta" || !got.CreatedAt.Equal(p.CreatedAt) {
		t.Errorf("re-exposed 8080 = %+v, want public, okta, created %v", got, p.CreatedAt)
	}
	for _, tc := range []struct {
		ns, name string
		want     []string
	}{
		{"default", "gh", []string{"c:443"}},
		{"team", "gh", []string{"a:3000"}},
		{"", "gh", []string{"c:443"}},
		{"team", "okta", nil},
		{"default", "okta", []string{"c:8080"}},
	} {
		got, err := s.ComputerPortsSigningInWith(ctx, tc.ns, tc.name)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ComputerPortsSigningInWith(%q, %q) = %v, %v; want %v", tc.ns, tc.name, got, err, tc.want)
		}
	}
	for range 2 {
		if err := s.DeleteComputerPort(ctx, "c", 443); err != nil {
			t.Fatal(err)
		}
	}
	if ps, _ := s.ComputerPorts(ctx, "c"); len(ps) != 2 {
		t.Errorf("after unexposing 443: %+v", ps)
	}
	if ps, err := s.ComputerPorts(ctx, "nope"); err != nil || len(ps) != 0 {
		t.Errorf("ports of unknown: %+v, %v", ps, err)
	}
}

func testWorkspaces(t *testing.T, s ComputersBackend) {
	ctx := t.Context()
	if err := s.PutWorkspace(ctx, store.Workspace{Deployment: "nope", Digest: "x"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("workspace of an unknown deployment: %v", err)
	}
	if _, err := s.PutDeployment(ctx, store.Deployment{ID: "w", Spec: []byte(`{"id":"w"}`)}, false, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Workspace(ctx, "w"); ok || err != nil {
		t.Fatalf("before any capture: %v %v", ok, err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	w := store.Workspace{Deployment: "w", Digest: "d1", CapturedAt: at, CapturedFrom: "r1", Files: 3, Bytes: 42}
	if err := s.PutWorkspace(ctx, w); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Workspace(ctx, "w"); err != nil || !ok || got != w {
		t.Fatalf("got %+v %v %v, want %+v", got, ok, err, w)
	}
	w.Pushed, w.PushedStore, w.PushedAt = "d1", "local", at.Add(time.Second)
	if err := s.PutWorkspace(ctx, w); err != nil {
		t.Fatal(err)
	}
	// Updating the deployment keeps its workspace.
	if _, err := s.PutDeployment(ctx, store.Deployment{ID: "w", Spec: []byte(`{"id":"w","n":2}`)}, false, 0); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Workspace(ctx, "w"); err != nil || !ok || got != w {
		t.Fatalf("got %+v %v %v, want %+v", got, ok, err, w)
	}
	if err := s.DeleteDeployment(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Workspace(ctx, "w"); ok {
		t.Error("the workspace outlived its deployment")
	}
	if _, err := s.PutDeployment(ctx, store.Deployment{ID: "w", Spec: []byte(`{"id":"w"}`)}, false, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Workspace(ctx, "w"); ok {
		t.Error("a deployment created again has the old one's workspace")
	}
}
