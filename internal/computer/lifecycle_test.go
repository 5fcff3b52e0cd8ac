//go:build linux

package computer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype/computertype"
	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/google/go-cmp/cmp"
)

func TestCreateUseStopDelete(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	ctx := context.Background()
	c, err := m.Create(ctx, CreateRequest{ID: "box", Namespace: "team"})
	if err != nil {
		t.Fatal(err)
	}
	want := Computer{ID: "box", Namespace: "team", Size: "small", IdleTimeout: 10 * time.Minute,
		Backings: []Backing{{Kind: KindProcess}}, State: State{State: StateSleeping}}
	if diff := cmp.Diff(want, c, cmpComputer); diff != "" {
		t.Errorf("Create (-want +got):\n%s", diff)
	}
	if _, err := m.Create(ctx, CreateRequest{ID: "box"}); !errors.Is(err, ErrExists) {
		t.Errorf("Create(existing) = %v, want ErrExists", err)
	}

	out := exec(t, m, "box", `pwd; echo "$HOME"; echo hello > greeting.txt`)
	ws := m.Workspace("box")
	if out != ws+"\n"+ws+"\n" {
		t.Errorf("pwd and HOME = %q, want the workspace %s twice", out, ws)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "greeting.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("workspace file = %q, %v", b, err)
	}
	// File operations are rooted in the workspace.
	cl, release, err := m.Use(ctx, "box")
	if err != nil {
		t.Fatal(err)
	}
	b, err := cl.ReadFile(ctx, "/greeting.txt")
	release()
	if err != nil || string(b) != "hello\n" {
		t.Errorf("ReadFile(/greeting.txt) = %q, %v", b, err)
	}
	c, err = m.Get(ctx, "box")
	if err != nil || c.State.State != StateRunning || c.Active != (Backing{Kind: KindProcess}) {
		t.Errorf("Get = %+v, %v; want running on process", c, err)
	}
	if n := len(e.sandboxes()); n != 1 {
		t.Errorf("%d sandboxes run, want 1", n)
	}

	if err := m.Stop(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx, "box"); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if n := len(e.sandboxes()); n != 0 {
		t.Errorf("%d sandboxes after Stop, want 0", n)
	}
	if c, _ := m.Get(ctx, "box"); c.State.State != StateSleeping || c.Active != (Backing{}) {
		t.Errorf("after Stop: %+v", c)
	}
	wantLife := []string{"sleeping/create", "starting/use", "running/use", "sleeping/stop"}
	if diff := cmp.Diff(wantLife, lifecycle(facts(t, m, "box"))); diff != "" {
		t.Errorf("lifecycle facts (-want +got):\n%s", diff)
	}

	list, err := m.List(ctx, "team")
	if err != nil || len(list) != 1 {
		t.Errorf("List(team) = %v, %v", list, err)
	}
	if list, _ := m.List(ctx, "other"); len(list) != 0 {
		t.Errorf("List(other) = %v", list)
	}
	if err := m.Delete(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace after Delete: %v", err)
	}
	if _, err := m.Get(ctx, "box"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete = %v", err)
	}
	if err := m.Delete(ctx, "box"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete twice = %v", err)
	}
	if _, _, err := m.Use(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Use(unknown) = %v", err)
	}
}

var cmpComputer = cmp.FilterPath(func(p cmp.Path) bool {
	s := p.String()
	return s == "CreatedAt" || s == "UpdatedAt"
}, cmp.Ignore())

func TestValidation(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	ctx := context.Background()
	tests := []struct {
		name string
		req  CreateRequest
		want string
	}{
		{"uppercase id", CreateRequest{ID: "Box"}, "id:"},
		{"leading dash", CreateRequest{ID: "-box"}, "id:"},
		{"long id", CreateRequest{ID: strings.Repeat("a", MaxIDLen+1)}, "id: longer"},
		{"namespace", CreateRequest{ID: "a", Namespace: "A B"}, "namespace:"},
		{"size", CreateRequest{ID: "a", Size: "huge"}, "size:"},
		{"idle negative", CreateRequest{ID: "a", IdleTimeout: -time.Second}, "idleTimeout"},
		{"idle tiny", CreateRequest{ID: "a", IdleTimeout: time.Millisecond}, "idleTimeout"},
		{"five backings", CreateRequest{ID: "a", Backings: []Backing{{Kind: KindContainer}, {Kind: KindProcess},
			{Kind: KindVM, HostID: "a"}, {Kind: KindVM, HostID: "b"}, {Kind: KindVM, HostID: "c"}}}, "at most 4"},
		{"duplicate", CreateRequest{ID: "a", Backings: []Backing{{Kind: KindContainer}, {Kind: KindContainer}}}, "twice"},
		{"unknown kind", CreateRequest{ID: "a", Backings: []Backing{{Kind: "cloud"}}}, "unknown kind"},
		{"vm without host", CreateRequest{ID: "a", Backings: []Backing{{Kind: KindVM}}}, "needs a hostId"},
		{"container with host", CreateRequest{ID: "a", Backings: []Backing{{Kind: KindContainer, HostID: "x"}}}, "takes no hostId"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Create(ctx, tt.req)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Create = %v, want ErrInvalid mentioning %q", err, tt.want)
			}
		})
	}
	for _, hc := range []HostCapacity{{MaxActive: 0}, {MaxActive: 2, ReservedHeadroom: 2}, {MaxActive: 2, ReservedHeadroom: -1}} {
		if err := m.SetHostCapacity(ctx, "h", hc); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetHostCapacity(%+v) = %v, want ErrInvalid", hc, err)
		}
	}
	if err := m.SetHostCapacity(ctx, "", HostCapacity{MaxActive: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetHostCapacity(no id) = %v", err)
	}
	// A backing this host cannot run is refused at start, clearly.
	if _, err := m.Create(ctx, CreateRequest{ID: "elsewhere", Backings: []Backing{{Kind: KindVM, HostID: "far"}, {Kind: KindContainer}}}); err != nil {
		t.Fatal(err)
	}
	_, err := m.Start(ctx, "elsewhere", false)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `host "far" is not this host`) || !strings.Contains(err.Error(), `no "container" driver`) {
		t.Errorf("Start(unrunnable) = %v", err)
	}
	if c, _ := m.Get(ctx, "elsewhere"); c.State.State != StateSleeping {
		t.Errorf("after a refused start: %+v", c.State)
	}
	if _, err := m.ExposePort(ctx, "elsewhere", computertype.PortRequest{Port: 0}); !errors.Is(err, ErrInvalid) {
		t.Errorf("ExposePort(0) = %v", err)
	}
}

// TestSleepWakeKeepsFiles: an idle Computer sleeps (its sandbox stops), and
// waking it finds every file, and restarts nothing: a background job that
// ran once has run once.
func TestSleepWakeKeepsFiles(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{ID: "dev", IdleTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c, release, err := m.Use(ctx, "dev")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, "/notes/todo.txt", strings.NewReader("ship it\n"), 0o600); err != nil {
		// The parent does not exist yet: make it and retry.
		if _, err := c.Mkdir(ctx, "/notes", 0, true); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteFile(ctx, "/notes/todo.txt", strings.NewReader("ship it\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.StartProcess(ctx, agent.ProcessRequest{Command: "echo ran >> runs.txt", Tag: ProcessTag(Provenance{Actor: "alice", Via: "cli"})})
	if err != nil {
		t.Fatal(err)
	}
	waitEnded(t, c, p.ID)
	release()
	sandbox := e.sandboxes()[0].ID

	// Not idle yet.
	e.clock.Add(59 * time.Second)
	m.tick(ctx)
	if got, _ := m.Get(ctx, "dev"); got.State.State != StateRunning {
		t.Fatalf("slept before its idle timeout: %+v", got.State)
	}
	e.clock.Add(2 * time.Second)
	m.tick(ctx)
	if got, _ := m.Get(ctx, "dev"); got.State.State != StateSleeping {
		t.Fatalf("not asleep after its idle timeout: %+v", got.State)
	}
	if n := len(e.sandboxes()); n != 0 {
		t.Fatalf("%d sandboxes while asleep", n)
	}
	fs := facts(t, m, "dev")
	if got := lifecycle(fs); got[len(got)-1] != "sleeping/idle" {
		t.Errorf("last lifecycle fact %v, want sleeping/idle", got)
	}
	var exited []Fact
	for _, f := range fs {
		if f.Kind == FactProcessExited {
			exited = append(exited, f)
		}
	}
	if len(exited) != 1 || exited[0].RequestID != p.ID || exited[0].ExitCode == nil || *exited[0].ExitCode != 0 ||
		exited[0].CPUTimeMs == nil || exited[0].Provenance != (Provenance{Actor: "alice", Via: "cli"}) {
		t.Errorf("process.exited facts = %+v", exited)
	}

	// Wake: the next operation.
	out := exec(t, m, "dev", "cat notes/todo.txt runs.txt")
	if out != "ship it\nran\n" {
		t.Errorf("after waking: %q", out)
	}
	if s := e.sandboxes(); len(s) != 1 || s[0].ID == sandbox {
		t.Errorf("sandboxes after waking: %+v (old %s)", s, sandbox)
	}
	c, release, err = m.Use(ctx, "dev")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if ps, err := c.Processes(ctx); err != nil || len(ps) != 0 {
		t.Errorf("processes after waking = %+v, %v; want none restarted", ps, err)
	}
}

func waitEnded(t *testing.T, c *agent.Client, id string) agent.ProcessInfo {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, err := c.Process(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Running {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s still runs", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBackgroundProcess: a background process survives the client that
// started it, keeps the Computer awake while it runs, and its exit is a
// fact.
func TestBackgroundProcess(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{ID: "job", IdleTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c, release, err := m.Use(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	p, err := c.StartProcess(sctx, agent.ProcessRequest{Command: "while [ ! -e stop ]; do sleep 0.01; done; echo done"})
	if err != nil {
		t.Fatal(err)
	}
	// The client goes away.
	cancel()
	c.Close()
	release()

	for range 3 {
		e.clock.Add(2 * time.Minute)
		m.tick(ctx)
		if got, _ := m.Get(ctx, "job"); got.State.State != StateRunning {
			t.Fatalf("slept while a background process ran: %+v", got.State)
		}
	}
	c2, release2, err := m.Use(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c2.Process(ctx, p.ID); err != nil || !info.Running {
		t.Fatalf("the process after its client left: %+v, %v", info, err)
	}
	if err := os.WriteFile(filepath.Join(m.Workspace("job"), "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, c2, p.ID)
	release2()
	m.tick(ctx) // sees the exit: activity until now
	e.clock.Add(61 * time.Second)
	m.tick(ctx)
	if got, _ := m.Get(ctx, "job"); got.State.State != StateSleeping {
		t.Fatalf("not asleep after the job ended and the idle timeout passed: %+v", got.State)
	}
	n := 0
	for _, f := range facts(t, m, "job") {
		if f.Kind == FactProcessExited && f.RequestID == p.ID {
			n++
			if f.ExitCode == nil || *f.ExitCode != 0 || f.Provenance.Actor != "unknown" {
				t.Errorf("fact = %+v", f)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d process.exited facts for %s, want exactly 1", n, p.ID)
	}
}

// TestStopRecordsKilledProcesses: stopping a Computer kills what runs in it
// and says so: process.exited with a null exit code.
func TestStopRecordsKilledProcesses(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{ID: "k", Start: true}); err != nil {
		t.Fatal(err)
	}
	c, release, err := m.Use(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.StartProcess(ctx, agent.ProcessRequest{Argv: []string{"sleep", "100"}})
	release()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	var got []Fact
	for _, f := range facts(t, m, "k") {
		if f.Kind == FactProcessExited {
			got = append(got, f)
		}
	}
	if len(got) != 1 || got[0].RequestID != p.ID || got[0].ExitCode != nil || got[0].CPUTimeMs != nil {
		t.Errorf("process.exited facts = %+v; want one with null exitCode and cpuTimeMs", got)
	}
}

// TestRestartAdopts: a new Manager (a berth restart) re-adopts running
// sandboxes by name, sleeps Computers whose sandbox vanished, and destroys
// sandboxes nobody claims.
func TestRestartAdopts(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	ctx := context.Background()
	for _, id := range []string{"keep", "lose"} {
		if _, err := m.Create(ctx, CreateRequest{ID: id, Start: true}); err != nil {
			t.Fatal(err)
		}
	}
	c, release, err := m.Use(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	release()
	if err != nil {
		t.Fatal(err)
	}
	keep, _ := e.st.Computer(ctx, "keep")
	lose, _ := e.st.Computer(ctx, "lose")
	// The sandbox of "lose" dies while berth is down; an orphan appears.
	d := e.drivers["process"]
	if err := d.Stop(ctx, lose.Sandbox, time.Second); err != nil {
		t.Fatal(err)
	}
	// Orphans: one of an older berth (no recorded owner; its name says
	// Computer), and one whose recorded owner is a Computer though its
	// name looks like a deployment's. Replicas of deployments are not the
	// Manager's, even one named like a Computer's sandbox.
	deployments := []vm.Spec{
		{Name: vm.Name("web", 8)},
		{Name: vm.Name(vm.ComputerPrefix+"web", 9), Owner: vm.Owner{Kind: vm.OwnerDeployment, ID: vm.ComputerPrefix + "web"}},
	}
	for _, s := range append([]vm.Spec{
		{Name: vm.Name(vm.ComputerPrefix+"ghost", 7)},
		{Name: vm.Name("plain", 10), Owner: vm.Owner{Kind: vm.OwnerComputer, ID: "ghost2"}},
	}, deployments...) {
		if _, err := d.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	e.st.Close()
	e.open()

	m2 := e.manager()
	got, err := m2.Get(ctx, "keep")
	if err != nil || got.State.State != StateRunning {
		t.Fatalf("keep after restart: %+v, %v", got, err)
	}
	c2, release2, err := m2.Use(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	info2, err := c2.Info(ctx)
	release2()
	if err != nil || info2.PID != info.PID || !info2.StartedAt.Equal(info.StartedAt) {
		t.Errorf("keep's agent after restart: %+v, %v; want the same agent %+v", info2, err, info)
	}
	if rec, _ := e.st.Computer(ctx, "keep"); rec.Sandbox != keep.Sandbox || rec.RuntimeID != keep.RuntimeID {
		t.Errorf("keep's sandbox/runtime changed: %+v, was %+v", rec, keep)
	}
	if got, _ := m2.Get(ctx, "lose"); got.State.State != StateSleeping {
		t.Errorf("lose after restart: %+v", got.State)
	}
	var names []string
	for _, in := range e.sandboxes() {
		names = append(names, in.ID)
	}
	want := []string{keep.Sandbox, deployments[0].Name, deployments[1].Name}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("sandboxes after restart = %v, want only %v", names, want)
	}
	slots, _ := e.st.ComputerSlots(ctx)
	if !slices.Equal(slots, []string{"keep"}) {
		t.Errorf("slots after restart = %v", slots)
	}
	// The lost runtime's interval ended; the kept one is still open.
	open, _ := e.st.OpenUsages(ctx)
	if len(open) != 1 || open[0].RuntimeID != keep.RuntimeID {
		t.Errorf("open intervals = %+v", open)
	}
	if life := lifecycle(facts(t, m2, "lose")); life[len(life)-1] != "sleeping/restart: sandbox gone" {
		t.Errorf("lose's lifecycle = %v", life)
	}
}

// TestFleetLeavesSandboxes: the fleet's Run neither adopts nor destroys
// Computers' sandboxes: they are not vm.OwnerDeployment replicas.
func TestFleetLeavesSandboxes(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{ID: "mine", Start: true}); err != nil {
		t.Fatal(err)
	}
	run := func(o fleet.Options) {
		cctx, cancel := context.WithCancel(ctx)
		cancel() // Run adopts and cleans up, then returns at once
		if err := fleet.New(o).Run(cctx); err != nil {
			t.Fatal(err)
		}
	}
	run(fleet.Options{Drivers: e.drivers})
	if n := len(e.sandboxes()); n != 1 {
		t.Fatalf("%d sandboxes after the fleet's start-up, want 1", n)
	}
	exec(t, m, "mine", "true")
}

// TestBackingFallbackAndMove: a backing whose sandbox fails to start falls
// back to the next; changing the backings moves a running Computer,
// keeping its workspace.
func TestBackingFallbackAndMove(t *testing.T) {
	e := newEnv(t)
	e.drivers["container"] = newDriver(t, "/nonexistent/agent") // starts fail
	e.drivers["kvm"] = newDriver(t)                             // a second place that works
	m := e.manager(func(o *Options) { o.HostID = "h1" })
	ctx := context.Background()
	_, err := m.Create(ctx, CreateRequest{ID: "fb", Backings: []Backing{{Kind: KindContainer}, {Kind: KindVM, HostID: "h1"}, {Kind: KindProcess}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Start(ctx, "fb", false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Active != (Backing{Kind: KindVM, HostID: "h1"}) || c.State.State != StateRunning {
		t.Fatalf("after fallback: %+v", c)
	}
	exec(t, m, "fb", "echo kept > kept.txt")
	c, err = m.SetBackings(ctx, "fb", []Backing{{Kind: KindProcess}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Active != (Backing{Kind: KindProcess}) || c.State.State != StateRunning {
		t.Fatalf("after the move: %+v", c)
	}
	if out := exec(t, m, "fb", "cat kept.txt"); out != "kept\n" {
		t.Errorf("after the move: %q", out)
	}
	// Only one place fails: every backing failing is an error that says so.
	if _, err := m.SetBackings(ctx, "fb", []Backing{{Kind: KindContainer}}); err == nil || !strings.Contains(err.Error(), "no backing started") {
		t.Errorf("SetBackings(failing) = %v", err)
	}
	if got, _ := m.Get(ctx, "fb"); got.State.State != StateSleeping {
		t.Errorf("after every backing failed: %+v", got.State)
	}
	if n := len(e.sandboxes()); n != 0 {
		t.Errorf("%d sandboxes left", n)
	}
}

// TestRecycle: a sandbox older than RecycleAfter is replaced at a quiet
// moment; the workspace stays and the old runtime's interval ends.
func TestRecycle(t *testing.T) {
	e := newEnv(t)
	m := e.manager(func(o *Options) { o.RecycleAfter = time.Hour; o.QuietFor = time.Minute })
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{ID: "old", IdleTimeout: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	exec(t, m, "old", "echo data > data.txt")
	before, _ := e.st.Computer(ctx, "old")
	e.clock.Add(30 * time.Minute)
	m.tick(ctx)
	if rec, _ := e.st.Computer(ctx, "old"); rec.Sandbox != before.Sandbox {
		t.Fatal("recycled too early")
	}
	e.clock.Add(31 * time.Minute)
	m.tick(ctx)
	after, _ := e.st.Computer(ctx, "old")
	if after.Sandbox == before.Sandbox || after.RuntimeID == before.RuntimeID || after.State != StateRunning {
		t.Fatalf("not recycled: %+v", after)
	}
	if out := exec(t, m, "old", "cat data.txt"); out != "data\n" {
		t.Errorf("after the recycle: %q", out)
	}
	if rs, _ := e.st.PendingRecycles(ctx); len(rs) != 0 {
		t.Errorf("pending recycles = %+v", rs)
	}
	pending, err := m.PendingUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ended bool
	for _, u := range pending {
		if u.RuntimeID == before.RuntimeID {
			ended = u.Ended && u.ObservedAt-u.StartedAt == (61*time.Minute).Milliseconds()
		}
	}
	if !ended {
		t.Errorf("the old runtime's interval is not ended at 61 minutes: %+v", pending)
	}
	if n := len(e.sandboxes()); n != 1 {
		t.Errorf("%d sandboxes, want 1", n)
	}
}

func TestPorts(t *testing.T) {
	e := newEnv(t)
	m := e.manager(func(o *Options) { o.BaseDomain = "example.test" })
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{ID: "web"}); err != nil {
		t.Fatal(err)
	}
	x, err := m.ExposePort(ctx, "web", computertype.PortRequest{Port: 8080, Public: true})
	want := Exposure{Port: 8080, Host: "8080-web.example.test", URL: "http://8080-web.example.test/", Public: true}
	if err != nil || x != want {
		t.Errorf("ExposePort = %+v, %v", x, err)
	}
	if _, err := m.ExposePort(ctx, "nope", computertype.PortRequest{Port: 80}); !errors.Is(err, ErrNotFound) {
		t.Errorf("ExposePort(unknown) = %v", err)
	}
	ps, err := m.Ports(ctx, "web")
	if err != nil || len(ps) != 1 || ps[0] != want {
		t.Errorf("Ports = %+v, %v", ps, err)
	}
	if err := m.UnexposePort(ctx, "web", 8080); err != nil {
		t.Fatal(err)
	}
	if err := m.UnexposePort(ctx, "web", 8080); err != nil {
		t.Errorf("second UnexposePort = %v", err)
	}
	if ps, _ := m.Ports(ctx, "web"); len(ps) != 0 {
		t.Errorf("Ports after unexpose = %+v", ps)
	}

	// A private port with a sign-in: kept, and told to the data plane
	// (with the Computer's namespace) without waking the Computer.
	if _, err := m.ExposePort(ctx, "web", computertype.PortRequest{Port: 3000, Public: true, SignIn: "corp"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("ExposePort(public, sign_in) = %v, want invalid", err)
	}
	if x, err := m.ExposePort(ctx, "web", computertype.PortRequest{Port: 3000, SignIn: "corp"}); err != nil || x.SignIn != "corp" || x.Public {
		t.Errorf("ExposePort(sign_in) = %+v, %v", x, err)
	}
	pol, err := m.PortPolicy(ctx, "web", 3000)
	if err != nil || pol.SignIn != "corp" || pol.Public || pol.Addr != "" {
		t.Errorf("PortPolicy = %+v, %v", pol, err)
	}
	if ps, _ := m.Ports(ctx, "web"); len(ps) != 1 || ps[0].SignIn != "corp" {
		t.Errorf("Ports = %+v", ps)
	}
	if _, err := m.PortPolicy(ctx, "web", 8080); !errors.Is(err, ErrNotFound) {
		t.Errorf("PortPolicy(unexposed) = %v", err)
	}
}
