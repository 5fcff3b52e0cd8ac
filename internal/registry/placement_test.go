package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

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
