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

// usageRec is a usage interval (computerusage/<runtime id>); AckedAt is
// the observation last acknowledged, -1 none.
type usageRec struct {
	store.UsageInterval
	AckedAt int64
}

func (s *Store) usageKey(runtimeID string) string { return s.key("computerusage", runtimeID) }

func newUsage(u store.UsageInterval) usageRec {
	u.ObservedAt, u.Ended = u.StartedAt, false
	return usageRec{UsageInterval: u, AckedAt: -1}
}

// OpenUsage opens the interval of a runtime that started at startedAt. It
// is idempotent: an existing runtime is left as it is.
func (s *Store) OpenUsage(ctx context.Context, u store.UsageInterval) error {
	if u.RuntimeID == "" {
		return errors.New("etcdstore: usage: runtime id must not be empty")
	}
	k := s.usageKey(u.RuntimeID)
	put, err := putJSON(k, newUsage(u))
	if err != nil {
		return err
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(put).Commit(); err != nil {
		return fmt.Errorf("etcdstore: open usage %q: %w", u.RuntimeID, err)
	}
	return nil
}

// OpenComputerRuntime records that the runtime u of Computer u.ComputerID
// has started, in one transaction: it opens u's usage interval (as
// OpenUsage), applies fn to the Computer's record and appends facts to its
// log. An unknown Computer is an error wrapping store.ErrNotFound; an
// error from fn aborts everything and is returned as is (fn runs again
// when another writer got in between).
func (s *Store) OpenComputerRuntime(ctx context.Context, u store.UsageInterval, fn func(*store.Computer) error, facts ...store.NewComputerFact) (store.Computer, error) {
	if u.RuntimeID == "" {
		return store.Computer{}, errors.New("etcdstore: usage: runtime id must not be empty")
	}
	if len(facts) > maxFactsPerWrite {
		return store.Computer{}, fmt.Errorf("etcdstore: computer %q: at most %d facts per write, not %d", u.ComputerID, maxFactsPerWrite, len(facts))
	}
	var out store.Computer
	id := u.ComputerID
	k, uk := s.computerKey(id), s.usageKey(u.RuntimeID)
	reads := append([]clientv3.Op{clientv3.OpGet(k), clientv3.OpGet(uk)}, s.factReads(id, facts)...)
	err := s.rmw(ctx, fmt.Sprintf("runtime %q", u.RuntimeID), reads, func(_ context.Context, r *clientv3.TxnResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		ckv := kvAt(r, 0)
		c, err := decodeComputer(ckv, id)
		if err != nil {
			return nil, nil, err
		}
		cmps := []clientv3.Cmp{unchanged(k, ckv), sameKey(uk, kvAt(r, 1))}
		var ops []clientv3.Op
		if kvAt(r, 1) == nil {
			put, err := putJSON(uk, newUsage(u))
			if err != nil {
				return nil, nil, err
			}
			ops = append(ops, put)
		}
		if err := fn(&c); err != nil {
			return nil, nil, err
		}
		c.ID = id
		c.UpdatedAt = norm(s.now())
		put, err := putJSON(k, storedComputer(c))
		if err != nil {
			return nil, nil, err
		}
		fc, fo, _, err := s.factWrites(id, facts, r, 2)
		if err != nil {
			return nil, nil, err
		}
		out = c
		return append(cmps, fc...), append(append(ops, put), fo...), nil
	})
	return out, err
}

// EndUsage closes a runtime's interval at endedAt (never before its last
// checkpoint), once. Ending an ended or unknown runtime does nothing.
func (s *Store) EndUsage(ctx context.Context, runtimeID string, endedAt int64) error {
	return s.update(ctx, s.usageKey(runtimeID), fmt.Sprintf("usage %q", runtimeID), func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, errSkip
		}
		var u usageRec
		if err := json.Unmarshal(cur, &u); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt usage %q: %w", runtimeID, err)
		}
		if u.Ended {
			return nil, errSkip
		}
		u.Ended, u.ObservedAt = true, max(u.ObservedAt, endedAt)
		return json.Marshal(u)
	})
}

func sortUsage(us []store.UsageInterval) {
	slices.SortFunc(us, func(a, b store.UsageInterval) int {
		return cmp.Or(cmp.Compare(a.StartedAt, b.StartedAt), cmp.Compare(a.RuntimeID, b.RuntimeID))
	})
}

// OpenUsages returns the intervals not yet ended, oldest first.
func (s *Store) OpenUsages(ctx context.Context) ([]store.UsageInterval, error) {
	us, err := list[usageRec](ctx, s, "computerusage", "usage")
	if err != nil {
		return nil, err
	}
	var out []store.UsageInterval
	for _, u := range us {
		if !u.Ended {
			out = append(out, u.UsageInterval)
		}
	}
	sortUsage(out)
	return out, nil
}

// usageWrite is a guarded write of one usage key: put (body) or delete.
type usageWrite struct {
	cmp clientv3.Cmp
	op  clientv3.Op
}

// usageRMW reads every interval, lets change edit them (returning the
// writes, each guarded by its key's ModRevision) and commits the writes,
// all in one transaction when there are at most maxTxnOps of them, else in
// transactions of maxTxnOps (each whole or not at all). When a write's key
// changed meanwhile, it reads and decides again.
func (s *Store) usageRMW(ctx context.Context, what string, change func(us []usageRec, mods []int64) ([]usageWrite, error)) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
outer:
	for {
		r, err := s.cli.Get(ctx, s.dir("computerusage"), clientv3.WithPrefix())
		if err != nil {
			return fmt.Errorf("etcdstore: read usage: %w", err)
		}
		us := make([]usageRec, len(r.Kvs))
		mods := make([]int64, len(r.Kvs))
		for i, kv := range r.Kvs {
			if us[i], err = decodeKV[usageRec](kv, "usage"); err != nil {
				return err
			}
			mods[i] = kv.ModRevision
		}
		ws, err := change(us, mods)
		if err != nil {
			return err
		}
		for _, part := range chunks(ws, maxTxnOps) {
			cmps := make([]clientv3.Cmp, len(part))
			ops := make([]clientv3.Op, len(part))
			for i, w := range part {
				cmps[i], ops[i] = w.cmp, w.op
			}
			t, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
			if err != nil {
				return fmt.Errorf("etcdstore: %s: %w", what, err)
			}
			if !t.Succeeded {
				continue outer
			}
		}
		return nil
	}
}

func (s *Store) usagePut(u usageRec, mod int64) (usageWrite, error) {
	k := s.usageKey(u.RuntimeID)
	put, err := putJSON(k, u)
	if err != nil {
		return usageWrite{}, err
	}
	return usageWrite{cmp: clientv3.Compare(clientv3.ModRevision(k), "=", mod), op: put}, nil
}

// PendingUsage advances the checkpoint of every open interval whose last
// checkpoint is at least checkpoint old to now, then returns up to limit
// intervals whose current observation has not been acknowledged, oldest
// first (a negative limit: all). Within one checkpoint, repeated calls
// return the same intervals with the same observations.
func (s *Store) PendingUsage(ctx context.Context, now int64, checkpoint time.Duration, limit int) ([]store.UsageInterval, error) {
	var out []store.UsageInterval
	err := s.usageRMW(ctx, "checkpoint usage", func(us []usageRec, mods []int64) ([]usageWrite, error) {
		out = nil
		var ws []usageWrite
		for i := range us {
			u := &us[i]
			if !u.Ended && now-u.ObservedAt >= checkpoint.Milliseconds() {
				u.ObservedAt = now
				w, err := s.usagePut(*u, mods[i])
				if err != nil {
					return nil, err
				}
				ws = append(ws, w)
			}
			if u.ObservedAt > u.AckedAt {
				out = append(out, u.UsageInterval)
			}
		}
		sortUsage(out)
		if limit >= 0 && len(out) > limit {
			out = out[:limit]
		}
		return ws, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AcknowledgeUsage records deliveries and deletes the intervals that have
// ended and whose end was delivered. It is idempotent, and an older
// observation never undoes a newer acknowledgement.
func (s *Store) AcknowledgeUsage(ctx context.Context, acks []store.UsageAck) error {
	return s.usageRMW(ctx, "acknowledge usage", func(us []usageRec, mods []int64) ([]usageWrite, error) {
		byID := map[string]int{}
		for i, u := range us {
			byID[u.RuntimeID] = i
		}
		changed := make([]bool, len(us))
		for _, a := range acks {
			i, ok := byID[a.RuntimeID]
			if !ok {
				continue
			}
			if u := &us[i]; a.ObservedAt <= u.ObservedAt && a.ObservedAt > u.AckedAt {
				u.AckedAt = a.ObservedAt
				changed[i] = true
			}
		}
		var ws []usageWrite
		for i, u := range us {
			k := s.usageKey(u.RuntimeID)
			switch {
			case u.Ended && u.AckedAt >= u.ObservedAt:
				ws = append(ws, usageWrite{cmp: clientv3.Compare(clientv3.ModRevision(k), "=", mods[i]), op: clientv3.OpDelete(k)})
			case changed[i]:
				w, err := s.usagePut(u, mods[i])
				if err != nil {
					return nil, err
				}
				ws = append(ws, w)
			}
		}
		return ws, nil
	})
}

// RequestRecycle records a recycle request (idempotent: a runtime already
// requested keeps its first request).
func (s *Store) RequestRecycle(ctx context.Context, r store.Recycle) error {
	if r.RuntimeID == "" {
		return errors.New("etcdstore: recycle: runtime id must not be empty")
	}
	k := s.key("computerrecycles", r.RuntimeID)
	put, err := putJSON(k, r)
	if err != nil {
		return err
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(put).Commit(); err != nil {
		return fmt.Errorf("etcdstore: request recycle %q: %w", r.RuntimeID, err)
	}
	return nil
}

// FinishRecycle removes a recycle request (idempotent).
func (s *Store) FinishRecycle(ctx context.Context, runtimeID string) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).Then(clientv3.OpDelete(s.key("computerrecycles", runtimeID))).Commit(); err != nil {
		return fmt.Errorf("etcdstore: finish recycle %q: %w", runtimeID, err)
	}
	return nil
}

// PendingRecycles returns the recycle requests, oldest first (ties by
// runtime id).
func (s *Store) PendingRecycles(ctx context.Context) ([]store.Recycle, error) {
	rs, err := list[store.Recycle](ctx, s, "computerrecycles", "recycles")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rs, func(a, b store.Recycle) int {
		return cmp.Or(cmp.Compare(a.RequestedAt, b.RequestedAt), cmp.Compare(a.RuntimeID, b.RuntimeID))
	})
	return rs, nil
}
