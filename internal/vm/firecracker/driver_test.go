package firecracker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
	"github.com/berth-dev/berth/internal/vm/proc"
)

// The test binary plays the VMM: BERTH_FC_TEST_ROLE makes it the fake
// firecracker or the fake jailer (see fake_test.go). On a KVM host it is
// also the guest's init and app (see conformance_test.go).
func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case "firecracker":
		os.Exit(fakeFirecrackerMain(os.Args[1:], ""))
	case "jailer":
		os.Exit(fakeJailerMain(os.Args[1:]))
	}
	if code, ok := guestMain(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// fakeNet is the host network of the tests: it hands out taps and
// addresses from the documentation range (never contacted) and records
// what exists.
type fakeNet struct {
	mu      sync.Mutex
	n       int
	taps    map[string]string // id → tap
	deleted []string
	fail    error
}

func (n *fakeNet) CreateTap(ctx context.Context, id string) (tap, guestIP, hostIP, mac string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fail != nil {
		return "", "", "", "", n.fail
	}
	n.n++
	tap = fmt.Sprintf("fctap%d", n.n)
	n.taps[id] = tap
	return tap, fmt.Sprintf("192.0.2.%d/24", 10+n.n), "192.0.2.1", "", nil
}

func (n *fakeNet) DeleteTap(ctx context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.taps, id)
	n.deleted = append(n.deleted, id)
	return nil
}

func (n *fakeNet) live() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.taps)
}

// fakeImages serves one small "disk" for every name.
type fakeImages struct{ path string }

func (i fakeImages) Ext4(name string, sizeGB int) (string, error) {
	if name == "missing" {
		return "", errors.New("no such image")
	}
	return i.path, nil
}

// harness is a Driver over a fake VMM binary, with its recordings.
type harness struct {
	t      *testing.T
	d      *Driver
	o      Options
	net    *fakeNet
	rec    string // the fake's recording file
	image  string
	kernel string
}

// shortTempDir is a temporary directory with a short path: the VMM's unix
// sockets live in it.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// fakeBinary writes a script named name that runs this test binary in role.
func fakeBinary(t *testing.T, dir, name, role, rec, fail string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	script := fmt.Sprintf("#!/bin/sh\nexec env %s=%s %s=%s %s=%q %s \"$@\"\n",
		envRole, role, envRecord, quote(rec), envFail, fail, quote(exe))
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func newHarness(t *testing.T, tweak func(*Options)) *harness {
	t.Helper()
	base := shortTempDir(t)
	bin := filepath.Join(base, "bin")
	os.Mkdir(bin, 0o755)
	h := &harness{t: t, net: &fakeNet{taps: map[string]string{}}, rec: filepath.Join(base, "requests.jsonl")}
	h.image = filepath.Join(base, "image.ext4")
	os.WriteFile(h.image, []byte("an ext4 image, as far as the fake knows"), 0o600)
	h.kernel = filepath.Join(base, "vmlinux")
	os.WriteFile(h.kernel, []byte("a kernel"), 0o600)
	kvm := filepath.Join(base, "kvm")
	os.WriteFile(kvm, nil, 0o600)
	h.o = Options{
		Dir:            filepath.Join(base, "r"),
		FirecrackerBin: fakeBinary(t, bin, "firecracker", "firecracker", h.rec, ""),
		Kernel:         h.kernel,
		Images:         fakeImages{h.image},
		Net:            h.net,
		KVMDevice:      kvm,
	}
	if tweak != nil {
		tweak(&h.o)
	}
	d, err := New(h.o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.d = d
	return h
}

// records returns what the fake VMMs served so far, and checks every
// request body and every answer against the API spec.
func (h *harness) records() []apiRecord {
	h.t.Helper()
	f, err := os.Open(h.rec)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	var recs []apiRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r apiRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			h.t.Fatalf("recording: %v", err)
		}
		recs = append(recs, r)
	}
	checkRecords(h.t, recs)
	return recs
}

// checkRecords validates recorded requests and answers against the spec.
func checkRecords(t *testing.T, recs []apiRecord) {
	t.Helper()
	s := loadSpec(t)
	for _, r := range recs {
		if r.Method == "EXEC" {
			continue
		}
		if err := s.checkRequest(r.Method, r.Path, r.Body); err != nil {
			t.Errorf("request does not match the API spec: %v", err)
		}
		if err := s.checkResponse(r.Method, r.Path, r.Status, r.Answer); err != nil {
			t.Errorf("the fake's answer does not match the API spec: %v", err)
		}
	}
}

// calls lists records as "METHOD /path" for sequence comparisons.
func calls(recs []apiRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Method + " " + r.Path
	}
	return out
}

func body[T any](t *testing.T, r apiRecord) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("%s %s body %s: %v", r.Method, r.Path, r.Body, err)
	}
	return v
}

func testID(deployment string) string {
	return vm.Name(deployment, uint64(time.Now().UnixNano()))
}

// eventually polls cond (a hang guard, not a timing assertion).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var startSequence = []string{
	"GET /", "PUT /logger", "PUT /machine-config", "PUT /boot-source",
	"PUT /drives/rootfs", "PUT /drives/config", "PUT /network-interfaces/eth0", "PUT /vsock",
	"PUT /actions",
}

func TestStartStop(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.KernelArgs = "quiet" })
	id := testID("web")
	spec := vm.Spec{
		Name: id, Deployment: "web", Image: "app", SizeClass: "medium",
		Command:    "echo hello; echo oops >&2; exec sleep 60",
		Env:        map[string]string{"GREETING": "hi there", "PORT": "1"},
		SetupHooks: []string{"true"},
		WorkDir:    "srv",
		TTL:        time.Hour,
	}
	inst, err := h.d.Start(t.Context(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if inst.State != vm.StateRunning || inst.Addr != "192.0.2.11:8080" || inst.ID != id || inst.Deployment != "web" {
		t.Errorf("Start = %+v, want running at 192.0.2.11:8080", inst)
	}
	recs := h.records()
	if got := calls(recs); !slices.Equal(got, startSequence) {
		t.Fatalf("Start made the requests\n%q\nwant\n%q", got, startSequence)
	}
	dir := filepath.Join(h.o.Dir, id)
	if m := body[MachineConfig](t, recs[2]); m.VCPUCount != 2 || m.MemSizeMiB != 2048 {
		t.Errorf("machine config %+v, want the medium size class (2 vCPUs, 2048 MiB)", m)
	}
	boot := body[BootSource](t, recs[3])
	if boot.KernelImagePath != h.kernel {
		t.Errorf("kernel %q, want %q", boot.KernelImagePath, h.kernel)
	}
	for _, want := range []string{"console=ttyS0", "reboot=k", "panic=1", "ip=192.0.2.11::192.0.2.1:255.255.255.0::eth0:off", " quiet ",
		"init=/berth-agent -- agent --vm-init --config /dev/vdb"} {
		if !strings.Contains(boot.BootArgs, want) {
			t.Errorf("boot args %q lack %q", boot.BootArgs, want)
		}
	}
	if !strings.HasSuffix(boot.BootArgs, "--config /dev/vdb") {
		t.Errorf("boot args %q: the init arguments must come last", boot.BootArgs)
	}
	root := body[Drive](t, recs[4])
	if root != (Drive{DriveID: "rootfs", PathOnHost: filepath.Join(dir, rootfsFile), IsRootDevice: true}) {
		t.Errorf("root drive %+v", root)
	}
	if b, _ := os.ReadFile(root.PathOnHost); string(b) != "an ext4 image, as far as the fake knows" {
		t.Errorf("the root disk is not a copy of the image: %q", b)
	}
	cfgDrive := body[Drive](t, recs[5])
	if cfgDrive != (Drive{DriveID: "config", PathOnHost: filepath.Join(dir, configFile), IsReadOnly: true}) {
		t.Errorf("config drive %+v", cfgDrive)
	}
	if n := body[NetworkInterface](t, recs[6]); n.HostDevName != "fctap1" || n.IfaceID != "eth0" || !strings.HasPrefix(n.GuestMAC, "02:fc:") {
		t.Errorf("network interface %+v", n)
	}
	if v := body[Vsock](t, recs[7]); v != (Vsock{GuestCID: 3, UDSPath: filepath.Join(dir, vsockSock)}) {
		t.Errorf("vsock %+v", v)
	}
	if a := string(recs[8].Body); a != `{"action_type":"InstanceStart"}` {
		t.Errorf("action %s", a)
	}

	// The config drive tells the agent everything else.
	f, err := os.Open(cfgDrive.PathOnHost)
	if err != nil {
		t.Fatal(err)
	}
	var cfg agent.GuestConfig
	if err := json.NewDecoder(f).Decode(&cfg); err != nil {
		t.Fatalf("config drive: %v", err)
	}
	f.Close()
	wantArgs := []string{"--listen", "vsock:10052", "--log", "/dev/ttyS0", "--lease-file", "/run/berth/lease", "--workdir", "/srv",
		"--setup", "true", "--", "/bin/sh", "-c", spec.Command}
	if !slices.Equal(cfg.Args, wantArgs) {
		t.Errorf("agent args %q, want %q", cfg.Args, wantArgs)
	}
	wantEnv := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "HOSTNAME=" + id,
		"GREETING=hi there", "PORT=8080"}
	if !slices.Equal(cfg.Env, wantEnv) {
		t.Errorf("guest env %q, want %q", cfg.Env, wantEnv)
	}
	if cfg.Hostname != id || cfg.Files[guestLease] == "" {
		t.Errorf("config hostname %q, files %v: want the id and an initial lease", cfg.Hostname, cfg.Files)
	}
	state, _ := os.ReadFile(filepath.Join(dir, stateFile))
	if strings.Contains(string(state), "hi there") {
		t.Errorf("state.json holds the environment: %s", state)
	}

	// The console carries the app's output.
	var lines []vm.LogLine
	eventually(t, "both output lines in Logs", func() bool {
		lines, err = h.d.Logs(t.Context(), id, 10)
		if err != nil {
			t.Fatalf("Logs: %v", err)
		}
		return len(lines) == 2
	})
	// stdout and stderr are separate pipes: their order is not defined.
	streams := map[string]string{}
	for _, l := range lines {
		streams[l.Text] = l.Stream
		if l.Time.IsZero() {
			t.Errorf("line %q has no time", l.Text)
		}
	}
	if streams["hello"] != "stdout" || streams["oops"] != "stderr" {
		t.Errorf("Logs = %+v, want hello on stdout and oops on stderr", lines)
	}
	if got, _ := h.d.Logs(t.Context(), id, 1); len(got) != 1 || got[0].Text != lines[1].Text {
		t.Errorf("Logs(n=1) = %+v, want the last line %q", got, lines[1].Text)
	}
	if list, err := h.d.List(t.Context()); err != nil || len(list) != 1 || list[0].State != vm.StateRunning {
		t.Errorf("List = %+v, %v; want the running replica", list, err)
	}
	if u, err := h.d.Usage(t.Context(), id); err != nil || u.MemoryBytes <= 0 {
		t.Errorf("Usage = %+v, %v; want the VMM's memory", u, err)
	}

	if _, err := h.d.Start(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second Start: %v, want an error saying it exists", err)
	}

	pid := inst.PID
	if err := h.d.Stop(t.Context(), id, 5*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	recs = h.records()
	if got := calls(recs[len(startSequence):]); !slices.Equal(got, []string{"PUT /actions"}) || string(recs[len(recs)-1].Body) != `{"action_type":"SendCtrlAltDel"}` {
		t.Errorf("Stop made the requests %q (last %s), want SendCtrlAltDel", got, recs[len(recs)-1].Body)
	}
	if processExists(pid) {
		t.Errorf("the VMM (pid %d) survived Stop", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the replica directory survived Stop: %v", err)
	}
	if h.net.live() != 0 {
		t.Errorf("taps left after Stop: %v", h.net.taps)
	}
	if _, err := h.d.Inspect(t.Context(), id); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Inspect after Stop: %v, want ErrNotFound", err)
	}
	if err := h.d.Stop(t.Context(), id, time.Second); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("second Stop: %v, want ErrNotFound", err)
	}
}

// processExists reports whether pid is a live (non-zombie) process.
func processExists(pid int) bool {
	ps, err := proc.ReadStat(pid)
	return err == nil && ps.State != 'Z' && ps.State != 'X'
}

func TestCrash(t *testing.T) {
	h := newHarness(t, nil)
	id := testID("crash")
	if _, err := h.d.Start(t.Context(), vm.Spec{Name: id, Image: "app", Command: "echo 'last words'; exit 3"}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	var inst vm.Instance
	eventually(t, "the guest to end", func() bool {
		var err error
		inst, err = h.d.Inspect(t.Context(), id)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		return inst.State.Terminal()
	})
	if inst.State != vm.StateExited || inst.ExitCode == nil || *inst.ExitCode != 3 {
		t.Errorf("Inspect = %+v, want exited with code 3", inst)
	}
	if !strings.Contains(inst.Reason, "exited with code 3") || !strings.Contains(inst.Reason, "last words") {
		t.Errorf("Reason = %q, want the exit and the last output", inst.Reason)
	}
	// A VMM that is gone gets no Ctrl-Alt-Del.
	n := len(h.records())
	if err := h.d.Stop(t.Context(), id, time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := h.records(); len(got) != n {
		t.Errorf("Stop of an ended replica sent %q", calls(got[n:]))
	}
	if h.net.live() != 0 {
		t.Errorf("taps left after Stop: %v", h.net.taps)
	}
}

func TestSuspendResume(t *testing.T) {
	h := newHarness(t, nil)
	id := testID("retain")
	first, err := h.d.Start(t.Context(), vm.Spec{Name: id, Image: "app", Command: "exec sleep 60"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	dir := filepath.Join(h.o.Dir, id)
	n := len(h.records())

	if err := h.d.Suspend(t.Context(), id); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	recs := h.records()
	if got, want := calls(recs[n:]), []string{"PATCH /vm", "PUT /snapshot/create"}; !slices.Equal(got, want) {
		t.Fatalf("Suspend made the requests %q, want %q", got, want)
	}
	if s := string(recs[n].Body); s != `{"state":"Paused"}` {
		t.Errorf("PATCH /vm %s", s)
	}
	snap := body[SnapshotCreate](t, recs[n+1])
	want := SnapshotCreate{SnapshotType: "Full", SnapshotPath: filepath.Join(dir, "vm-1.snap"), MemFilePath: filepath.Join(dir, "mem-1.snap")}
	if snap != want {
		t.Errorf("snapshot %+v, want %+v", snap, want)
	}
	if processExists(first.PID) {
		t.Errorf("the VMM (pid %d) still runs after Suspend", first.PID)
	}
	inst, err := h.d.Inspect(t.Context(), id)
	if err != nil || inst.State != vm.StateSuspended || inst.Addr != first.Addr {
		t.Errorf("Inspect after Suspend = %+v, %v; want suspended at %s", inst, err, first.Addr)
	}
	if h.net.live() != 1 {
		t.Error("Suspend deleted the tap; the address must survive")
	}
	if err := h.d.Suspend(t.Context(), id); err == nil {
		t.Error("Suspend of a suspended replica succeeded")
	}
	if _, err := h.d.DialAgent(t.Context(), id); err == nil || !strings.Contains(err.Error(), "suspended") {
		t.Errorf("DialAgent while suspended: %v, want an error", err)
	}
	// Renewed while suspended: kept, and passed on at Resume.
	until := time.Now().Add(2 * time.Hour)
	if err := h.d.Renew(t.Context(), id, until); err != nil {
		t.Fatalf("Renew while suspended: %v", err)
	}
	n = len(h.records())

	inst, err = h.d.Resume(t.Context(), id)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if inst.State != vm.StateRunning || inst.Addr != first.Addr || inst.PID == first.PID {
		t.Errorf("Resume = %+v, want running at %s in a new VMM", inst, first.Addr)
	}
	recs = h.records()
	if got, want := calls(recs[n:]), []string{"GET /", "PUT /logger", "PUT /snapshot/load"}; !slices.Equal(got, want) {
		t.Fatalf("Resume made the requests %q, want %q", got, want)
	}
	load := body[SnapshotLoad](t, recs[n+2])
	wantLoad := SnapshotLoad{SnapshotPath: filepath.Join(dir, "vm-1.snap"), MemBackend: &MemoryBackend{BackendType: "File", BackendPath: filepath.Join(dir, "mem-1.snap")}, ResumeVM: true}
	if load.SnapshotPath != wantLoad.SnapshotPath || *load.MemBackend != *wantLoad.MemBackend || !load.ResumeVM {
		t.Errorf("snapshot load %+v, want %+v", load, wantLoad)
	}
	leasePath := filepath.Join(dir, "guest", "run", "berth", "lease")
	if b, _ := os.ReadFile(leasePath); string(b) != string(agent.FormatLease(until)) {
		t.Errorf("guest lease after Resume = %q, want the deadline renewed while suspended %q", b, agent.FormatLease(until))
	}

	// A second cycle uses new snapshot files and drops the old ones.
	if err := h.d.Suspend(t.Context(), id); err != nil {
		t.Fatalf("second Suspend: %v", err)
	}
	for _, f := range []string{"vm-1.snap", "mem-1.snap"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived the second Suspend", f)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "mem-2.snap")); err != nil {
		t.Errorf("second snapshot: %v", err)
	}
	n = len(h.records())
	if err := h.d.Stop(t.Context(), id, time.Second); err != nil {
		t.Fatalf("Stop of a suspended replica: %v", err)
	}
	if got := h.records(); len(got) != n {
		t.Errorf("Stop of a suspended replica sent %q", calls(got[n:]))
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) || h.net.live() != 0 {
		t.Errorf("Stop left the directory (%v) or taps (%v)", err, h.net.taps)
	}
	if _, err := h.d.Resume(t.Context(), id); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Resume after Stop: %v, want ErrNotFound", err)
	}
}

func TestAgentAndLease(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.AgentPort = 7000 })
	id := testID("agent")
	if _, err := h.d.Start(t.Context(), vm.Spec{Name: id, Image: "app", Command: "exec sleep 60"}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { h.d.Stop(context.Background(), id, time.Second) })
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return h.d.DialAgent(ctx, id) })
	defer c.Close()
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatalf("agent over vsock: %v", err)
	}
	if info.Protocol != 1 {
		t.Errorf("agent info %+v, want protocol 1", info)
	}
	until := time.Now().Add(time.Hour)
	if err := h.d.Renew(t.Context(), id, until); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(h.o.Dir, id, "guest", "run", "berth", "lease"))
	if string(b) != string(agent.FormatLease(until)) {
		t.Errorf("guest lease file %q, want %q", b, agent.FormatLease(until))
	}
	for _, bad := range []string{"../../etc", testID("nobody")} {
		if err := h.d.Renew(t.Context(), bad, until); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Renew(%q): %v, want ErrNotFound", bad, err)
		}
		if _, err := h.d.DialAgent(t.Context(), bad); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("DialAgent(%q): %v, want ErrNotFound", bad, err)
		}
	}
}

// TestVsockHandshakeRefused: a guest port nobody listens on is an error
// naming the port, not a hang.
func TestVsockHandshakeRefused(t *testing.T) {
	h := newHarness(t, nil)
	id := testID("agent")
	if _, err := h.d.Start(t.Context(), vm.Spec{Name: id, Image: "app", Command: "exec sleep 60"}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { h.d.Stop(context.Background(), id, time.Second) })
	h.d.agentPort = 9 // not the agent's
	if _, err := h.d.DialAgent(t.Context(), id); err == nil || !strings.Contains(err.Error(), "vsock port 9") {
		t.Errorf("DialAgent to a closed port: %v, want an error naming it", err)
	}
}

func TestReopen(t *testing.T) {
	h := newHarness(t, nil)
	id := testID("again")
	first, err := h.d.Start(t.Context(), vm.Spec{Name: id, Image: "app", Command: "exec sleep 60"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	// A second driver over the same directory, as berth after a restart.
	d2, err := New(h.o)
	if err != nil {
		t.Fatal(err)
	}
	list, err := d2.List(t.Context())
	if err != nil || len(list) != 1 {
		t.Fatalf("reopened List = %+v, %v", list, err)
	}
	if got := list[0]; got.ID != id || got.State != vm.StateRunning || got.Addr != first.Addr || got.PID != first.PID {
		t.Errorf("reopened List = %+v, want %+v", got, first)
	}
	if err := d2.Stop(t.Context(), id, 5*time.Second); err != nil {
		t.Fatalf("reopened Stop: %v", err)
	}
	if processExists(first.PID) {
		t.Error("the VMM survived the reopened driver's Stop")
	}
	if _, err := h.d.Inspect(t.Context(), id); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("first driver's Inspect: %v, want ErrNotFound", err)
	}
}

func TestJailer(t *testing.T) {
	var h *harness
	h = newHarness(t, func(o *Options) {
		o.UseJailer = true
		o.JailerBin = fakeBinary(t, filepath.Dir(o.FirecrackerBin), "jailer", "jailer", filepath.Join(filepath.Dir(filepath.Dir(o.FirecrackerBin)), "requests.jsonl"), "")
		o.JailerUID, o.JailerGID = os.Getuid(), os.Getgid()
		o.JailerArgs = []string{"--cgroup-version", "2"}
	})
	id := testID("jailed")
	if _, err := h.d.Start(t.Context(), vm.Spec{Name: id, Image: "app", Command: "exec sleep 60"}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	recs := h.records()
	if len(recs) == 0 || recs[0].Method != "EXEC" {
		t.Fatalf("no jailer run recorded: %q", calls(recs))
	}
	var args []string
	json.Unmarshal(recs[0].Body, &args)
	jid := jailID(id)
	wantArgs := []string{"--id", jid, "--exec-file", h.d.fcBin, "--uid", fmt.Sprint(os.Getuid()), "--gid", fmt.Sprint(os.Getgid()),
		"--chroot-base-dir", filepath.Join(h.o.Dir, "jail"), "--cgroup-version", "2", "--", "--api-sock", "/fc.sock"}
	if !slices.Equal(args, wantArgs) {
		t.Errorf("jailer args %q, want %q", args, wantArgs)
	}
	if got := calls(recs[1:]); !slices.Equal(got, startSequence) {
		t.Fatalf("jailed Start made the requests %q", got)
	}
	// Inside the jail, the VMM sees chroot paths.
	if b := body[BootSource](t, recs[4]); b.KernelImagePath != "/vmlinux" {
		t.Errorf("kernel path %q, want /vmlinux in the chroot", b.KernelImagePath)
	}
	if d := body[Drive](t, recs[5]); d.PathOnHost != "/rootfs.ext4" {
		t.Errorf("root drive path %q, want /rootfs.ext4", d.PathOnHost)
	}
	if v := body[Vsock](t, recs[8]); v.UDSPath != "/vsock.sock" {
		t.Errorf("vsock path %q, want /vsock.sock", v.UDSPath)
	}
	root := filepath.Join(h.o.Dir, "jail", "firecracker", jid, "root")
	for _, f := range []string{"vmlinux", "rootfs.ext4", "config.img", "vsock.sock", "fc.sock"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("jail: %v", err)
		}
	}
	// Suspend and Resume run the jailer again over the same chroot.
	if err := h.d.Suspend(t.Context(), id); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "vm-1.snap")); err != nil {
		t.Errorf("snapshot in the jail: %v", err)
	}
	if _, err := h.d.Resume(t.Context(), id); err != nil {
		t.Fatalf("Resume under the jailer: %v", err)
	}
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return h.d.DialAgent(ctx, id) })
	if _, err := c.Info(t.Context()); err != nil {
		t.Errorf("agent after a jailed Resume: %v", err)
	}
	c.Close()
	if err := h.d.Stop(t.Context(), id, 5*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(root)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the jail survived Stop: %v", err)
	}
}

// TestStartFailures: every failure leaves nothing behind (no directory, no
// tap, no VMM) and says why.
func TestStartFailures(t *testing.T) {
	h := newHarness(t, nil)
	good := func() vm.Spec { return vm.Spec{Name: testID("bad"), Image: "app", Command: "exec sleep 60"} }
	tests := []struct {
		name  string
		spec  func() vm.Spec
		fail  string // request the fake refuses
		netFn error
		want  string
	}{
		{"bad name", func() vm.Spec { s := good(); s.Name = "../../etc"; return s }, "", nil, "not a replica name"},
		{"empty name", func() vm.Spec { s := good(); s.Name = ""; return s }, "", nil, "not a replica name"},
		{"other deployment", func() vm.Spec { s := good(); s.Deployment = "else"; return s }, "", nil, "belongs to deployment"},
		{"no image", func() vm.Spec { s := good(); s.Image = ""; return s }, "", nil, "needs an image"},
		{"size", func() vm.Spec { s := good(); s.SizeClass = "gigantic"; return s }, "", nil, "unknown size class"},
		{"port", func() vm.Spec { s := good(); s.Port = 70000; return s }, "", nil, "out of range"},
		{"workspace", func() vm.Spec { s := good(); s.Workspace = t.TempDir(); return s }, "", nil, "workspaces are not supported"},
		{"env", func() vm.Spec { s := good(); s.Env = map[string]string{"A=B": "c"}; return s }, "", nil, "bad environment"},
		{"nul", func() vm.Spec { s := good(); s.Command = "a\x00b"; return s }, "", nil, "NUL"},
		{"image store", func() vm.Spec { s := good(); s.Image = "missing"; return s }, "", nil, "no such image"},
		{"tap", good, "", errors.New("bridge berth0 is missing"), "bridge berth0 is missing"},
		{"refused config", good, "PUT /vsock", nil, "refused on purpose"},
		{"refused start", good, "PUT /actions", nil, "refused on purpose"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := h.o
			o.FirecrackerBin = fakeBinary(t, t.TempDir(), "firecracker", "firecracker", h.rec, tt.fail)
			d, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			h.net.fail = tt.netFn
			defer func() { h.net.fail = nil }()
			spec := tt.spec()
			_, err = d.Start(t.Context(), spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start: %v, want an error with %q", err, tt.want)
			}
			ents, _ := os.ReadDir(o.Dir)
			for _, e := range ents {
				if e.Name() != "jail" {
					t.Errorf("left behind: %s", e.Name())
				}
			}
			if h.net.live() != 0 {
				t.Errorf("taps left behind: %v", h.net.taps)
			}
		})
	}
	h.records() // every request made, refused or not, was valid
}

func TestNewUnavailable(t *testing.T) {
	h := newHarness(t, nil)
	tests := []struct {
		name  string
		tweak func(*Options)
		want  string
	}{
		{"kvm", func(o *Options) { o.KVMDevice = "/nonexistent/kvm" }, "no KVM"},
		{"binary", func(o *Options) { o.FirecrackerBin = "/nonexistent/firecracker" }, "no firecracker binary"},
		{"jailer", func(o *Options) { o.UseJailer, o.JailerBin = true, "/nonexistent/jailer" }, "no jailer binary"},
		{"kernel", func(o *Options) { o.Kernel = "" }, "no guest kernel"},
		{"kernel file", func(o *Options) { o.Kernel = "/nonexistent/vmlinux" }, "guest kernel"},
		{"images", func(o *Options) { o.Images = nil }, "no image store"},
		{"net", func(o *Options) { o.Net = nil }, "no host network"},
	}
	for _, tt := range tests {
		o := h.o
		tt.tweak(&o)
		_, err := New(o)
		if !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New: %v, want ErrUnavailable saying %q", tt.name, err, tt.want)
		}
	}
	o := h.o
	o.Dir = ""
	if _, err := New(o); err == nil || errors.Is(err, vm.ErrUnavailable) {
		t.Errorf("New without Dir: %v, want a plain error", err)
	}
	o = h.o
	o.KernelArgs = "quiet -- evil"
	if _, err := New(o); err == nil {
		t.Error("New with init arguments in KernelArgs succeeded")
	}
}

func TestUnknownIDs(t *testing.T) {
	h := newHarness(t, nil)
	ctx := t.Context()
	for _, id := range []string{"", "../../etc", testID("nobody"), "berth-x/../../y-0123456789ab"} {
		if _, err := h.d.Inspect(ctx, id); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Inspect(%q): %v", id, err)
		}
		if err := h.d.Stop(ctx, id, time.Second); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Stop(%q): %v", id, err)
		}
		if err := h.d.Suspend(ctx, id); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Suspend(%q): %v", id, err)
		}
		if _, err := h.d.Resume(ctx, id); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Resume(%q): %v", id, err)
		}
		if _, err := h.d.Logs(ctx, id, 1); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Logs(%q): %v", id, err)
		}
		if err := h.d.FollowLogs(ctx, id, io.Discard); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("FollowLogs(%q): %v", id, err)
		}
		if _, err := h.d.Usage(ctx, id); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Usage(%q): %v", id, err)
		}
	}
}

func TestFollowLogs(t *testing.T) {
	h := newHarness(t, nil)
	id := testID("follow")
	cmd := "i=0; while [ $i -lt 600 ]; do echo tick-$i; i=$((i+1)); sleep 0.05; done"
	if _, err := h.d.Start(t.Context(), vm.Spec{Name: id, Image: "app", Command: cmd}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { h.d.Stop(context.Background(), id, time.Second) })
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.d.FollowLogs(ctx, id, pw); pw.Close() }()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		t.Fatalf("FollowLogs wrote nothing: %v", sc.Err())
	}
	var e console.Entry
	if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.S != "stdout" || !strings.HasPrefix(e.M, "tick-") || e.T.IsZero() {
		t.Errorf("FollowLogs line %s (%v), want a JSON stdout tick line", sc.Bytes(), err)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Errorf("FollowLogs: %v", err)
	}
}

// TestClient drives the client against the fake in this process: answers
// decode, faults become *APIError with the fault message, and everything
// exchanged matches the spec.
func TestClient(t *testing.T) {
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "api.sock")
	var (
		mu   sync.Mutex
		recs []apiRecord
	)
	ctx, cancel := context.WithCancel(t.Context())
	f := newFakeVMM("", io.Discard, func(r apiRecord) { mu.Lock(); recs = append(recs, r); mu.Unlock() }, cancel)
	served := make(chan error, 1)
	go func() { served <- serveFakeVMM(ctx, f, sock) }()
	c := NewClient(sock)
	// Dialled, not stat'ed: the socket file exists from bind(2), before
	// listen(2), and a connect in between is refused.
	eventually(t, "the fake's socket", func() bool {
		conn, err := net.Dial("unix", sock)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})

	info, err := c.Describe(t.Context())
	if err != nil || info.State != "Not started" || info.AppName != "Firecracker" {
		t.Errorf("Describe = %+v, %v", info, err)
	}
	if err := c.PutMachineConfig(t.Context(), MachineConfig{VCPUCount: 4, MemSizeMiB: 4096, TrackDirtyPages: true}); err != nil {
		t.Fatalf("PutMachineConfig: %v", err)
	}
	if m, err := c.MachineConfig(t.Context()); err != nil || m.VCPUCount != 4 || m.MemSizeMiB != 4096 || !m.TrackDirtyPages {
		t.Errorf("MachineConfig = %+v, %v", m, err)
	}
	err = c.PutBootSource(t.Context(), BootSource{KernelImagePath: filepath.Join(dir, "missing")})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Fault, "kernel file cannot be opened") {
		t.Errorf("PutBootSource of a missing kernel: %v, want an APIError with the fault message", err)
	}
	if err == nil || !strings.Contains(err.Error(), "PUT /boot-source: 400") {
		t.Errorf("error text %q, want the method, path and status", err)
	}
	if err := c.Action(t.Context(), ActionInstanceStart); err == nil {
		t.Error("InstanceStart without a kernel succeeded")
	}
	if err := c.PatchVM(t.Context(), VMPaused); err == nil {
		t.Error("pausing a VM that never started succeeded")
	}
	if err := c.PutMetrics(t.Context(), Metrics{MetricsPath: filepath.Join(dir, "m")}); err == nil {
		t.Error("the fake accepted PUT /metrics, which it does not implement")
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("fake: %v", err)
	}
	if _, err := c.Describe(t.Context()); err == nil || isAPIError(err) {
		t.Errorf("Describe of a gone VMM: %v, want a transport error", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(recs) != 7 {
		t.Errorf("the fake served %d requests, want 7: %q", len(recs), calls(recs))
	}
	checkRecords(t, recs)
}

// TestClientMalformedAnswer: an answer that is not JSON is an error, not a
// zero value.
func TestClientMalformedAnswer(t *testing.T) {
	sock := filepath.Join(shortTempDir(t), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			w.Write([]byte("<html>"))
			return
		}
		w.WriteHeader(500)
		w.Write([]byte("plain failure"))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	c := NewClient(sock)
	if _, err := c.Describe(t.Context()); err == nil || !strings.Contains(err.Error(), "malformed answer") {
		t.Errorf("Describe: %v, want a malformed answer error", err)
	}
	var apiErr *APIError
	if err := c.Action(t.Context(), ActionFlushMetrics); !errors.As(err, &apiErr) || apiErr.Status != 500 || apiErr.Fault != "plain failure" {
		t.Errorf("Action: %v, want an APIError carrying the plain body", err)
	}
}
