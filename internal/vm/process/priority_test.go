package process

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
)

// cpuWeightOf reads a replica's cgroup CPU weight (cpu.weight on cgroup
// v2, cpu.shares on v1), and false when it has no cpu cgroup.
func cpuWeightOf(t *testing.T, d *Driver, st state) (w int, v1, ok bool) {
	t.Helper()
	var path string
	switch {
	case st.Cgroup != "" && d.cg.cpu:
		path = filepath.Join(st.Cgroup, "cpu.weight")
	default:
		for i, p := range d.cg.v1 {
			if p.controller == "cpu" && i < len(st.CgroupsV1) {
				path, v1 = filepath.Join(st.CgroupsV1[i], "cpu.shares"), true
			}
		}
	}
	if path == "" {
		return 0, false, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return w, v1, true
}

// wantPriority checks a replica's CPU weight (where it has a cpu cgroup)
// and that every thread of its processes, the app's included, runs at
// nice.
func wantPriority(t *testing.T, d *Driver, id string, low bool, nice int) {
	t.Helper()
	st, err := d.rd.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	if w, v1, ok := cpuWeightOf(t, d, st); ok {
		t.Logf("%s: cpu weight %d (cgroup v1 %v)", id, w, v1)
		want := map[[2]bool]string{{false, false}: normalWeight, {false, true}: lowWeight, {true, false}: normalShares, {true, true}: lowShares}[[2]bool{v1, low}]
		if strconv.Itoa(w) != want {
			t.Errorf("%s: cpu weight %d (cgroup v1 %v), want %s", id, w, v1, want)
		}
	} else {
		t.Logf("%s has no cpu cgroup; only its nice values are checked", id)
	}
	pids := d.members(st)
	if len(pids) < 2 {
		t.Fatalf("%s: processes %v, want the agent and the app", id, pids)
	}
	for _, pid := range pids {
		for _, n := range niceValues(t, pid) {
			if n != nice {
				t.Errorf("%s: a thread of pid %d at nice %d, want %d", id, pid, n, nice)
			}
		}
	}
}

// TestBackground: a replica started in the background, cold or from a
// spare, runs at the lowest CPU weight with every thread at nice 19
// until Foreground gives it the normal weight and berth's nice; a Start,
// cold or from a spare, has the normal ones from the start.
func TestBackground(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a background replica's priority is given back as root")
	}
	own, err := proc.OwnNice()
	if err != nil || own == proc.BackgroundNice {
		t.Skipf("berth's own nice value: %d, %v", own, err)
	}
	ctx := t.Context()
	dir := shortTempDir(t)
	t.Cleanup(func() { checkNoProcesses(t, dir) })
	o := options(t, dir, true)
	o.CgroupParent = testCgroupParent() // "": cgroup v1 where there is no v2
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	run := func(n uint64, low bool, d *Driver) string {
		t.Helper()
		id := vm.Name("bg", n)
		s := vm.Spec{Name: id, Command: appCommand(t, "app")}
		start := d.Start
		if low {
			start = d.StartBackground
		}
		if _, err := start(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Stop(context.Background(), id, time.Second) })
		waitServing(t, d, id)
		return id
	}

	// Cold (no spare before the first Start), in the background.
	id := run(1, true, d)
	wantPriority(t, d, id, true, proc.BackgroundNice)
	if err := d.Foreground(ctx, id); err != nil {
		t.Fatal(err)
	}
	wantPriority(t, d, id, false, own)

	// From a spare, in the background, then normally.
	readySpares(t, d, DefaultSpares)
	id = run(2, true, d)
	wantPriority(t, d, id, true, proc.BackgroundNice)
	if err := d.Foreground(ctx, id); err != nil {
		t.Fatal(err)
	}
	wantPriority(t, d, id, false, own)
	readySpares(t, d, DefaultSpares)
	id = run(3, false, d)
	wantPriority(t, d, id, false, own)
	if err := d.Foreground(ctx, id); err != nil {
		t.Errorf("Foreground of a replica started normally: %v", err)
	}
	wantPriority(t, d, id, false, own)

	// Cold, normally.
	none := 0
	o.Dir, o.Spares = shortTempDir(t), &none
	cold, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cold.Close() })
	id = run(4, false, cold)
	wantPriority(t, cold, id, false, own)

	if err := d.Foreground(ctx, vm.Name("bg", 99)); err == nil {
		t.Error("Foreground of an unknown replica succeeded")
	}
}
