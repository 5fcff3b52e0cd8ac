package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// GuardRules returns every stored guard rule, oldest first (ties by id),
// expired ones included.
func (s *Store) GuardRules(ctx context.Context) ([]store.GuardRule, error) {
	rs, err := list[store.GuardRule](ctx, s, "guardrules", "guard rules")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rs, func(a, b store.GuardRule) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return rs, nil
}

func normRule(x store.GuardRule) store.GuardRule {
	x.CreatedAt, x.ExpiresAt, x.LastHit = norm(x.CreatedAt), norm(x.ExpiresAt), norm(x.LastHit)
	return x
}

// PutGuardRule inserts a rule or replaces the one with its id, every field
// (hits and last hit included), in one transaction.
func (s *Store) PutGuardRule(ctx context.Context, x store.GuardRule) error {
	if x.ID == "" || x.CreatedAt.IsZero() {
		return errors.New("etcdstore: a guard rule needs an id and a creation time")
	}
	body, err := json.Marshal(normRule(x))
	if err != nil {
		return fmt.Errorf("etcdstore: guard rule %q: %w", x.ID, err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).Then(clientv3.OpPut(s.key("guardrules", x.ID), string(body))).Commit(); err != nil {
		return fmt.Errorf("etcdstore: put guard rule %q: %w", x.ID, err)
	}
	return nil
}

// DeleteGuardRules removes rules by id, in one transaction per 128 ids. An
// id not stored is no error.
func (s *Store) DeleteGuardRules(ctx context.Context, ids []string) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	for _, part := range chunks(ids, maxTxnOps) {
		ops := make([]clientv3.Op, len(part))
		for i, id := range part {
			ops[i] = clientv3.OpDelete(s.key("guardrules", id))
		}
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("etcdstore: delete guard rules: %w", err)
		}
	}
	return nil
}

// AddGuardHits adds each rule's Delta to its hits and moves its last hit
// forward to LastHit (never back), in one transaction per 128 rules that
// commits only if none of them changed since it was read. An id not
// stored is skipped: its rule was deleted meanwhile.
func (s *Store) AddGuardHits(ctx context.Context, hits map[string]store.GuardHits) error {
	return updateRecords(ctx, s, "guardrules", "guard rule", "guard hits", hits, func(x *store.GuardRule, h store.GuardHits) {
		x.Hits += h.Delta
		if !h.LastHit.IsZero() && (x.LastHit.IsZero() || x.LastHit.Before(h.LastHit)) {
			x.LastHit = norm(h.LastHit)
		}
	})
}
