package etcdstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// alertKey is an alert's key: its id zero-padded to 20 digits, so that key
// order is id order and "every id below n" is one key range.
func (s *Store) alertKey(id int64) string { return s.key("securityalerts", fmt.Sprintf("%020d", id)) }

// SecurityAlerts returns every stored alert in id order (oldest first) and
// the last id ever stored, which is at least the largest id returned, both
// read at one revision.
func (s *Store) SecurityAlerts(ctx context.Context) ([]store.SecurityAlert, int64, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.key("securityalertseq")),
		clientv3.OpGet(s.dir("securityalerts"), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("etcdstore: list security alerts: %w", err)
	}
	last, err := alertSeq(first(r.Responses[0].GetResponseRange().Kvs))
	if err != nil {
		return nil, 0, err
	}
	var out []store.SecurityAlert
	for _, kv := range r.Responses[1].GetResponseRange().Kvs {
		var a store.SecurityAlert
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			return nil, 0, fmt.Errorf("etcdstore: corrupt security alert at %s: %w", kv.Key, err)
		}
		last = max(last, a.ID)
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b store.SecurityAlert) int { return cmp.Compare(a.ID, b.ID) })
	return out, last, nil
}

func alertSeq(kv *mvccpb.KeyValue) (int64, error) {
	if kv == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcdstore: corrupt alert sequence %q: %w", kv.Value, err)
	}
	return n, nil
}

// alertsPerTxn leaves room in a transaction for the trim and the sequence.
const alertsPerTxn = maxTxnOps - 2

// PutSecurityAlerts inserts or replaces alerts by id (of two with one id
// the later counts), advances the id sequence past them, and then, if
// keep > 0, deletes all but the keep alerts with the largest ids: one
// transaction, which every call also uses to rewrite the sequence key and
// commits only if that key did not change since it was read, so
// concurrent calls apply one after the other. More than 126 alerts commit
// in several such transactions of at most 126 alerts each, in the order
// given, each one trimming: the alerts left are the same.
func (s *Store) PutSecurityAlerts(ctx context.Context, alerts []store.SecurityAlert, keep int) error {
	for _, a := range alerts {
		if a.ID <= 0 {
			return fmt.Errorf("etcdstore: security alert id %d: must be positive", a.ID)
		}
		if !json.Valid(a.JSON) {
			return fmt.Errorf("etcdstore: security alert %d: body is not valid JSON", a.ID)
		}
	}
	if len(alerts) == 0 && keep <= 0 {
		return nil
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	if len(alerts) == 0 {
		return s.putAlerts(ctx, nil, keep)
	}
	for _, part := range chunks(alerts, alertsPerTxn) {
		if err := s.putAlerts(ctx, part, keep); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) putAlerts(ctx context.Context, alerts []store.SecurityAlert, keep int) error {
	byID := map[int64]store.SecurityAlert{}
	var top int64
	for _, a := range alerts {
		a.JSON = bytes.Clone(a.JSON)
		byID[a.ID] = a
		top = max(top, a.ID)
	}
	seqKey, dir := s.key("securityalertseq"), s.dir("securityalerts")
	reads := []clientv3.Op{clientv3.OpGet(seqKey)}
	if keep > 0 {
		reads = append(reads, clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(keep))))
	}
	for {
		r, err := s.cli.Txn(ctx).Then(reads...).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: read security alerts: %w", err)
		}
		seqKV := first(r.Responses[0].GetResponseRange().Kvs)
		seq, err := alertSeq(seqKV)
		if err != nil {
			return err
		}
		var seqMod int64
		if seqKV != nil {
			seqMod = seqKV.ModRevision
		}
		// below: every alert with a smaller id goes (0: none).
		var below int64
		if keep > 0 {
			ids := make([]int64, 0, keep+len(byID))
			for id := range byID {
				ids = append(ids, id)
			}
			for _, kv := range r.Responses[1].GetResponseRange().Kvs {
				id, err := strconv.ParseInt(string(kv.Key[len(dir):]), 10, 64)
				if err != nil {
					return fmt.Errorf("etcdstore: corrupt security alert key %s: %w", kv.Key, err)
				}
				if _, ok := byID[id]; !ok {
					ids = append(ids, id)
				}
			}
			if len(ids) >= keep {
				slices.SortFunc(ids, func(a, b int64) int { return cmp.Compare(b, a) })
				below = ids[keep-1]
			}
		}
		var ops []clientv3.Op
		for _, id := range slices.Sorted(maps.Keys(byID)) {
			if id < below {
				continue // trimmed at once
			}
			body, err := json.Marshal(byID[id])
			if err != nil {
				return fmt.Errorf("etcdstore: security alert %d: %w", id, err)
			}
			ops = append(ops, clientv3.OpPut(s.alertKey(id), string(body)))
		}
		if below > 0 {
			ops = append(ops, clientv3.OpDelete(dir, clientv3.WithRange(s.alertKey(below))))
		}
		ops = append(ops, clientv3.OpPut(seqKey, strconv.FormatInt(max(seq, top), 10)))
		t, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(seqKey), "=", seqMod)).
			Then(ops...).
			Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: put security alerts: %w", err)
		}
		if t.Succeeded {
			return nil
		}
	}
}
