package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/spec"
)

// TestPlacement: a vm deployment runs where Options.Place says: nowhere
// while it is being placed (its requests refused with a reason), here
// from its pool (each create fenced by Options.Fence), or on another host
// through that host's hop listener, its local replicas stopped; Changed
// hears each write and the delete.
func TestPlacement(t *testing.T) {
	r := newRig(t)
	var (
		mu      sync.Mutex
		where   Placement
		changes []string
		fences  atomic.Int64
		refuse  atomic.Bool
	)
	reg := New(Options{
		Store: r.st, Publisher: r.tables, Pools: r.fleet,
		Spec:    spec.Options{BaseDomain: "apps.test", Drivers: []string{"process"}},
		Domains: func(context.Context) (map[string][]string, error) { return r.domains, nil },
		Place:   func(string) Placement { mu.Lock(); defer mu.Unlock(); return where },
		Fence: func(_ context.Context, id string) error {
			fences.Add(1)
			if refuse.Load() {
				return errors.New("not held")
			}
			return nil
		},
		Changed: func(id string, e *Entry) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, id+":"+map[bool]string{true: "deleted", false: "written"}[e == nil])
		},
		HopTLS: func(host string) *tls.Config { return &tls.Config{ServerName: host} },
	})
	set := func(p Placement) { mu.Lock(); where = p; mu.Unlock() }
	ctx := t.Context()
	if _, _, err := reg.Put(ctx, vmSpec("app", "app.example"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	e, _ := reg.Get("app")
	if e.VMPool != nil || !strings.Contains(e.dp.Unavailable, "being placed") {
		t.Fatalf("while being placed: VMPool %v, unavailable %q", e.VMPool, e.dp.Unavailable)
	}
	if _, ok := r.fleet.Pool("app"); ok {
		t.Fatal("a pool of a deployment being placed")
	}

	set(Placement{Here: true})
	if !reg.Placed(ctx, "app", true) {
		t.Fatal("Placed: no such vm deployment")
	}
	var id string
	waitFor(t, "a replica here", func() bool {
		list, _ := r.drv.List(ctx)
		if len(list) == 1 {
			id = list[0].ID
		}
		return id != ""
	})
	if fences.Load() == 0 {
		t.Fatal("a replica was created without the fence")
	}

	set(Placement{HostID: "h2", Addr: "127.0.0.1:1"})
	reg.Placed(ctx, "app", true)
	if _, ok := r.fleet.Pool("app"); ok {
		t.Fatal("the pool stayed after the deployment moved to h2")
	}
	if !r.drv.Stopped(id) {
		t.Fatal("the local replica was not stopped when the deployment moved")
	}
	e, _ = reg.Get("app")
	bs := e.Pool.Backends()
	if e.VMPool != nil || !e.dp.Forwarded || len(bs) != 1 || bs[0].Addr != "127.0.0.1:1" || bs[0].TLSConfig == nil || bs[0].TLSConfig.ServerName != "h2" {
		t.Fatalf("on h2: VMPool %v, forwarded %v, backends %+v", e.VMPool, e.dp.Forwarded, bs)
	}

	// Back here, but no longer held: the create is refused.
	refuse.Store(true)
	before := fences.Load()
	set(Placement{Here: true})
	reg.Placed(ctx, "app", true)
	waitFor(t, "the fence to be asked", func() bool { return fences.Load() > before })
	if list, _ := r.drv.List(ctx); len(list) != 0 {
		t.Fatalf("a replica was created although the fence refused: %+v", list)
	}

	if err := reg.Delete(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := strings.Join(changes, ",")
	mu.Unlock()
	if got != "app:written,app:deleted" {
		t.Fatalf("Changed heard %s", got)
	}
}

// TestPlaceHold: a request for a deployment placed on another host, held
// because that host does not answer, goes on when the deployment moves to
// a third host (to its hop listener, in the same pool), when it moves
// here (to the local pool's holder: a replica starts and takes it), when
// the host's hop listener takes connections again, and fails when the
// deployment is deleted.
func TestPlaceHold(t *testing.T) {
	r := newRig(t)
	var (
		mu    sync.Mutex
		where = Placement{HostID: "h2", Addr: "127.0.0.1:1"}
	)
	reg := New(Options{
		Store: r.st, Publisher: r.tables, Pools: r.fleet,
		Spec:    spec.Options{BaseDomain: "apps.test", Drivers: []string{"process"}},
		Domains: func(context.Context) (map[string][]string, error) { return r.domains, nil },
		Place:   func(string) Placement { mu.Lock(); defer mu.Unlock(); return where },
		HopTLS:  func(host string) *tls.Config { return &tls.Config{ServerName: host} },
	})
	set := func(p Placement) { mu.Lock(); where = p; mu.Unlock() }
	ctx := t.Context()
	if _, _, err := reg.Put(ctx, vmSpec("app", "app.example"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	e, _ := reg.Get("app")
	if e.dp.Hold == nil || !e.dp.Forwarded {
		t.Fatalf("a deployment on h2 has no hold (forwarded %v)", e.dp.Forwarded)
	}
	pool := e.Pool
	held := func() chan error {
		done := make(chan error, 1)
		go func() { done <- e.dp.Hold.Await(ctx, time.Now(), true) }()
		return done
	}
	pool.Backends()[0].SetHealthy(false) // h2 does not answer

	// Moved to h3: the held request goes on, and finds h3 in its pool.
	done := held()
	set(Placement{HostID: "h3", Addr: "127.0.0.1:2"})
	reg.Placed(ctx, "app", true)
	if err := <-done; err != nil {
		t.Fatalf("held across the move to h3: %v", err)
	}
	if bs := pool.Backends(); len(bs) != 1 || bs[0].Addr != "127.0.0.1:2" {
		t.Fatalf("after the move to h3 the held request's pool has %+v", bs)
	}

	// h3's hop listener comes back: the held request goes on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	set(Placement{HostID: "h3", Addr: ln.Addr().String()})
	reg.Placed(ctx, "app", true)
	pool.Backends()[0].SetHealthy(false)
	if err := <-held(); err != nil {
		t.Fatalf("held until h3 answered: %v", err)
	}
	if !pool.Backends()[0].AcquireBackend() {
		t.Fatal("h3's backend is not available again once it answers")
	}

	// Moved here: the held request is handed to the local pool, whose
	// replica starts and joins the same pool.
	ln.Close()
	pool.Backends()[0].SetHealthy(false)
	done = held()
	set(Placement{Here: true})
	reg.Placed(ctx, "app", true)
	if err := <-done; err != nil {
		t.Fatalf("held across the move here: %v", err)
	}
	waitFor(t, "a local replica in the held request's pool", func() bool {
		bs := pool.Backends()
		return len(bs) == 1 && bs[0].Addr != ln.Addr().String()
	})

	// Deleted while held elsewhere: the request fails.
	set(Placement{HostID: "h2", Addr: "127.0.0.1:1"})
	reg.Placed(ctx, "app", true)
	e, _ = reg.Get("app")
	e.Pool.Backends()[0].SetHealthy(false)
	done = held()
	if err := reg.Delete(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("a request held for a deleted deployment went on")
	}
}
