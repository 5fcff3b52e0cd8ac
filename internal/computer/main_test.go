//go:build linux

package computer

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/clocktest"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// TestMain lets the test binary be the in-sandbox agent: with
// BERTH_TEST_ROLE=agent it runs `berth agent`. When benchmarks run, it
// runs them in a network namespace of their own (netnstest, as root), where
// the container benchmarks give containers their addresses.
func TestMain(m *testing.M) {
	if os.Getenv("BERTH_TEST_ROLE") == "agent" {
		os.Exit(agent.Main(context.Background(), os.Args[1:], os.Stderr))
	}
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		os.Exit(netnstest.Main(benchRunner{m}))
	}
	os.Exit(m.Run())
}

// benchRunner runs the benchmarks, then removes the container benchmarks'
// environment.
type benchRunner struct{ m *testing.M }

func (r benchRunner) Run() int {
	code := r.m.Run()
	if cenv != nil {
		cenv.close()
	}
	return code
}

// env is a test's berth: a real store, real process drivers whose agent is
// this test binary, and the directories a Manager needs.
type env struct {
	t       *testing.T
	dataDir string
	st      *store.Store
	drivers map[string]vm.Driver
	clock   *clocktest.Clock
}

// newDriver returns a process driver in a short directory (agent socket
// paths are limited to 107 bytes) that stops every sandbox it has when
// the test ends.
func newDriver(t *testing.T, agentCmd ...string) *process.Driver {
	t.Helper()
	dir, err := os.MkdirTemp("", "cmp")
	if err != nil {
		t.Fatal(err)
	}
	if len(agentCmd) == 0 {
		agentCmd = []string{os.Args[0]}
	}
	d, err := process.New(process.Options{Dir: dir, AgentCommand: agentCmd, AgentEnv: []string{"BERTH_TEST_ROLE=agent"}, CgroupParent: "none"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		insts, _ := d.List(context.Background())
		for _, in := range insts {
			if err := d.Stop(context.Background(), in.ID, time.Second); err != nil {
				t.Errorf("stopping sandbox %s: %v", in.ID, err)
			}
		}
		os.RemoveAll(dir)
	})
	return d
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, dataDir: t.TempDir(), clock: clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	e.drivers = map[string]vm.Driver{"process": newDriver(t)}
	e.open()
	return e
}

// open opens the store (again, after closeStore: a berth restart).
func (e *env) open() {
	st, err := store.Open(e.dataDir)
	if err != nil {
		e.t.Fatal(err)
	}
	e.st = st
	e.t.Cleanup(func() { st.Close() })
}

func (e *env) manager(opts ...func(*Options)) *Manager {
	e.t.Helper()
	o := Options{
		Store: e.st, Drivers: e.drivers, DataDir: e.dataDir, Now: e.clock.Now,
		StopGrace: time.Second, Tick: time.Hour,
	}
	for _, f := range opts {
		f(&o)
	}
	m, err := New(context.Background(), o)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// sandboxes lists the running sandboxes of every driver.
func (e *env) sandboxes() []vm.Instance {
	e.t.Helper()
	var out []vm.Instance
	for _, d := range e.drivers {
		insts, err := d.List(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		for _, in := range insts {
			if in.State == vm.StateRunning {
				out = append(out, in)
			}
		}
	}
	return out
}

// exec runs a shell command in Computer id (waking it) and returns its
// stdout.
func exec(t *testing.T, m *Manager, id, command string) string {
	t.Helper()
	c, release, err := m.Use(context.Background(), id)
	if err != nil {
		t.Fatalf("Use(%s): %v", id, err)
	}
	defer release()
	res, err := c.Exec(context.Background(), agent.ExecRequest{Command: command})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s", command, res.ExitCode, res.Output)
	}
	return res.Stdout
}

// facts returns every fact of Computer id.
func facts(t *testing.T, m *Manager, id string) []Fact {
	t.Helper()
	recs, err := m.Facts(context.Background(), id, 0, MaxFactsLimit)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Fact, len(recs))
	for i, r := range recs {
		out[i] = r.Fact
	}
	return out
}

// lifecycle returns the states (with via) of the lifecycle facts.
func lifecycle(fs []Fact) []string {
	var out []string
	for _, f := range fs {
		if f.Kind == FactLifecycle {
			out = append(out, f.State.State+"/"+f.Provenance.Via)
		}
	}
	return out
}
