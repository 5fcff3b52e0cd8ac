package etcdstore

import (
	"context"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// Backoff of WatchShared between failed watches.
const (
	watchBackoffMin = 100 * time.Millisecond
	watchBackoffMax = 5 * time.Second
)

// WatchShared reports every write and delete of a record of a shared kind
// (store.SharedKinds) on the store, by any host this one included, in the
// order etcd committed them, until ctx ends (it then returns ctx.Err()).
// It starts right after the revision Open read at, so that nothing
// written since Open is missed. Fn gets the changes of one etcd watch
// response at a time, on WatchShared's goroutine: the next batch waits
// for it to return. Responses with no shared change (host records, the
// holder keys, the secret key check) are not reported.
//
// When changes may have been missed (the watch fell behind etcd's
// compaction, or etcd cancelled it: no leader, the connection lost), it
// watches again from etcd's current revision, and first hands fn a
// store.Change with Kind "": reload everything shared. Repeated failures
// back off, from 100 ms up to 5 s between tries.
//
// Each call watches on its own from Open's revision; one watch per Store
// is what a berth needs.
func (s *Store) WatchShared(ctx context.Context, fn func([]store.Change)) error {
	rev := s.openRev
	reload := false
	failures := 0
	for {
		if failures > 0 {
			d := watchBackoffMin << min(failures-1, 6)
			t := time.NewTimer(min(d, watchBackoffMax))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if reload {
			cur, err := s.currentRev(ctx)
			if err != nil {
				failures++
				continue
			}
			rev, reload = cur, false
			fn([]store.Change{{Kind: ""}})
		}
		if s.watch(ctx, rev, fn) {
			failures = 0
		} else {
			failures++
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		reload = true
	}
}

// watch watches the prefix from after rev, handing fn the shared changes
// of each response, until the watch ends (ctx's end, or an error: etcd
// cancelled it). healthy is whether it delivered any response before.
func (s *Store) watch(ctx context.Context, rev int64, fn func([]store.Change)) (healthy bool) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if resp.Err() != nil || resp.Canceled {
			return healthy
		}
		healthy = true
		if cs := s.sharedChanges(resp.Events); len(cs) > 0 {
			fn(cs)
		}
	}
	return healthy
}

// currentRev is etcd's current revision, read from one key's get.
func (s *Store) currentRev(ctx context.Context) (int64, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Get(ctx, s.key(kindSecretKeyCheck), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return r.Header.Revision, nil
}

// sharedChanges are the events of shared records among evs, as Changes.
func (s *Store) sharedChanges(evs []*clientv3.Event) []store.Change {
	var out []store.Change
	for _, ev := range evs {
		rest, ok := strings.CutPrefix(string(ev.Kv.Key), s.prefix)
		if !ok || strings.HasPrefix(rest, hostsDir) {
			continue
		}
		kind, tail, ok := strings.Cut(rest, "/")
		if !ok || kind == kindSecretKeyCheck || !shared[kind] {
			continue // the secret key check, a holder, a key of no kind
		}
		parts := strings.Split(tail, "/")
		for i, p := range parts {
			if u, err := url.PathUnescape(p); err == nil {
				parts[i] = u
			}
		}
		out = append(out, store.Change{Kind: kind, Key: parts, Deleted: ev.Type == mvccpb.DELETE})
	}
	return out
}
