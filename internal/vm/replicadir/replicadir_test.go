package replicadir_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

type state struct {
	ID  string `json:"id"`
	PID int    `json:"pid"`
}

func newDir(t *testing.T) *replicadir.Dir[state] {
	return &replicadir.Dir[state]{
		Root: t.TempDir(), Driver: "test",
		ID:    func(st state) string { return st.ID },
		Empty: func(id, owner string) state { return state{ID: id} },
	}
}

// TestDir: ids berth does not give are unknown (never paths), a claimed
// replica is starting until released and cannot be claimed twice, a
// directory without a state file loads empty, and a corrupt state file is
// skipped by States but reported by Load.
func TestDir(t *testing.T) {
	d := newDir(t)
	for _, id := range []string{"../../etc", "berth-x-zz", "berth-a,b-000000000001", ""} {
		if _, err := d.Load(id); !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Load(%q) = %v, want ErrNotFound", id, err)
		}
	}
	a, b := vm.Name("app", 1), vm.Name("app", 2)
	release, err := d.Claim(a)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Starting(a) {
		t.Error("a claimed replica is not starting")
	}
	if _, err := d.Claim(a); err == nil {
		t.Error("a replica was claimed twice")
	}
	release()
	if d.Starting(a) {
		t.Error("a released replica is still starting")
	}
	if st, err := d.Load(a); err != nil || st != (state{ID: a}) {
		t.Errorf("Load of a replica without a state file = %+v, %v", st, err)
	}
	if err := replicadir.WriteState(d.Path(a), state{ID: a, PID: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Claim(b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Path(b, replicadir.StateFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load(b); err == nil || errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Load of a corrupt state = %v, want an error that is not ErrNotFound", err)
	}
	sts, err := d.States()
	if err != nil || len(sts) != 1 || sts[0] != (state{ID: a, PID: 7}) {
		t.Errorf("States = %+v, %v; want only %s with pid 7", sts, err, a)
	}
	// A state file naming another replica is not this one's.
	if err := replicadir.WriteState(d.Path(b), state{ID: a}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load(b); err == nil {
		t.Error("Load accepted a state file naming another replica")
	}
}

func TestLease(t *testing.T) {
	d := newDir(t)
	id := vm.Name("app", 3)
	if err := d.Renew(t.Context(), id, time.Now(), 0o600); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Renew of an unknown replica = %v, want ErrNotFound", err)
	}
	if _, err := d.Claim(id); err != nil {
		t.Fatal(err)
	}
	until := time.Unix(1_900_000_000, 0)
	if err := d.Renew(t.Context(), id, until, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, ok := replicadir.ReadLease(d.Path(id)); !ok || !got.Equal(until) {
		t.Errorf("ReadLease = %v, %v; want %v", got, ok, until)
	}
	if left, _ := filepath.Glob(d.Path(id, ".*tmp*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestCheckSpec(t *testing.T) {
	ok := vm.Spec{Name: vm.Name("app", 4), Deployment: "app"}
	if owner, size, err := replicadir.CheckSpec(ok); err != nil || owner != "app" || size != vm.Sizes[vm.DefaultSize] {
		t.Fatalf("CheckSpec(%+v) = %q, %+v, %v", ok, owner, size, err)
	}
	// The owner is recorded, not checked against the name.
	if _, _, err := replicadir.CheckSpec(vm.Spec{Name: ok.Name, Owner: vm.Owner{Kind: vm.OwnerComputer, ID: "desk"}}); err != nil {
		t.Errorf("CheckSpec with a Computer owner: %v", err)
	}
	for name, s := range map[string]vm.Spec{
		"bad name":   {Name: "../x"},
		"deployment": {Name: ok.Name, Deployment: "other"},
		"port":       {Name: ok.Name, Port: 70000},
		"size":       {Name: ok.Name, SizeClass: "huge"},
		"env name":   {Name: ok.Name, Env: map[string]string{"A=B": "x"}},
		"env value":  {Name: ok.Name, Env: map[string]string{"A": "x\x00"}},
		"command":    {Name: ok.Name, Command: "a\x00"},
		"hook":       {Name: ok.Name, SetupHooks: []string{"a\x00"}},
		"owner kind": {Name: ok.Name, Owner: vm.Owner{Kind: "job", ID: "x"}},
		"owner id":   {Name: ok.Name, Owner: vm.Owner{Kind: vm.OwnerComputer}},
	} {
		if _, _, err := replicadir.CheckSpec(s); err == nil {
			t.Errorf("%s: CheckSpec accepted %+v", name, s)
		}
	}
}
