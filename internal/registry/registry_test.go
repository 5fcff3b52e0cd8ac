package registry

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// tables records the routing tables the registry publishes.
type tables struct {
	mu    sync.Mutex
	last  *proxy.Table
	swaps int
}

func (p *tables) Swap(t *proxy.Table) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last, p.swaps = t, p.swaps+1
}

// routes reports which deployment the last table sends host to ("" for none).
func (p *tables) routes(host string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.last.Lookup(host, "/")
	if !ok {
		return ""
	}
	return m.ID
}

func (p *tables) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.swaps
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// rig is a registry over a real store, with vm deployments run by a real
// fleet.Manager on the fake driver.
type rig struct {
	st      *store.Store
	tables  *tables
	drv     *vmfake.Driver
	fleet   *fleet.Manager
	reg     *Registry
	domains map[string][]string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{st: openStore(t), tables: &tables{}, drv: vmfake.New(vmfake.Options{}), domains: map[string][]string{}}
	r.fleet = fleet.New(fleet.Options{Driver: r.drv, Tick: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.fleet.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		r.drv.Close()
	})
	r.reg = r.open(t)
	return r
}

// open returns a registry over the rig's store (a second one: berth after
// a restart) and loads it.
func (r *rig) open(t *testing.T) *Registry {
	t.Helper()
	reg := New(Options{
		Store: r.st, Publisher: r.tables, Pools: r.fleet,
		Spec:    spec.Options{BaseDomain: "apps.test", Drivers: []string{"process"}},
		Domains: func(context.Context) (map[string][]string, error) { return r.domains, nil },
	})
	if err := reg.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return reg
}

func static(id, host string, upstreams ...string) apitype.DeploymentSpec {
	return apitype.DeploymentSpec{ID: id, Routes: []apitype.RouteRule{{Host: host}}, Upstreams: upstreams}
}

func vmSpec(id, host string) apitype.DeploymentSpec {
	one := 1
	return apitype.DeploymentSpec{
		ID: id, Routes: []apitype.RouteRule{{Host: host}},
		VM:      &apitype.VmSpec{Driver: apitype.DriverProcess, Port: 8080, StartCommand: "serve"},
		Scaling: &apitype.ScalingPolicy{MinReplicas: &one, MaxReplicas: &one},
	}
}

// TestPutGetDelete: a write is validated, persisted and routed; its
// preconditions (create only, must exist, If-Match) refuse what they say;
// a second registry over the same store loads it; a delete unroutes it.
func TestPutGetDelete(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	e, created, err := r.reg.Put(ctx, static("web", "web.example", "127.0.0.1:9"), PutOptions{CreateOnly: true})
	if err != nil || !created {
		t.Fatalf("create: created %v, %v", created, err)
	}
	if e.Kind != apitype.KindStatic || e.ETag == "" || e.Revision == 0 || e.Spec.Namespace != "" && e.Spec.Namespace != "default" {
		t.Errorf("entry %+v", e)
	}
	if got, ok := r.reg.Get("web"); !ok || got != e {
		t.Errorf("Get = %v, %v; want the entry Put returned", got, ok)
	}
	if id := r.tables.routes("web.example"); id != "web" {
		t.Errorf("web.example routes to %q, want web", id)
	}

	if _, _, err := r.reg.Put(ctx, static("web", "web.example", "127.0.0.1:9"), PutOptions{CreateOnly: true}); !errors.Is(err, ErrExists) {
		t.Errorf("second create: %v, want ErrExists", err)
	}
	if _, _, err := r.reg.Put(ctx, static("nope", "nope.example", "127.0.0.1:9"), PutOptions{MustExist: true}); !errors.Is(err, ErrNotFound) {
		t.Errorf("replace of a missing deployment: %v, want ErrNotFound", err)
	}
	if _, ok := r.reg.Get("nope"); ok {
		t.Error("a refused replace created the deployment")
	}
	if _, _, err := r.reg.Put(ctx, static("web", "web.example", "127.0.0.1:10"), PutOptions{IfMatch: `"stale"`}); !errors.Is(err, ErrPrecondition) {
		t.Errorf("If-Match with a stale ETag: %v, want ErrPrecondition", err)
	}
	e2, created, err := r.reg.Put(ctx, static("web", "web.example", "127.0.0.1:10"), PutOptions{IfMatch: e.ETag, MustExist: true})
	if err != nil || created {
		t.Fatalf("replace with the current ETag: created %v, %v", created, err)
	}
	if e2.ETag == e.ETag || e2.Revision <= e.Revision || e2.Upstreams[0] != "127.0.0.1:10" {
		t.Errorf("replaced entry %+v after %+v", e2, e)
	}

	// berth restarted: the deployment is loaded from the store.
	again := r.open(t)
	if got, ok := again.Get("web"); !ok || got.ETag != e2.ETag || got.Revision != e2.Revision {
		t.Errorf("after a reload: %+v, %v; want revision %d", got, ok, e2.Revision)
	}

	if err := r.reg.Delete(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.reg.Get("web"); ok {
		t.Error("Get after Delete found it")
	}
	if id := r.tables.routes("web.example"); id != "" {
		t.Errorf("after Delete web.example routes to %q", id)
	}
	if err := r.reg.Delete(ctx, "web"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if rows, _ := r.st.Deployments(ctx); len(rows) != 0 {
		t.Errorf("store still has %d deployments", len(rows))
	}
}

// TestPutRefusesInvalid: a spec that does not validate is a *spec.FieldError
// naming the field, and nothing is stored.
func TestPutRefusesInvalid(t *testing.T) {
	r := newRig(t)
	s := static("web", "web.example", "127.0.0.1:9")
	s.Routes[0].Host = "bad host"
	_, _, err := r.reg.Put(t.Context(), s, PutOptions{})
	var fe *spec.FieldError
	if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "routes[0]") {
		t.Fatalf("Put: %v, want a FieldError on routes[0]", err)
	}
	if r.reg.Len() != 0 {
		t.Error("an invalid spec was registered")
	}
}

// TestRouteOwnership: a host belongs to one namespace (409, naming the
// other deployment only to a writer who may see it), a restricted writer
// may route only under its namespace's domains and its automatic host
// (403), and no namespace may reach another's domain.
func TestRouteOwnership(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	r.domains["blue"] = []string{"blue.example"}
	a := static("alpha", "shared.example", "127.0.0.1:9")
	a.Namespace = "red"
	if _, _, err := r.reg.Put(ctx, a, PutOptions{}); err != nil {
		t.Fatal(err)
	}

	b := static("beta", "shared.example", "127.0.0.1:9")
	b.Namespace = "green"
	var re *RouteError
	_, _, err := r.reg.Put(ctx, b, PutOptions{})
	if !errors.As(err, &re) || re.Status != http.StatusConflict || re.Field != "routes[0]" || !strings.Contains(re.Msg, `"alpha"`) {
		t.Fatalf("a host of another namespace: %v, want a 409 on routes[0] naming alpha", err)
	}
	// A writer who cannot see alpha is not told it exists.
	_, _, err = r.reg.Put(ctx, b, PutOptions{Visible: func(id, ns string) bool { return ns == "green" }})
	if !errors.As(err, &re) || re.Status != http.StatusConflict || strings.Contains(re.Msg, "alpha") || strings.Contains(re.Msg, `"red"`) {
		t.Fatalf("conflict for a writer who cannot see alpha: %v, want a 409 naming neither alpha nor red", err)
	}

	// Another namespace's domain is out of reach, subdomains included.
	c := static("gamma", "www.blue.example", "127.0.0.1:9")
	c.Namespace = "green"
	if _, _, err := r.reg.Put(ctx, c, PutOptions{}); !errors.As(err, &re) || re.Status != http.StatusConflict || !strings.Contains(re.Msg, "blue") {
		t.Fatalf("a host under another namespace's domain: %v, want a 409", err)
	}

	// A restricted writer of blue: its domain and its automatic host, not
	// elsewhere and not every host.
	d := static("delta", "www.blue.example", "127.0.0.1:9")
	d.Namespace = "blue"
	if _, _, err := r.reg.Put(ctx, d, PutOptions{Restricted: true}); err != nil {
		t.Fatalf("a restricted writer under its own domain: %v", err)
	}
	d.Routes = []apitype.RouteRule{{Host: "delta.apps.test"}}
	if _, _, err := r.reg.Put(ctx, d, PutOptions{Restricted: true}); err != nil {
		t.Fatalf("a restricted writer on its automatic host: %v", err)
	}
	for _, rule := range []apitype.RouteRule{{Host: "elsewhere.example"}, {PathPrefix: "/x"}} {
		d.Routes = []apitype.RouteRule{rule}
		if _, _, err := r.reg.Put(ctx, d, PutOptions{Restricted: true}); !errors.As(err, &re) || re.Status != http.StatusForbidden {
			t.Errorf("a restricted writer routing %+v: %v, want a 403", rule, err)
		}
	}
	if got, _ := r.reg.Get("delta"); got.Spec.Routes[0].Host != "delta.apps.test" {
		t.Errorf("a refused write changed delta's routes to %+v", got.Spec.Routes)
	}
}

// TestAdmit: Admit sees the spec, the deployment it replaces and the
// others; its error is Put's, and nothing is stored.
func TestAdmit(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	if _, _, err := r.reg.Put(ctx, static("one", "one.example", "127.0.0.1:9"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	quota := errors.New("namespace quota: 1 deployment")
	var sawPrev *Entry
	var sawOthers []string
	admit := func(s *apitype.DeploymentSpec, prev *Entry, others iter.Seq[*Entry]) error {
		sawPrev = prev
		sawOthers = nil
		for e := range others {
			sawOthers = append(sawOthers, e.Spec.ID)
		}
		if prev == nil && len(sawOthers) >= 1 {
			return quota
		}
		return nil
	}
	if _, _, err := r.reg.Put(ctx, static("two", "two.example", "127.0.0.1:9"), PutOptions{Admit: admit}); err != quota {
		t.Fatalf("Put over the quota: %v, want Admit's error as is", err)
	}
	if sawPrev != nil || len(sawOthers) != 1 || sawOthers[0] != "one" {
		t.Errorf("Admit saw prev %v and others %v, want nil and [one]", sawPrev, sawOthers)
	}
	if _, ok := r.reg.Get("two"); ok {
		t.Error("a write Admit refused was registered")
	}
	if rows, _ := r.st.Deployments(ctx); len(rows) != 1 {
		t.Errorf("store has %d deployments, want 1", len(rows))
	}
	// Replacing "one" is within the quota; Admit sees what it replaces.
	if _, _, err := r.reg.Put(ctx, static("one", "one.example", "127.0.0.1:10"), PutOptions{Admit: admit}); err != nil {
		t.Fatal(err)
	}
	if sawPrev == nil || sawPrev.Spec.ID != "one" || len(sawOthers) != 0 {
		t.Errorf("Admit on a replace saw prev %v and others %v", sawPrev, sawOthers)
	}
}

// TestDryRun: a dry run runs the checks and returns the entry, but stores,
// publishes and starts nothing.
func TestDryRun(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	swaps := r.tables.count()
	e, created, err := r.reg.Put(ctx, vmSpec("app", "app.example"), PutOptions{DryRun: true})
	if err != nil || !created || e.Kind != apitype.KindVM || e.ETag == "" {
		t.Fatalf("dry run: %+v, created %v, %v", e, created, err)
	}
	if _, ok := r.reg.Get("app"); ok {
		t.Error("a dry run registered the deployment")
	}
	if rows, _ := r.st.Deployments(ctx); len(rows) != 0 {
		t.Errorf("a dry run stored %d deployments", len(rows))
	}
	if r.tables.count() != swaps {
		t.Error("a dry run published a routing table")
	}
	if _, ok := r.fleet.Pool("app"); ok {
		t.Error("a dry run created a replica pool")
	}
	// The checks still run: a dry run that would conflict says so.
	if _, _, err := r.reg.Put(ctx, static("web", "web.example", "127.0.0.1:9"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	other := static("web2", "web.example", "127.0.0.1:9")
	other.Namespace = "other"
	var re *RouteError
	if _, _, err := r.reg.Put(ctx, other, PutOptions{DryRun: true}); !errors.As(err, &re) || re.Status != http.StatusConflict {
		t.Errorf("a conflicting dry run: %v, want a 409", err)
	}
	if _, _, err := r.reg.Put(ctx, static("web", "web.example", "127.0.0.1:9"), PutOptions{DryRun: true, CreateOnly: true}); !errors.Is(err, ErrExists) {
		t.Errorf("a dry-run create of an existing id: %v, want ErrExists", err)
	}
}

// waitFor polls cond until it holds; the limit only guards against a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestVMToStatic: changing a deployment from vm to static stops its replica
// pool. Before, Put never called Pools.Remove, so the replicas kept running
// (and kept their pool and leases) behind a deployment that no longer had
// them. Deleting a vm deployment stops them too.
func TestVMToStatic(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	if _, _, err := r.reg.Put(ctx, vmSpec("app", "app.example"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var id string
	waitFor(t, "the vm deployment's replica", func() bool {
		list, _ := r.drv.List(ctx)
		if len(list) == 1 {
			id = list[0].ID
		}
		return id != ""
	})

	e, _, err := r.reg.Put(ctx, static("app", "app.example", "127.0.0.1:9"), PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Kind != apitype.KindStatic || e.VMPool != nil {
		t.Errorf("entry after the change: kind %s, VMPool %v", e.Kind, e.VMPool)
	}
	if _, ok := r.fleet.Pool("app"); ok {
		t.Error("the replica pool outlived the change to static")
	}
	if !r.drv.Stopped(id) {
		t.Error("the vm deployment's replica was not stopped when it became static")
	}
	if list, _ := r.drv.List(ctx); len(list) != 0 {
		t.Errorf("replicas still running: %+v", list)
	}

	// And back to vm, then deleted: the new pool's replica is stopped.
	if _, _, err := r.reg.Put(ctx, vmSpec("app", "app.example"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	id = ""
	waitFor(t, "a replica of the vm deployment again", func() bool {
		list, _ := r.drv.List(ctx)
		if len(list) == 1 {
			id = list[0].ID
		}
		return id != ""
	})
	if err := r.reg.Delete(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if !r.drv.Stopped(id) {
		t.Error("deleting a vm deployment did not stop its replica")
	}
}

// TestDrain: a drain is refused for the last healthy accepting upstream
// unless forced, survives a restart (it is stored before it takes effect),
// keeps its start across a second drain, and leaves with its upstream.
func TestDrain(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	if _, _, err := r.reg.Put(ctx, static("web", "web.example", "127.0.0.1:9", "127.0.0.1:10"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := r.reg.Drain(ctx, "web", "127.0.0.1:9", false, "deploying")
	if err != nil || st.State != apitype.TrafficDrained || st.Reason == nil || *st.Reason != "deploying" || st.StartedAt == nil {
		t.Fatalf("Drain = %+v, %v", st, err)
	}
	if _, err := r.reg.Drain(ctx, "web", "127.0.0.1:10", false, ""); !errors.Is(err, ErrLastUpstream) {
		t.Errorf("draining the last accepting upstream: %v, want ErrLastUpstream", err)
	}
	again, err := r.reg.Drain(ctx, "web", "127.0.0.1:9", false, "still deploying")
	if err != nil || *again.StartedAt != *st.StartedAt {
		t.Errorf("a second drain: %+v, %v; want the first's start kept", again, err)
	}
	for _, tt := range []struct {
		id, up string
		want   error
	}{
		{"nope", "127.0.0.1:9", ErrNotFound},
		{"web", "127.0.0.1:11", ErrNoUpstream},
	} {
		if _, err := r.reg.Drain(ctx, tt.id, tt.up, true, ""); !errors.Is(err, tt.want) {
			t.Errorf("Drain(%s, %s): %v, want %v", tt.id, tt.up, err, tt.want)
		}
	}
	if _, _, err := r.reg.Put(ctx, vmSpec("app", "app.example"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.reg.Drain(ctx, "app", "x", true, ""); !errors.Is(err, ErrNotStatic) {
		t.Errorf("Drain of a vm deployment: %v, want ErrNotStatic", err)
	}

	// berth restarted: the drain is back.
	reloaded := r.open(t)
	e, _ := reloaded.Get("web")
	if b := e.Pool.Find("127.0.0.1:9"); b == nil || !b.Draining() {
		t.Fatal("the drain did not survive a reload")
	}
	// The upstream leaves the spec: its drain goes with it, and coming back
	// it accepts again.
	if _, _, err := r.reg.Put(ctx, static("web", "web.example", "127.0.0.1:10"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.reg.Put(ctx, static("web", "web.example", "127.0.0.1:9", "127.0.0.1:10"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	reloaded = r.open(t)
	e, _ = reloaded.Get("web")
	if b := e.Pool.Find("127.0.0.1:9"); b == nil || b.Draining() {
		t.Error("an upstream that left the spec kept its drain")
	}
	if _, err := r.reg.Undrain(ctx, "web", "127.0.0.1:9"); err != nil {
		t.Fatal(err)
	}
}

// TestLoadSkipsInvalid: a stored spec that no longer decodes or validates
// is skipped at Load (and logged), never deleted; the others load.
func TestLoadSkipsInvalid(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	if _, _, err := r.reg.Put(ctx, static("web", "web.example", "127.0.0.1:9"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for id, raw := range map[string]string{
		"bad":      `{"id": "bad", "routes": [{"host": "bad host"}], "upstreams": ["127.0.0.1:9"]}`,
		"mistyped": `{"id": "mistyped", "routes": "everywhere"}`,
	} {
		if _, err := r.st.PutDeployment(ctx, store.Deployment{ID: id, Spec: []byte(raw)}, true, 0); err != nil {
			t.Fatal(err)
		}
	}
	again := r.open(t)
	if _, ok := again.Get("web"); !ok || again.Len() != 1 {
		t.Errorf("after Load: %d deployments, web present %v; want only web", again.Len(), ok)
	}
	if rows, _ := r.st.Deployments(ctx); len(rows) != 3 {
		t.Errorf("store has %d deployments after Load, want the 3 it had", len(rows))
	}
}

// TestAdmitSerialised: Admit runs under the registry's lock, so concurrent
// writes cannot all pass a check on their sum: of ten creates racing for a
// quota of three deployments, exactly three land.
func TestAdmitSerialised(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	quota := func(s *apitype.DeploymentSpec, prev *Entry, others iter.Seq[*Entry]) error {
		n := 0
		for range others {
			n++
		}
		if prev == nil && n >= 3 {
			return errors.New("quota")
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Go(func() {
			id := fmt.Sprintf("d%d", i)
			_, _, errs[i] = r.reg.Put(ctx, static(id, id+".example", "127.0.0.1:9"), PutOptions{Admit: quota})
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if ok != 3 || r.reg.Len() != 3 {
		t.Errorf("%d writes passed and %d deployments are registered, want 3 and 3", ok, r.reg.Len())
	}
}

// TestHasNamespace: a namespace has deployments once one is written in it,
// the default namespace by either of its names, and none after the last
// is deleted.
func TestHasNamespace(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	if r.reg.HasNamespace("default") || r.reg.HasNamespace("team-a") {
		t.Fatal("an empty registry has a namespace")
	}
	s := static("a1", "a1.example", "127.0.0.1:9")
	s.Namespace = "team-a"
	if _, _, err := r.reg.Put(ctx, s, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if !r.reg.HasNamespace("team-a") || r.reg.HasNamespace("default") || r.reg.HasNamespace("") || r.reg.HasNamespace("team-b") {
		t.Fatal("HasNamespace after a write in team-a")
	}
	if _, _, err := r.reg.Put(ctx, static("d1", "d1.example", "127.0.0.1:9"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if !r.reg.HasNamespace("default") || !r.reg.HasNamespace("") {
		t.Fatal("the default namespace, by either name, after a write in it")
	}
	if err := r.reg.Delete(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if r.reg.HasNamespace("team-a") {
		t.Fatal("team-a still has deployments after its last was deleted")
	}
}
