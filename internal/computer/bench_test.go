//go:build linux

package computer

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// benchManager is a Manager on the process driver for benchmarks.
func benchManager(b *testing.B) *Manager {
	b.Helper()
	dir, err := os.MkdirTemp("", "cmpb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	d, err := process.New(process.Options{Dir: dir + "/r", AgentCommand: []string{os.Args[0]}, AgentEnv: []string{"BERTH_TEST_ROLE=agent"}, CgroupParent: "none"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		insts, _ := d.List(context.Background())
		for _, in := range insts {
			d.Stop(context.Background(), in.ID, time.Second)
		}
	})
	st, err := store.Open(dir + "/data")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	m, err := New(context.Background(), Options{Store: st, Drivers: map[string]vm.Driver{"process": d}, DataDir: dir + "/data", StopGrace: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// firstExec runs `true` in Computer id (waking it) and returns how long
// that took.
func firstExec(b *testing.B, m *Manager, id string) time.Duration {
	ctx := context.Background()
	start := time.Now()
	c, release, err := m.Use(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	res, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"true"}})
	d := time.Since(start)
	release()
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("exec: %+v, %v", res, err)
	}
	return d
}

func reportP50(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(ds[len(ds)*95/100].Microseconds())/1000, "p95-ms")
}

// BenchmarkCreateFirstExec: Create → first exec on the process backing
// (the target is ≤ 50 ms p50).
func BenchmarkCreateFirstExec(b *testing.B) {
	m := benchManager(b)
	ctx := context.Background()
	var ds []time.Duration
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("b%d", i)
		start := time.Now()
		if _, err := m.Create(ctx, CreateRequest{ID: id}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start)+firstExec(b, m, id))
		b.StopTimer()
		if err := m.Delete(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportP50(b, ds)
}

// BenchmarkWakeFirstExec: wake from sleep → first exec on the process
// backing.
func BenchmarkWakeFirstExec(b *testing.B) {
	m := benchManager(b)
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{ID: "w"}); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for b.Loop() {
		ds = append(ds, firstExec(b, m, "w"))
		b.StopTimer()
		if err := m.Stop(ctx, "w"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportP50(b, ds)
}
