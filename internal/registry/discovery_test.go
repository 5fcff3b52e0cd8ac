package registry

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/spec"
)

// TestDiscoveryUpstreams: a discovery-backed static deployment is served
// by its service's peers (Options.Discovered), those no backend can be
// made of left out; Refresh follows a change, keeping the pool when the
// peers are the same and an upstream's drain when it stays.
func TestDiscoveryUpstreams(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	peers := map[string][]string{"svc": {"127.0.0.1:9", "not a peer"}}
	reg := New(Options{
		Store: r.st, Publisher: r.tables, Pools: r.fleet,
		Spec: spec.Options{BaseDomain: "apps.test", Drivers: []string{"process"}, Discovery: true},
		Discovered: func(_, id string) []Peer {
			mu.Lock()
			defer mu.Unlock()
			var ps []Peer
			for _, a := range peers[id] {
				ps = append(ps, Peer{Addr: a})
			}
			return ps
		},
	})
	if err := reg.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s := apitype.DeploymentSpec{ID: "front", Routes: []apitype.RouteRule{{Host: "front.example"}}, Discovery: &apitype.DiscoverySpec{ServiceID: "svc"}}
	if _, _, err := reg.Put(ctx, s, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	e, _ := reg.Get("front")
	if e.Kind != apitype.KindStatic || !slices.Equal(e.Upstreams, []string{"127.0.0.1:9"}) || len(e.Pool.Backends()) != 1 {
		t.Fatalf("front = %s %v", e.Kind, e.Upstreams)
	}
	if r.tables.routes("front.example") != "front" {
		t.Fatalf("front.example routes to %q", r.tables.routes("front.example"))
	}
	pool := e.Pool
	reg.Refresh("front")
	if e, _ = reg.Get("front"); e.Pool != pool {
		t.Error("a refresh with the same peers made a new pool")
	}
	mu.Lock()
	peers["svc"] = []string{"127.0.0.1:9", "127.0.0.1:10"}
	mu.Unlock()
	reg.Refresh("front")
	e, _ = reg.Get("front")
	if !slices.Equal(e.Upstreams, []string{"127.0.0.1:9", "127.0.0.1:10"}) || len(e.Pool.Backends()) != 2 {
		t.Fatalf("after the service grew: %v", e.Upstreams)
	}
	if _, err := reg.Drain(ctx, "front", "127.0.0.1:9", false, "moving"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	peers["svc"] = []string{"127.0.0.1:9", "127.0.0.1:10", "127.0.0.1:11"}
	mu.Unlock()
	reg.Refresh("front")
	if e, _ = reg.Get("front"); len(e.Upstreams) != 3 {
		t.Fatalf("after the service grew again: %v", e.Upstreams)
	}
	if b := e.Pool.Find("127.0.0.1:9"); b == nil || !b.Draining() {
		t.Error("the drained peer lost its drain on refresh")
	}
	mu.Lock()
	delete(peers, "svc")
	mu.Unlock()
	reg.Refresh("front")
	if e, _ = reg.Get("front"); len(e.Upstreams) != 0 || len(e.Pool.Backends()) != 0 {
		t.Errorf("after the service emptied: %v", e.Upstreams)
	}
}
