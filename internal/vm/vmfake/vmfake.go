// Package vmfake is an in-memory vm.Driver for fast, root-free tests of what
// runs above the drivers (fleet, registry, admin). It passes the conformance
// suite of package vmtest like the real drivers; real drivers stay in their
// own tests.
//
// A replica's start command (and its setup hooks) run in an in-process POSIX
// shell interpreter (mvdan.cc/sh), never as host processes: builtins such as
// echo, printf, exit, while and test behave as in sh, redirections go to a
// file system in memory (one per replica), and the only other commands are
// the fake's own:
//
//	serve      answer HTTP 200 "ok" on the replica's address until told to stop
//	serve-env  the same, answering the four lines of vmtest's EnvApp
//	sleep N    wait N seconds (on the clock of a testing/synctest bubble, inside one)
//	cat FILE…  print files of the replica's file system
//
// Any other command is "not found" (exit status 127). An empty start command
// means "serve".
//
// Each replica gets its own loopback HTTP listener (Instance.Addr), which
// answers while a serve command runs and drops connections otherwise; $PORT
// is Spec.Port, or the listener's port when that is 0. Inside a
// testing/synctest bubble set Options.Addr instead: a goroutine waiting in
// Accept is never durably blocked, so the fake then serves nothing and every
// replica reports that address.
//
// The environment is Spec.Env with HOME, PATH and PORT (vm.AppEnv), nothing
// of the host's. Spec.Image, User, DiskSizeGB, OpenPorts and Workspace are
// accepted and ignored (the fake runs no image, so no image user). Stop's grace is never waited out: the fake's
// commands all end as soon as they are told to.
//
// Tests steer replicas with Exit, Crash, Lose, Find and SetUsage, and the
// driver with SetUnavailable; they learn what a pool did with Stopped and
// Starts. Options.BootDelay, BeforeStart
// and BeforeStop make Start slow or failing and Stop slow.
package vmfake

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// Options configures a Driver. The zero value is a driver whose replicas
// start at once and serve on loopback listeners of their own.
type Options struct {
	// Addr, when set, is the address every replica reports; the fake then
	// opens no listener and serves nothing (see the package doc). Give an
	// address made outside a synctest bubble: one that listens for a TCP
	// health probe that passes, one that refuses for one that fails.
	Addr string

	// BootDelay is how long each Start takes before the replica runs (or
	// less, when Start's context ends first: Start then fails).
	BootDelay time.Duration

	// BeforeStart, when set, is called first by every Start; an error it
	// returns is Start's (a start error). A test can block in it.
	BeforeStart func(ctx context.Context, spec vm.Spec) error

	// BeforeStop, when set, is called first by every Stop; a test can
	// block in it.
	BeforeStop func(ctx context.Context, id string)
}

// Driver is the in-memory driver. It declares (vm.Abilities) and is a
// vm.Suspender, vm.LogReader, vm.LogFollower, vm.UsageReader, vm.Leaser,
// vm.Waiter and vm.Checker; it is not a vm.AgentDialer (it runs no
// in-sandbox agent).
type Driver struct {
	o Options
	h *host
}

// Compile-time checks of the abilities the driver declares.
var (
	_ vm.Driver      = (*Driver)(nil)
	_ vm.Abilities   = (*Driver)(nil)
	_ vm.Suspender   = (*Driver)(nil)
	_ vm.LogReader   = (*Driver)(nil)
	_ vm.LogFollower = (*Driver)(nil)
	_ vm.Leaser      = (*Driver)(nil)
	_ vm.UsageReader = (*Driver)(nil)
	_ vm.Waiter      = (*Driver)(nil)
	_ vm.Checker     = (*Driver)(nil)
)

// Abilities lists what the driver offers; the conformance suite checks
// each one.
func (d *Driver) Abilities() []vm.Ability {
	return []vm.Ability{vm.CanSuspend, vm.CanLease, vm.CanLogs, vm.CanFollowLogs, vm.CanUsage, vm.CanWait, vm.CanCheck}
}

// host is the state drivers over the same "host" share (see Reopen).
type host struct {
	mu      sync.Mutex
	reps    map[string]*replica
	lost    map[string]*replica // forgotten by Lose, still running
	stopped []string            // ids Stop destroyed, in order
	starts  int                 // Start calls
	// unavailable, when set, is why the driver cannot run replicas now
	// (SetUnavailable).
	unavailable error
}

// New returns a driver with no replicas.
func New(o Options) *Driver {
	return &Driver{o: o, h: &host{reps: map[string]*replica{}, lost: map[string]*replica{}}}
}

// Reopen returns a second driver over the same replicas, as berth has after
// its own restart.
func (d *Driver) Reopen() *Driver { return &Driver{o: d.o, h: d.h} }

// Start starts a replica running spec.Command after spec.SetupHooks.
func (d *Driver) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	d.h.mu.Lock()
	d.h.starts++
	d.h.mu.Unlock()
	if d.o.BeforeStart != nil {
		if err := d.o.BeforeStart(ctx, spec); err != nil {
			return vm.Instance{}, err
		}
	}
	if err := d.Check(ctx); err != nil {
		return vm.Instance{}, err
	}
	dep, _, err := replicadir.CheckSpec(spec)
	if err == nil {
		err = replicadir.NoMounts("vmfake", spec)
	}
	if err != nil {
		return vm.Instance{}, fmt.Errorf("vmfake: start %q: %w", spec.Name, err)
	}
	spec.Deployment = dep
	spec.Owner = vm.ResolveOwner(spec.Owner, spec.Name)
	// The replica outlives Start's context, as a real sandbox does. It is
	// listed, starting, from here on, as the drivers' claimed replicas are.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &replica{
		h: d.h, spec: spec, startedAt: time.Now(), cancel: cancel,
		done: make(chan struct{}), state: vm.StateStarting,
		files: map[string][]byte{}, changed: make(chan struct{}),
	}

	// Every field is set before the replica is published in reps.
	port := spec.Port
	var l net.Listener
	if d.o.Addr != "" {
		r.addr = d.o.Addr
	} else {
		var err error
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			cancel()
			return vm.Instance{}, fmt.Errorf("vmfake: %w", err)
		}
		r.addr = l.Addr().String()
		r.srv = &http.Server{Handler: r}
		if port == 0 {
			port = l.Addr().(*net.TCPAddr).Port
		}
	}

	d.h.mu.Lock()
	_, dup := d.h.reps[spec.Name]
	_, lost := d.h.lost[spec.Name]
	if dup || lost {
		d.h.mu.Unlock()
		cancel()
		if l != nil {
			l.Close()
		}
		return vm.Instance{}, fmt.Errorf("vmfake: replica %s already exists", spec.Name)
	}
	d.h.reps[spec.Name] = r
	d.h.mu.Unlock()

	if err := r.boot(ctx, rctx, d.o.BootDelay); err != nil {
		if l != nil {
			l.Close()
		}
		return vm.Instance{}, err
	}
	d.h.mu.Lock()
	r.state = vm.StateRunning
	if spec.TTL > 0 {
		r.renewLocked(time.Now().Add(spec.TTL))
	}
	d.h.mu.Unlock()
	if l != nil {
		go r.srv.Serve(l)
	}
	go r.run(rctx, port)

	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	return r.instanceLocked(), nil
}

// Stop destroys a replica: its commands are told to end at once (the fake's
// commands all end when told, so grace is never waited out), its listener
// closes, and it is forgotten.
func (d *Driver) Stop(ctx context.Context, id string, grace time.Duration) error {
	if d.o.BeforeStop != nil {
		d.o.BeforeStop(ctx, id)
	}
	d.h.mu.Lock()
	r, ok := d.h.reps[id]
	if ok {
		delete(d.h.reps, id)
		d.h.stopped = append(d.h.stopped, id)
		r.resumeLocked()
		if r.lease != nil {
			r.lease.Stop()
		}
	}
	d.h.mu.Unlock()
	if !ok {
		return notFound(id)
	}
	r.cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Inspect reports one replica.
func (d *Driver) Inspect(ctx context.Context, id string) (vm.Instance, error) {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	r, ok := d.h.reps[id]
	if !ok {
		return vm.Instance{}, notFound(id)
	}
	return r.instanceLocked(), nil
}

// List reports every replica the driver has not stopped or lost, ended
// ones included.
func (d *Driver) List(ctx context.Context) ([]vm.Instance, error) {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	list := make([]vm.Instance, 0, len(d.h.reps))
	for _, r := range d.h.reps {
		list = append(list, r.instanceLocked())
	}
	slices.SortFunc(list, func(a, b vm.Instance) int { return strings.Compare(a.ID, b.ID) })
	return list, nil
}

// Suspend freezes a running replica until Resume: its address takes
// connections but answers none, and its commands write nothing and do not
// return from sleep (a sleep whose time passes meanwhile ends at Resume).
func (d *Driver) Suspend(ctx context.Context, id string) error {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	r, ok := d.h.reps[id]
	if !ok {
		return notFound(id)
	}
	switch {
	case r.state.Terminal():
		return fmt.Errorf("vmfake: cannot suspend %s: it is %s", id, r.state)
	case r.state == vm.StateSuspended:
		return nil
	}
	r.state = vm.StateSuspended
	r.resumed = make(chan struct{})
	return nil
}

// Resume thaws a suspended replica; the held requests are answered.
func (d *Driver) Resume(ctx context.Context, id string) (vm.Instance, error) {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	r, ok := d.h.reps[id]
	if !ok {
		return vm.Instance{}, notFound(id)
	}
	if r.state.Terminal() {
		return vm.Instance{}, fmt.Errorf("vmfake: cannot resume %s: it is %s", id, r.state)
	}
	r.resumeLocked()
	return r.instanceLocked(), nil
}

// Renew moves a replica's lease deadline; once it passes, the replica ends
// with a Reason saying the lease expired.
func (d *Driver) Renew(ctx context.Context, id string, until time.Time) error {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	r, ok := d.h.reps[id]
	if !ok {
		return notFound(id)
	}
	r.renewLocked(until)
	return nil
}

// Usage reports what SetUsage set for the replica, or by default no CPU and
// the memory of its size class.
func (d *Driver) Usage(ctx context.Context, id string) (vm.Usage, error) {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	r, ok := d.h.reps[id]
	if !ok {
		return vm.Usage{}, notFound(id)
	}
	if r.usage != nil {
		return *r.usage, nil
	}
	size := r.spec.SizeClass
	if size == "" {
		size = vm.DefaultSize
	}
	return vm.Usage{MemoryBytes: int64(vm.Sizes[size].MemoryMB) << 20}, nil
}

// SetUsage sets what Usage reports for a replica.
func (d *Driver) SetUsage(id string, u vm.Usage) error {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	r, ok := d.h.reps[id]
	if !ok {
		return notFound(id)
	}
	r.usage = &u
	return nil
}

// Wait blocks until replica id has ended (its state is terminal), is
// stopped, or ctx ends, and returns its last Instance; a replica stopped
// meanwhile is ErrNotFound.
func (d *Driver) Wait(ctx context.Context, id string) (vm.Instance, error) {
	d.h.mu.Lock()
	r, ok := d.h.reps[id]
	d.h.mu.Unlock()
	if !ok {
		return vm.Instance{}, notFound(id)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return vm.Instance{}, ctx.Err()
	}
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	if d.h.reps[id] != r {
		return vm.Instance{}, notFound(id)
	}
	return r.instanceLocked(), nil
}

// Check reports whether the driver can run replicas: it can unless
// SetUnavailable said otherwise.
func (d *Driver) Check(ctx context.Context) error {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	if d.h.unavailable != nil {
		return fmt.Errorf("vmfake: %w: %w", vm.ErrUnavailable, d.h.unavailable)
	}
	return nil
}

// SetUnavailable makes the driver unavailable (Check fails and Start is
// refused with vm.ErrUnavailable) for the reason why, or available again
// with nil, as when a host's VM daemon dies and comes back.
func (d *Driver) SetUnavailable(why error) {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	d.h.unavailable = why
}

// Logs returns up to n of the replica's most recent output lines.
func (d *Driver) Logs(ctx context.Context, id string, n int) ([]vm.LogLine, error) {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	r, ok := d.h.reps[id]
	if !ok {
		return nil, notFound(id)
	}
	lines := r.logs
	if n >= 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return slices.Clone(lines), nil
}

// FollowLogs writes the lines the replica writes from now on to w, one text
// line each, until ctx ends or the replica is stopped.
func (d *Driver) FollowLogs(ctx context.Context, id string, w io.Writer) error {
	d.h.mu.Lock()
	r, ok := d.h.reps[id]
	if !ok {
		d.h.mu.Unlock()
		return notFound(id)
	}
	next := len(r.logs)
	for {
		lines := slices.Clone(r.logs[next:])
		next = len(r.logs)
		changed := r.changed
		d.h.mu.Unlock()
		for _, l := range lines {
			if _, err := io.WriteString(w, l.Text+"\n"); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.done:
			return nil
		case <-changed:
		}
		d.h.mu.Lock()
	}
}

// Exit ends a replica's commands as if its app exited with code: the
// replica stays listed, in state exited. It returns once the replica has
// ended.
func (d *Driver) Exit(id string, code int) error {
	return d.end(id, func(r *replica) { r.forced = &ending{state: vm.StateExited, code: &code} })
}

// Crash ends a replica as if its sandbox died: the replica stays listed, in
// state failed, with reason. It returns once the replica has ended.
func (d *Driver) Crash(id, reason string) error {
	return d.end(id, func(r *replica) { r.forced = &ending{state: vm.StateFailed, reason: reason} })
}

func (d *Driver) end(id string, set func(*replica)) error {
	d.h.mu.Lock()
	r, ok := d.h.reps[id]
	if !ok {
		r, ok = d.h.lost[id]
	}
	if ok && r.forced == nil && !r.state.Terminal() {
		set(r)
		r.resumeLocked()
	}
	d.h.mu.Unlock()
	if !ok {
		return notFound(id)
	}
	r.cancel()
	<-r.done
	return nil
}

// Lose makes the driver forget a replica without stopping it (it is no
// longer listed, and Inspect and Stop do not find it), as when a sandbox
// vanishes from its host's view; Find brings it back.
func (d *Driver) Lose(id string) {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	if r, ok := d.h.reps[id]; ok {
		d.h.lost[id] = r
		delete(d.h.reps, id)
	}
}

// Find undoes Lose.
func (d *Driver) Find(id string) {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	if r, ok := d.h.lost[id]; ok {
		d.h.reps[id] = r
		delete(d.h.lost, id)
	}
}

// Stopped reports whether Stop destroyed replica id.
func (d *Driver) Stopped(id string) bool {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	return slices.Contains(d.h.stopped, id)
}

// Starts returns how many times Start was called, failed calls included.
func (d *Driver) Starts() int {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	return d.h.starts
}

// Close stops every replica, lost ones included.
func (d *Driver) Close() {
	d.h.mu.Lock()
	var all []*replica
	for _, m := range []map[string]*replica{d.h.reps, d.h.lost} {
		for id, r := range m {
			all = append(all, r)
			r.resumeLocked()
			delete(m, id)
		}
	}
	d.h.mu.Unlock()
	for _, r := range all {
		r.cancel()
		<-r.done
	}
}

func notFound(id string) error { return fmt.Errorf("vmfake: %q: %w", id, vm.ErrNotFound) }

// ending is how Exit or Crash asked a replica to end.
type ending struct {
	state  vm.State
	code   *int
	reason string
}

// replica is one fake sandbox. Its fields after done and cancel are
// guarded by h.mu.
type replica struct {
	h         *host
	spec      vm.Spec
	startedAt time.Time
	addr      string
	srv       *http.Server // nil with Options.Addr
	cancel    context.CancelFunc
	done      chan struct{} // closed once its commands have ended

	state    vm.State
	exitCode *int
	reason   string
	forced   *ending
	resumed  chan struct{} // while suspended: closed by Resume
	deadline time.Time     // the lease, when lease is set
	lease    *time.Timer
	expired  bool
	app      *app // the serve command running, if any
	files    map[string][]byte
	logs     []vm.LogLine
	changed  chan struct{} // closed and replaced at each new log line
	usage    *vm.Usage     // set by SetUsage
}

// thawed waits while the replica is suspended (or until ctx ends).
func (r *replica) thawed(ctx context.Context) error {
	r.h.mu.Lock()
	resumed := r.resumed
	r.h.mu.Unlock()
	if resumed == nil {
		return nil
	}
	select {
	case <-resumed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *replica) instanceLocked() vm.Instance {
	return vm.Instance{
		ID: r.spec.Name, Deployment: r.spec.Deployment, Owner: r.spec.Owner, State: r.state, Addr: r.addr,
		StartedAt: r.startedAt, ExitCode: r.exitCode, Reason: r.reason,
	}
}

func (r *replica) resumeLocked() {
	if r.resumed != nil {
		close(r.resumed)
		r.resumed = nil
	}
	if r.state == vm.StateSuspended {
		r.state = vm.StateRunning
	}
}

func (r *replica) renewLocked(until time.Time) {
	if r.state.Terminal() {
		return
	}
	r.deadline = until
	if r.lease != nil {
		r.lease.Stop()
	}
	r.lease = time.AfterFunc(time.Until(until), func() {
		r.h.mu.Lock()
		passed := !r.deadline.After(time.Now()) && !r.state.Terminal() && r.forced == nil
		if passed {
			r.expired = true
			r.resumeLocked()
		}
		r.h.mu.Unlock()
		if passed {
			r.cancel()
		}
	})
}

// boot waits out the boot delay. When Start's context ends first, the
// replica is forgotten and Start fails; when the replica is stopped, exited
// or crashed meanwhile, it ends as told (still listed after Exit or Crash)
// and Start fails.
func (r *replica) boot(ctx, rctx context.Context, delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	var err error
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		err = fmt.Errorf("vmfake: booting %s: %w", r.spec.Name, ctx.Err())
	case <-rctx.Done():
		err = fmt.Errorf("vmfake: %s ended while booting", r.spec.Name)
	}
	r.h.mu.Lock()
	if r.forced == nil {
		for _, m := range []map[string]*replica{r.h.reps, r.h.lost} {
			if m[r.spec.Name] == r {
				delete(m, r.spec.Name)
			}
		}
	}
	if f := r.forced; f != nil {
		r.state, r.exitCode, r.reason = f.state, f.code, f.reason
		if r.reason == "" {
			r.reason = fmt.Sprintf("exited with code %d while booting", *r.exitCode)
		}
	} else {
		r.state = vm.StateFailed
		r.reason = err.Error()
	}
	r.h.mu.Unlock()
	r.cancel()
	close(r.done)
	return err
}

// run runs the setup hooks and the start command, then records how the
// replica ended.
func (r *replica) run(ctx context.Context, port int) {
	defer close(r.done)
	code, err := r.shell(ctx, port)
	r.cancel() // ends its background jobs

	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if r.srv != nil {
		r.srv.Close()
	}
	if r.lease != nil {
		r.lease.Stop()
	}
	r.app = nil
	r.resumeLocked()
	switch {
	case r.forced != nil:
		r.state, r.exitCode, r.reason = r.forced.state, r.forced.code, r.forced.reason
		if r.reason == "" {
			r.reason = fmt.Sprintf("exited with code %d", *r.exitCode)
		}
	case r.expired:
		r.state, r.reason = vm.StateExited, "lease expired at "+r.deadline.UTC().Format(time.RFC3339Nano)
	case err != nil:
		r.state, r.reason = vm.StateFailed, err.Error()
	default:
		r.state, r.exitCode = vm.StateExited, &code
		r.reason = "exited with code " + strconv.Itoa(code)
	}
	if tail := r.tailLocked(5); tail != "" {
		r.reason += "; last output:\n" + tail
	}
}

func (r *replica) tailLocked(n int) string {
	lines := r.logs[max(0, len(r.logs)-n):]
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l.Text)
	}
	return b.String()
}

// logLine appends one output line.
func (r *replica) logLine(stream, text string) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	r.logs = append(r.logs, vm.LogLine{Time: time.Now(), Stream: stream, Text: text})
	close(r.changed)
	r.changed = make(chan struct{})
}

// app is a running serve command: what it answers.
type app struct {
	body string
}

// ServeHTTP answers for the serve command running, holds the request while
// the replica is suspended, and drops the connection when nothing serves.
func (r *replica) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.h.mu.Lock()
	resumed := r.resumed
	r.h.mu.Unlock()
	if resumed != nil {
		select {
		case <-resumed:
		case <-req.Context().Done():
			return
		}
	}
	r.h.mu.Lock()
	a := r.app
	r.h.mu.Unlock()
	if a == nil {
		panic(http.ErrAbortHandler) // as a refused connection, near enough
	}
	io.WriteString(w, a.body)
}

// token returns a fresh random token.
func token() string {
	var b [8]byte
	rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}
