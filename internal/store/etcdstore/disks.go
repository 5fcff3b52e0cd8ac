package etcdstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// DiskRecords returns every disk decision, sorted by sandbox id.
func (s *Store) DiskRecords(ctx context.Context) ([]store.DiskRecord, error) {
	ds, err := list[store.DiskRecord](ctx, s, "diskrecords", "disk records")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ds, func(a, b store.DiskRecord) int { return cmp.Compare(a.SandboxID, b.SandboxID) })
	return ds, nil
}

// PutDiskRecord replaces the decision about disk d.SandboxID in one
// transaction; a record with nothing decided (not retained, no note,
// never archived) deletes it instead, so only non-default records exist.
func (s *Store) PutDiskRecord(ctx context.Context, d store.DiskRecord) error {
	if d.SandboxID == "" {
		return errors.New("etcdstore: a disk record needs a sandbox id")
	}
	if !d.Retain && d.Note == "" && d.ArchiveURI == "" {
		return s.DeleteDiskRecord(ctx, d.SandboxID)
	}
	body, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("etcdstore: disk record %q: %w", d.SandboxID, err)
	}
	return s.put(ctx, s.key("diskrecords", d.SandboxID), fmt.Sprintf("disk record %q", d.SandboxID), body)
}

// DeleteDiskRecord forgets the decision about a disk, in one transaction
// (none is no error).
func (s *Store) DeleteDiskRecord(ctx context.Context, id string) error {
	return s.deleteKeys(ctx, []string{s.key("diskrecords", id)}, fmt.Sprintf("disk record %q", id))
}

// newestArchiveFirst is the SQLite store's ORDER BY started_at DESC, id DESC.
func newestArchiveFirst(a, b store.DiskArchive) int {
	return cmp.Or(cmp.Compare(b.StartedAt, a.StartedAt), cmp.Compare(b.ID, a.ID))
}

// PutDiskArchive inserts an archive record or replaces the view of the one
// with its id (its sandbox and start stay as first stored), and keeps the
// newest keep records (by start, then id; keep <= 0: all), in one
// transaction that commits only if no archive was written since the
// records were read (every writer of archives puts one, so a concurrent
// writer is always seen). Pruning more than 127 records at once deletes
// the rest in further transactions: a record outside the newest keep
// stays outside, as starts never change and records are only added.
func (s *Store) PutDiskArchive(ctx context.Context, a store.DiskArchive, keep int) error {
	if a.ID == "" || !json.Valid(a.View) {
		return errors.New("etcdstore: a disk archive needs an id and a JSON view")
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	key, dir := s.key("diskarchives", a.ID), s.dir("diskarchives")
	for {
		r, err := s.cli.Get(ctx, dir, clientv3.WithPrefix())
		if err != nil {
			return fmt.Errorf("etcdstore: read disk archives: %w", err)
		}
		all := make([]store.DiskArchive, 0, len(r.Kvs)+1)
		put := store.DiskArchive{ID: a.ID, SandboxID: a.SandboxID, StartedAt: a.StartedAt, View: bytes.Clone(a.View)}
		for _, kv := range r.Kvs {
			var x store.DiskArchive
			if err := json.Unmarshal(kv.Value, &x); err != nil {
				return fmt.Errorf("etcdstore: corrupt disk archive at %s: %w", kv.Key, err)
			}
			if string(kv.Key) == key {
				put.SandboxID, put.StartedAt = x.SandboxID, x.StartedAt
				continue
			}
			all = append(all, x)
		}
		all = append(all, put)
		var drop []string
		if keep > 0 && len(all) > keep {
			slices.SortFunc(all, newestArchiveFirst)
			for _, x := range all[keep:] {
				drop = append(drop, s.key("diskarchives", x.ID))
			}
		}
		var ops []clientv3.Op
		if !slices.Contains(drop, key) {
			body, err := json.Marshal(put)
			if err != nil {
				return fmt.Errorf("etcdstore: disk archive %q: %w", a.ID, err)
			}
			ops = append(ops, clientv3.OpPut(key, string(body)))
		}
		n := min(len(drop), maxTxnOps-len(ops))
		for _, k := range drop[:n] {
			ops = append(ops, clientv3.OpDelete(k))
		}
		t, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(dir), "<", r.Header.Revision+1).WithPrefix()).
			Then(ops...).
			Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: put disk archive %q: %w", a.ID, err)
		}
		if !t.Succeeded {
			continue
		}
		return s.deleteKeys(ctx, drop[n:], "disk archives")
	}
}

// DiskArchives returns the archive records, newest first (by start, then
// id, both descending).
func (s *Store) DiskArchives(ctx context.Context) ([]store.DiskArchive, error) {
	as, err := list[store.DiskArchive](ctx, s, "diskarchives", "disk archives")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(as, newestArchiveFirst)
	return as, nil
}
