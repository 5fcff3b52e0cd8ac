package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// updateKeys is a read-modify-write of several keys, in one transaction
// per maxTxnOps keys that commits only if none of its keys changed since
// it was read (and otherwise decides again on what the other writer
// left). decide sees key i's current value, never nil: a key not stored
// is skipped (its record was deleted meanwhile) and guarded to stay
// absent. keys must be distinct.
func (s *Store) updateKeys(ctx context.Context, keys []string, what string, decide func(i int, cur []byte) ([]byte, error)) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	for start := 0; start < len(keys); start += maxTxnOps {
		part := keys[start:min(start+maxTxnOps, len(keys))]
		gets := make([]clientv3.Op, len(part))
		for i, k := range part {
			gets[i] = clientv3.OpGet(k)
		}
		r, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: read %s: %w", what, err)
		}
		for {
			var (
				cmps []clientv3.Cmp
				puts []clientv3.Op
			)
			for i, k := range part {
				kv := first(r.Responses[i].GetResponseRange().Kvs)
				if kv == nil {
					cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", 0))
					continue
				}
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision))
				val, err := decide(start+i, kv.Value)
				if err != nil {
					return err
				}
				puts = append(puts, clientv3.OpPut(k, string(val)))
			}
			if len(puts) == 0 {
				break
			}
			t, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Else(gets...).Commit()
			if err != nil {
				return fmt.Errorf("etcdstore: write %s: %w", what, err)
			}
			if t.Succeeded {
				break
			}
			r = t
		}
	}
	return nil
}

// updateRecords is updateKeys over the records of kind named by the ids
// in changes, in id order: each stored one is decoded into a T, changed
// by apply with its id's entry and stored again; an id not stored is
// skipped. noun names one record in errors, what all of them.
func updateRecords[T, V any](ctx context.Context, s *Store, kind, noun, what string, changes map[string]V, apply func(x *T, v V)) error {
	ids := slices.Sorted(maps.Keys(changes))
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.key(kind, id)
	}
	return s.updateKeys(ctx, keys, what, func(i int, cur []byte) ([]byte, error) {
		var x T
		if err := json.Unmarshal(cur, &x); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt %s %q: %w", noun, ids[i], err)
		}
		apply(&x, changes[ids[i]])
		return json.Marshal(x)
	})
}

// deleteKeys deletes keys, in one transaction per maxTxnOps keys. A key
// not stored is no error.
func (s *Store) deleteKeys(ctx context.Context, keys []string, what string) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	for _, part := range chunks(keys, maxTxnOps) {
		ops := make([]clientv3.Op, len(part))
		for i, k := range part {
			ops[i] = clientv3.OpDelete(k)
		}
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("etcdstore: delete %s: %w", what, err)
		}
	}
	return nil
}

// create puts val at key in one transaction unless the key exists; then
// it returns exists true and writes nothing.
func (s *Store) create(ctx context.Context, key, what string, val []byte) (exists bool, err error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	t, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("etcdstore: put %s: %w", what, err)
	}
	return !t.Succeeded, nil
}

// putIfDeployment puts val at key in one transaction if deployment dep
// exists; found is false (and nothing written) when it does not.
func (s *Store) putIfDeployment(ctx context.Context, dep, key, what string, val []byte) (found bool, err error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	t, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.key("deployments", dep)), ">", 0)).
		Then(clientv3.OpPut(key, string(val))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("etcdstore: put %s: %w", what, err)
	}
	return t.Succeeded, nil
}

// put writes val at key in one transaction.
func (s *Store) put(ctx context.Context, key, what string, val []byte) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).Then(clientv3.OpPut(key, string(val))).Commit(); err != nil {
		return fmt.Errorf("etcdstore: put %s: %w", what, err)
	}
	return nil
}
