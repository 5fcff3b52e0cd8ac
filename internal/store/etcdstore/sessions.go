package etcdstore

import (
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

// Sessions returns every stored session, sorted by id.
func (s *Store) Sessions(ctx context.Context) ([]store.Session, error) {
	xs, err := list[store.Session](ctx, s, "sessions", "sessions")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(xs, func(a, b store.Session) int { return cmp.Compare(a.ID, b.ID) })
	return xs, nil
}

func normSession(x store.Session) store.Session {
	x.CreatedAt, x.ExpiresAt, x.LastSeenAt = norm(x.CreatedAt), norm(x.ExpiresAt), norm(x.LastSeenAt)
	return x
}

// PutSession inserts a session or, for an id already stored, replaces
// only its token id, last-seen and expiry times (the rest stays as first
// stored), in one transaction. Only the secret's hash is stored, as
// store.Session carries nothing else; as in the SQLite store, the hash is
// unique: inserting a session whose hash another one has is an error,
// enforced by an index key written in the same transaction.
func (s *Store) PutSession(ctx context.Context, x store.Session) error {
	if x.ID == "" {
		return errors.New("etcdstore: a session needs an id")
	}
	x = normSession(x)
	key, hashKey := s.key("sessions", x.ID), s.key("sessionhashes", x.SecretSHA256)
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("etcdstore: read session %q: %w", x.ID, err)
	}
	kv := first(r.Kvs)
	for {
		var t *clientv3.TxnResponse
		if kv == nil {
			body, err := json.Marshal(x)
			if err != nil {
				return fmt.Errorf("etcdstore: session %q: %w", x.ID, err)
			}
			idBody, _ := json.Marshal(x.ID)
			t, err = s.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", 0), clientv3.Compare(clientv3.CreateRevision(hashKey), "=", 0)).
				Then(clientv3.OpPut(key, string(body)), clientv3.OpPut(hashKey, string(idBody))).
				Else(clientv3.OpGet(key)).
				Commit()
			if err != nil {
				return fmt.Errorf("etcdstore: put session %q: %w", x.ID, err)
			}
			if !t.Succeeded && len(t.Responses[0].GetResponseRange().Kvs) == 0 {
				return fmt.Errorf("etcdstore: put session %q: secret_sha256 is another session's", x.ID)
			}
		} else {
			var out store.Session
			if err := json.Unmarshal(kv.Value, &out); err != nil {
				return fmt.Errorf("etcdstore: corrupt session %q: %w", x.ID, err)
			}
			out.TokenID, out.LastSeenAt, out.ExpiresAt = x.TokenID, x.LastSeenAt, x.ExpiresAt
			body, err := json.Marshal(out)
			if err != nil {
				return fmt.Errorf("etcdstore: session %q: %w", x.ID, err)
			}
			t, err = s.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
				Then(clientv3.OpPut(key, string(body))).
				Else(clientv3.OpGet(key)).
				Commit()
			if err != nil {
				return fmt.Errorf("etcdstore: put session %q: %w", x.ID, err)
			}
		}
		if t.Succeeded {
			return nil
		}
		kv = first(t.Responses[0].GetResponseRange().Kvs)
	}
}

// TouchSessions records when sessions were last seen, a read-modify-write
// in one transaction per 128 sessions that commits only if none of them
// changed since it was read. An id not stored is skipped.
func (s *Store) TouchSessions(ctx context.Context, seen map[string]time.Time) error {
	return updateRecords(ctx, s, "sessions", "session", "session last-seen times", seen, func(x *store.Session, at time.Time) {
		x.LastSeenAt = norm(at)
	})
}

// sessionsPerTxn leaves room in a transaction for each session's hash
// index key.
const sessionsPerTxn = maxTxnOps / 2

// DeleteSessions removes sessions by id, with their hash index keys, in
// one transaction per 64 ids that commits only if none of those sessions
// changed since it was read. An id not stored is no error.
func (s *Store) DeleteSessions(ctx context.Context, ids []string) error {
	var keys []string
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			keys = append(keys, s.key("sessions", id))
		}
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	for _, part := range chunks(keys, sessionsPerTxn) {
		gets := make([]clientv3.Op, len(part))
		for i, k := range part {
			gets[i] = clientv3.OpGet(k)
		}
		r, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: read sessions: %w", err)
		}
		for {
			var (
				cmps []clientv3.Cmp
				dels []clientv3.Op
			)
			for i, k := range part {
				kv := first(r.Responses[i].GetResponseRange().Kvs)
				if kv == nil {
					continue
				}
				var x store.Session
				if err := json.Unmarshal(kv.Value, &x); err != nil {
					return fmt.Errorf("etcdstore: corrupt session at %s: %w", k, err)
				}
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision))
				dels = append(dels, clientv3.OpDelete(k), clientv3.OpDelete(s.key("sessionhashes", x.SecretSHA256)))
			}
			if len(dels) == 0 {
				break
			}
			t, err := s.cli.Txn(ctx).If(cmps...).Then(dels...).Else(gets...).Commit()
			if err != nil {
				return fmt.Errorf("etcdstore: delete sessions: %w", err)
			}
			if t.Succeeded {
				break
			}
			r = t
		}
	}
	return nil
}
