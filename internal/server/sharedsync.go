package server

import (
	"context"
	"time"

	"github.com/berth-dev/berth/internal/store"
)

// sharedStore is a store several hosts share (the etcd store, issue 19):
// WatchShared reports every write and delete of a shared record
// (store.SharedKinds) by any host, this one included, until ctx ends; a
// Change with Kind "" says changes may have been missed. The SQLite store
// is not one: one host, and nothing changes behind its back.
type sharedStore interface {
	WatchShared(ctx context.Context, fn func([]store.Change)) error
}

// What each shared kind's sync does on a host (syncShared), or why none is
// needed:
//
//   - deployments: registry.Sync of the ids changed (all on Kind ""):
//     rebuilt as Load builds them, routed, vm pools rolled out or stopped,
//     a deployment gone removed as Delete removes it (Options.Forget:
//     metrics, limits, sessions, job). The registry holds them in memory.
//   - upstreamdrains: registry.SyncDrains: the static upstreams' drain
//     state is the pools' in memory.
//   - namespaces: nothing of theirs is held (namespaces.Store reads the
//     store on every use: listing, the route ownership checks' domains);
//     but a deleted namespace takes its auth providers with it, so the
//     gates' provider snapshot is reloaded, as for authproviders.
//   - authproviders: gate.Manager.ReloadProviders: the gates resolve
//     provider_ref from an in-memory snapshot.
//   - tokens: auth.Tokens.Reload: every app-token is held in memory
//     (verification reads no store).
//   - secrets: nothing: secrets.Store reads the store on every use (env
//     resolution, gates' client secrets); a JWT gate's HMAC key is
//     re-resolved every minute, as after a local rotation.
//   - registrycredentials: nothing: read from the store at each pull.
//   - guardrules: guard.Guard.Reload: the rules in force are a compiled
//     snapshot in memory; other hosts' hits are added to the counts.
//   - ratelimits: ratelimit.Manager.Reload: the limiters are in memory;
//     each deployment whose limit changed is recompiled (Refresh).
//   - sessions, sessionhashes: sessions.Manager.Reload: every live session
//     is in memory (the gate's lookup reads no store).
//   - webhooks: notify.Notifier.Reload: the webhooks and their senders
//     run in memory.
//   - obsalerts: obs.Handler.Reload: the evaluator's rules are in memory.
//
// Each reload takes the package's own write lock across its store read,
// so it never undoes a write of this host's that comes in between.

// syncShared brings what this host holds in memory up to date with the
// changes a shared store reported. Changes of one kind are coalesced:
// deployments by id, every other kind reloads its whole set (they are
// small). Errors are logged, never fatal: the next change (or Kind "")
// syncs again.
func (s *Server) syncShared(ctx context.Context, changes []store.Change) {
	kinds := map[string]bool{}
	all := false
	var ids []string
	seen := map[string]bool{}
	for _, c := range changes {
		switch c.Kind {
		case "":
			all = true
		case store.KindDeployments:
			if len(c.Key) > 0 && !seen[c.Key[0]] {
				seen[c.Key[0]] = true
				ids = append(ids, c.Key[0])
			}
		}
		kinds[c.Kind] = true
	}
	want := func(ks ...string) bool {
		if all {
			return true
		}
		for _, k := range ks {
			if kinds[k] {
				return true
			}
		}
		return false
	}
	fail := func(what string, err error) {
		if err != nil {
			s.log.Error("could not bring a shared record up to date from the store; this host keeps what it had", "kind", what, "err", err)
		}
	}
	// Providers first: a deployment synced below may inherit one.
	if want(store.KindNamespaces, store.KindAuthProviders) && s.gates != nil {
		fail(store.KindAuthProviders, s.gates.ReloadProviders(ctx))
	}
	if want(store.KindTokens) && s.tokens != nil {
		fail(store.KindTokens, s.tokens.Reload(ctx))
	}
	if want(store.KindGuardRules) && s.guard != nil {
		fail(store.KindGuardRules, s.guard.Reload(ctx))
	}
	switch {
	case all:
		fail(store.KindDeployments, s.registry.Sync(ctx))
	case len(ids) > 0:
		fail(store.KindDeployments, s.registry.Sync(ctx, ids...))
	}
	if want(store.KindUpstreamDrains) {
		fail(store.KindUpstreamDrains, s.registry.SyncDrains(ctx))
	}
	if want(store.KindRateLimits) && s.limits != nil {
		fail(store.KindRateLimits, s.limits.Reload(ctx))
	}
	if want(store.KindSessions, store.KindSessionHashes) && s.sessions != nil {
		fail(store.KindSessions, s.sessions.Reload(ctx))
	}
	if want(store.KindWebhooks) && s.notifier != nil {
		fail(store.KindWebhooks, s.notifier.Reload(ctx))
	}
	if want(store.KindObsAlerts) && s.obs != nil {
		fail(store.KindObsAlerts, s.obs.Reload(ctx))
	}
}

// runSharedSync watches a shared store until ctx ends, syncing each batch
// of changes (syncShared); a watch that fails is started again after a
// pause, with everything reloaded, since changes may have been missed
// meanwhile. Without a shared store it returns at once.
func (s *Server) runSharedSync(ctx context.Context) error {
	ss, ok := s.store.(sharedStore)
	if !ok {
		return nil
	}
	for {
		err := ss.WatchShared(ctx, func(cs []store.Change) { s.syncShared(ctx, cs) })
		if ctx.Err() != nil {
			return nil
		}
		s.log.Error("the shared store's watch stopped; starting it again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		s.syncShared(ctx, []store.Change{{Kind: ""}})
	}
}
