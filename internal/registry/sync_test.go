package registry

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/store"
)

// syncRig is a registry over the rig's store that records what it forgets
// (Options.Forget), as a second host on a shared store would be.
type syncRig struct {
	*rig
	reg *Registry

	mu     sync.Mutex
	forgot []string
}

func newSyncRig(t *testing.T) *syncRig {
	t.Helper()
	sr := &syncRig{rig: newRig(t)}
	sr.reg = New(Options{
		Store: sr.st, Publisher: sr.tables, Pools: sr.fleet,
		Spec: spec.Options{BaseDomain: "apps.test", Drivers: []string{"process"}},
		Forget: func(id string) {
			sr.mu.Lock()
			sr.forgot = append(sr.forgot, id)
			sr.mu.Unlock()
		},
	})
	if err := sr.reg.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return sr
}

func (sr *syncRig) forgotten() []string {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	return slices.Clone(sr.forgot)
}

// storeSpec writes s straight into the store, as another host's registry
// would: behind this registry's back.
func storeSpec(t *testing.T, st *store.Store, s apitype.DeploymentSpec) store.Deployment {
	t.Helper()
	raw, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	row, err := st.PutDeployment(t.Context(), store.Deployment{ID: s.ID, Namespace: s.Namespace, Spec: raw}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func upstreamsOf(e *Entry) []string {
	var out []string
	for _, b := range e.Pool.Backends() {
		out = append(out, b.ID)
	}
	return out
}

// TestSyncStatic: a deployment written to the store behind the registry's
// back is routed after Sync (one publish); a Sync of an unchanged record
// rebuilds and publishes nothing; a change of its upstreams is picked up,
// a change that keeps them keeps the pool; a deployment deleted from the
// store is unrouted and forgotten.
func TestSyncStatic(t *testing.T) {
	sr := newSyncRig(t)
	ctx := t.Context()
	row := storeSpec(t, sr.st, static("web", "web.example", "127.0.0.1:9001"))
	if got := sr.tables.routes("web.example"); got != "" {
		t.Fatalf("routed %q before any Sync", got)
	}
	swaps := sr.tables.count()
	if err := sr.reg.Sync(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if got := sr.tables.routes("web.example"); got != "web" {
		t.Fatalf("after Sync web.example routes to %q, want web", got)
	}
	if n := sr.tables.count() - swaps; n != 1 {
		t.Errorf("Sync published %d tables, want 1", n)
	}
	e, ok := sr.reg.Get("web")
	if !ok || e.Revision != row.Revision || !slices.Equal(upstreamsOf(e), []string{"127.0.0.1:9001"}) {
		t.Fatalf("entry after Sync: %+v (ok %v), want revision %d with upstream 127.0.0.1:9001", e, ok, row.Revision)
	}

	// Unchanged: nothing rebuilt, nothing published (a host's own write
	// coming back through the watch).
	swaps = sr.tables.count()
	if err := sr.reg.Sync(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if err := sr.reg.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if again, _ := sr.reg.Get("web"); again != e || sr.tables.count() != swaps {
		t.Errorf("a Sync of an unchanged record replaced the entry (%v) or published (%d tables)", again != e, sr.tables.count()-swaps)
	}

	// The upstream changes.
	storeSpec(t, sr.st, static("web", "web.example", "127.0.0.1:9002"))
	if err := sr.reg.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	e2, _ := sr.reg.Get("web")
	if e2 == e || !slices.Equal(upstreamsOf(e2), []string{"127.0.0.1:9002"}) {
		t.Fatalf("after the upstream changed: upstreams %v, want [127.0.0.1:9002]", upstreamsOf(e2))
	}
	// A change that keeps the backends keeps the pool (and its
	// connections).
	s := static("web", "web.example", "127.0.0.1:9002")
	on := true
	s.Maintenance = &on
	storeSpec(t, sr.st, s)
	if err := sr.reg.Sync(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	e3, _ := sr.reg.Get("web")
	if e3 == e2 || e3.Pool != e2.Pool || e3.Spec.Maintenance == nil || !*e3.Spec.Maintenance {
		t.Errorf("a change keeping the backends: new entry %v, same pool %v, maintenance %v", e3 != e2, e3.Pool == e2.Pool, e3.Spec.Maintenance)
	}

	// Deleted from the store.
	if err := sr.st.DeleteDeployment(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if err := sr.reg.Sync(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if _, ok := sr.reg.Get("web"); ok || sr.tables.routes("web.example") != "" {
		t.Errorf("after the delete: held %v, routed %q", ok, sr.tables.routes("web.example"))
	}
	if got := sr.forgotten(); !slices.Equal(got, []string{"web"}) {
		t.Errorf("forgot %v, want [web]", got)
	}
	// Syncing a deployment that is neither stored nor held is a no-op.
	swaps = sr.tables.count()
	if err := sr.reg.Sync(ctx, "web", "nope"); err != nil || sr.tables.count() != swaps {
		t.Errorf("Sync of absent deployments: %v, %d tables published", err, sr.tables.count()-swaps)
	}
}

// TestSyncAll: a Sync without ids adds what the store has and the
// registry lacks, replaces what changed, and removes what the store no
// longer has, in one publish.
func TestSyncAll(t *testing.T) {
	sr := newSyncRig(t)
	ctx := t.Context()
	for _, s := range []apitype.DeploymentSpec{
		static("a", "a.example", "127.0.0.1:9001"),
		static("b", "b.example", "127.0.0.1:9002"),
	} {
		if _, _, err := sr.reg.Put(ctx, s, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := sr.reg.Get("a")
	// Another host: b deleted, c created, a left alone.
	if err := sr.st.DeleteDeployment(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	storeSpec(t, sr.st, static("c", "c.example", "127.0.0.1:9003"))
	swaps := sr.tables.count()
	if err := sr.reg.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := sr.tables.count() - swaps; n != 1 {
		t.Errorf("Sync published %d tables, want 1", n)
	}
	for host, want := range map[string]string{"a.example": "a", "b.example": "", "c.example": "c"} {
		if got := sr.tables.routes(host); got != want {
			t.Errorf("%s routes to %q, want %q", host, got, want)
		}
	}
	if again, _ := sr.reg.Get("a"); again != a {
		t.Error("the unchanged deployment a was rebuilt")
	}
	if got := sr.forgotten(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("forgot %v, want [b]", got)
	}
}

// TestSyncOwnWrite: the registry's own Put, reported back by a shared
// store, is a no-op.
func TestSyncOwnWrite(t *testing.T) {
	sr := newSyncRig(t)
	ctx := t.Context()
	e, _, err := sr.reg.Put(ctx, static("web", "web.example", "127.0.0.1:9001"), PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	swaps := sr.tables.count()
	if err := sr.reg.Sync(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if got, _ := sr.reg.Get("web"); got != e || sr.tables.count() != swaps {
		t.Errorf("Sync after the registry's own Put rebuilt the entry (%v) or published (%d)", got != e, sr.tables.count()-swaps)
	}
}

// TestSyncInvalidKeepsPrevious: a stored spec that does not validate here
// leaves the previous entry serving.
func TestSyncInvalidKeepsPrevious(t *testing.T) {
	sr := newSyncRig(t)
	ctx := t.Context()
	e, _, err := sr.reg.Put(ctx, static("web", "web.example", "127.0.0.1:9001"), PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sr.st.PutDeployment(ctx, store.Deployment{ID: "web", Spec: []byte(`{"id":"web","upstreams":["not an address"]}`)}, false, 0); err != nil {
		t.Fatal(err)
	}
	if err := sr.reg.Sync(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if got, _ := sr.reg.Get("web"); got != e || sr.tables.routes("web.example") != "web" {
		t.Error("an invalid stored spec replaced the serving entry")
	}
}

// TestSyncVM: a vm deployment written behind the registry's back gets its
// replica pool; a change of its template reaches the pool (a rollout), and
// its deletion stops the pool.
func TestSyncVM(t *testing.T) {
	sr := newSyncRig(t)
	ctx := t.Context()
	storeSpec(t, sr.st, vmSpec("app", "app.example"))
	if err := sr.reg.Sync(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	e, ok := sr.reg.Get("app")
	if !ok || e.VMPool == nil || sr.tables.routes("app.example") != "app" {
		t.Fatalf("after Sync: held %v, pool %v, routed %q", ok, ok && e.VMPool != nil, sr.tables.routes("app.example"))
	}
	s := vmSpec("app", "app.example")
	s.VM.StartCommand = "serve --v2"
	storeSpec(t, sr.st, s)
	if err := sr.reg.Sync(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	e2, _ := sr.reg.Get("app")
	if e2 == e || e2.VMPool != e.VMPool || e2.Pool != e.Pool {
		t.Errorf("template change: new entry %v, same fleet pool %v, same data plane pool %v (a rollout keeps both)", e2 != e, e2.VMPool == e.VMPool, e2.Pool == e.Pool)
	}
	if got := e2.VMPool.Config().Key; got != TemplateKey(&e2.Spec) {
		t.Errorf("the pool's template is %s, want the new one %s", got, TemplateKey(&e2.Spec))
	}
	if err := sr.st.DeleteDeployment(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if err := sr.reg.Sync(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, ok := sr.reg.Get("app"); ok || sr.tables.routes("app.example") != "" {
		t.Error("the deleted vm deployment is still held or routed")
	}
	if got := sr.forgotten(); !slices.Equal(got, []string{"app"}) {
		t.Errorf("forgot %v, want [app]", got)
	}
}

// TestSyncDrains: a drain stored behind the registry's back drains its
// upstream after SyncDrains; its removal lets it take traffic again.
func TestSyncDrains(t *testing.T) {
	sr := newSyncRig(t)
	ctx := t.Context()
	e, _, err := sr.reg.Put(ctx, static("web", "web.example", "127.0.0.1:9001", "127.0.0.1:9002"), PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Unix(1_700_000_000, 0).UTC()
	if err := sr.st.PutUpstreamDrain(ctx, store.UpstreamDrain{Deployment: "web", Upstream: "127.0.0.1:9001", Reason: "maint", StartedAt: since}); err != nil {
		t.Fatal(err)
	}
	if err := sr.reg.SyncDrains(ctx); err != nil {
		t.Fatal(err)
	}
	b := e.Pool.Find("127.0.0.1:9001")
	if reason, at, draining := b.DrainInfo(); !draining || reason != "maint" || !at.Equal(since) {
		t.Fatalf("after SyncDrains: draining %v, reason %q, since %v", draining, reason, at)
	}
	if e.Pool.Find("127.0.0.1:9002").Draining() {
		t.Error("the other upstream drains too")
	}
	if err := sr.st.DeleteUpstreamDrain(ctx, "web", "127.0.0.1:9001"); err != nil {
		t.Fatal(err)
	}
	if err := sr.reg.SyncDrains(ctx); err != nil {
		t.Fatal(err)
	}
	if b.Draining() {
		t.Error("the uncordoned upstream still drains")
	}
	// A deployment synced in comes with its stored drains.
	storeSpec(t, sr.st, static("api", "api.example", "127.0.0.1:9003", "127.0.0.1:9004"))
	if err := sr.st.PutUpstreamDrain(ctx, store.UpstreamDrain{Deployment: "api", Upstream: "127.0.0.1:9004", Reason: "old", StartedAt: since}); err != nil {
		t.Fatal(err)
	}
	if err := sr.reg.Sync(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	api, _ := sr.reg.Get("api")
	if !api.Pool.Find("127.0.0.1:9004").Draining() || api.Pool.Find("127.0.0.1:9003").Draining() {
		t.Error("a synced deployment did not come with its stored drain")
	}
}

// TestSyncRecreated: a deployment deleted and created again between two
// Syncs is at revision 1 again, like the one held: it is still picked up.
func TestSyncRecreated(t *testing.T) {
	sr := newSyncRig(t)
	ctx := t.Context()
	storeSpec(t, sr.st, static("web", "web.example", "127.0.0.1:9001"))
	if err := sr.reg.Sync(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	e, _ := sr.reg.Get("web")
	if err := sr.st.DeleteDeployment(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	again := storeSpec(t, sr.st, static("web", "web.example", "127.0.0.1:9002"))
	if again.Revision != e.Revision {
		t.Fatalf("the re-created deployment is at revision %d, the held one at %d: the test needs them equal", again.Revision, e.Revision)
	}
	if err := sr.reg.Sync(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	e2, _ := sr.reg.Get("web")
	if e2 == e || !slices.Equal(upstreamsOf(e2), []string{"127.0.0.1:9002"}) {
		t.Errorf("after a delete and re-create: upstreams %v, want [127.0.0.1:9002]", upstreamsOf(e2))
	}
}
