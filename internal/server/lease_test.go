package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// startWithAgentArgs is start with extra flags for every replica's agent
// (e.g. a short --lease-check).
func startWithAgentArgs(t *testing.T, dir string, agentArgs ...string) *harness {
	t.Helper()
	t.Cleanup(func() { stopReplicas(t, dir) })
	o := Options{
		ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: dir,
		DrainTimeout: 10 * time.Second,
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	testOptions(&o)
	o.AgentCommand = append(o.AgentCommand, agentArgs...)
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, s: s, dir: dir, admin: "http://" + s.AdminAddr(), proxy: "http://" + s.ProxyAddr(), cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- s.Run(rctx) }()
	t.Cleanup(h.stop)
	return h
}

// vmSpecWith is a vm deployment of the test app with extra fields in its vm
// section and at the top level.
func vmSpecWith(id, vmExtra, extra string) string {
	return `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"vm":{"driver":"process","port":8080,"start_command":` +
		jsonString(appCommand()) + vmExtra + `}` + extra + `}`
}

// TestVMLeaseRenewedWhileBerthRuns checks the TTL backstop end to end: with
// a TTL of a few seconds, berth renews the replica's lease so it keeps
// serving across several TTLs; once berth has stopped (gracefully, which
// leaves replicas running for the next berth to adopt), nobody renews, and
// the replica ends by itself.
func TestVMLeaseRenewedWhileBerthRuns(t *testing.T) {
	skipShort(t, "lets leases pass on the real clock; fleet.TestLeasesRenewed covers renewal under synctest")
	// Twice the fleet's 2 s reconcile tick: renewed every tick, with about
	// a tick of slack before the lease would pass.
	const ttl = 4 * time.Second
	dir := t.TempDir()
	h := startWithAgentArgs(t, dir, "--lease-check=100ms")
	spec := vmSpecWith("ttl", fmt.Sprintf(`,"ttl_seconds":%d`, int(ttl/time.Second)), `,"scaling":{"min_replicas":1,"max_replicas":1}`)
	if r := h.json("POST", "/deployments", spec); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "a ready replica", func() bool { return h.status("ttl").Ready == 1 })
	id := h.status("ttl").VMs[0].SandboxID
	lease := filepath.Join(dir, "replicas", id, "lease")

	// Three TTLs: without renewals the replica would have ended (and been
	// replaced) twice over.
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		if r := get(t, h.proxy+"/", "ttl.test"); r.code != 200 || r.header.Get("X-Vm-Id") != id {
			t.Fatalf("while berth renews: %d from %q %q, want 200 from %s", r.code, r.header.Get("X-Vm-Id"), r.body, id)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if v := h.view("ttl"); v.Metrics.Autoscale.VMsCreated != 1 {
		t.Errorf("vms_created %d, want 1: the replica was replaced", v.Metrics.Autoscale.VMsCreated)
	}
	if b, err := os.ReadFile(lease); err != nil {
		t.Errorf("lease file: %v", err)
	} else if sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil || !time.Unix(sec, 0).After(time.Now()) {
		t.Errorf("lease file %q: want a deadline in the future", b)
	}

	h.stop()
	d, err := process.New(process.Options{Dir: filepath.Join(dir, "replicas")})
	if err != nil {
		t.Fatal(err)
	}
	var in vm.Instance
	waitFor(t, "the replica to end once nobody renews its lease", func() bool {
		in, err = d.Inspect(t.Context(), id)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		return in.State.Terminal()
	})
	if !strings.Contains(in.Reason, "lease expired") {
		t.Errorf("the replica ended in state %s with reason %q, want the lease to have ended it", in.State, in.Reason)
	}
}

// appPID finds the test app process serving on port: the one whose
// environment has BERTH_TEST_ROLE=app and PORT=port.
func appPID(t *testing.T, port string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var found []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		env := bytes.Split(b, []byte{0})
		has := func(kv string) bool {
			for _, v := range env {
				if string(v) == kv {
					return true
				}
			}
			return false
		}
		if has("BERTH_TEST_ROLE=app") && has("PORT="+port) {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("found app processes %v for port %s, want exactly one", found, port)
	}
	return found[0]
}

// TestVMCrashedAppIsReplaced kills a ready replica's app with SIGKILL: its
// agent exits with it, and the pool notices, replaces the replica with a new
// one and serves again.
func TestVMCrashedAppIsReplaced(t *testing.T) {
	h := start(t, "")
	if r := h.json("POST", "/deployments", vmSpec("crash", `,"scaling":{"min_replicas":1,"max_replicas":1}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "a ready replica", func() bool { return h.status("crash").Ready == 1 })
	old := h.status("crash").VMs[0].SandboxID
	drv := h.s.fleet.Driver("process")
	in, err := drv.Inspect(t.Context(), old)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(in.Addr, ":")
	pid := appPID(t, port)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "a new ready replica", func() bool {
		st := h.status("crash")
		return st.Ready == 1 && len(st.VMs) == 1 && st.VMs[0].SandboxID != old
	})
	r := get(t, h.proxy+"/", "crash.test")
	if r.code != 200 || r.header.Get("X-Vm-Id") == old || !strings.HasPrefix(r.header.Get("X-Vm-Id"), "berth-crash-") {
		t.Errorf("after the crash: %d from %q, want 200 from a new replica", r.code, r.header.Get("X-Vm-Id"))
	}
	if v := h.view("crash"); v.Metrics.Autoscale.VMsCreated != 2 {
		t.Errorf("vms_created %d, want 2", v.Metrics.Autoscale.VMsCreated)
	}
	// The crashed replica is cleaned up, not left behind.
	waitFor(t, "the crashed replica to be removed", func() bool {
		_, err := drv.Inspect(t.Context(), old)
		return err != nil
	})
	if _, err := drv.Inspect(t.Context(), old); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Inspect of the crashed replica: %v, want not found", err)
	}
}
