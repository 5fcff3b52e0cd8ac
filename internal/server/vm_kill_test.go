package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestVMKillNineUnderLoad runs berth in a child process with a vm deployment
// of two replicas, kills it with SIGKILL while requests are in flight, and
// starts a new berth on the same data directory: it adopts the same two
// replicas (creating none, duplicating none, orphaning none) and serves
// again.
func TestVMKillNineUnderLoad(t *testing.T) {
	if os.Getenv("BERTH_VM_CHILD") == "1" {
		return
	}
	dir := t.TempDir()
	// Whatever happens below, no replica outlives the test.
	t.Cleanup(func() { stopReplicas(t, dir) })
	child, cmd := startChild(t, "TestVMServerChild", dir, "BERTH_VM_CHILD=1", "BERTH_CHILD_DIR="+dir)
	if r := child.json("POST", "/deployments", vmSpec("busy", `,"scaling":{"min_replicas":2,"max_replicas":2}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "two ready replicas", func() bool { return child.status("busy").Ready == 2 })
	before := ids(child.status("busy"))

	// A bounded load: 4 clients, at most 300 requests each, stopped after
	// the kill.
	var ok, failed, failedBefore atomic.Int64
	var killed atomic.Bool
	fail := func() {
		failed.Add(1)
		if !killed.Load() {
			failedBefore.Add(1)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for range 4 {
		wg.Go(func() {
			for range 300 {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", child.proxy+"/", nil)
				req.Host = "busy.test"
				resp, err := client.Do(req)
				if err != nil {
					fail()
					time.Sleep(5 * time.Millisecond)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok.Add(1)
				} else {
					fail()
				}
			}
		})
	}
	waitFor(t, "load on the child", func() bool { return ok.Load() >= 40 })
	killed.Store(true)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	close(stop)
	wg.Wait()
	if n := failedBefore.Load(); n != 0 {
		t.Errorf("%d requests failed before the kill", n)
	}
	t.Logf("load: %d ok, %d failed once berth was killed", ok.Load(), failed.Load())

	h := start(t, dir)
	waitFor(t, "the replicas to be adopted", func() bool { return h.status("busy").Ready == 2 })
	if after := ids(h.status("busy")); !slices.Equal(before, after) {
		t.Errorf("replicas before the kill %v, after %v", before, after)
	}
	insts, err := h.s.fleet.Driver("process").List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, in := range insts {
		listed = append(listed, in.ID)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, before) {
		t.Errorf("the driver lists %v, want exactly %v", listed, before)
	}
	if v := h.view("busy"); v.Metrics.Autoscale.VMsCreated != 0 {
		t.Errorf("the new berth created %d replicas instead of adopting", v.Metrics.Autoscale.VMsCreated)
	}
	if stray := replicaProcesses(t, dir, before); len(stray) != 0 {
		t.Errorf("processes of no adopted replica: %v", stray)
	}
	seen := map[string]bool{}
	for range 40 {
		r := get(t, h.proxy+"/", "busy.test")
		if r.code != 200 {
			t.Fatalf("after the restart: %d %q", r.code, r.body)
		}
		seen[r.header.Get("X-Vm-Id")] = true
	}
	for id := range seen {
		if !slices.Contains(before, id) {
			t.Errorf("served by %q, which is not one of the adopted replicas %v", id, before)
		}
	}
}

// replicaProcesses lists live processes whose command line names a replica
// directory under dir other than those of keep: agents of replicas nobody
// tracks.
func replicaProcesses(t *testing.T, dir string, keep []string) []string {
	t.Helper()
	root := []byte(filepath.Join(dir, "replicas") + "/")
	ents, _ := os.ReadDir("/proc")
	var stray []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, root) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && len(st) > i+2 && (st[i+2] == 'Z' || st[i+2] == 'X') {
				continue // exited, awaiting its reaper
			}
		}
		mine := false
		for _, id := range keep {
			if bytes.Contains(b, append(root, id+"/"...)) {
				mine = true
			}
		}
		if !mine {
			stray = append(stray, fmt.Sprintf("%s: %s", e.Name(), bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return stray
}

// TestVMServerChild is the child half of TestVMKillNineUnderLoad: a berth
// whose replicas run the test binary as their agent.
func TestVMServerChild(t *testing.T) {
	if os.Getenv("BERTH_VM_CHILD") != "1" {
		t.Skip("helper process for TestVMKillNineUnderLoad")
	}
	o := Options{ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: os.Getenv("BERTH_CHILD_DIR"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	testOptions(&o)
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ADMIN %s\nPROXY %s\n", s.AdminAddr(), s.ProxyAddr())
	s.Run(context.Background()) // until killed
}

// startChild runs a berth in a child process of this test binary (the
// test named child, which serves on data directory dir and prints
// "ADMIN addr" and "PROXY addr"), with env added to its environment, and
// returns a harness on it and the process, for the test to kill with
// SIGKILL. The process is killed when the test ends, whatever happened.
func startChild(t *testing.T, child, dir string, env ...string) (*harness, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	h := &harness{t: t, dir: dir, stopped: true}
	// Hang guard: a child that never reports is killed, which ends the scan.
	guard := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(out)
	for (h.admin == "" || h.proxy == "") && sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ADMIN "); ok {
			h.admin = "http://" + a
		}
		if a, ok := strings.CutPrefix(sc.Text(), "PROXY "); ok {
			h.proxy = "http://" + a
		}
	}
	guard.Stop()
	if h.admin == "" || h.proxy == "" {
		t.Fatal("the child did not report its addresses")
	}
	return h, cmd
}
