package fleet

import (
	"context"

	"github.com/berth-dev/berth/internal/vm"
)

// Workspace is a deployment's workspace as the pool sees it (vm.workspace,
// vm.workspace_archive; package workspace behind it, wired by the server):
// a directory each replica is seeded with before it starts and, for a
// durable workspace, captured from once it has stopped. Config.Workspace
// nil means none.
type Workspace interface {
	// Seed readies the workspace of the replica spec describes (spec.Name
	// is set) and points spec at it (Spec.Workspace, or a writable
	// Spec.Mounts entry for another guest path). It may wait: a durable
	// workspace has one owner at a time, so a new replica waits for the
	// one it replaces to stop and be captured. An error fails the create
	// with that reason.
	Seed(ctx context.Context, spec *vm.Spec) error
	// Stopped is told that replica id has stopped for good (retired,
	// evicted, scaled down, failed, or its deployment deleted): its
	// workspace is captured and its directory removed. It outlasts ctx.
	Stopped(ctx context.Context, id string)
	// Suspended is told that replica id was suspended (idle_action:
	// retain): its workspace is captured and kept for its resume.
	Suspended(ctx context.Context, id string)
}

// workspaceStopped tells the pool's workspace, if any, that replica id has
// stopped for good.
func (p *Pool) workspaceStopped(ctx context.Context, id string) {
	if ws := p.cfg.Load().Workspace; ws != nil {
		ws.Stopped(context.WithoutCancel(ctx), id)
	}
}

// workspaceSuspended tells the pool's workspace, if any, that replica id
// was suspended.
func (p *Pool) workspaceSuspended(ctx context.Context, id string) {
	if ws := p.cfg.Load().Workspace; ws != nil {
		ws.Suspended(context.WithoutCancel(ctx), id)
	}
}
