// Package vmtest is the conformance suite every vm.Driver must pass. A
// driver's own test calls RunDriverTests with a constructor and commands that
// run inside its sandboxes; the suite then checks the contract of package vm
// the same way for all of them, including the optional abilities the driver
// declares (vm.Abilities: Suspender, LogReader, LogFollower, AgentDialer,
// UsageReader, Leaser, Waiter, Checker, Mounter). A driver must declare its
// abilities; the suite fails, rather than skips, when a declared ability
// is missing or does not work, and when the driver implements one it does
// not declare.
//
// The suite only waits on conditions with bounded polling loops (a hang guard,
// never a timing assertion), so slow hosts make it slower, not flaky.
package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// Options tells the suite how to run apps in the driver's sandboxes. Commands
// are start_command strings: the driver runs them with /bin/sh -c.
type Options struct {
	// App serves HTTP 200 on $PORT until it is signalled, and is quiet
	// once serving. The suite composes it with other shell commands
	// ("echo x; APP", "(loop) & APP"), so it must be a complete command
	// list; "exec prog" is fine. Required.
	App string

	// EnvApp serves HTTP 200 on $PORT with a body of four lines: the value
	// of $GREETING, the working directory, the contents of the file hook.txt
	// in the working directory (trimmed), and a token chosen once when the
	// app starts (so the suite can tell a resumed app from a restarted one).
	// Empty skips the environment test and the token check of Suspend.
	EnvApp string

	// Image is passed as Spec.Image, for image-based drivers.
	Image string

	// WorkDir is the directory the suite uses as Spec.WorkDir in the
	// environment test; it must exist in the sandbox. Empty means a fresh
	// t.TempDir(), which suits drivers that share the host's filesystem.
	WorkDir string

	// CrashApp prints CrashLine as its last line of output and exits with
	// code 3 at once. Empty means "echo <CrashLine>; exit 3".
	CrashApp string

	// Reopen returns a second driver over the same state as old, as berth
	// has after a restart. Nil skips the re-adoption test.
	Reopen func(t *testing.T, old vm.Driver) vm.Driver

	// Grace is passed to Stop. Zero means 5 seconds.
	Grace time.Duration

	// LeaseCheck is how often the driver's replicas notice that their
	// lease has passed (the agent's --lease-check); the Lease test keeps a
	// renewed replica alive across several of them. Required for drivers
	// that are vm.Leasers; keep it short (tens of milliseconds).
	LeaseCheck time.Duration

	// Patience bounds every wait of the suite (it only guards against
	// hangs). Zero means 30 s; a driver whose guests boot slowly, such
	// as QEMU under TCG emulation on a busy host, sets more.
	Patience time.Duration
}

// CrashLine is the line CrashApp prints last; a crashed replica's
// Instance.Reason must contain it.
const CrashLine = "vmtest: crashing on purpose"

// patience bounds every wait of the suite: it only guards against hangs.
// RunDriverTests sets it from Options.Patience.
var patience = defaultPatience

const defaultPatience = 30 * time.Second

// RunDriverTests runs the conformance suite as parallel subtests of t. Each
// subtest gets its own driver from newDriver and stops the replicas it
// started when it ends.
func RunDriverTests(t *testing.T, newDriver func(t *testing.T) vm.Driver, o Options) {
	t.Helper()
	if o.App == "" {
		t.Fatal("vmtest: Options.App is required")
	}
	if o.Grace == 0 {
		o.Grace = 5 * time.Second
	}
	if o.CrashApp == "" {
		o.CrashApp = "echo '" + CrashLine + "'; exit 3"
	}
	patience = defaultPatience
	if o.Patience > 0 {
		patience = o.Patience
	}
	s := &suite{o: o, newDriver: newDriver}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Abilities", s.testAbilities},
		{"Lifecycle", s.testLifecycle},
		{"Unknown", s.testUnknown},
		{"BadName", s.testBadName},
		{"Duplicate", s.testDuplicate},
		{"Crash", s.testCrash},
		{"Environment", s.testEnvironment},
		{"Replicas", s.testReplicas},
		{"Suspend", s.testSuspend},
		{"Logs", s.testLogs},
		{"FollowLogs", s.testFollowLogs},
		{"Agent", s.testAgent},
		{"Usage", s.testUsage},
		{"Lease", s.testLease},
		{"Wait", s.testWait},
		{"Check", s.testCheck},
		{"Mounts", s.testMounts},
		{"Reopen", s.testReopen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t)
		})
	}
}

// declared returns the abilities d declares, failing the test when it
// declares none.
func declared(t *testing.T, d vm.Driver) []vm.Ability {
	t.Helper()
	ab, ok := d.(vm.Abilities)
	if !ok {
		t.Fatalf("the driver (%T) does not declare its abilities (vm.Abilities)", d)
	}
	return ab.Abilities()
}

// ability returns d as I, the interface of ability a. It skips the test
// when d does not declare a, and fails it when d declares a but is no I: a
// driver that loses an ability it declares fails the suite.
func ability[I any](t *testing.T, d vm.Driver, a vm.Ability) I {
	t.Helper()
	if !slices.Contains(declared(t, d), a) {
		t.Skipf("the driver does not declare vm.%s", a)
	}
	i, ok := d.(I)
	if !ok {
		t.Fatalf("the driver declares vm.%s but (%T) does not implement it", a, d)
	}
	return i
}

// testAbilities checks the declaration against the interfaces: each
// declared ability is implemented, and each implemented one is declared
// (else the suite would not check it).
func (s *suite) testAbilities(t *testing.T) {
	d := s.newDriver(t)
	decl := declared(t, d)
	for _, a := range decl {
		if !slices.Contains(vm.AllAbilities, a) {
			t.Errorf("the driver declares an unknown ability %q", a)
		}
	}
	for _, a := range vm.AllAbilities {
		has, says := vm.Implements(d, a), slices.Contains(decl, a)
		switch {
		case says && !has:
			t.Errorf("the driver declares vm.%s but (%T) does not implement it", a, d)
		case has && !says:
			t.Errorf("the driver implements vm.%s but does not declare it (so the suite would not check it)", a)
		}
	}
}

type suite struct {
	o         Options
	newDriver func(t *testing.T) vm.Driver
}

// name returns a fresh replica name for a deployment of the suite.
func name(deployment string) string {
	var b [8]byte
	rand.Read(b[:])
	return vm.Name(deployment, binary.LittleEndian.Uint64(b[:]))
}

func (s *suite) spec(deployment, command string) vm.Spec {
	id := name(deployment)
	return vm.Spec{Name: id, Deployment: deployment, Image: s.o.Image, Command: command}
}

// start starts a replica and stops it when the test ends.
func (s *suite) start(t *testing.T, d vm.Driver, spec vm.Spec) vm.Instance {
	t.Helper()
	inst, err := d.Start(t.Context(), spec)
	if err != nil {
		t.Fatalf("Start(%s): %v", spec.Name, err)
	}
	t.Cleanup(func() {
		err := d.Stop(context.Background(), spec.Name, s.o.Grace)
		if err != nil && !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("cleanup: Stop(%s): %v", spec.Name, err)
		}
	})
	if inst.ID != spec.Name {
		t.Errorf("Start returned ID %q, want %q", inst.ID, spec.Name)
	}
	if inst.Deployment != spec.Deployment {
		t.Errorf("Start returned Deployment %q, want %q", inst.Deployment, spec.Deployment)
	}
	if want := vm.ResolveOwner(spec.Owner, spec.Name); inst.Owner != want {
		t.Errorf("Start returned Owner %v, want %v", inst.Owner, want)
	}
	return inst
}

// eventually polls cond every 10 ms until it returns true, failing the test
// with the last description if that takes longer than patience.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s: %s", what, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var client = &http.Client{Timeout: 5 * time.Second}

// get fetches http://addr/ and returns the status and body.
func get(ctx context.Context, addr string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitServing polls Inspect until the replica is running with an Addr that
// answers HTTP 200, and returns the instance and the body.
func waitServing(t *testing.T, d vm.Driver, id string) (vm.Instance, string) {
	t.Helper()
	var inst vm.Instance
	var body string
	eventually(t, id+" to serve HTTP", func() (bool, string) {
		var err error
		inst, err = d.Inspect(t.Context(), id)
		if err != nil {
			t.Fatalf("Inspect(%s): %v", id, err)
		}
		if inst.State.Terminal() {
			t.Fatalf("%s ended while starting: state %s, reason %q", id, inst.State, inst.Reason)
		}
		if inst.Addr == "" {
			return false, "no Addr yet, state " + string(inst.State)
		}
		code, b, err := get(t.Context(), inst.Addr)
		if err != nil {
			return false, err.Error()
		}
		if code != http.StatusOK {
			return false, fmt.Sprintf("status %d", code)
		}
		body = b
		return true, ""
	})
	if inst.State != vm.StateRunning {
		t.Errorf("%s serves HTTP in state %s, want %s", id, inst.State, vm.StateRunning)
	}
	return inst, body
}

// waitSilent polls addr until it no longer answers HTTP 200.
func waitSilent(t *testing.T, addr string) {
	t.Helper()
	eventually(t, addr+" to stop answering", func() (bool, string) {
		code, _, err := get(t.Context(), addr)
		if err != nil {
			return true, ""
		}
		return code != http.StatusOK, fmt.Sprintf("status %d", code)
	})
}

func find(list []vm.Instance, id string) (vm.Instance, bool) {
	i := slices.IndexFunc(list, func(inst vm.Instance) bool { return inst.ID == id })
	if i < 0 {
		return vm.Instance{}, false
	}
	return list[i], true
}

func (s *suite) testLifecycle(t *testing.T) {
	d := s.newDriver(t)
	spec := s.spec("vmtest-life", s.o.App)
	// An owner the name does not imply: the driver keeps what it was
	// given (package inventory hands replicas out by it).
	spec.Owner = vm.Owner{Kind: vm.OwnerComputer, ID: "vmtest-owner"}
	s.start(t, d, spec)
	inst, _ := waitServing(t, d, spec.Name)
	if inst.ID != spec.Name || inst.Deployment != spec.Deployment || inst.Owner != spec.Owner {
		t.Errorf("Inspect = {ID %q, Deployment %q, Owner %v}, want {%q, %q, %v}", inst.ID, inst.Deployment, inst.Owner, spec.Name, spec.Deployment, spec.Owner)
	}
	if inst.StartedAt.IsZero() {
		t.Error("Inspect: StartedAt is zero")
	}

	list, err := d.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	got, ok := find(list, spec.Name)
	if !ok {
		t.Fatalf("List does not have %s: %v", spec.Name, list)
	}
	owner, _ := vm.ParseName(spec.Name)
	if got.Deployment != owner || got.Owner != spec.Owner {
		t.Errorf("List: {Deployment %q, Owner %v}, want {%q, %v}", got.Deployment, got.Owner, owner, spec.Owner)
	}
	if got.State != vm.StateRunning || got.Addr != inst.Addr {
		t.Errorf("List: {State %s, Addr %q}, want {%s, %q}", got.State, got.Addr, vm.StateRunning, inst.Addr)
	}

	if err := d.Stop(t.Context(), spec.Name, s.o.Grace); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := d.Inspect(t.Context(), spec.Name); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Inspect after Stop: error %v, want ErrNotFound", err)
	}
	waitSilent(t, inst.Addr)
	list, err = d.List(t.Context())
	if err != nil {
		t.Fatalf("List after Stop: %v", err)
	}
	if _, ok := find(list, spec.Name); ok {
		t.Errorf("List after Stop still has %s", spec.Name)
	}
	if err := d.Stop(t.Context(), spec.Name, s.o.Grace); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("second Stop: error %v, want ErrNotFound", err)
	}
}

func (s *suite) testUnknown(t *testing.T) {
	d := s.newDriver(t)
	id := name("vmtest-unknown")
	ctx := t.Context()
	if _, err := d.Inspect(ctx, id); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Inspect: error %v, want ErrNotFound", err)
	}
	if err := d.Stop(ctx, id, s.o.Grace); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Stop: error %v, want ErrNotFound", err)
	}
	if sd, ok := d.(vm.Suspender); ok {
		if err := sd.Suspend(ctx, id); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Suspend: error %v, want ErrNotFound", err)
		}
		if _, err := sd.Resume(ctx, id); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Resume: error %v, want ErrNotFound", err)
		}
	}
	if lr, ok := d.(vm.LogReader); ok {
		if _, err := lr.Logs(ctx, id, 10); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Logs: error %v, want ErrNotFound", err)
		}
	}
	if lf, ok := d.(vm.LogFollower); ok {
		if err := lf.FollowLogs(ctx, id, io.Discard); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("FollowLogs: error %v, want ErrNotFound", err)
		}
	}
	if ad, ok := d.(vm.AgentDialer); ok {
		c, err := ad.DialAgent(ctx, id)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("DialAgent: error %v, want ErrNotFound", err)
		}
	}
	if ur, ok := d.(vm.UsageReader); ok {
		if _, err := ur.Usage(ctx, id); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Usage: error %v, want ErrNotFound", err)
		}
	}
	if l, ok := d.(vm.Leaser); ok {
		if err := l.Renew(ctx, id, time.Now().Add(time.Hour)); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Renew: error %v, want ErrNotFound", err)
		}
		if err := l.Renew(ctx, "../../etc", time.Now().Add(time.Hour)); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Renew(../../etc): error %v, want ErrNotFound", err)
		}
	}
}

// testBadName checks that ids berth never gives are refused, not used as
// paths or names: a driver keyed by files must not be walked out of its
// directory.
func (s *suite) testBadName(t *testing.T) {
	d := s.newDriver(t)
	for _, id := range []string{"", "../../etc", "berth-x/../../y-0123456789ab", "not-a-berth-name"} {
		spec := vm.Spec{Name: id, Deployment: "x", Image: s.o.Image, Command: s.o.App}
		if inst, err := d.Start(t.Context(), spec); err == nil {
			d.Stop(context.Background(), inst.ID, s.o.Grace)
			t.Errorf("Start(%q) succeeded, want an error", id)
		}
		if _, err := d.Inspect(t.Context(), id); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Inspect(%q): error %v, want ErrNotFound", id, err)
		}
		if err := d.Stop(t.Context(), id, s.o.Grace); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Stop(%q): error %v, want ErrNotFound", id, err)
		}
	}
	spec := s.spec("vmtest-bad", s.o.App)
	spec.Deployment = "someone-else"
	if _, err := d.Start(t.Context(), spec); err == nil {
		d.Stop(context.Background(), spec.Name, s.o.Grace)
		t.Errorf("Start with Deployment %q for name %q succeeded, want an error", spec.Deployment, spec.Name)
	}
	spec = s.spec("vmtest-bad", s.o.App)
	spec.SizeClass = "gigantic"
	if _, err := d.Start(t.Context(), spec); err == nil {
		d.Stop(context.Background(), spec.Name, s.o.Grace)
		t.Errorf("Start with SizeClass %q succeeded, want an error", spec.SizeClass)
	}
}

// testDuplicate checks that a name runs at most once: starting it again must
// fail and leave the first replica serving.
func (s *suite) testDuplicate(t *testing.T) {
	d := s.newDriver(t)
	spec := s.spec("vmtest-dup", s.o.App)
	s.start(t, d, spec)
	first, _ := waitServing(t, d, spec.Name)
	if _, err := d.Start(t.Context(), spec); err == nil {
		t.Fatalf("second Start(%s) succeeded, want an error", spec.Name)
	}
	inst, _ := waitServing(t, d, spec.Name)
	if inst.Addr != first.Addr {
		t.Errorf("after a second Start, Addr = %q, want %q", inst.Addr, first.Addr)
	}
	list, err := d.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	n := 0
	for _, inst := range list {
		if inst.ID == spec.Name {
			n++
		}
	}
	if n != 1 {
		t.Errorf("List has %s %d times, want 1", spec.Name, n)
	}
}

func (s *suite) testCrash(t *testing.T) {
	d := s.newDriver(t)
	spec := s.spec("vmtest-crash", s.o.CrashApp)
	s.start(t, d, spec)
	var inst vm.Instance
	eventually(t, "the crashing app to end", func() (bool, string) {
		var err error
		inst, err = d.Inspect(t.Context(), spec.Name)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		return inst.State.Terminal(), "state " + string(inst.State)
	})
	if inst.ExitCode == nil || *inst.ExitCode != 3 {
		t.Errorf("ExitCode = %s, want 3", fmtCode(inst.ExitCode))
	}
	if !strings.Contains(inst.Reason, CrashLine) {
		t.Errorf("Reason = %q, want it to contain the last output line %q", inst.Reason, CrashLine)
	}
	list, err := d.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if got, ok := find(list, spec.Name); !ok || !got.State.Terminal() {
		t.Errorf("List: %s present %v in state %s, want it listed as ended", spec.Name, ok, got.State)
	}
	if err := d.Stop(t.Context(), spec.Name, s.o.Grace); err != nil {
		t.Fatalf("Stop of an ended replica: %v", err)
	}
	if _, err := d.Inspect(t.Context(), spec.Name); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Inspect after Stop: error %v, want ErrNotFound", err)
	}
}

func fmtCode(p *int) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// envBody is what EnvApp answers.
type envBody struct {
	greeting, workDir, hook, token string
}

func parseEnvBody(t *testing.T, body string) envBody {
	t.Helper()
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("EnvApp answered %q, want 4 lines", body)
	}
	return envBody{lines[0], lines[1], lines[2], lines[3]}
}

func (s *suite) envSpec(t *testing.T, deployment string) vm.Spec {
	spec := s.spec(deployment, s.o.EnvApp)
	spec.WorkDir = s.o.WorkDir
	if spec.WorkDir == "" {
		spec.WorkDir = t.TempDir()
		// Writable by the sandbox's user, where the driver runs the app
		// as one of its own (the process driver as root).
		if err := os.Chmod(spec.WorkDir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	spec.Env = map[string]string{"GREETING": "hello from vmtest"}
	spec.SetupHooks = []string{"printf first > hook.txt", "printf ' then hooked' >> hook.txt"}
	return spec
}

func (s *suite) testEnvironment(t *testing.T) {
	if s.o.EnvApp == "" {
		t.Skip("Options.EnvApp is empty")
	}
	d := s.newDriver(t)
	spec := s.envSpec(t, "vmtest-env")
	s.start(t, d, spec)
	_, body := waitServing(t, d, spec.Name)
	got := parseEnvBody(t, body)
	if got.greeting != spec.Env["GREETING"] {
		t.Errorf("app saw GREETING=%q, want %q", got.greeting, spec.Env["GREETING"])
	}
	if filepath.Clean(got.workDir) != filepath.Clean(spec.WorkDir) {
		t.Errorf("app ran in %q, want %q", got.workDir, spec.WorkDir)
	}
	if want := "first then hooked"; got.hook != want {
		t.Errorf("hook.txt = %q, want %q (both setup hooks, in order)", got.hook, want)
	}
}

func (s *suite) testReplicas(t *testing.T) {
	d := s.newDriver(t)
	specs := []vm.Spec{s.spec("vmtest-pair", s.o.App), s.spec("vmtest-pair", s.o.App)}
	var wg sync.WaitGroup
	insts := make([]vm.Instance, len(specs))
	errs := make([]error, len(specs))
	for i, spec := range specs {
		wg.Go(func() {
			insts[i], errs[i] = d.Start(t.Context(), spec)
		})
	}
	wg.Wait()
	for i, spec := range specs {
		if errs[i] != nil {
			t.Fatalf("concurrent Start(%s): %v", spec.Name, errs[i])
		}
		t.Cleanup(func() { d.Stop(context.Background(), spec.Name, s.o.Grace) })
	}
	a, _ := waitServing(t, d, specs[0].Name)
	b, _ := waitServing(t, d, specs[1].Name)
	if a.Addr == b.Addr {
		t.Errorf("two replicas share the address %s", a.Addr)
	}
	if err := d.Stop(t.Context(), specs[0].Name, s.o.Grace); err != nil {
		t.Fatalf("Stop(%s): %v", specs[0].Name, err)
	}
	// Stopping one replica leaves its sibling serving.
	waitServing(t, d, specs[1].Name)
}

func (s *suite) testSuspend(t *testing.T) {
	d := s.newDriver(t)
	sd := ability[vm.Suspender](t, d, vm.CanSuspend)
	var spec vm.Spec
	if s.o.EnvApp != "" {
		spec = s.envSpec(t, "vmtest-suspend")
	} else {
		spec = s.spec("vmtest-suspend", s.o.App)
	}
	s.start(t, d, spec)
	before, body := waitServing(t, d, spec.Name)

	if err := sd.Suspend(t.Context(), spec.Name); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	inst, err := d.Inspect(t.Context(), spec.Name)
	if err != nil {
		t.Fatalf("Inspect after Suspend: %v", err)
	}
	if inst.State != vm.StateSuspended {
		t.Errorf("state after Suspend = %s, want %s", inst.State, vm.StateSuspended)
	}
	list, err := d.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if got, ok := find(list, spec.Name); !ok || got.State != vm.StateSuspended {
		t.Errorf("List: %s present %v in state %s, want it listed as suspended", spec.Name, ok, got.State)
	}
	// A suspended replica must not answer. A short deadline is the only
	// way to observe silence; it cannot make the test flaky, because an
	// answer is a failure however late it comes.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	code, _, err := get(ctx, before.Addr)
	cancel()
	if err == nil && code == http.StatusOK {
		t.Errorf("suspended replica answered HTTP %d", code)
	}

	inst, err = sd.Resume(t.Context(), spec.Name)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if inst.State != vm.StateRunning {
		t.Errorf("Resume returned state %s, want %s", inst.State, vm.StateRunning)
	}
	after, body2 := waitServing(t, d, spec.Name)
	if after.Addr != before.Addr {
		t.Errorf("Addr after Resume = %q, want %q", after.Addr, before.Addr)
	}
	if s.o.EnvApp != "" {
		b1, b2 := parseEnvBody(t, body), parseEnvBody(t, body2)
		if b1 != b2 {
			t.Errorf("after Resume the app answers %+v, want %+v (same process, same files)", b2, b1)
		}
	}

	// A suspended replica can be stopped.
	if err := sd.Suspend(t.Context(), spec.Name); err != nil {
		t.Fatalf("second Suspend: %v", err)
	}
	if err := d.Stop(t.Context(), spec.Name, s.o.Grace); err != nil {
		t.Fatalf("Stop of a suspended replica: %v", err)
	}
	if _, err := d.Inspect(t.Context(), spec.Name); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Inspect after Stop: error %v, want ErrNotFound", err)
	}
}

func (s *suite) testLogs(t *testing.T) {
	d := s.newDriver(t)
	lr := ability[vm.LogReader](t, d, vm.CanLogs)
	const first, second = "vmtest: first log line", "vmtest: second log line"
	spec := s.spec("vmtest-logs", "echo '"+first+"'; echo '"+second+"' >&2; "+s.o.App)
	s.start(t, d, spec)
	waitServing(t, d, spec.Name)
	var lines []vm.LogLine
	eventually(t, "both lines in Logs", func() (bool, string) {
		var err error
		lines, err = lr.Logs(t.Context(), spec.Name, 1000)
		if err != nil {
			t.Fatalf("Logs: %v", err)
		}
		i := slices.IndexFunc(lines, func(l vm.LogLine) bool { return l.Text == first })
		j := slices.IndexFunc(lines, func(l vm.LogLine) bool { return l.Text == second })
		return i >= 0 && j >= 0, fmt.Sprintf("%+v", lines)
	})
	for _, l := range lines {
		switch l.Text {
		case first:
			if l.Stream != "stdout" {
				t.Errorf("%q on stream %q, want stdout", l.Text, l.Stream)
			}
		case second:
			if l.Stream != "stderr" {
				t.Errorf("%q on stream %q, want stderr", l.Text, l.Stream)
			}
		}
		if l.Time.IsZero() {
			t.Errorf("line %q has no time", l.Text)
		}
	}
	last, err := lr.Logs(t.Context(), spec.Name, 1)
	if err != nil {
		t.Fatalf("Logs(n=1): %v", err)
	}
	if len(last) != 1 {
		t.Fatalf("Logs(n=1) returned %d lines, want 1", len(last))
	}
	if want := lines[len(lines)-1].Text; last[0].Text != want {
		// Only fails if the app logs more lines meanwhile; the App of the
		// suite is quiet once serving.
		t.Errorf("Logs(n=1) = %q, want the most recent line %q", last[0].Text, want)
	}
}

// lineWatcher is an io.Writer that closes found once a write contains want.
type lineWatcher struct {
	want  string
	mu    sync.Mutex
	buf   bytes.Buffer
	found chan struct{}
	once  sync.Once
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if bytes.Contains(w.buf.Bytes(), []byte(w.want)) {
		w.once.Do(func() { close(w.found) })
	}
	return len(p), nil
}

func (s *suite) testFollowLogs(t *testing.T) {
	d := s.newDriver(t)
	lf := ability[vm.LogFollower](t, d, vm.CanFollowLogs)
	// A background loop keeps writing after the app serves, so lines keep
	// arriving after FollowLogs begins, wherever it starts reading.
	cmd := "(i=0; while [ $i -lt 1200 ]; do echo vmtest-tick-$i; i=$((i+1)); sleep 0.05; done) & " + s.o.App
	spec := s.spec("vmtest-follow", cmd)
	s.start(t, d, spec)
	waitServing(t, d, spec.Name)

	w := &lineWatcher{want: "vmtest-tick-", found: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- lf.FollowLogs(ctx, spec.Name, w) }()
	select {
	case <-w.found:
	case err := <-done:
		t.Fatalf("FollowLogs returned early: %v", err)
	case <-time.After(patience):
		t.Fatal("gave up waiting for FollowLogs to write a line")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatal("FollowLogs did not return after its context ended")
	}
}

func (s *suite) testAgent(t *testing.T) {
	d := s.newDriver(t)
	ad := ability[vm.AgentDialer](t, d, vm.CanDialAgent)
	spec := s.spec("vmtest-agent", s.o.App)
	s.start(t, d, spec)
	waitServing(t, d, spec.Name)
	conn, err := ad.DialAgent(t.Context(), spec.Name)
	if err != nil {
		t.Fatalf("DialAgent: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(patience))
	if _, err := io.WriteString(conn, "GET /v1/info HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatalf("writing to the agent: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the agent's answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/info over the agent connection: status %d, want 200", resp.StatusCode)
	}
}

func (s *suite) testUsage(t *testing.T) {
	d := s.newDriver(t)
	ur := ability[vm.UsageReader](t, d, vm.CanUsage)
	spec := s.spec("vmtest-usage", s.o.App)
	s.start(t, d, spec)
	waitServing(t, d, spec.Name)
	for range 2 { // the second reading may be relative to the first
		u, err := ur.Usage(t.Context(), spec.Name)
		if err != nil {
			t.Fatalf("Usage: %v", err)
		}
		if u.MemoryBytes <= 0 {
			t.Errorf("Usage: MemoryBytes = %d, want > 0", u.MemoryBytes)
		}
		if u.CPUPercent < 0 {
			t.Errorf("Usage: CPUPercent = %v, want >= 0", u.CPUPercent)
		}
	}
}

func (s *suite) testReopen(t *testing.T) {
	if s.o.Reopen == nil {
		t.Skip("Options.Reopen is nil")
	}
	d1 := s.newDriver(t)
	spec := s.spec("vmtest-reopen", s.o.App)
	s.start(t, d1, spec)
	first, _ := waitServing(t, d1, spec.Name)

	d2 := s.o.Reopen(t, d1)
	list, err := d2.List(t.Context())
	if err != nil {
		t.Fatalf("reopened List: %v", err)
	}
	got, ok := find(list, spec.Name)
	if !ok {
		t.Fatalf("reopened List does not have %s: %v", spec.Name, list)
	}
	if got.State != vm.StateRunning || got.Addr != first.Addr || got.Deployment != spec.Deployment {
		t.Errorf("reopened List: {State %s, Addr %q, Deployment %q}, want {%s, %q, %q}",
			got.State, got.Addr, got.Deployment, vm.StateRunning, first.Addr, spec.Deployment)
	}
	waitServing(t, d2, spec.Name)
	if err := d2.Stop(t.Context(), spec.Name, s.o.Grace); err != nil {
		t.Fatalf("reopened Stop: %v", err)
	}
	waitSilent(t, first.Addr)
	if _, err := d1.Inspect(t.Context(), spec.Name); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("first driver's Inspect after the second stopped it: error %v, want ErrNotFound", err)
	}
}

// leaseTTL is the initial lease of the Lease test's replicas (and how far
// each renewal reaches): long enough to start and serve, short enough that
// the test does not wait long for it. A suite given more patience (slow
// guests: a renewal's round trip into a TCG guest on a busy host can take
// seconds) gets more.
func leaseTTL() time.Duration {
	if patience > defaultPatience {
		return 10 * time.Second
	}
	return 2 * time.Second
}

// testLease checks the TTL backstop: a lease moved into the past ends the
// replica, a replica left alone ends once Spec.TTL has passed, and one whose
// lease is renewed outlives the first (started earlier with the same TTL) and
// keeps serving across further checks.
func (s *suite) testLease(t *testing.T) {
	d := s.newDriver(t)
	l := ability[vm.Leaser](t, d, vm.CanLease)
	if s.o.LeaseCheck <= 0 {
		t.Fatal("vmtest: the driver is a vm.Leaser, so Options.LeaseCheck is required")
	}

	expired := func(id string) (bool, string) {
		inst, err := d.Inspect(t.Context(), id)
		if err != nil {
			t.Fatalf("Inspect(%s): %v", id, err)
		}
		if !inst.State.Terminal() {
			return false, "state " + string(inst.State)
		}
		if !strings.Contains(inst.Reason, "lease expired") {
			t.Errorf("%s ended in state %s with reason %q, want it to say the lease expired", id, inst.State, inst.Reason)
		}
		return true, ""
	}

	// A lease moved into the past ends a replica started without a TTL.
	gone := s.spec("vmtest-lease", s.o.App)
	s.start(t, d, gone)
	inst, _ := waitServing(t, d, gone.Name)
	if err := l.Renew(t.Context(), gone.Name, time.Now().Add(-time.Hour)); err != nil {
		t.Fatalf("Renew into the past: %v", err)
	}
	eventually(t, gone.Name+" to end after its lease passed", func() (bool, string) { return expired(gone.Name) })
	waitSilent(t, inst.Addr)

	// Two replicas with the same TTL: the renewed one is started first, so
	// its initial lease ends no later than the other's.
	kept, left := s.spec("vmtest-lease", s.o.App), s.spec("vmtest-lease", s.o.App)
	kept.TTL, left.TTL = leaseTTL(), leaseTTL()
	s.start(t, d, kept)
	// kept is renewed from now on, also while left starts: a slow start of
	// left (a TCG guest on a busy host) must not outlast kept's first lease.
	renewing, renewed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(s.o.LeaseCheck)
		defer tick.Stop()
		for {
			if err := l.Renew(t.Context(), kept.Name, time.Now().Add(leaseTTL())); err != nil {
				t.Errorf("Renew(%s): %v", kept.Name, err)
				return
			}
			select {
			case <-renewing:
				return
			case <-tick.C:
			}
		}
	}()
	stopRenewing := sync.OnceFunc(func() { close(renewing); <-renewed })
	t.Cleanup(stopRenewing) // also when the test ends early
	s.start(t, d, left)
	tick := time.NewTicker(s.o.LeaseCheck)
	defer tick.Stop()
	eventually(t, left.Name+" to end when its TTL passed", func() (bool, string) {
		<-tick.C
		return expired(left.Name)
	})
	// The renewed replica's first lease has passed too; give its sandbox
	// several more checks to (wrongly) act on it.
	for range 10 {
		<-tick.C
	}
	waitServing(t, d, kept.Name)
	stopRenewing()
	if err := l.Renew(t.Context(), kept.Name, time.Now().Add(-time.Second)); err != nil {
		t.Fatalf("Renew into the past: %v", err)
	}
	eventually(t, kept.Name+" to end after its lease passed", func() (bool, string) { return expired(kept.Name) })
}

// testWait checks that Wait reports a replica's end: at once for an
// unknown one, with the exit of one that crashes, with ctx's error for one
// that keeps running, and with its disappearance (or end) when it is
// stopped meanwhile.
func (s *suite) testWait(t *testing.T) {
	d := s.newDriver(t)
	w := ability[vm.Waiter](t, d, vm.CanWait)
	if _, err := w.Wait(t.Context(), name("vmtest-unknown")); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Wait of an unknown replica: error %v, want ErrNotFound", err)
	}

	crash := s.spec("vmtest-wait-crash", s.o.CrashApp)
	s.start(t, d, crash)
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	in, err := w.Wait(ctx, crash.Name)
	cancel()
	if err != nil {
		t.Fatalf("Wait of a crashing replica: %v", err)
	}
	if !in.State.Terminal() || !strings.Contains(in.Reason, CrashLine) {
		t.Errorf("Wait of a crashing replica = %s (exit %s), reason %q; want it ended, with %q in the reason", in.State, fmtCode(in.ExitCode), in.Reason, CrashLine)
	}

	run := s.spec("vmtest-wait-run", s.o.App)
	s.start(t, d, run)
	waitServing(t, d, run.Name)
	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		in, err := w.Wait(ctx, run.Name)
		if err == nil {
			err = fmt.Errorf("returned %s while the replica runs", in.State)
		}
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Wait of a running replica with its context cancelled: %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithTimeout(t.Context(), patience)
	defer cancel()
	type result struct {
		in  vm.Instance
		err error
	}
	got := make(chan result, 1)
	go func() {
		in, err := w.Wait(ctx, run.Name)
		got <- result{in, err}
	}()
	if err := d.Stop(t.Context(), run.Name, s.o.Grace); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	r := <-got
	if !errors.Is(r.err, vm.ErrNotFound) && !(r.err == nil && r.in.State.Terminal()) {
		t.Errorf("Wait of a replica stopped meanwhile = %s, %v; want its end or ErrNotFound", r.in.State, r.err)
	}
}

// testCheck checks that a working driver says it is available.
func (s *suite) testCheck(t *testing.T) {
	d := s.newDriver(t)
	c := ability[vm.Checker](t, d, vm.CanCheck)
	if err := c.Check(t.Context()); err != nil {
		t.Errorf("Check of a working driver: %v", err)
	}
}
