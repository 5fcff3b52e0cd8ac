package etcdstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// Grants returns every stored grant that expires at or after notBefore
// (Unix milliseconds), sorted by ID.
func (s *Store) Grants(ctx context.Context, notBefore int64) ([]store.Grant, error) {
	all, err := list[store.Grant](ctx, s, "grants", "grants")
	if err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(all, func(g store.Grant) bool { return g.ExpiresAt < notBefore })
	slices.SortFunc(out, func(a, b store.Grant) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// PutGrant records a newly issued grant, in one transaction. An existing
// id is an error wrapping store.ErrConflict, never an overwrite.
func (s *Store) PutGrant(ctx context.Context, g store.Grant) error {
	if g.ID == "" || g.ComputerID == "" || !json.Valid(g.Payload) {
		return errors.New("etcdstore: a grant needs an id, a Computer id and a JSON payload")
	}
	g.Payload, g.IssuedAt, g.RevokedAt = bytes.Clone(g.Payload), norm(g.IssuedAt), norm(g.RevokedAt)
	body, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("etcdstore: grant %q: %w", g.ID, err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	k := s.key("grants", g.ID)
	t, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(body))).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: put grant %q: %w", g.ID, err)
	}
	if !t.Succeeded {
		return fmt.Errorf("%w: grant %q exists", store.ErrConflict, g.ID)
	}
	return nil
}

// RevokeGrants marks the grants with the given ids revoked at at, keeping
// the earliest revocation time of one already revoked. With no ids it
// revokes every standing grant of computerID instead. It returns the ids it
// marked (sorted), and an error wrapping store.ErrNotFound when ids were
// given and none of them is a grant of computerID. Each transaction
// commits up to 128 grants and only if the grants it read are unchanged
// (with no ids: if no grant at all changed since the read, so one issued
// meanwhile is not missed).
func (s *Store) RevokeGrants(ctx context.Context, computerID string, at time.Time, ids ...string) ([]string, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	at = norm(at)
	var marked []string
	if len(ids) == 0 {
		dir := s.dir("grants")
		for {
			r, err := s.cli.Get(ctx, dir, clientv3.WithPrefix())
			if err != nil {
				return nil, fmt.Errorf("etcdstore: revoke grants of %q: %w", computerID, err)
			}
			var puts []clientv3.Op
			var ids []string
			for _, kv := range r.Kvs {
				var g store.Grant
				if err := json.Unmarshal(kv.Value, &g); err != nil {
					return nil, fmt.Errorf("etcdstore: corrupt grant at %s: %w", kv.Key, err)
				}
				if g.ComputerID != computerID || !g.RevokedAt.IsZero() || len(puts) == maxTxnOps {
					continue
				}
				g.RevokedAt = at
				body, err := json.Marshal(g)
				if err != nil {
					return nil, err
				}
				puts = append(puts, clientv3.OpPut(string(kv.Key), string(body)))
				ids = append(ids, g.ID)
			}
			if len(puts) == 0 {
				slices.Sort(marked)
				return marked, nil
			}
			t, err := s.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(dir), "<", r.Header.Revision+1).WithPrefix()).
				Then(puts...).
				Commit()
			if err != nil {
				return nil, fmt.Errorf("etcdstore: revoke grants of %q: %w", computerID, err)
			}
			if t.Succeeded {
				marked = append(marked, ids...)
			}
		}
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	for _, part := range chunks(ids, maxTxnOps) {
		gets := make([]clientv3.Op, len(part))
		for i, id := range part {
			gets[i] = clientv3.OpGet(s.key("grants", id))
		}
		r, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return nil, fmt.Errorf("etcdstore: revoke grants of %q: %w", computerID, err)
		}
		for {
			var (
				cmps  []clientv3.Cmp
				puts  []clientv3.Op
				these []string
			)
			for i := range part {
				kv := first(r.Responses[i].GetResponseRange().Kvs)
				if kv == nil {
					continue
				}
				var g store.Grant
				if err := json.Unmarshal(kv.Value, &g); err != nil {
					return nil, fmt.Errorf("etcdstore: corrupt grant at %s: %w", kv.Key, err)
				}
				if g.ComputerID != computerID {
					continue
				}
				these = append(these, g.ID)
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
				if g.RevokedAt.IsZero() {
					g.RevokedAt = at
					body, err := json.Marshal(g)
					if err != nil {
						return nil, err
					}
					puts = append(puts, clientv3.OpPut(string(kv.Key), string(body)))
				}
			}
			if len(puts) == 0 { // nothing to write: already revoked, or none of them
				marked = append(marked, these...)
				break
			}
			t, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Else(gets...).Commit()
			if err != nil {
				return nil, fmt.Errorf("etcdstore: revoke grants of %q: %w", computerID, err)
			}
			if t.Succeeded {
				marked = append(marked, these...)
				break
			}
			r = t
		}
	}
	if len(marked) == 0 {
		return nil, fmt.Errorf("%w: no grant %q of Computer %q", store.ErrNotFound, ids[0], computerID)
	}
	return marked, nil
}

// PruneGrants deletes the grants that expired before before (Unix
// milliseconds), in one transaction per 128, and returns how many it
// deleted.
func (s *Store) PruneGrants(ctx context.Context, before int64) (int64, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Get(ctx, s.dir("grants"), clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcdstore: prune grants: %w", err)
	}
	var dels []clientv3.Op
	for _, kv := range r.Kvs {
		var g store.Grant
		if err := json.Unmarshal(kv.Value, &g); err != nil {
			return 0, fmt.Errorf("etcdstore: corrupt grant at %s: %w", kv.Key, err)
		}
		if g.ExpiresAt < before {
			dels = append(dels, clientv3.OpDelete(string(kv.Key)))
		}
	}
	var n int64
	for _, part := range chunks(dels, maxTxnOps) {
		t, err := s.cli.Txn(ctx).Then(part...).Commit()
		if err != nil {
			return n, fmt.Errorf("etcdstore: prune grants: %w", err)
		}
		for _, resp := range t.Responses {
			n += resp.GetResponseDeleteRange().Deleted
		}
	}
	return n, nil
}
