package process

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// BenchmarkStartSpare measures a Start that takes a spare agent, step by
// step (see assign): "nice" (berth's CPU priority back), "cgroup" (the
// replica's cgroup, the spare moved in), "state" (state.json, the rename
// into place), "prepare" (the directories), "assign" (the agent's round
// trip, until the replica's agent answers); then "listen", from Start's
// return until the app (bench/coldapp) listens, seen by connecting in a
// tight loop. As root the replica is isolated and in a cgroup.
func BenchmarkStartSpare(b *testing.B) {
	app := filepath.Join(b.TempDir(), "coldapp")
	if os.Geteuid() == 0 {
		// Readable by the sandbox's uid, outside its private /tmp.
		dir, err := os.MkdirTemp("/var/tmp", "bpb")
		if err != nil {
			b.Fatal(err)
		}
		os.Chmod(dir, 0o755)
		b.Cleanup(func() { os.RemoveAll(dir) })
		app = filepath.Join(dir, "coldapp")
	}
	if out, err := exec.Command("go", "build", "-o", app, "../../../bench/coldapp").CombinedOutput(); err != nil {
		b.Fatalf("building coldapp: %v\n%s", err, out)
	}
	dir, err := os.MkdirTemp("", "bp")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	isolate := os.Geteuid() == 0
	o := options(b, dir, isolate)
	o.CgroupParent = ""
	if p := testCgroupParent(); p != "" {
		o.CgroupParent = p
	} else if isolate {
		o.AllowUnlimited = true
	}
	d, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	d.Prewarm(vm.Spec{})
	var mu sync.Mutex
	steps := map[string][]time.Duration{}
	d.trace = func(step string, dur time.Duration) {
		mu.Lock()
		steps[step] = append(steps[step], dur)
		mu.Unlock()
	}
	var start, listen, total []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		waitSpares(b, d, d.pool.N())
		b.StartTimer()
		id := vm.Name("bench", uint64(i+1))
		t0 := time.Now()
		inst, err := d.Start(context.Background(), vm.Spec{Name: id, Deployment: "bench", Command: "exec " + app})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		for {
			if c, err := net.Dial("tcp", inst.Addr); err == nil {
				c.Close()
				break
			}
			if time.Since(t0) > 30*time.Second {
				b.Fatalf("%s never listened", id)
			}
			// Not a spin: on a small host it would take a CPU from the app.
			time.Sleep(20 * time.Microsecond)
		}
		t2 := time.Now()
		start = append(start, t1.Sub(t0))
		listen = append(listen, t2.Sub(t1))
		total = append(total, t2.Sub(t0))
		b.StopTimer()
		if err := d.Stop(context.Background(), id, time.Second); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	vmtest.ReportP50P90(b, "start", start)
	vmtest.ReportP50P90(b, "listen", listen)
	vmtest.ReportP50P90(b, "total", total)
	for _, s := range []string{"nice", "cgroup", "state", "prepare", "assign"} {
		vmtest.ReportP50P90(b, s, steps[s])
	}
}

// waitSpares waits until n spares are ready: a scale from zero follows a
// quiet spell in which the driver topped them up.
func waitSpares(b *testing.B, d *Driver, n int) {
	b.Helper()
	for deadline := time.Now().Add(30 * time.Second); len(d.pool.Ready(struct{}{})) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal(fmt.Sprintf("%d spares never got ready", n))
		}
	}
}
