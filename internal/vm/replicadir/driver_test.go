package replicadir_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// TestStart: a check error is prefixed and launches nothing; a launch that
// fails after its request was cancelled is still cleaned up, under a
// context that is not cancelled, and the claim is released; a launch that
// succeeds is described by instance; Reports lists and inspects through
// the same description.
func TestStart(t *testing.T) {
	d := newDir(t)
	id := vm.Name("app", 1)
	describe := func(st state) vm.Instance { return vm.Instance{ID: st.ID, PID: st.PID} }
	check := func(spec vm.Spec) (state, vm.Size, error) { return state{ID: spec.Name}, vm.Size{VCPUs: 1}, nil }
	launched := false
	launchOK := func(ctx context.Context, spec vm.Spec, st state, size vm.Size) (state, error) {
		launched = true
		st.PID = 42
		return st, replicadir.WriteState(d.Path(st.ID), st)
	}
	noCleanup := func(context.Context, state) error { t.Error("cleanup of a start that did not fail"); return nil }

	_, err := d.Start(t.Context(), vm.Spec{Name: id}, func(vm.Spec) (state, vm.Size, error) {
		return state{}, vm.Size{}, errors.New("bad port")
	}, launchOK, noCleanup, describe)
	if err == nil || err.Error() != `test: start "`+id+`": bad port` || launched {
		t.Errorf("Start with a failing check = %v (launched %v), want the prefixed check error and no launch", err, launched)
	}

	ctx, cancel := context.WithCancel(t.Context())
	var cleaned state
	var cleanErr error
	_, err = d.Start(ctx, vm.Spec{Name: id}, check, func(ctx context.Context, spec vm.Spec, st state, size vm.Size) (state, error) {
		cancel()
		st.PID = 7
		return st, errors.New("boom")
	}, func(ctx context.Context, st state) error {
		cleaned, cleanErr = st, ctx.Err()
		return nil
	}, describe)
	if err == nil || !strings.Contains(err.Error(), "test: start "+id+": boom") {
		t.Errorf("Start with a failing launch = %v, want the prefixed launch error", err)
	}
	if cleaned.PID != 7 || cleanErr != nil {
		t.Errorf("cleanup got %+v under a context with error %v; want the launch's state, uncancelled", cleaned, cleanErr)
	}
	if d.Starting(id) {
		t.Error("a failed Start left its claim")
	}

	id = vm.Name("app", 3)
	inst, err := d.Start(t.Context(), vm.Spec{Name: id}, check, launchOK, noCleanup, describe)
	if err != nil || inst.ID != id || inst.PID != 42 {
		t.Fatalf("Start = %+v, %v; want %s with pid 42", inst, err, id)
	}
	r := replicadir.Reports[state]{Dir: d, Instance: describe}
	if got, err := r.Inspect(t.Context(), id); err != nil || got != inst {
		t.Errorf("Inspect = %+v, %v; want %+v", got, err, inst)
	}
	if got, err := r.List(t.Context()); err != nil || len(got) != 2 || got[1] != inst {
		t.Errorf("List = %+v, %v; want [%+v]", got, err, inst)
	}
	if _, err := r.Inspect(t.Context(), vm.Name("app", 9)); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Inspect of an unknown replica = %v, want ErrNotFound", err)
	}
}

// TestStop: Stop loads the replica for destroy, prefixes destroy's error,
// and reports an unknown replica as not found without calling destroy.
func TestStop(t *testing.T) {
	d := newDir(t)
	id := vm.Name("app", 1)
	if err := os.Mkdir(d.Path(id), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := replicadir.WriteState(d.Path(id), state{ID: id, PID: 5}); err != nil {
		t.Fatal(err)
	}
	var cpu proc.CPUMeter
	var got state
	if err := d.Stop(t.Context(), id, &cpu, func(ctx context.Context, st state) error { got = st; return errors.New("stuck") }); err == nil || err.Error() != "test: stop "+id+": stuck" || got.PID != 5 {
		t.Errorf("Stop with a failing destroy = %v (destroy got %+v), want the prefixed error", err, got)
	}
	if err := d.Stop(t.Context(), id, &cpu, func(ctx context.Context, st state) error { return os.RemoveAll(d.Path(id)) }); err != nil {
		t.Errorf("Stop = %v", err)
	}
	if err := d.Stop(t.Context(), id, &cpu, func(context.Context, state) error { t.Error("destroy of a stopped replica"); return nil }); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("second Stop = %v, want ErrNotFound", err)
	}
}
