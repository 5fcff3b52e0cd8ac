package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/berth-dev/berth/internal/store"
)

// Sync brings deployments ids (every deployment when none are given) in
// line with the store, without writing it: on a store several hosts share
// (issue 19), another host's writes reach this one's registry here.
//
//   - A stored deployment this registry does not hold, or whose stored
//     Revision or creation time is not its entry's (a deployment deleted
//     and created again starts at revision 1 again), is made as Load makes it (decoded,
//     normalized, validated, built) and activated, reusing the previous
//     entry's pool as Put does: an unchanged set of static backends keeps
//     its connections, health and drains, and a vm deployment whose
//     template changed rolls out as after a Put.
//   - An entry with the stored Revision and creation time is left alone: this host's own
//     writes, which a shared store reports back, change nothing.
//   - An entry whose deployment is no longer stored is removed as Delete
//     removes it (its replica pool stopped, Options.Forget called), without
//     the store write.
//   - The static upstreams of the deployments it (re)built take the drain
//     state the store has for them.
//
// The routing table is published once, when anything changed. A stored
// deployment that no longer makes an entry (it does not validate here) is
// logged and its previous entry, if any, kept. The store is read under the
// registry's lock, so a Sync never undoes a write of this host that comes
// between the read and the change.
func (r *Registry) Sync(ctx context.Context, ids ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rows []store.Deployment
	gone := map[string]bool{}
	if len(ids) == 0 {
		all, err := r.o.Store.Deployments(ctx)
		if err != nil {
			return fmt.Errorf("sync deployments: %w", err)
		}
		rows = all
		stored := make(map[string]bool, len(all))
		for _, row := range all {
			stored[row.ID] = true
		}
		for id := range r.deps {
			if !stored[id] {
				gone[id] = true
			}
		}
	} else {
		for _, id := range ids {
			row, err := r.o.Store.Deployment(ctx, id)
			switch {
			case errors.Is(err, store.ErrNotFound):
				gone[id] = true
			case err != nil:
				return fmt.Errorf("sync deployment %q: %w", id, err)
			default:
				rows = append(rows, row)
			}
		}
	}
	type replaced struct{ prev, e *Entry }
	var (
		changed []string
		built   = map[string]bool{}
		repl    []replaced
		retired = map[string]*Entry{}
	)
	for _, row := range rows {
		prev := r.deps[row.ID]
		if prev != nil && prev.Revision == row.Revision && prev.CreatedAt.Equal(row.CreatedAt) || built[row.ID] {
			continue
		}
		e, err := r.fromRowLocked(ctx, row, prev)
		if err != nil {
			r.o.Log.Error("could not sync a stored deployment; this host keeps what it had", "id", row.ID, "revision", row.Revision, "err", err)
			continue
		}
		r.installLocked(e)
		changed, built[row.ID] = append(changed, row.ID), true
		repl = append(repl, replaced{prev, e})
	}
	for _, id := range slices.Sorted(maps.Keys(gone)) {
		if e := r.unlinkLocked(id); e != nil {
			changed, retired[id] = append(changed, id), e
		}
	}
	if len(changed) == 0 {
		return nil
	}
	var drainErr error
	if len(built) > 0 {
		drains, err := r.o.Store.UpstreamDrains(ctx)
		if err != nil {
			drainErr = fmt.Errorf("sync upstream drains: %w", err)
		} else {
			r.applyDrainsLocked(drains, built)
		}
	}
	r.publishLocked(changed...)
	for _, x := range repl {
		r.replacedLocked(ctx, x.prev, x.e)
	}
	for _, id := range slices.Sorted(maps.Keys(retired)) {
		r.retireLocked(ctx, id, retired[id])
	}
	return drainErr
}

// SyncDrains brings the drain state of every static upstream in line with
// the stored upstream drains (another host's drains and uncordons, on a
// shared store), without writing the store.
func (r *Registry) SyncDrains(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	drains, err := r.o.Store.UpstreamDrains(ctx)
	if err != nil {
		return fmt.Errorf("sync upstream drains: %w", err)
	}
	r.applyDrainsLocked(drains, nil)
	return nil
}
