package registry

import (
	"context"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/ratelimit"
	"github.com/berth-dev/berth/internal/spec"
)

// limitRig is a registry wired to a real ratelimit.Manager over the same
// real store, as the server wires them: the registry asks the Manager for a
// deployment's Limiter when it compiles one, the Manager has the registry
// Refresh after every change, and a deleted deployment's Limiter is
// forgotten.
type limitRig struct {
	tables *tables
	reg    *Registry
	rl     *ratelimit.Manager
}

func newLimitRig(t *testing.T, r *rig) *limitRig {
	t.Helper()
	ctx := context.Background()
	lr := &limitRig{tables: &tables{}}
	var err error
	lr.rl, err = ratelimit.NewManager(ctx, r.st, ratelimit.Options{Changed: func(id string) { lr.reg.Refresh(id) }})
	if err != nil {
		t.Fatal(err)
	}
	lr.reg = New(Options{
		Store: r.st, Publisher: lr.tables,
		Spec: spec.Options{BaseDomain: "apps.test"},
		Limit: func(id string) proxy.Limiter {
			if l := lr.rl.Limiter(id); l != nil {
				return l
			}
			return nil // not a nil *Limiter in the interface
		},
		Forget: lr.rl.Forget,
	})
	if err := lr.reg.Load(ctx); err != nil {
		t.Fatal(err)
	}
	return lr
}

// published is the Limit the last published table gives host's deployment.
func (lr *limitRig) published(t *testing.T, host string) proxy.Limiter {
	t.Helper()
	lr.tables.mu.Lock()
	defer lr.tables.mu.Unlock()
	m, ok := lr.tables.last.Lookup(host, "/")
	if !ok {
		t.Fatalf("%s is not routed", host)
	}
	return m.Target.Limit
}

// TestLimitRefresh: a limit put or deleted is published at once, without a
// write of the spec; a spec write keeps the limit; a restart loads it; a
// deleted deployment takes it along.
func TestLimitRefresh(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	lr := newLimitRig(t, r)
	if _, _, err := lr.reg.Put(ctx, static("web", "web.test", "127.0.0.1:1"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if l := lr.published(t, "web.test"); l != nil {
		t.Fatalf("a deployment without a limit is published with %v", l)
	}
	before, _ := lr.reg.Get("web")
	swaps := lr.tables.count()
	if _, err := lr.rl.Put(ctx, "web", apitype.RateLimit{RequestsPerSec: 5}); err != nil {
		t.Fatal(err)
	}
	if lr.tables.count() != swaps+1 {
		t.Errorf("%d tables published by a limit's put, want 1", lr.tables.count()-swaps)
	}
	first := lr.rl.Limiter("web")
	if l := lr.published(t, "web.test"); l != first {
		t.Fatalf("published limit %v, want the Manager's %p", l, first)
	}
	after, _ := lr.reg.Get("web")
	if after == before || after.ETag != before.ETag || after.Revision != before.Revision || after.Pool != before.Pool {
		t.Error("Refresh must replace the entry, keeping its spec, revision and pool")
	}

	// A spec write compiles the deployment again, with its limit.
	s := static("web", "web.test", "127.0.0.1:1")
	s.Routes = append(s.Routes, apitype.RouteRule{Host: "www.test"})
	if _, _, err := lr.reg.Put(ctx, s, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if lr.published(t, "www.test") != first {
		t.Fatal("a spec write lost the limit")
	}

	// Replaced: a new Limiter, published.
	if _, err := lr.rl.Put(ctx, "web", apitype.RateLimit{ConcurrentPerClient: 2}); err != nil {
		t.Fatal(err)
	}
	if l := lr.published(t, "web.test"); l == first || l != lr.rl.Limiter("web") {
		t.Fatal("the replaced limit is not published")
	}

	// A restart: the limit is loaded before the registry compiles.
	lr2 := newLimitRig(t, r)
	if l := lr2.published(t, "web.test"); l == nil {
		t.Fatal("the limit is not published after a restart")
	}

	if err := lr.rl.Delete(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if l := lr.published(t, "web.test"); l != nil {
		t.Fatalf("a deleted limit is still published: %v", l)
	}
	if lr.reg.Refresh("nope") {
		t.Error("Refresh of a deployment that does not exist reports it")
	}

	// A deleted deployment takes its limit along, in the store and in
	// memory: created again, it has none.
	if _, err := lr.rl.Put(ctx, "web", apitype.RateLimit{RequestsPerSec: 1}); err != nil {
		t.Fatal(err)
	}
	if err := lr.reg.Delete(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if _, ok := lr.rl.Get("web"); ok {
		t.Fatal("the deleted deployment's limit is still in memory")
	}
	if _, _, err := lr.reg.Put(ctx, static("web", "web.test", "127.0.0.1:1"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if l := lr.published(t, "web.test"); l != nil {
		t.Fatalf("the re-created deployment inherited a limit: %v", l)
	}
	if rows, err := r.st.RateLimits(ctx); err != nil || len(rows) != 0 {
		t.Fatalf("stored limits: %+v, %v", rows, err)
	}
}
