package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// The test binary plays every part: BERTH_TEST_ROLE makes it the agent, an
// app, or a short-lived berth that starts a replica and dies.
func TestMain(m *testing.M) {
	switch os.Getenv("BERTH_TEST_ROLE") {
	case "agent":
		os.Exit(runAgent(os.Args[1:]))
	case "app":
		os.Exit(vmtest.ServeApp("127.0.0.1", false))
	case "envapp":
		os.Exit(vmtest.ServeApp("127.0.0.1", true))
	case "termapp":
		os.Exit(termApp())
	case "berth":
		os.Exit(startAndDie())
	}
	os.Exit(m.Run())
}

// runAgent is the agent role: what `berth agent` runs.
func runAgent(args []string) int { return agent.Main(context.Background(), args, os.Stderr) }

// testBinary is this test executable, which the replicas run.
func testBinary(t testing.TB) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// quote quotes s for /bin/sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func appCommand(t testing.TB, role string) string {
	return "exec env BERTH_TEST_ROLE=" + role + " " + quote(testBinary(t))
}

// shortTempDir is a temporary directory with a short path: agent sockets
// live in it, and unix socket paths are limited to 107 bytes.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "bp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// leaseCheck is how often the test agents read their lease.
const leaseCheck = 50 * time.Millisecond

func options(t testing.TB, dir string, isolate bool) Options {
	return Options{
		Dir:          dir,
		AgentCommand: []string{testBinary(t), "--lease-check=" + leaseCheck.String()},
		AgentEnv:     []string{"BERTH_TEST_ROLE=agent"},
		Isolate:      &isolate,
		CgroupParent: "none", // the Cgroup mode of TestDriver tests cgroups
	}
}

func newDriver(t *testing.T, dir string, isolate bool) *Driver {
	t.Helper()
	d, err := New(options(t, dir, isolate))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// testCgroupParent is where the Cgroup mode of TestDriver puts replicas'
// cgroups: $BERTH_TEST_CGROUP_PARENT (any cgroup v2 directory, e.g. in a
// cgroup2 filesystem mounted on a cgroup v1 host), else a berth-test
// directory in /sys/fs/cgroup when it is a writable cgroup v2 hierarchy;
// "" skips the mode.
func testCgroupParent() string {
	if p := os.Getenv("BERTH_TEST_CGROUP_PARENT"); p != "" {
		return p
	}
	if os.Geteuid() != 0 {
		return ""
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		return ""
	}
	return filepath.Join(cgroupRoot, "berth-test")
}

// checkNoProcesses fails t if a live process still names dir on its command
// line: every agent does (its --listen, --log and --exit-file).
func checkNoProcesses(t *testing.T, dir string) {
	t.Helper()
	for _, pid := range proc.Pids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(dir+"/")) {
			continue
		}
		if ps, err := proc.ReadStat(pid); err == nil && !ps.Dead() {
			t.Errorf("process %d outlived its replica: %q", pid, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
}

// modes are the ways the driver runs here: isolation needs root.
func modes(t *testing.T) []bool {
	if os.Geteuid() != 0 {
		t.Log("not root: testing without namespaces only")
		return []bool{false}
	}
	t.Log("root: testing sandboxes only (berth as root cannot run replicas without)")
	return []bool{true}
}

// mustIsolate is what replicas are as berth runs the tests: sandboxed as
// root, plain otherwise.
var mustIsolate = os.Geteuid() == 0

func modeName(isolate bool) string {
	if isolate {
		return "Isolated"
	}
	return "Plain"
}

func TestDriver(t *testing.T) {
	for _, isolate := range modes(t) {
		t.Run(modeName(isolate), func(t *testing.T) {
			newD := func(t *testing.T) vm.Driver {
				dir := shortTempDir(t)
				t.Cleanup(func() { checkNoProcesses(t, dir) })
				return newDriver(t, dir, isolate)
			}
			vmtest.RunDriverTests(t, newD, vmtest.Options{
				App:    appCommand(t, "app"),
				EnvApp: appCommand(t, "envapp"),
				Reopen: func(t *testing.T, old vm.Driver) vm.Driver {
					return newDriver(t, old.(*Driver).dir, isolate)
				},
				LeaseCheck: leaseCheck,
			})
		})
	}
	t.Run("Cgroup", func(t *testing.T) {
		parent := testCgroupParent()
		if parent == "" {
			t.Skip("no cgroup v2 hierarchy to test with (set BERTH_TEST_CGROUP_PARENT)")
		}
		isolate := os.Geteuid() == 0
		t.Cleanup(func() { syscall.Rmdir(parent) })
		open := func(t *testing.T, dir string) *Driver {
			o := options(t, dir, isolate)
			o.CgroupParent = parent
			d, err := New(o)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(func() { d.Close() })
			if d.cg.parent == "" {
				t.Fatalf("the driver does not use the cgroup v2 directory %s", parent)
			}
			return d
		}
		vmtest.RunDriverTests(t, func(t *testing.T) vm.Driver {
			dir := shortTempDir(t)
			t.Cleanup(func() { checkNoProcesses(t, dir) })
			return open(t, dir)
		}, vmtest.Options{
			App:        appCommand(t, "app"),
			EnvApp:     appCommand(t, "envapp"),
			Reopen:     func(t *testing.T, old vm.Driver) vm.Driver { return open(t, old.(*Driver).dir) },
			LeaseCheck: leaseCheck,
		})
	})
}

// waitServing polls until the replica answers HTTP 200.
func waitServing(t *testing.T, d *Driver, id string) vm.Instance {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		inst, err := d.Inspect(t.Context(), id)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if inst.State.Terminal() {
			t.Fatalf("replica ended: %s: %s", inst.State, inst.Reason)
		}
		if resp, err := http.Get("http://" + inst.Addr + "/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return inst
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not serve", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitGone polls until pid has exited (a zombie has: only its parent can
// reap it, and after a berth crash that is init).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps, err := proc.ReadStat(pid)
		if err != nil || !proc.Alive(pid, ps.StartTicks) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs (state %c)", pid, ps.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("namespaces need root")
	}
	hostBefore, _ := os.Hostname()
	dir := shortTempDir(t)
	d := newDriver(t, dir, true)
	id := vm.Name("iso", 1)
	cmd := "cat /proc/sys/kernel/hostname > host.txt; readlink /proc/self/ns/pid > ns.txt; " + appCommand(t, "app")
	if _, err := d.Start(t.Context(), vm.Spec{Name: id, Command: cmd}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), id, time.Second) })
	inst := waitServing(t, d, id)

	data := filepath.Join(dir, id, dataDir)
	host, _ := os.ReadFile(filepath.Join(data, "host.txt"))
	if got := strings.TrimSpace(string(host)); got != id {
		t.Errorf("hostname inside = %q, want %q", got, id)
	}
	if h, _ := os.Hostname(); h != hostBefore {
		t.Errorf("berth's hostname changed from %q to %q", hostBefore, h)
	}
	for _, ns := range []string{"pid", "mnt", "uts", "ipc"} {
		mine, err1 := os.Readlink("/proc/self/ns/" + ns)
		theirs, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", inst.PID, ns))
		if err1 != nil || err2 != nil {
			t.Fatalf("reading %s namespaces: %v, %v", ns, err1, err2)
		}
		if mine == theirs {
			t.Errorf("the agent shares berth's %s namespace %s", ns, mine)
		}
	}
	appNS, _ := os.ReadFile(filepath.Join(data, "ns.txt"))
	if agentNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", inst.PID)); strings.TrimSpace(string(appNS)) != agentNS {
		t.Errorf("the app's pid namespace %q is not the agent's %q", appNS, agentNS)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", inst.PID))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "NSpid:" && f[len(f)-1] != "1" {
			t.Errorf("the agent is not PID 1 in its namespace: %s", strings.TrimSpace(line))
		}
	}
	// The mount namespace is private: a mount inside is not seen outside.
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", inst.PID))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mi)) {
		if strings.Contains(line, " shared:") {
			t.Errorf("a mount of the replica propagates to the host: %s", strings.TrimSpace(line))
		}
	}
}

// TestBerthCrash starts a replica from a berth process that then exits
// without stopping it, as after a crash, and checks that the next berth
// adopts it exactly once and can stop it without leaving a process.
func TestBerthCrash(t *testing.T) {
	for _, isolate := range modes(t) {
		t.Run(modeName(isolate), func(t *testing.T) {
			dir := shortTempDir(t)
			cmd := exec.Command(testBinary(t))
			cmd.Env = append(os.Environ(), "BERTH_TEST_ROLE=berth", "BERTH_TEST_DIR="+dir,
				"BERTH_TEST_ISOLATE="+strconv.FormatBool(isolate), "BERTH_TEST_APP="+appCommand(t, "app"))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("the first berth: %v (%s)", err, out)
			}
			var first vm.Instance
			if err := json.Unmarshal(out, &first); err != nil {
				t.Fatalf("the first berth said %q: %v", out, err)
			}
			t.Cleanup(func() { checkNoProcesses(t, dir) })

			d := newDriver(t, dir, isolate)
			list, err := d.List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 || list[0].ID != first.ID || list[0].PID != first.PID {
				t.Fatalf("List after the crash = %+v, want just %s with pid %d", list, first.ID, first.PID)
			}
			inst := waitServing(t, d, first.ID)
			if inst.State != vm.StateRunning || inst.Addr != first.Addr {
				t.Errorf("adopted replica: {%s %s}, want {running %s}", inst.State, inst.Addr, first.Addr)
			}
			if err := d.Stop(t.Context(), first.ID, 5*time.Second); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			waitGone(t, first.PID)
			if _, err := os.Stat(filepath.Join(dir, first.ID)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the replica directory survives Stop: %v", err)
			}
		})
	}
}

// startAndDie is the "berth" role: start a replica, print it, exit.
func startAndDie() int {
	isolate := os.Getenv("BERTH_TEST_ISOLATE") == "true"
	exe, _ := os.Executable()
	d, err := New(Options{
		Dir:          os.Getenv("BERTH_TEST_DIR"),
		AgentCommand: []string{exe},
		AgentEnv:     []string{"BERTH_TEST_ROLE=agent"},
		Isolate:      &isolate,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	inst, err := d.Start(context.Background(), vm.Spec{Name: vm.Name("crash", 7), Command: os.Getenv("BERTH_TEST_APP")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(inst)
	return 0
}

// TestAgentKilled checks that a replica whose agent dies without an exit
// record is reported failed and that Stop still removes its app: without a
// PID namespace, the app outlives the agent in the agent's session.
func TestAgentKilled(t *testing.T) {
	for _, isolate := range modes(t) {
		t.Run(modeName(isolate), func(t *testing.T) {
			dir := shortTempDir(t)
			t.Cleanup(func() { checkNoProcesses(t, dir) })
			d := newDriver(t, dir, isolate)
			id := vm.Name("killed", 2)
			if _, err := d.Start(t.Context(), vm.Spec{Name: id, Command: "echo about to be orphaned; " + appCommand(t, "app")}); err != nil {
				t.Fatal(err)
			}
			inst := waitServing(t, d, id)
			if err := syscall.Kill(inst.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitGone(t, inst.PID)
			got, err := d.Inspect(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != vm.StateFailed || !strings.Contains(got.Reason, "about to be orphaned") {
				t.Errorf("after SIGKILL of the agent: {%s %q}, want failed with the last output", got.State, got.Reason)
			}
			if err := d.Stop(t.Context(), id, time.Second); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if resp, err := http.Get("http://" + inst.Addr + "/"); err == nil {
				resp.Body.Close()
				t.Errorf("the app still answers at %s after Stop", inst.Addr)
			}
		})
	}
}

// TestInterruptedStart simulates berth dying between starting the agent and
// recording its pid: the next driver finds the agent by its command line.
func TestInterruptedStart(t *testing.T) {
	dir := shortTempDir(t)
	t.Cleanup(func() { checkNoProcesses(t, dir) })
	d := newDriver(t, dir, mustIsolate)
	id := vm.Name("interrupted", 3)
	if _, err := d.Start(t.Context(), vm.Spec{Name: id, Command: appCommand(t, "app")}); err != nil {
		t.Fatal(err)
	}
	inst := waitServing(t, d, id)
	st, err := d.rd.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	st.PID, st.StartTicks = 0, 0
	if err := replicadir.WriteState(filepath.Join(dir, id), st); err != nil {
		t.Fatal(err)
	}
	d2 := newDriver(t, dir, mustIsolate)
	got, err := d2.Inspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != vm.StateRunning {
		t.Errorf("state = %s (%s), want running", got.State, got.Reason)
	}
	if err := d2.Stop(t.Context(), id, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	waitGone(t, inst.PID)
}

func TestStartErrors(t *testing.T) {
	d := newDriver(t, shortTempDir(t), mustIsolate)
	long := newDriver(t, filepath.Join(shortTempDir(t), strings.Repeat("d", 90)), mustIsolate)
	id := vm.Name("bad", 4)
	tests := []struct {
		name string
		d    *Driver
		spec vm.Spec
		want string
	}{
		{"image", d, vm.Spec{Name: id, Command: "true", Image: "alpine"}, "runs no images"},
		{"user", d, vm.Spec{Name: id, Command: "true", User: &vm.User{UID: 1000, GID: 1000}}, "cannot run as user 1000:1000"},
		{"port", d, vm.Spec{Name: id, Command: "true", Port: 70000}, "out of range"},
		{"size", d, vm.Spec{Name: id, Command: "true", SizeClass: "huge"}, "unknown size class"},
		{"deployment", d, vm.Spec{Name: id, Deployment: "other", Command: "true"}, "belongs to deployment"},
		{"env", d, vm.Spec{Name: id, Command: "true", Env: map[string]string{"A=B": "c"}}, "bad environment variable"},
		{"nul", d, vm.Spec{Name: id, Command: "true\x00"}, "NUL"},
		{"workdir", d, vm.Spec{Name: id, Command: "true", WorkDir: "../../etc"}, "leaves the data directory"},
		{"name", d, vm.Spec{Name: "berth-a/b-0123456789ab", Command: "true"}, "not a replica name"},
		{"socket", long, vm.Spec{Name: id, Command: "true"}, "shorter Dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.d.Start(t.Context(), tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start: error %v, want one containing %q", err, tt.want)
			}
			if _, err := tt.d.Inspect(t.Context(), id); !errors.Is(err, vm.ErrNotFound) {
				t.Errorf("a refused Start left a replica: Inspect error %v", err)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without Dir succeeded")
	}
	if os.Geteuid() != 0 {
		yes := true
		_, err := New(Options{Dir: t.TempDir(), Isolate: &yes})
		if !errors.Is(err, vm.ErrUnavailable) {
			t.Errorf("New with Isolate as non-root: error %v, want ErrUnavailable", err)
		}
	}
}

func TestStopSendsTERM(t *testing.T) {
	// SIGTERM reaches the app through the agent: a trap records it in the
	// working directory, which the test gives outside the replica's own.
	for _, isolate := range modes(t) {
		t.Run(modeName(isolate), func(t *testing.T) {
			wd := t.TempDir()
			os.Chmod(wd, 0o777) // the sandbox's user writes it
			d := newDriver(t, shortTempDir(t), isolate)
			id := vm.Name("term", 5)
			cmd := "trap 'echo got TERM > term.txt; exit 0' TERM; echo > ready.txt; while :; do sleep 0.05; done"
			if _, err := d.Start(t.Context(), vm.Spec{Name: id, Command: cmd, WorkDir: wd}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				if _, err := os.Stat(filepath.Join(wd, "ready.txt")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the app did not start")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := d.Stop(t.Context(), id, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(wd, "term.txt"))
			if err != nil || strings.TrimSpace(string(b)) != "got TERM" {
				t.Errorf("the app's TERM trap did not run: %q, %v", b, err)
			}
		})
	}
}

// TestCgroupMembership checks that a replica is born in its own cgroup,
// frozen through it, and that Stop removes it.
func TestCgroupMembership(t *testing.T) {
	parent := testCgroupParent()
	if parent == "" {
		t.Skip("no cgroup v2 hierarchy to test with (set BERTH_TEST_CGROUP_PARENT)")
	}
	t.Cleanup(func() { syscall.Rmdir(parent) })
	o := options(t, shortTempDir(t), os.Geteuid() == 0)
	o.CgroupParent = parent
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	id := vm.Name("cgroup", 6)
	if _, err := d.Start(t.Context(), vm.Spec{Name: id, Command: appCommand(t, "app")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), id, time.Second) })
	inst := waitServing(t, d, id)
	cg := filepath.Join(parent, id)
	procs, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(procs)); !slices.Contains(f, strconv.Itoa(inst.PID)) || len(f) < 2 {
		t.Errorf("cgroup.procs = %q, want the agent %d and the app", procs, inst.PID)
	}
	if err := d.Suspend(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if ev, _ := os.ReadFile(filepath.Join(cg, "cgroup.events")); !strings.Contains(string(ev), "frozen 1") {
		t.Errorf("after Suspend, cgroup.events = %q, want frozen 1", ev)
	}
	if err := d.Stop(t.Context(), id, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the replica's cgroup survives Stop: %v", err)
	}
}

// unsupportedSuspend is the process driver with an ability it declares
// broken: Suspend says it is not supported.
type unsupportedSuspend struct{ *Driver }

func (unsupportedSuspend) Suspend(context.Context, string) error { return errors.ErrUnsupported }

// lostSuspend declares every ability of the process driver but has lost
// Suspend and Resume (only the vm.Driver methods and the rest are kept).
type lostSuspend struct {
	vm.Driver
	vm.LogReader
	vm.LogFollower
	vm.AgentDialer
	vm.UsageReader
	vm.Leaser
	vm.Waiter
	vm.Checker
	vm.Abilities
}

// TestBrokenDriverChild runs the conformance suite on a driver that lost
// an ability it declares; TestSuiteFailsOnLostAbility runs it in a child
// process and checks that it fails.
func TestBrokenDriverChild(t *testing.T) {
	mode := os.Getenv("BERTH_TEST_BROKEN")
	if mode == "" {
		t.Skip("run by TestSuiteFailsOnLostAbility")
	}
	vmtest.RunDriverTests(t, func(t *testing.T) vm.Driver {
		d := newDriver(t, shortTempDir(t), mustIsolate)
		if mode == "unsupported" {
			return unsupportedSuspend{d}
		}
		return lostSuspend{d, d, d, d, d, d, d, d, d}
	}, vmtest.Options{App: appCommand(t, "app"), LeaseCheck: leaseCheck})
}

// TestSuiteFailsOnLostAbility: a driver that declares Suspend fails the
// conformance suite, not skips it, when Suspend returns ErrUnsupported or
// the method is gone.
func TestSuiteFailsOnLostAbility(t *testing.T) {
	for _, tc := range []struct{ mode, fails string }{
		{"unsupported", "--- FAIL: TestBrokenDriverChild/Suspend "},
		{"lost", "--- FAIL: TestBrokenDriverChild/Abilities "},
		{"lost", "--- FAIL: TestBrokenDriverChild/Suspend "},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenDriverChild$/^(Abilities|Suspend)$", "-test.v")
			cmd.Env = append(os.Environ(), "BERTH_TEST_BROKEN="+tc.mode)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a driver whose Suspend is %s:\n%s", tc.mode, out)
			}
			if !bytes.Contains(out, []byte(tc.fails)) {
				t.Fatalf("the suite did not report %q:\n%s", tc.fails, out)
			}
			if bytes.Contains(out, []byte("--- SKIP: TestBrokenDriverChild/Suspend")) {
				t.Fatalf("the suite skipped Suspend:\n%s", out)
			}
		})
	}
}

// termApp serves like the app role and, on SIGTERM, tells $TERM_ADDR
// "term" and exits 0: it shows that the app was asked to end and could act
// on it.
func termApp() int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	}))
	<-sigs
	c, err := net.Dial("tcp", os.Getenv("TERM_ADDR"))
	if err != nil {
		return 1
	}
	c.Write([]byte("term"))
	c.Close()
	return 0
}

// TestStopSuspendedAsksFirst: stopping a suspended replica thaws it before
// SIGTERM (the one stop order, proc.End), so the frozen app gets to handle
// SIGTERM instead of being killed while it cannot run.
func TestStopSuspendedAsksFirst(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		got <- string(b)
	}()
	d := newDriver(t, shortTempDir(t), mustIsolate)
	id := vm.Name("termapp", 1)
	if _, err := d.Start(t.Context(), vm.Spec{Name: id, Command: appCommand(t, "termapp"), Env: map[string]string{"TERM_ADDR": l.Addr().String()}}); err != nil {
		t.Fatal(err)
	}
	waitServing(t, d, id)
	if err := d.Suspend(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(t.Context(), id, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "term" {
			t.Fatalf("the app said %q, want term", s)
		}
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the suspended app never handled SIGTERM")
	}
}
