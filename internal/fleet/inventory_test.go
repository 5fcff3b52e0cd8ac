package fleet

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/autoscale"
	"github.com/berth-dev/berth/internal/inventory"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// TestMain lets the test binary be the in-sandbox agent of the process
// driver's replicas (BERTH_TEST_ROLE=agent runs `berth agent`), for
// TestInventoryOwners, the one test of this package on a real driver; the
// others run on vmfake.
func TestMain(m *testing.M) {
	if os.Getenv("BERTH_TEST_ROLE") == "agent" {
		os.Exit(agent.Main(context.Background(), os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// TestInventoryOwners: on the real process driver, after a berth restart
// the shared inventory hands each replica to its recorded owner, whatever
// its name says: a deployment whose replicas are named like a Computer's
// sandbox keeps them, a Computer's sandbox named like a deployment's
// replica is never adopted (nor destroyed) by that deployment's pool,
// replicas an older berth left without a recorded owner are migrated by
// name, and orphans of both kinds are destroyed.
func TestInventoryOwners(t *testing.T) {
	dir := t.TempDir()
	d, err := process.New(process.Options{
		Dir: dir, AgentCommand: []string{os.Args[0]}, AgentEnv: []string{"BERTH_TEST_ROLE=agent"},
		CgroupParent: "none", Spares: new(int),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		insts, _ := d.List(context.Background())
		for _, in := range insts {
			d.Stop(context.Background(), in.ID, time.Second)
		}
	})
	ctx := t.Context()
	var (
		dep = func(id string) vm.Owner { return vm.Owner{Kind: vm.OwnerDeployment, ID: id} }
		cmp = func(id string) vm.Owner { return vm.Owner{Kind: vm.OwnerComputer, ID: id} }

		lookalike = vm.Name(vm.ComputerPrefix+"web", 1)   // deployment cmp_web's
		gone      = vm.Name("gone", 2)                    // a deleted deployment's
		desk      = vm.Name("desk", 3)                    // Computer desk's, named like deployment desk's
		ghost     = vm.Name(vm.ComputerPrefix+"ghost", 4) // a deleted Computer's
		oldCmp    = vm.Name(vm.ComputerPrefix+"old", 5)   // an older berth's Computer sandbox
		oldDep    = vm.Name("old", 6)                     // an older berth's replica of deployment old
	)
	for name, o := range map[string]vm.Owner{lookalike: dep("cmp_web"), gone: dep("gone"), desk: cmp("desk"), ghost: cmp("ghost"), oldCmp: {}, oldDep: {}} {
		if _, err := d.Start(ctx, vm.Spec{Name: name, Owner: o, Command: "exec sleep 600"}); err != nil {
			t.Fatal(err)
		}
	}
	// An older berth recorded no owner.
	for _, id := range []string{oldCmp, oldDep} {
		path := filepath.Join(dir, id, "state.json")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var st map[string]any
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		if _, ok := st["owner"]; !ok {
			t.Fatalf("%s: the driver recorded no owner: %s", id, b)
		}
		delete(st, "owner")
		if b, err = json.Marshal(st); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// The restarted berth: one inventory, the fleet and (standing in for
	// package computer) a claimant of Computers' sandboxes.
	inv := inventory.New(map[string]vm.Driver{"process": d}, inventory.Options{
		Expect: []vm.OwnerKind{vm.OwnerDeployment, vm.OwnerComputer}, Grace: time.Millisecond, StopGrace: time.Second,
	})
	if err := inv.List(ctx); err != nil {
		t.Fatal(err)
	}
	m := New(Options{Driver: d, Inventory: inv, Tick: time.Hour})
	pools := map[string]*Pool{}
	for _, id := range []string{"cmp_web", "desk", "old"} {
		pools[id] = m.Ensure(Config{
			Deployment: id, Driver: "process", Key: "k", Backends: newDataPlane(),
			Template: vm.Spec{Command: "exec sleep 600"},
			Policy:   autoscale.Policy{Max: 1, Target: 1, ColdStartTimeout: time.Minute},
		})
	}
	handed := inv.Register(vm.OwnerComputer, func(f inventory.Found) bool { return f.Instance.ID == desk || f.Instance.ID == oldCmp })
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if err := inv.Run(ctx); err != nil { // returns after the sweep
		t.Fatal(err)
	}

	var got []string
	for _, f := range handed {
		got = append(got, f.Instance.ID)
		if f.Instance.ID == oldCmp && f.Instance.Owner != cmp("old") {
			t.Errorf("%s migrated to owner %v, want %v", oldCmp, f.Instance.Owner, cmp("old"))
		}
	}
	slices.Sort(got)
	if want := sortedIDs(desk, ghost, oldCmp); !slices.Equal(got, want) {
		t.Errorf("the Computers were handed %v, want %v", got, want)
	}
	tracked := func(p *Pool) []string {
		var ids []string
		for _, r := range p.Status().Replicas {
			ids = append(ids, r.ID)
		}
		return ids
	}
	waitUntil(t, "the pools to adopt their replicas", func() bool {
		return slices.Equal(tracked(pools["cmp_web"]), []string{lookalike}) && slices.Equal(tracked(pools["old"]), []string{oldDep})
	})
	if ids := tracked(pools["desk"]); len(ids) != 0 {
		t.Errorf("deployment desk's pool tracks %v: a Computer's sandbox", ids)
	}
	insts, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, in := range insts {
		left = append(left, in.ID)
	}
	slices.Sort(left)
	if want := sortedIDs(lookalike, desk, oldCmp, oldDep); !slices.Equal(left, want) {
		t.Errorf("replicas after the sweep: %v, want %v", left, want)
	}
}

func sortedIDs(ids ...string) []string { return slices.Sorted(slices.Values(ids)) }
