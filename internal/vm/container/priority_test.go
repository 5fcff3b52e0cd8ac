package container

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// threadNices reads field 19 (nice) of /proc/<pid>/task/<tid>/stat for
// every thread of every process in the replica's cgroup (its init first).
func threadNices(t *testing.T, d *Driver, id string) map[string]int {
	t.Helper()
	st, err := d.rd.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{st.PID}
	if dirs := cpuCgroupDirs(st.Cgroup); len(dirs) > 0 {
		b, _ := os.ReadFile(filepath.Join(dirs[0].path, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != st.PID {
				pids = append(pids, pid)
			}
		}
	}
	out := map[string]int{}
	for _, pid := range pids {
		for _, tid := range proc.Threads(pid) {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
			if err != nil {
				continue // ended meanwhile
			}
			i := bytes.LastIndexByte(b, ')')
			fs := strings.Fields(string(b[i+1:]))
			if len(fs) < 17 {
				t.Fatalf("/proc/%d/task/%d/stat: %q", pid, tid, b)
			}
			n, err := strconv.Atoi(fs[16]) // field 19; fs[0] is field 3
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%d/%d", pid, tid)] = n
		}
	}
	return out
}

// cpuWeight reads the replica's cgroup CPU weight: cpu.weight on cgroup
// v2, cpu.shares on v1 (and which it read).
func cpuWeight(t *testing.T, d *Driver, id string) (int, bool) {
	t.Helper()
	st, err := d.rd.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	dirs := cpuCgroupDirs(st.Cgroup)
	if len(dirs) == 0 {
		t.Fatalf("no cpu cgroup for %s (%s)", id, st.Cgroup)
	}
	file := "cpu.weight"
	if dirs[0].v1 {
		file = "cpu.shares"
	}
	b, err := os.ReadFile(filepath.Join(dirs[0].path, file))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n, dirs[0].v1
}

// wantPriority checks the replica's cgroup weight and that every thread
// of it has nice value nice.
func wantPriority(t *testing.T, d *Driver, id string, low bool, nice int) {
	t.Helper()
	w, v1 := cpuWeight(t, d, id)
	want := normalWeight
	switch {
	case v1 && low:
		want = lowShares
	case v1:
		want = normalShares
	case low:
		want = lowWeight
	}
	if w != want {
		t.Errorf("%s: cpu weight %d (cgroup v1 %v), want %d", id, w, v1, want)
	}
	ns := threadNices(t, d, id)
	if len(ns) == 0 {
		t.Fatalf("%s: no threads", id)
	}
	t.Logf("%s: cpu weight %d (cgroup v1 %v), threads' nice values %v", id, w, v1, ns)
	for task, n := range ns {
		if n != nice {
			t.Errorf("%s: thread %s at nice %d, want %d", id, task, n, nice)
		}
	}
}

// answering waits until the replica's app answers, so that its processes
// (the app besides the init) are there.
func answering(t *testing.T, inst vm.Instance) {
	t.Helper()
	eventually(t, "the app to answer", func() bool {
		resp, err := httpClient.Get("http://" + inst.Addr + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// TestBackground: a replica started in the background (cold, or from a
// spare made at the normal priority) has the lowest CPU weight and every
// thread at nice 19, its app included, until Foreground gives it the
// normal weight and berth's own nice; a Start, cold or from a spare made
// after a StartBackground (at the low priority), has the normal ones from
// the start.
func TestBackground(t *testing.T) {
	e := setup(t)
	own, err := proc.OwnNice()
	if err != nil {
		t.Fatal(err)
	}
	if own == proc.BackgroundNice {
		t.Skip("the test runs at nice 19 already")
	}
	ctx := t.Context()
	d := newDriver(t)
	kind := kindOf(spec("bg", app))

	// Cold, in the background.
	s := spec("bg", app)
	inst, err := d.StartBackground(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), s.Name, time.Second) })
	answering(t, inst)
	if st, _ := d.rd.Load(s.Name); st.RuntimeID != "" {
		t.Fatalf("the first replica started from a spare (%s)", st.RuntimeID)
	}
	wantPriority(t, d, s.Name, true, proc.BackgroundNice)
	if err := d.Foreground(ctx, s.Name); err != nil {
		t.Fatal(err)
	}
	wantPriority(t, d, s.Name, false, own)
	if err := d.Foreground(ctx, s.Name); err != nil {
		t.Errorf("Foreground again: %v", err)
	}

	// The spare made after it is at the low priority; a Start takes it
	// and gets the normal one.
	eventually(t, "a spare", func() bool { return readySpares(d, kind) == 1 })
	if sp := d.pool.Ready(kind)[0]; !sp.low {
		t.Error("the spare made after a StartBackground is not at the low priority")
	}
	s2 := spec("bg", app)
	inst2 := start(t, d, s2)
	if st, _ := d.rd.Load(s2.Name); st.RuntimeID == "" {
		t.Fatal("the second replica did not start from the spare")
	}
	answering(t, inst2)
	wantPriority(t, d, s2.Name, false, own)

	// The spare made after that Start is at the normal priority; a
	// StartBackground takes it and gets the low one.
	eventually(t, "the next spare", func() bool { return readySpares(d, kind) == 1 })
	if sp := d.pool.Ready(kind)[0]; sp.low {
		t.Error("the spare made after a Start is at the low priority")
	}
	s3 := spec("bg", app)
	inst3, err := d.StartBackground(ctx, s3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), s3.Name, time.Second) })
	if st, _ := d.rd.Load(s3.Name); st.RuntimeID == "" {
		t.Fatal("the third replica did not start from the spare")
	}
	answering(t, inst3)
	wantPriority(t, d, s3.Name, true, proc.BackgroundNice)
	if err := d.Foreground(ctx, s3.Name); err != nil {
		t.Fatal(err)
	}
	wantPriority(t, d, s3.Name, false, own)

	// Cold, normally: a driver without spares.
	none := 0
	cold, err := New(Options{
		Dir: shortTempDir(t), Images: e.images, Net: e.net, Agent: e.agent, CgroupParent: testCgroupParent,
		Runtime: os.Getenv("BERTH_TEST_OCI_RUNTIME"), Spares: &none,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cold.Close() })
	s4 := spec("bg", app)
	inst4 := start(t, cold, s4)
	answering(t, inst4)
	wantPriority(t, cold, s4.Name, false, own)

	if err := d.Foreground(ctx, "berth-bg-000000000000"); err == nil {
		t.Error("Foreground of an unknown replica succeeded")
	}
}

// TestForegroundWhileStarting: Foreground of a replica whose start is
// still under way (no init yet) renices the runtime's processes at work
// on it, found by its bundle on their command line.
func TestForegroundWhileStarting(t *testing.T) {
	setup(t)
	own, err := proc.OwnNice()
	if err != nil || own == proc.BackgroundNice {
		t.Skipf("the test's own nice value: %d, %v", own, err)
	}
	d := newDriver(t)
	id := vm.Name("starting", 1)
	release, err := d.rd.Claim(id)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	st := state{ID: id, Deployment: "starting", Cgroup: d.cgParent + "/" + id}
	if err := replicadir.WriteState(d.path(id), st); err != nil {
		t.Fatal(err)
	}
	// Stands in for the runtime: a process naming the bundle, at nice 19.
	rt := exec.Command("/bin/sh", "-c", "sleep 30; :", d.path(id, bundleDir))
	rt.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its sleep ends with it
	if err := proc.StartNiced(rt, proc.BackgroundNice); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-rt.Process.Pid, syscall.SIGKILL); rt.Wait() }()
	if n, _ := proc.Nice(rt.Process.Pid); n != proc.BackgroundNice {
		t.Fatalf("the stand-in runs at nice %d, want %d", n, proc.BackgroundNice)
	}
	if err := d.Foreground(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if got := withArg(d.path(id, bundleDir)); len(got) != 1 || got[0] != rt.Process.Pid {
		t.Fatalf("processes naming the bundle after Foreground: %v, want the stand-in %d", got, rt.Process.Pid)
	}
	if n, _ := proc.Nice(rt.Process.Pid); n != own {
		t.Errorf("the runtime's process at nice %d after Foreground, want %d", n, own)
	}
}
