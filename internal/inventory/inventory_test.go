package inventory

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// fake is an in-memory driver: List reports what it was given, Stop
// removes and records.
type fake struct {
	mu      sync.Mutex
	insts   map[string]vm.Instance
	stopped []string
}

func newFake(insts ...vm.Instance) *fake {
	f := &fake{insts: map[string]vm.Instance{}}
	for _, in := range insts {
		f.insts[in.ID] = in
	}
	return f
}

func (f *fake) Start(ctx context.Context, s vm.Spec) (vm.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := vm.Instance{ID: s.Name, Owner: vm.ResolveOwner(s.Owner, s.Name), State: vm.StateRunning}
	f.insts[s.Name] = in
	return in, nil
}

func (f *fake) Stop(ctx context.Context, id string, grace time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.insts[id]; !ok {
		return vm.ErrNotFound
	}
	delete(f.insts, id)
	f.stopped = append(f.stopped, id)
	return nil
}

func (f *fake) Inspect(ctx context.Context, id string) (vm.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.insts[id]
	if !ok {
		return vm.Instance{}, vm.ErrNotFound
	}
	return in, nil
}

func (f *fake) List(ctx context.Context) ([]vm.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []vm.Instance
	for _, in := range f.insts {
		out = append(out, in)
	}
	return out, nil
}

func (f *fake) stops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(slices.Values(f.stopped))
}

var (
	dep = func(id string) vm.Owner { return vm.Owner{Kind: vm.OwnerDeployment, ID: id} }
	cmp = func(id string) vm.Owner { return vm.Owner{Kind: vm.OwnerComputer, ID: id} }
)

func inst(name string, o vm.Owner) vm.Instance {
	return vm.Instance{ID: name, Owner: o, State: vm.StateRunning}
}

func sorted(s ...string) []string { return slices.Sorted(slices.Values(s)) }

func ids(fs []Found) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Driver+"/"+f.Instance.ID)
	}
	slices.Sort(out)
	return out
}

// The replicas of one host, as a fleet and a Computer manager would find
// them after a berth restart.
var (
	web       = inst(vm.Name("web", 1), dep("web"))                   // a pool's
	gone      = inst(vm.Name("gone", 2), dep("gone"))                 // a deleted deployment's
	desk      = inst(vm.Name("cmp_desk", 3), cmp("desk"))             // a Computer's, adopted
	ghost     = inst(vm.Name("cmp_ghost", 4), cmp("ghost"))           // a deleted Computer's
	lookalike = inst(vm.Name("cmp_desk", 5), dep("cmp_desk"))         // a deployment's, named like a Computer's sandbox
	plain     = inst(vm.Name("desk", 6), cmp("desk"))                 // a Computer's, named like a deployment's, not the one it runs
	oldCmp    = inst(vm.Name("cmp_old", 7), vm.Owner{})               // an older berth's Computer sandbox: no recorded owner
	oldDep    = inst(vm.Name("web", 8), vm.Owner{})                   // an older berth's replica of web
	future    = inst(vm.Name("x", 9), vm.Owner{Kind: "job", ID: "x"}) // a kind nobody registers
)

// TestHandOutAndSweep: each replica goes to the claimant of its recorded
// owner kind, whatever its name says (a deployment's replica named like a
// Computer's sandbox goes to the fleet, and the other way round); replicas
// without a recorded owner get the one their name implies; the sweep
// destroys exactly the replicas of unregistered kinds and those their
// claimant does not claim.
func TestHandOutAndSweep(t *testing.T) {
	a := newFake(web, gone, desk, lookalike)
	b := newFake(ghost, plain, oldCmp, oldDep, future)
	inv := New(map[string]vm.Driver{"a": a, "b": b}, Options{})
	if err := inv.List(t.Context()); err != nil {
		t.Fatal(err)
	}
	pools := map[string]bool{"web": true, "cmp_desk": true}
	deps := inv.Register(vm.OwnerDeployment, func(f Found) bool { return pools[f.Instance.Owner.ID] })
	adopted := map[string]bool{desk.ID: true, oldCmp.ID: true}
	cmps := inv.Register(vm.OwnerComputer, func(f Found) bool { return adopted[f.Instance.ID] })

	if got, want := ids(deps), sorted("a/"+gone.ID, "a/"+lookalike.ID, "a/"+web.ID, "b/"+oldDep.ID); !slices.Equal(got, want) {
		t.Errorf("the fleet was handed %v, want %v", got, want)
	}
	if got, want := ids(cmps), sorted("a/"+desk.ID, "b/"+ghost.ID, "b/"+oldCmp.ID, "b/"+plain.ID); !slices.Equal(got, want) {
		t.Errorf("the Computers were handed %v, want %v", got, want)
	}
	for _, f := range append(deps, cmps...) {
		if f.Instance.ID == oldCmp.ID && f.Instance.Owner != cmp("old") || f.Instance.ID == oldDep.ID && f.Instance.Owner != dep("web") {
			t.Errorf("%s: migrated owner %v", f.Instance.ID, f.Instance.Owner)
		}
	}

	inv.Sweep(t.Context())
	if got, want := a.stops(), []string{gone.ID}; !slices.Equal(got, want) {
		t.Errorf("destroyed on a: %v, want %v", got, want)
	}
	// oldDep is web's: its pool claims it.
	if got, want := b.stops(), sorted(ghost.ID, plain.ID, future.ID); !slices.Equal(got, want) {
		t.Errorf("destroyed on b: %v, want %v", got, want)
	}
	// Sweeping again destroys nothing more.
	inv.Sweep(t.Context())
	if n := len(a.stops()) + len(b.stops()); n != 4 {
		t.Errorf("%d destroyed after a second sweep, want 4", n)
	}
}

// TestSweepOfKinds: a sweep of one kind (a claimant with an inventory of
// its own) leaves every other kind's replicas, registered or not.
func TestSweepOfKinds(t *testing.T) {
	a := newFake(web, gone, ghost, future)
	inv := New(map[string]vm.Driver{"a": a}, Options{})
	if err := inv.List(t.Context()); err != nil {
		t.Fatal(err)
	}
	inv.Register(vm.OwnerComputer, func(Found) bool { return false })
	inv.Sweep(t.Context(), vm.OwnerComputer)
	if got := a.stops(); !slices.Equal(got, []string{ghost.ID}) {
		t.Errorf("destroyed %v, want only %s", got, ghost.ID)
	}
}

// TestRunWaits: Run sweeps only once every expected kind has registered
// and Grace has passed since the listing; a claimant that learns of its
// owner after registering (a pool created late) is asked at the sweep; a
// Run whose context ends first destroys nothing.
func TestRunWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newFake(web, gone, desk, ghost)
		inv := New(map[string]vm.Driver{"a": a}, Options{Expect: []vm.OwnerKind{vm.OwnerDeployment, vm.OwnerComputer}, Grace: time.Minute})
		if err := inv.List(t.Context()); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			inv.Run(t.Context())
		}()
		var mu sync.Mutex
		pools := map[string]bool{}
		inv.Register(vm.OwnerDeployment, func(f Found) bool {
			mu.Lock()
			defer mu.Unlock()
			return pools[f.Instance.Owner.ID]
		})
		time.Sleep(time.Hour) // far past the grace: the Computers have not registered
		synctest.Wait()
		if got := a.stops(); len(got) != 0 {
			t.Fatalf("destroyed %v before every expected owner registered", got)
		}
		mu.Lock()
		pools["web"] = true // loaded after its registration, before the sweep
		mu.Unlock()
		inv.Register(vm.OwnerComputer, func(f Found) bool { return f.Instance.ID == desk.ID })
		<-done
		if got, want := a.stops(), sorted(gone.ID, ghost.ID); !slices.Equal(got, want) {
			t.Errorf("destroyed %v, want %v", got, want)
		}
		select {
		case <-inv.Swept():
		default:
			t.Error("Swept is open after the sweep")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		a := newFake(gone)
		inv := New(map[string]vm.Driver{"a": a}, Options{Expect: []vm.OwnerKind{vm.OwnerDeployment}, Grace: time.Minute})
		if err := inv.List(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			inv.Run(ctx)
		}()
		inv.Register(vm.OwnerDeployment, func(Found) bool { return false })
		time.Sleep(time.Minute - time.Second)
		synctest.Wait()
		if got := a.stops(); len(got) != 0 {
			t.Fatalf("destroyed %v within the grace", got)
		}
		cancel()
		<-done
		if got := a.stops(); len(got) != 0 {
			t.Errorf("destroyed %v after Run's context ended", got)
		}
	})
}
