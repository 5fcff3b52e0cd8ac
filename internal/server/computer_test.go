package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// TestComputerSurvivesRestart: the server runs Computers on the fleet's
// drivers; a restart of berth (the inventory's orphan sweep included) re-adopts a
// running Computer's sandbox instead of destroying it.
func TestComputerSurvivesRestart(t *testing.T) {
	skipShort(t, "waits out the inventory's 10 s orphan grace; computer and inventory unit tests cover adoption")
	dir := t.TempDir()
	h := start(t, dir)
	ctx := context.Background()
	if _, err := h.s.computers.Create(ctx, computer.CreateRequest{ID: "desk", Start: true}); err != nil {
		t.Fatal(err)
	}
	c, release, err := h.s.computers.Use(ctx, "desk")
	if err != nil {
		t.Fatal(err)
	}
	before, err := c.Info(ctx)
	if err == nil {
		_, err = c.Exec(ctx, agent.ExecRequest{Command: "echo kept > note.txt"})
	}
	release()
	if err != nil {
		t.Fatal(err)
	}
	h.stop()

	h2 := start(t, dir)
	got, err := h2.s.computers.Get(ctx, "desk")
	if err != nil || got.State.State != computer.StateRunning {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	c2, release2, err := h2.s.computers.Use(ctx, "desk")
	if err != nil {
		t.Fatal(err)
	}
	after, err := c2.Info(ctx)
	if err != nil || after.PID != before.PID {
		t.Errorf("agent after restart: %+v, %v; want pid %d", after, err, before.PID)
	}
	res, err := c2.Exec(ctx, agent.ExecRequest{Command: "cat note.txt"})
	if err != nil || res.Stdout != "kept\n" {
		t.Errorf("note after restart: %q, %v", res.Stdout, err)
	}
	release2()
	// The inventory's sweep of orphans (after its grace) must leave the
	// sandbox alone.
	select {
	case <-h2.s.inventory.Swept():
	case <-time.After(time.Minute):
		t.Fatal("the inventory did not sweep")
	}
	h2.stop()
	d, err := process.New(process.Options{Dir: filepath.Join(dir, "replicas")})
	if err != nil {
		t.Fatal(err)
	}
	insts, err := d.List(ctx)
	if err != nil || len(insts) != 1 || insts[0].State != vm.StateRunning || insts[0].Owner != (vm.Owner{Kind: vm.OwnerComputer, ID: "desk"}) {
		t.Errorf("replicas after the second berth: %+v, %v", insts, err)
	}
}
