package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// warmDriver is the fake driver with a Prewarm that records its calls.
type warmDriver struct {
	*vmfake.Driver
	mu     sync.Mutex
	warmed []vm.Spec
}

func (d *warmDriver) Prewarm(spec vm.Spec) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.warmed = append(d.warmed, spec)
}

func (d *warmDriver) prewarmed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for _, s := range d.warmed {
		ids = append(ids, s.Deployment)
	}
	return ids
}

// TestPrewarm: the driver is asked to prewarm for a pool that scales from
// zero when the pool starts (at Run for a pool ensured before it, at
// Ensure for one ensured while it runs) and when its spec changes; never
// for a pool that keeps replicas (they start at once), is disabled, or
// has mounts (a spare cannot take them).
func TestPrewarm(t *testing.T) {
	d := &warmDriver{Driver: vmfake.New(vmfake.Options{})}
	defer d.Close()
	m := New(Options{Driver: d, Tick: time.Hour, Log: slog.New(slog.DiscardHandler)})
	zero := autoscale.Policy{Min: 0, Max: 1, Target: 1, ColdStartTimeout: time.Minute}
	cfg := func(id string, pol autoscale.Policy) Config {
		return Config{Deployment: id, Driver: "process", Key: "k", Template: vm.Spec{Command: "app"}, Policy: pol, Backends: newDataPlane()}
	}
	m.Ensure(cfg("early", zero))
	if got := d.prewarmed(); len(got) != 0 {
		t.Errorf("prewarmed %v before Run", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		for _, id := range []string{"early", "late", "kept", "off", "mounted"} {
			m.Remove(context.Background(), id)
		}
	}()
	waitUntil(t, "Run to start the early pool", func() bool { return len(d.prewarmed()) >= 1 })
	m.Ensure(cfg("late", zero)) // started by Run before Ensure returns
	m.Ensure(cfg("kept", autoscale.Policy{Min: 1, Max: 1, Target: 1}))
	m.Ensure(cfg("off", autoscale.Policy{Min: 0, Max: 0}))
	mounted := cfg("mounted", zero)
	mounted.Mounts = func(context.Context) ([]vm.Mount, error) { return nil, nil }
	m.Ensure(mounted)
	changed := cfg("late", zero)
	changed.Key = "k2"
	m.Ensure(changed)
	got := d.prewarmed()
	if want := []string{"early", "late", "late"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("prewarmed for %v, want %v", got, want)
	}
	d.mu.Lock()
	if s := d.warmed[0]; s.Command != "app" || s.Owner != (vm.Owner{Kind: vm.OwnerDeployment, ID: "early"}) {
		t.Errorf("prewarm spec %+v: want the template, owned by the deployment", s)
	}
	d.mu.Unlock()
}

// TestBootProbeBackoff: the waits between boot probes start at
// firstBootProbe and grow to Options.BootProbe, never past it; sleepFine
// sleeps at least what it is asked (the waits under a millisecond).
func TestBootProbeBackoff(t *testing.T) {
	var waits []time.Duration
	for w := time.Duration(0); len(waits) < 40; {
		w = nextBootProbe(w, 2*time.Millisecond)
		waits = append(waits, w)
	}
	if waits[0] != firstBootProbe {
		t.Errorf("first wait %s, want %s", waits[0], firstBootProbe)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] < waits[i-1] || waits[i] > 2*time.Millisecond {
			t.Fatalf("waits %v: want growing up to 2ms", waits)
		}
	}
	if waits[len(waits)-1] != 2*time.Millisecond {
		t.Errorf("last wait %s, want the longest, 2ms", waits[len(waits)-1])
	}
	if w := nextBootProbe(0, 50*time.Microsecond); w != 50*time.Microsecond {
		t.Errorf("first wait with BootProbe 50µs: %s", w)
	}
	t0 := time.Now()
	sleepFine(300 * time.Microsecond)
	if slept := time.Since(t0); slept < 300*time.Microsecond {
		t.Errorf("sleepFine(300µs) returned after %s", slept)
	}
}

// TestReadyWakesHeldRequest: a request held for a cold start is released
// as soon as the app answers its health probe, a few milliseconds after
// Start here, not at the next BootProbe interval (a second here): the
// probes start far more often than BootProbe.
func TestReadyWakesHeldRequest(t *testing.T) {
	var healthy atomic.Bool
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})}
	go srv.Serve(l)
	defer srv.Close()
	const appBoot = 5 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		var startedAt time.Time
		d := vmfake.New(vmfake.Options{Addr: l.Addr().String(), BeforeStart: func(context.Context, vm.Spec) error {
			startedAt = time.Now()
			time.AfterFunc(appBoot, func() { healthy.Store(true) })
			return nil
		}})
		m := New(Options{Driver: d, Tick: time.Hour, BootProbe: time.Second, Log: slog.New(slog.DiscardHandler)})
		m.sleepFine = time.Sleep // on the bubble's clock, like the timers
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		t.Cleanup(func() {
			m.Remove(context.Background(), "d")
			cancel()
			<-done
			d.Close()
		})
		p := m.Ensure(Config{Deployment: "d", Driver: "process", Key: "k", HealthPath: "/", Backends: newDataPlane(),
			Policy: autoscale.Policy{Min: 0, Max: 1, Target: 1, ColdStartTimeout: time.Minute}})
		synctest.Wait()
		if err := p.Await(t.Context(), time.Now(), true); err != nil {
			t.Fatal(err)
		}
		// Fake time: exact, whatever the load. The probes around 5ms are
		// under a millisecond apart.
		if after := time.Since(startedAt); after < appBoot || after > appBoot+time.Millisecond {
			t.Errorf("released %s after Start, want within a millisecond of the app's %s boot (BootProbe is 1s)", after, appBoot)
		}
	})
}
