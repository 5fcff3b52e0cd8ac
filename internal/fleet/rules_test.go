package fleet

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// The tests in this file pin the pool's time rules — missing_grace,
// boot_timeout_secs and drain_timeout_secs — with testing/synctest: inside
// the bubble time.Now, timers and the reconcile loop's ticks run on the
// bubble's fake clock, so an hour of pool life takes no real time and each
// rule is checked just before and just after its deadline.

// listening returns the address of a loopback listener that takes TCP
// connections (the kernel completes them; nothing accepts), for replicas
// whose TCP health probe passes. Call it outside the synctest bubble.
func listening(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// refusing returns a loopback address nothing listens on, for replicas
// whose health probe never passes.
func refusing(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// rig is a Manager with one pool "d" on the fake driver, in a synctest
// bubble.
type rig struct {
	t  *testing.T
	d  *vmfake.Driver
	dp dataPlane
	p  *Pool
}

// startRig runs a Manager (one step a second) and ensures pool "d" with
// policy pol, and returns once the pool has settled. Call it inside the
// bubble; it stops everything when the test ends.
func startRig(t *testing.T, addr string, o Options, pol autoscale.Policy, edit ...func(*Config)) *rig {
	r := &rig{t: t, d: vmfake.New(vmfake.Options{Addr: addr}), dp: newDataPlane()}
	o.Driver, o.Tick, o.BootProbe, o.Log = r.d, time.Second, 100*time.Millisecond, slog.New(slog.DiscardHandler)
	m := New(o)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		m.Remove(context.Background(), "d") // ends the boot probes too
		cancel()
		<-done
		r.d.Close()
	})
	synctest.Wait()
	cfg := Config{Deployment: "d", Driver: "process", Key: "k", Policy: pol, HealthTCP: true, Backends: r.dp}
	for _, e := range edit {
		e(&cfg)
	}
	r.p = m.Ensure(cfg)
	synctest.Wait()
	return r
}

// after lets d of fake time pass and the pool settle.
func (r *rig) after(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// replica returns the pool's view of replica id, if it tracks it.
func (r *rig) replica(id string) (ReplicaView, bool) {
	for _, v := range r.p.Status().Replicas {
		if v.ID == id {
			return v, true
		}
	}
	return ReplicaView{}, false
}

// only returns the pool's single replica, failing unless there is exactly
// one in phase.
func (r *rig) only(phase string) string {
	r.t.Helper()
	st := r.p.Status()
	if len(st.Replicas) != 1 || st.Replicas[0].Phase != phase {
		r.t.Fatalf("replicas %+v, want one %s", st.Replicas, phase)
	}
	return st.Replicas[0].ID
}

// TestMissingGrace: a replica the driver no longer lists is given up once
// it has been missing for MissingGrace, not before; it leaves the data
// plane and is replaced. Seen again within the grace, it is kept, and the
// grace starts over the next time it goes missing.
func TestMissingGrace(t *testing.T) {
	addr := listening(t)
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, addr, Options{MissingGrace: 10 * time.Second}, autoscale.Policy{Min: 1, Max: 1, Target: 1})
		a := r.only("ready")

		// Missing for 5s, then seen again: kept.
		r.d.Lose(a)
		r.after(5 * time.Second)
		r.d.Find(a)
		r.after(8 * time.Second)
		if v, ok := r.replica(a); !ok || v.Phase != "ready" {
			t.Fatalf("replica seen again within the grace: %+v, %v; want it ready", v, ok)
		}

		// Missing again: the grace starts over (the first absence was 13s
		// ago), so just under 10s later it is still there...
		r.d.Lose(a)
		r.after(9500 * time.Millisecond)
		if _, ok := r.replica(a); !ok {
			t.Fatal("a replica missing for less than MissingGrace was given up")
		}
		if r.dp.pool.Find(a) == nil {
			t.Fatal("a replica missing for less than MissingGrace left the data plane")
		}
		// ...and gone once the grace has passed, from the data plane too,
		// with a replacement serving.
		r.after(3 * time.Second)
		if _, ok := r.replica(a); ok {
			t.Fatal("a replica missing for longer than MissingGrace is still tracked")
		}
		if r.dp.pool.Find(a) != nil {
			t.Fatal("a replica given up is still in the data plane")
		}
		if b := r.only("ready"); b == a {
			t.Fatal("no replacement")
		}
		if st := r.p.Status(); st.Failures != 0 {
			t.Errorf("a ready replica that went missing counted as %d boot failures", st.Failures)
		}
	})
}

// TestBootTimeout: a replica that does not pass its health probe within
// boot_timeout_secs of its create is stopped and counted as a boot
// failure, not before; the failure names boot_timeout_secs and, while the
// backoff holds, a request is refused at once.
func TestBootTimeout(t *testing.T) {
	addr := refusing(t)
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, addr, Options{}, autoscale.Policy{Min: 1, Max: 1, Target: 1, BootTimeout: 30 * time.Second, ColdStartTimeout: time.Hour})
		a := r.only("pending")

		r.after(29500 * time.Millisecond)
		if b := r.only("pending"); b != a {
			t.Fatalf("replica %s replaced by %s before boot_timeout_secs", a, b)
		}
		if st := r.p.Status(); st.Failures != 0 || r.d.Stopped(a) {
			t.Fatalf("before boot_timeout_secs: %d failures, stopped %v", st.Failures, r.d.Stopped(a))
		}

		r.after(2 * time.Second)
		if _, ok := r.replica(a); ok {
			t.Fatal("a replica past boot_timeout_secs is still tracked")
		}
		if !r.d.Stopped(a) {
			t.Error("a replica past boot_timeout_secs was not stopped")
		}
		st := r.p.Status()
		if st.Failures != 1 || st.BackoffFor <= 0 {
			t.Errorf("after boot_timeout_secs: %d failures, backoff %s; want 1 failure and a backoff", st.Failures, st.BackoffFor)
		}
		var se *StartError
		if err := r.p.Await(t.Context(), time.Now(), true); !errors.As(err, &se) {
			t.Fatalf("a request during the backoff: %v, want a StartError", err)
		}
		if !strings.Contains(se.Detail, "did not become ready within boot_timeout_secs (30s)") || !strings.Contains(se.Detail, a) {
			t.Errorf("detail %q", se.Detail)
		}
		if se.Reason != "its replica did not become ready within boot_timeout_secs" {
			t.Errorf("reason %q", se.Reason)
		}
	})
}

// TestDrain: an evicted replica stops taking new requests and sessions at
// once, stays while one is on it, and is stopped at the first step after
// the last one ends — or, when one outlasts drain_timeout_secs, once that
// has passed since the drain began, with the session still on it.
func TestDrain(t *testing.T) {
	addr := listening(t)
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, addr, Options{}, autoscale.Policy{Min: 1, Max: 1, Target: 1, DrainTimeout: time.Minute})
		ctx := t.Context()

		// A session on A; A is evicted and drains.
		a, release, err := r.p.Pick(ctx, "", false)
		if err != nil {
			t.Fatal(err)
		}
		if killed, err := r.p.Evict(ctx, a, false); killed || err != nil {
			t.Fatalf("evict: killed %v, %v", killed, err)
		}
		if _, _, err := r.p.Pick(ctx, a, false); !errors.Is(err, ErrReplicaDraining) {
			t.Errorf("a session on a draining replica: %v, want ErrReplicaDraining", err)
		}
		synctest.Wait() // the replacement
		// Requests pile onto the replacement: A, with one session and
		// listed first, would get the second one were it not draining.
		for range 3 {
			id, rel, ok := r.dp.Acquire()
			if !ok {
				t.Fatal("no replacement serving")
			}
			defer rel()
			if id == a {
				t.Fatal("the data plane picked a draining replica")
			}
		}
		r.after(30 * time.Second)
		if v, ok := r.replica(a); !ok || v.Phase != "draining" || v.InFlight != 1 {
			t.Fatalf("draining replica with a session: %+v, %v", v, ok)
		}
		if r.d.Stopped(a) || r.dp.pool.Find(a) == nil {
			t.Fatal("a draining replica with a session was reaped")
		}
		release()
		r.after(1500 * time.Millisecond)
		if _, ok := r.replica(a); ok || !r.d.Stopped(a) || r.dp.pool.Find(a) != nil {
			t.Fatalf("drained replica: tracked %v, stopped %v, in the data plane %v; want it stopped and gone", ok, r.d.Stopped(a), r.dp.pool.Find(a) != nil)
		}

		// A session that outlasts drain_timeout_secs.
		b, release, err := r.p.Pick(ctx, "", false)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		if b == a {
			t.Fatal("picked the reaped replica")
		}
		if _, err := r.p.Evict(ctx, b, false); err != nil {
			t.Fatal(err)
		}
		r.after(59500 * time.Millisecond)
		if v, ok := r.replica(b); !ok || v.Phase != "draining" || r.d.Stopped(b) {
			t.Fatalf("just before drain_timeout_secs: %+v, %v, stopped %v; want it draining", v, ok, r.d.Stopped(b))
		}
		r.after(2 * time.Second)
		if _, ok := r.replica(b); ok || !r.d.Stopped(b) {
			t.Fatalf("after drain_timeout_secs: tracked %v, stopped %v; want it stopped with its session on it", ok, r.d.Stopped(b))
		}
	})
}

// TestReplicaExit: a ready replica whose app exits leaves the data plane
// and is stopped and replaced at the next step; it is not a boot failure.
func TestReplicaExit(t *testing.T) {
	addr := listening(t)
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, addr, Options{}, autoscale.Policy{Min: 1, Max: 1, Target: 1})
		a := r.only("ready")
		if err := r.d.Exit(a, 3); err != nil {
			t.Fatal(err)
		}
		r.after(1500 * time.Millisecond)
		if _, ok := r.replica(a); ok || r.dp.pool.Find(a) != nil {
			t.Fatal("a replica whose app exited is still tracked or in the data plane")
		}
		if !r.d.Stopped(a) {
			t.Error("the exited replica was not stopped (its sandbox is left behind)")
		}
		if b := r.only("ready"); b == a {
			t.Fatal("no replacement")
		}
		if st := r.p.Status(); st.Failures != 0 {
			t.Errorf("a ready replica that exited counted as %d boot failures", st.Failures)
		}
	})
}

// TestCrashWhileBooting: a replica that ends before it is ready is a boot
// failure whose detail carries the driver's reason (its last output line),
// and the pool backs off.
func TestCrashWhileBooting(t *testing.T) {
	addr := refusing(t)
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, addr, Options{}, autoscale.Policy{Min: 1, Max: 1, Target: 1, ColdStartTimeout: time.Hour},
			func(c *Config) { c.Template.Command = "echo 'missing DATABASE_URL'; exit 2" })
		r.after(1500 * time.Millisecond)
		st := r.p.Status()
		if st.Failures != 1 || st.BackoffFor <= 0 {
			t.Fatalf("after a crash while booting: %d failures, backoff %s; want 1 and a backoff", st.Failures, st.BackoffFor)
		}
		var se *StartError
		if err := r.p.Await(t.Context(), time.Now(), true); !errors.As(err, &se) || !strings.Contains(se.Detail, "missing DATABASE_URL") {
			t.Fatalf("a request during the backoff: %v, want a StartError with the replica's last line", err)
		}
	})
}

// TestLeasesRenewed: the pool renews the leases of its replicas, so one
// whose lease (vm.ttl_seconds) is a minute still serves an hour later; the
// fake driver ends a replica whose lease passes, as the real ones do.
func TestLeasesRenewed(t *testing.T) {
	addr := listening(t)
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, addr, Options{}, autoscale.Policy{Min: 1, Max: 1, Target: 1},
			func(c *Config) { c.Template.TTL = time.Minute })
		a := r.only("ready")
		for range 60 {
			r.after(time.Minute)
		}
		if b := r.only("ready"); b != a {
			t.Fatalf("replica %s was replaced by %s: its lease was not renewed", a, b)
		}
		if in, err := r.d.Inspect(t.Context(), a); err != nil || in.State != vm.StateRunning {
			t.Errorf("after an hour: %+v, %v; want it running", in, err)
		}
	})
}

// TestColdStart: a request held for a replica scaled from zero is released
// once the replica is ready — after the driver's boot, not before — and
// one whose cold_start_timeout_secs passes first gets ErrColdStartTimeout,
// with the replica kept booting for the next.
func TestColdStart(t *testing.T) {
	addr := listening(t)
	synctest.Test(t, func(t *testing.T) {
		r := &rig{t: t, d: vmfake.New(vmfake.Options{Addr: addr, BootDelay: 15 * time.Second}), dp: newDataPlane()}
		m := New(Options{Driver: r.d, Tick: time.Second, BootProbe: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		t.Cleanup(func() {
			m.Remove(context.Background(), "d")
			cancel()
			<-done
			r.d.Close()
		})
		r.p = m.Ensure(Config{Deployment: "d", Driver: "process", Key: "k", HealthTCP: true, Backends: r.dp,
			Policy: autoscale.Policy{Min: 0, Max: 1, Target: 1, ColdStartTimeout: 10 * time.Second, BootTimeout: time.Minute}})
		synctest.Wait()
		if st := r.p.Status(); len(st.Replicas) != 0 {
			t.Fatalf("a pool at min 0 started %+v before any request", st.Replicas)
		}

		start := time.Now()
		if err := r.p.Await(t.Context(), start, true); !errors.Is(err, ErrColdStartTimeout) {
			t.Fatalf("a request held past cold_start_timeout_secs: %v, want ErrColdStartTimeout", err)
		}
		if waited := time.Since(start); waited != 10*time.Second {
			t.Errorf("held for %s, want the cold-start timeout (10s)", waited)
		}
		if r.d.Starts() != 1 {
			t.Errorf("%d Starts for a held request, want 1", r.d.Starts())
		}

		// The replica still boots; the next request is released when it is
		// ready, at the end of the driver's 15s boot (and the next probe).
		if err := r.p.Await(t.Context(), time.Now(), true); err != nil {
			t.Fatalf("a request during the boot: %v", err)
		}
		if booted := time.Since(start); booted < 15*time.Second || booted > 16*time.Second {
			t.Errorf("released %s after the first request, want once the 15s boot ended", booted)
		}
		r.only("ready")
	})
}

// TestEnsureAndRun: a pool created while Run runs is started under Run's
// context (its replica serves); one created once Run has stopped is not
// started, and Ensure does not wait for a Run that is gone.
func TestEnsureAndRun(t *testing.T) {
	addr := listening(t)
	synctest.Test(t, func(t *testing.T) {
		d := vmfake.New(vmfake.Options{Addr: addr})
		defer d.Close()
		m := New(Options{Driver: d, Tick: time.Second, BootProbe: 100 * time.Millisecond})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		synctest.Wait()
		pol := autoscale.Policy{Min: 1, Max: 1, Target: 1}
		late := m.Ensure(Config{Deployment: "late", Driver: "process", Key: "k", Policy: pol, HealthTCP: true, Backends: newDataPlane()})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st := late.Status(); st.Ready != 1 {
			t.Errorf("a pool created while Run runs: %+v, want one ready replica", st)
		}
		m.Remove(context.Background(), "late")
		cancel()
		<-done
		after := m.Ensure(Config{Deployment: "after", Driver: "process", Key: "k", Policy: pol, HealthTCP: true, Backends: newDataPlane()})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st := after.Status(); len(st.Replicas) != 0 || st.Pending != 0 {
			t.Errorf("a pool created after Run stopped: %+v, want it idle", st)
		}
	})
}
