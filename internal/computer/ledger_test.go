//go:build linux

package computer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/store"
	"github.com/google/go-cmp/cmp"
)

// TestLedgerCrashReplay replays a billing host that crashes between reading
// and acknowledging (and berth restarting too) at random, and proves that
// every runtime is billed exactly its true length: no interval lost, none
// counted twice.
func TestLedgerCrashReplay(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { ledgerReplay(t, seed) })
	}
}

func ledgerReplay(t *testing.T, seed uint64) {
	e := newEnv(t)
	const checkpoint = 10 * time.Second
	opt := func(o *Options) { o.Checkpoint = checkpoint }
	m := e.manager(opt)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 42))

	type runtime struct {
		start, end int64
		ended      bool
	}
	truth := map[string]*runtime{}
	// The billing host: per runtime, the largest observation it has
	// billed; billing is observedAt − startedAt, made idempotent by max.
	billed := map[string]int64{}
	starts := map[string]int64{}
	var open []string
	bill := func(ivs []UsageInterval) {
		for _, iv := range ivs {
			if prev, ok := starts[iv.RuntimeID]; ok && prev != iv.StartedAt {
				t.Fatalf("runtime %s changed its start: %d then %d", iv.RuntimeID, prev, iv.StartedAt)
			}
			starts[iv.RuntimeID] = iv.StartedAt
			billed[iv.RuntimeID] = max(billed[iv.RuntimeID], iv.ObservedAt)
		}
	}
	for step := range 400 {
		now := e.clock.Now().UnixMilli()
		switch r := rng.IntN(10); {
		case r < 2: // a runtime starts
			id := fmt.Sprintf("rt_%d_%d", seed, step)
			if err := e.st.OpenUsage(ctx, store.UsageInterval{RuntimeID: id, ComputerID: "x", Backing: `{"kind":"process"}`, StartedAt: now}); err != nil {
				t.Fatal(err)
			}
			truth[id] = &runtime{start: now}
			open = append(open, id)
		case r < 4 && len(open) > 0: // one ends
			i := rng.IntN(len(open))
			id := open[i]
			open = append(open[:i], open[i+1:]...)
			if err := e.st.EndUsage(ctx, id, now); err != nil {
				t.Fatal(err)
			}
			truth[id].end, truth[id].ended = now, true
		case r < 7: // the host reads, and crashes or acknowledges
			ivs, err := m.PendingUsage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ivs) > MaxPendingUsage {
				t.Fatalf("%d pending intervals, want at most %d", len(ivs), MaxPendingUsage)
			}
			again, err := m.PendingUsage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ivs, again); diff != "" {
				t.Fatalf("two reads within one checkpoint differ:\n%s", diff)
			}
			bill(ivs)
			switch rng.IntN(3) {
			case 0: // the host crashes before acknowledging
			case 1: // and berth restarts too, finding no sandbox for any
				// runtime: each ends at its last checkpoint, the last time
				// it was seen running.
				left, err := e.st.OpenUsages(ctx)
				if err != nil {
					t.Fatal(err)
				}
				e.st.Close()
				e.open()
				m = e.manager(opt)
				for _, u := range left {
					truth[u.RuntimeID].end, truth[u.RuntimeID].ended = u.ObservedAt, true
				}
				open = open[:0]
			default:
				if err := m.AcknowledgeUsage(ctx, ivs); err != nil {
					t.Fatal(err)
				}
				if rng.IntN(2) == 0 { // a duplicate delivery of the ack
					if err := m.AcknowledgeUsage(ctx, ivs); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		e.clock.Add(time.Duration(rng.IntN(8000)) * time.Millisecond)
	}
	// Everything ends; the host drains the ledger.
	now := e.clock.Now().UnixMilli()
	for _, id := range open {
		if err := e.st.EndUsage(ctx, id, now); err != nil {
			t.Fatal(err)
		}
		truth[id].end, truth[id].ended = now, true
	}
	for range 100 {
		ivs, err := m.PendingUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ivs) == 0 {
			break
		}
		bill(ivs)
		if err := m.AcknowledgeUsage(ctx, ivs); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := e.st.OpenUsages(ctx); len(left) != 0 {
		t.Errorf("open intervals left: %+v", left)
	}
	if ivs, _ := m.PendingUsage(ctx); len(ivs) != 0 {
		t.Errorf("pending intervals left: %+v", ivs)
	}
	if len(truth) == 0 {
		t.Fatal("no runtime ran")
	}
	for id, rt := range truth {
		got := billed[id] - starts[id]
		if _, ok := billed[id]; !ok || starts[id] != rt.start || got != rt.end-rt.start {
			t.Errorf("runtime %s billed %d ms (start %d), want %d ms (start %d)", id, got, starts[id], rt.end-rt.start, rt.start)
		}
	}
}

// TestLedgerCheckpoint: an open runtime's observation advances at most
// once per checkpoint, and acknowledging an old observation never undoes a
// newer one.
func TestLedgerCheckpoint(t *testing.T) {
	e := newEnv(t)
	m := e.manager(func(o *Options) { o.Checkpoint = time.Minute })
	ctx := context.Background()
	t0 := e.clock.Now().UnixMilli()
	if err := e.st.OpenUsage(ctx, store.UsageInterval{RuntimeID: "r1", ComputerID: "x", Backing: `{"kind":"process"}`, StartedAt: t0}); err != nil {
		t.Fatal(err)
	}
	read := func() []UsageInterval {
		t.Helper()
		ivs, err := m.PendingUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ivs
	}
	want := []UsageInterval{{RuntimeID: "r1", Backing: Backing{Kind: KindProcess}, StartedAt: t0, ObservedAt: t0, ComputerID: "x"}}
	if diff := cmp.Diff(want, read()); diff != "" {
		t.Errorf("first read (-want +got):\n%s", diff)
	}
	e.clock.Add(59 * time.Second)
	if diff := cmp.Diff(want, read()); diff != "" {
		t.Errorf("within the checkpoint (-want +got):\n%s", diff)
	}
	e.clock.Add(time.Second)
	want[0].ObservedAt = t0 + 60_000
	if diff := cmp.Diff(want, read()); diff != "" {
		t.Errorf("after the checkpoint (-want +got):\n%s", diff)
	}
	if err := m.AcknowledgeUsage(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 0 {
		t.Errorf("after the ack: %+v", got)
	}
	// A stale ack (an older observation) changes nothing.
	if err := m.AcknowledgeUsage(ctx, []UsageInterval{{RuntimeID: "r1", ObservedAt: t0}}); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 0 {
		t.Errorf("after a stale ack: %+v", got)
	}
	if err := m.AcknowledgeUsage(ctx, []UsageInterval{{ObservedAt: 1}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("ack without runtimeId = %v", err)
	}
	// More than 64 pending: pages of 64.
	for i := range 70 {
		if err := e.st.OpenUsage(ctx, store.UsageInterval{RuntimeID: fmt.Sprintf("p%02d", i), ComputerID: "x", Backing: `{"kind":"process"}`, StartedAt: t0 + int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(); len(got) != MaxPendingUsage {
		t.Errorf("%d pending, want %d", len(got), MaxPendingUsage)
	}
}

// TestUsageOfARealRuntime: a Computer's run is an interval from start to
// sleep, with an interval fact at the end.
func TestUsageOfARealRuntime(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{ID: "u", Start: true}); err != nil {
		t.Fatal(err)
	}
	rec, _ := e.st.Computer(ctx, "u")
	e.clock.Add(90 * time.Second)
	if err := m.Stop(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	ivs, err := m.PendingUsage(ctx)
	if err != nil || len(ivs) != 1 {
		t.Fatalf("PendingUsage = %+v, %v", ivs, err)
	}
	iv := ivs[0]
	if iv.RuntimeID != rec.RuntimeID || !iv.Ended || iv.ObservedAt-iv.StartedAt != 90_000 || iv.Backing.Kind != KindProcess || iv.ComputerID != "u" {
		t.Errorf("interval = %+v", iv)
	}
	var fact *Fact
	for _, f := range facts(t, m, "u") {
		if f.Kind == FactInterval {
			fact = &f
		}
	}
	if fact == nil || fact.RuntimeID != iv.RuntimeID || !fact.Ended || fact.ObservedAt != iv.ObservedAt || fact.StartedAt != iv.StartedAt {
		t.Errorf("interval fact = %+v, want one matching %+v", fact, iv)
	}
}

func TestFactJSON(t *testing.T) {
	code := 3
	cpu := int64(12)
	one := 1
	prov := Provenance{Actor: "alice", Via: "cli"}
	tests := []struct {
		name string
		f    Fact
		want string
	}{
		{"process.exited", Fact{Kind: FactProcessExited, ComputerID: "c", Provenance: prov, RequestID: "p1", ExitCode: &code, CPUTimeMs: &cpu, WallTimeMs: 40},
			`{"kind":"process.exited","requestId":"p1","exitCode":3,"cpuTimeMs":12,"wallTimeMs":40,"computerId":"c","provenance":{"actor":"alice","via":"cli"}}`},
		{"process.exited unmeasured", Fact{Kind: FactProcessExited, ComputerID: "c", Provenance: Provenance{Actor: "b"}, RequestID: "p2"},
			`{"kind":"process.exited","requestId":"p2","exitCode":null,"cpuTimeMs":null,"wallTimeMs":0,"computerId":"c","provenance":{"actor":"b"}}`},
		{"files.written", Fact{Kind: FactFilesWritten, ComputerID: "c", Provenance: prov, Path: "/a.txt", Bytes: 5},
			`{"kind":"files.written","path":"/a.txt","bytes":5,"computerId":"c","provenance":{"actor":"alice","via":"cli"}}`},
		{"egress", Fact{Kind: FactEgress, ComputerID: "c", Provenance: prov, Host: "example.com", Method: "GET", Status: 200},
			`{"kind":"egress","host":"example.com","method":"GET","status":200,"computerId":"c","provenance":{"actor":"alice","via":"cli"}}`},
		{"lifecycle queued", Fact{Kind: FactLifecycle, ComputerID: "c", Provenance: prov, ObservedAt: 9, State: State{State: StateQueued, Position: &one}},
			`{"kind":"lifecycle","observedAt":9,"state":{"state":"queued","position":1},"computerId":"c","provenance":{"actor":"alice","via":"cli"}}`},
		{"interval", Fact{Kind: FactInterval, ComputerID: "c", Provenance: prov, RuntimeID: "r", Backing: Backing{Kind: KindVM, HostID: "h"}, StartedAt: 1, ObservedAt: 2, Ended: true},
			`{"runtimeId":"r","backing":{"kind":"on-box-vm","hostId":"h"},"startedAt":1,"observedAt":2,"ended":true,"kind":"interval","computerId":"c","provenance":{"actor":"alice","via":"cli"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.f)
			if err != nil || string(b) != tt.want {
				t.Fatalf("Marshal = %s, %v\nwant %s", b, err, tt.want)
			}
			var back Fact
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.f, back); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
	for _, bad := range []string{
		`{"kind":"nope","computerId":"c","provenance":{"actor":"a"}}`,
		`{"kind":"egress","computerId":"c","provenance":{"actor":"a"}}`,
		`{"kind":"egress","host":"h","method":"GET","status":99,"computerId":"c","provenance":{"actor":"a"}}`,
		`{"kind":"egress","host":"h","status":200,"computerId":"c","provenance":{"actor":"a"}}`,
		`{"kind":"lifecycle","state":{"state":"queued"},"computerId":"c","provenance":{"actor":"a"}}`,
		`{"kind":"files.written","path":"/x","bytes":1,"computerId":"c"}`,
		`[1]`,
	} {
		var f Fact
		if err := json.Unmarshal([]byte(bad), &f); err == nil {
			t.Errorf("Unmarshal(%s) accepted %+v", bad, f)
		}
	}
}

func TestFactsLog(t *testing.T) {
	e := newEnv(t)
	m := e.manager(func(o *Options) { o.FactRetention = 24 * time.Hour })
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{ID: "f"}); err != nil {
		t.Fatal(err)
	}
	last := int64(len(facts(t, m, "f"))) // the create's lifecycle fact
	ch := m.WaitFacts(ctx, "f", last)
	select {
	case <-ch:
		t.Fatal("WaitFacts fired with no new fact")
	default:
	}
	w := Fact{Kind: FactFilesWritten, ComputerID: "f", Provenance: Provenance{Actor: "agent-7"}, Path: "/x", Bytes: 3}
	if err := m.Emit(ctx, w); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("WaitFacts did not fire after Emit")
	}
	select {
	case <-m.WaitFacts(ctx, "f", last):
	default:
		t.Error("WaitFacts for an older cursor did not fire at once")
	}
	recs, err := m.Facts(ctx, "f", last, 10)
	if err != nil || len(recs) != 1 || recs[0].Seq != last+1 || recs[0].Fact.Path != "/x" {
		t.Errorf("Facts after %d = %+v, %v", last, recs, err)
	}
	if err := m.Emit(ctx, Fact{Kind: FactEgress, ComputerID: "nope", Provenance: Provenance{Actor: "a"}, Host: "h", Method: "GET", Status: 200}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Emit(unknown computer) = %v", err)
	}
	if err := m.Emit(ctx, Fact{Kind: FactEgress, ComputerID: "f", Host: "h", Method: "GET", Status: 200}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Emit(no actor) = %v", err)
	}
	// Retention: old facts go, sequence numbers keep growing.
	e.clock.Add(25 * time.Hour)
	m.tick(ctx)
	if recs, _ := m.Facts(ctx, "f", 0, 0); len(recs) != 0 {
		t.Errorf("facts past retention: %+v", recs)
	}
	if err := m.Emit(ctx, w); err != nil {
		t.Fatal(err)
	}
	if recs, _ := m.Facts(ctx, "f", 0, 0); len(recs) != 1 || recs[0].Seq != last+2 {
		t.Errorf("after retention: %+v, want seq %d", recs, last+2)
	}
}
