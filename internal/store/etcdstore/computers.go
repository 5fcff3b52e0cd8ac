package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// maxFactsPerWrite bounds the facts one write appends, so that its
// transaction (three operations per fact, a few for the write itself)
// stays within maxTxnOps.
const maxFactsPerWrite = 32

// maxHolderCmps is how many slot holders a reservation that counted them
// compares one by one; above it compares the whole computers directory.
const maxHolderCmps = 64

// rmw is a read-modify-write of several keys in one transaction: reads run
// in one transaction (so at one revision), decide returns the comparisons
// and writes, and these commit only if the comparisons still hold;
// otherwise decide runs again on what the else branch (the same reads)
// returned. decide may return errSkip to end without writing. decide gets
// the context rmw bounds, for further reads at the response's revision.
func (s *Store) rmw(ctx context.Context, what string, reads []clientv3.Op,
	decide func(ctx context.Context, r *clientv3.TxnResponse) ([]clientv3.Cmp, []clientv3.Op, error)) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: read %s: %w", what, err)
	}
	for {
		cmps, ops, err := decide(ctx, r)
		if errors.Is(err, errSkip) {
			return nil
		}
		if err != nil {
			return err
		}
		t, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(reads...).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: write %s: %w", what, err)
		}
		if t.Succeeded {
			return nil
		}
		r = t
	}
}

// kvAt is the first key-value of the i-th (range) response of r.
func kvAt(r *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	return first(r.Responses[i].GetResponseRange().Kvs)
}

func kvsAt(r *clientv3.TxnResponse, i int) []*mvccpb.KeyValue {
	return r.Responses[i].GetResponseRange().Kvs
}

// unchanged compares key's ModRevision with kv's (0: still absent).
func unchanged(key string, kv *mvccpb.KeyValue) clientv3.Cmp {
	var mod int64
	if kv != nil {
		mod = kv.ModRevision
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", mod)
}

// sameKey compares key's CreateRevision with kv's: the key was neither
// deleted nor created since kv was read (it may have been rewritten).
func sameKey(key string, kv *mvccpb.KeyValue) clientv3.Cmp {
	var c int64
	if kv != nil {
		c = kv.CreateRevision
	}
	return clientv3.Compare(clientv3.CreateRevision(key), "=", c)
}

// noneNewer holds while no key under dir was written after rev (deletes
// are not seen: callers guard those otherwise).
func noneNewer(dir string, rev int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(dir), "<", rev+1).WithPrefix()
}

func putJSON(key string, v any) (clientv3.Op, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpPut(key, string(b)), nil
}

func decodeKV[T any](kv *mvccpb.KeyValue, what string) (T, error) {
	var v T
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return v, fmt.Errorf("etcdstore: corrupt %s at %s: %w", what, kv.Key, err)
	}
	return v, nil
}

// storedComputer is c as the SQLite store keeps it: its idle timeout in
// whole milliseconds, times in UTC.
func storedComputer(c store.Computer) store.Computer {
	c.IdleTimeout = c.IdleTimeout.Truncate(time.Millisecond)
	c.CreatedAt, c.UpdatedAt = norm(c.CreatedAt), norm(c.UpdatedAt)
	return c
}

func (s *Store) computerKey(id string) string { return s.key("computers", id) }

func notFoundComputer(id string) error { return fmt.Errorf("%w: computer %q", store.ErrNotFound, id) }

// decodeComputer decodes kv, or returns an error wrapping
// store.ErrNotFound when kv is nil.
func decodeComputer(kv *mvccpb.KeyValue, id string) (store.Computer, error) {
	if kv == nil {
		return store.Computer{}, notFoundComputer(id)
	}
	return decodeKV[store.Computer](kv, fmt.Sprintf("computer %q", id))
}

// CreateComputer stores a new Computer and appends facts to its log, in
// one transaction. It returns an error wrapping store.ErrConflict if the
// id exists; no fact is appended then.
func (s *Store) CreateComputer(ctx context.Context, c store.Computer, facts ...store.NewComputerFact) (store.Computer, error) {
	if c.ID == "" {
		return store.Computer{}, errors.New("etcdstore: computer id must not be empty")
	}
	if len(facts) > maxFactsPerWrite {
		return store.Computer{}, fmt.Errorf("etcdstore: computer %q: at most %d facts per write, not %d", c.ID, maxFactsPerWrite, len(facts))
	}
	now := norm(s.now())
	c.CreatedAt, c.UpdatedAt = now, now
	k := s.computerKey(c.ID)
	reads := append([]clientv3.Op{clientv3.OpGet(k)}, s.factReads(c.ID, facts)...)
	err := s.rmw(ctx, fmt.Sprintf("computer %q", c.ID), reads, func(_ context.Context, r *clientv3.TxnResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		if kvAt(r, 0) != nil {
			return nil, nil, fmt.Errorf("%w: computer %q exists", store.ErrConflict, c.ID)
		}
		put, err := putJSON(k, storedComputer(c))
		if err != nil {
			return nil, nil, err
		}
		fc, fo, _, err := s.factWrites(c.ID, facts, r, 1)
		if err != nil {
			return nil, nil, err
		}
		return append(fc, unchanged(k, nil)), append(fo, put), nil
	})
	return c, err
}

// Computer returns one Computer, or an error wrapping store.ErrNotFound.
func (s *Store) Computer(ctx context.Context, id string) (store.Computer, error) {
	var c store.Computer
	found, err := s.get(ctx, s.computerKey(id), fmt.Sprintf("computer %q", id), &c)
	if err != nil {
		return store.Computer{}, err
	}
	if !found {
		return store.Computer{}, notFoundComputer(id)
	}
	return c, nil
}

// Computers returns the Computers of a namespace ("" for all), by id.
func (s *Store) Computers(ctx context.Context, namespace string) ([]store.Computer, error) {
	cs, err := list[store.Computer](ctx, s, "computers", "computers")
	if err != nil {
		return nil, err
	}
	if namespace != "" {
		cs = slices.DeleteFunc(cs, func(c store.Computer) bool { return c.Namespace != namespace })
	}
	slices.SortFunc(cs, func(a, b store.Computer) int { return cmp.Compare(a.ID, b.ID) })
	return cs, nil
}

// UpdateComputer reads a Computer, lets fn change it and writes it back,
// in one transaction (fn runs again on the newer record when another
// writer got in between). An error from fn aborts the update and is
// returned as is.
func (s *Store) UpdateComputer(ctx context.Context, id string, fn func(*store.Computer) error) (store.Computer, error) {
	var out store.Computer
	err := s.update(ctx, s.computerKey(id), fmt.Sprintf("computer %q", id), func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, notFoundComputer(id)
		}
		var c store.Computer
		if err := json.Unmarshal(cur, &c); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt computer %q: %w", id, err)
		}
		if err := fn(&c); err != nil {
			return nil, err
		}
		c.ID = id
		c.UpdatedAt = norm(s.now())
		out = c
		return json.Marshal(storedComputer(c))
	})
	return out, err
}

// slotRec is a held slot (computerslots/<id>).
type slotRec struct {
	ComputerID string
	ReservedAt time.Time
}

// queueRec is a queued start (computerqueue/<id>); Seq orders the queue.
type queueRec struct {
	ComputerID string
	Seq        int64
	QueuedAt   time.Time
}

// queueSeq is the value of computerqueueseq: the last queue seq handed
// out. Every write to the slots or the queue rewrites it, so that a
// comparison of its ModRevision guards what was read of both (etcd's
// range comparisons do not see deletes).
type queueSeq struct {
	Last int64
}

func (s *Store) seqKey() string { return s.key("computerqueueseq") }

func decodeSeq(kv *mvccpb.KeyValue) (queueSeq, error) {
	if kv == nil {
		return queueSeq{}, nil
	}
	return decodeKV[queueSeq](kv, "queue seq")
}

// DeleteComputer removes a Computer with its slot, queue entry and ports,
// in one transaction. Its facts stay (until retention deletes them), as
// in the SQLite store. It returns an error wrapping store.ErrNotFound if
// there is none.
func (s *Store) DeleteComputer(ctx context.Context, id string) error {
	k, slot, queue, seq := s.computerKey(id), s.key("computerslots", id), s.key("computerqueue", id), s.seqKey()
	reads := []clientv3.Op{clientv3.OpGet(k), clientv3.OpGet(seq), clientv3.OpGet(slot), clientv3.OpGet(queue)}
	return s.rmw(ctx, fmt.Sprintf("computer %q", id), reads, func(_ context.Context, r *clientv3.TxnResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		kv := kvAt(r, 0)
		if kv == nil {
			return nil, nil, notFoundComputer(id)
		}
		cmps := []clientv3.Cmp{sameKey(k, kv), unchanged(slot, kvAt(r, 2)), unchanged(queue, kvAt(r, 3))}
		ops := []clientv3.Op{
			clientv3.OpDelete(k), clientv3.OpDelete(slot), clientv3.OpDelete(queue),
			clientv3.OpDelete(s.key("computerports", id)+"/", clientv3.WithPrefix()),
		}
		if kvAt(r, 2) != nil || kvAt(r, 3) != nil {
			q, err := decodeSeq(kvAt(r, 1))
			if err != nil {
				return nil, nil, err
			}
			put, err := putJSON(seq, q)
			if err != nil {
				return nil, nil, err
			}
			cmps, ops = append(cmps, unchanged(seq, kvAt(r, 1))), append(ops, put)
		}
		return cmps, ops, nil
	})
}

// hostRec is a host's capacity (computerhosts/<host id>).
type hostRec struct {
	HostID string
	store.ComputerHost
}

// PutComputerHost registers or replaces a host's capacity.
func (s *Store) PutComputerHost(ctx context.Context, hostID string, h store.ComputerHost) error {
	if hostID == "" {
		return errors.New("etcdstore: host id must not be empty")
	}
	put, err := putJSON(s.key("computerhosts", hostID), hostRec{HostID: hostID, ComputerHost: h})
	if err != nil {
		return err
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).Then(put).Commit(); err != nil {
		return fmt.Errorf("etcdstore: put host %q: %w", hostID, err)
	}
	return nil
}

// ComputerHosts returns the host capacity registry.
func (s *Store) ComputerHosts(ctx context.Context) (map[string]store.ComputerHost, error) {
	hs, err := list[hostRec](ctx, s, "computerhosts", "hosts")
	if err != nil {
		return nil, err
	}
	out := map[string]store.ComputerHost{}
	for _, h := range hs {
		out[h.HostID] = h.ComputerHost
	}
	return out, nil
}

// ReserveComputerSlot atomically reserves a fleet slot for Computer id and
// applies fn to its record in the same transaction, exactly as
// store.Store.ReserveComputerSlot: a holder re-reserves for free; else a
// slot is granted when the slots held plus the queued starts ahead of id
// are below the limit, and the Computer leaves the queue. The transaction
// commits only if the Computer, the slots and queue (through
// computerqueueseq), the hosts (when they set the limit) and, when fn
// counted them with activeOn, the records of the other holders are as
// read; otherwise everything, fn included, runs again on what changed. So
// fn must not keep effects of a run but the last. facts are appended in
// the same transaction when, and only when, the slot is reserved.
func (s *Store) ReserveComputerSlot(ctx context.Context, id string, limit store.SlotLimit, fn func(c *store.Computer, activeOn store.ActiveOn) error, facts ...store.NewComputerFact) (store.SlotReservation, store.Computer, error) {
	if len(facts) > maxFactsPerWrite {
		return store.SlotReservation{}, store.Computer{}, fmt.Errorf("etcdstore: computer %q: at most %d facts per write, not %d", id, maxFactsPerWrite, len(facts))
	}
	var (
		res store.SlotReservation
		out store.Computer
	)
	k, slot, queue, seq := s.computerKey(id), s.key("computerslots", id), s.key("computerqueue", id), s.seqKey()
	reads := append([]clientv3.Op{
		clientv3.OpGet(k), clientv3.OpGet(seq),
		clientv3.OpGet(s.dir("computerslots"), clientv3.WithPrefix()),
		clientv3.OpGet(s.dir("computerqueue"), clientv3.WithPrefix()),
		clientv3.OpGet(s.dir("computerhosts"), clientv3.WithPrefix()),
	}, s.factReads(id, facts)...)
	err := s.rmw(ctx, "slot reservation", reads, func(ctx context.Context, r *clientv3.TxnResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		res, out = store.SlotReservation{}, store.Computer{}
		rev := r.Header.Revision
		ckv := kvAt(r, 0)
		c, err := decodeComputer(ckv, id)
		if err != nil {
			return nil, nil, err
		}
		cmps := []clientv3.Cmp{unchanged(k, ckv), unchanged(seq, kvAt(r, 1))}
		switch hosts := kvsAt(r, 4); {
		case limit.Fixed > 0:
			res.Limit = limit.Fixed
		case len(hosts) == 0:
			res.Limit = limit.Default
			cmps = append(cmps, noneNewer(s.dir("computerhosts"), rev))
		default:
			for _, kv := range hosts {
				h, err := decodeKV[hostRec](kv, "host")
				if err != nil {
					return nil, nil, err
				}
				res.Limit += h.MaxActive - h.ReservedHeadroom
			}
			cmps = append(cmps, noneNewer(s.dir("computerhosts"), rev))
		}
		var holders []string
		held := false
		for _, kv := range kvsAt(r, 2) {
			sr, err := decodeKV[slotRec](kv, "slot")
			if err != nil {
				return nil, nil, err
			}
			if sr.ComputerID == id {
				held = true
			} else {
				holders = append(holders, sr.ComputerID)
			}
		}
		res.Running = len(kvsAt(r, 2))
		if !held {
			var entries []queueRec
			own := int64(math.MaxInt64)
			for _, kv := range kvsAt(r, 3) {
				q, err := decodeKV[queueRec](kv, "queue entry")
				if err != nil {
					return nil, nil, err
				}
				entries = append(entries, q)
				if q.ComputerID == id {
					own = q.Seq
				}
			}
			ahead := 0
			for _, q := range entries {
				if q.Seq < own {
					ahead++
				}
			}
			if res.Running+ahead >= res.Limit {
				return nil, nil, errSkip
			}
		}
		var others map[string]*mvccpb.KeyValue // holders' records, read once at rev
		activeOn := func(active string) (int, error) {
			if others == nil {
				others = map[string]*mvccpb.KeyValue{}
				g, err := s.cli.Get(ctx, s.dir("computers"), clientv3.WithPrefix(), clientv3.WithRev(rev))
				if err != nil {
					return 0, fmt.Errorf("etcdstore: read computers: %w", err)
				}
				byKey := map[string]*mvccpb.KeyValue{}
				for _, kv := range g.Kvs {
					byKey[string(kv.Key)] = kv
				}
				for _, h := range holders {
					if kv := byKey[s.computerKey(h)]; kv != nil {
						others[h] = kv
					}
				}
			}
			n := 0
			for h, kv := range others {
				o, err := decodeComputer(kv, h)
				if err != nil {
					return 0, err
				}
				if o.Active == active {
					n++
				}
			}
			return n, nil
		}
		if err := fn(&c, activeOn); err != nil {
			return nil, nil, err
		}
		if others != nil {
			if len(others) > maxHolderCmps {
				cmps = append(cmps, noneNewer(s.dir("computers"), rev))
			} else {
				for h, kv := range others {
					cmps = append(cmps, unchanged(s.computerKey(h), kv))
				}
			}
		}
		now := norm(s.now())
		q, err := decodeSeq(kvAt(r, 1))
		if err != nil {
			return nil, nil, err
		}
		putSeq, err := putJSON(seq, q)
		if err != nil {
			return nil, nil, err
		}
		ops := []clientv3.Op{putSeq, clientv3.OpDelete(queue)}
		if !held {
			put, err := putJSON(slot, slotRec{ComputerID: id, ReservedAt: now})
			if err != nil {
				return nil, nil, err
			}
			ops = append(ops, put)
			res.Running++
		}
		res.Reserved = true
		c.UpdatedAt = now
		put, err := putJSON(k, storedComputer(c))
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, put)
		fc, fo, _, err := s.factWrites(id, facts, r, 5)
		if err != nil {
			return nil, nil, err
		}
		out = c
		return append(cmps, fc...), append(ops, fo...), nil
	})
	if err != nil {
		return store.SlotReservation{}, store.Computer{}, err
	}
	return res, out, nil
}

// ReleaseComputerSlot frees the slot of Computer id (if it holds one) and
// removes it from the queue, applying fn to its record in the same
// transaction (fn runs again when another writer got in between).
// Releasing twice is harmless. A Computer that does not exist (deleted
// meanwhile) is not an error: fn is not called.
func (s *Store) ReleaseComputerSlot(ctx context.Context, id string, fn func(*store.Computer)) (store.Computer, error) {
	var out store.Computer
	k, slot, queue, seq := s.computerKey(id), s.key("computerslots", id), s.key("computerqueue", id), s.seqKey()
	reads := []clientv3.Op{clientv3.OpGet(k), clientv3.OpGet(seq), clientv3.OpGet(slot), clientv3.OpGet(queue)}
	err := s.rmw(ctx, "slot release", reads, func(_ context.Context, r *clientv3.TxnResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		out = store.Computer{}
		ckv := kvAt(r, 0)
		cmps := []clientv3.Cmp{unchanged(k, ckv), unchanged(slot, kvAt(r, 2)), unchanged(queue, kvAt(r, 3))}
		var ops []clientv3.Op
		if kvAt(r, 2) != nil || kvAt(r, 3) != nil {
			q, err := decodeSeq(kvAt(r, 1))
			if err != nil {
				return nil, nil, err
			}
			put, err := putJSON(seq, q)
			if err != nil {
				return nil, nil, err
			}
			cmps = append(cmps, unchanged(seq, kvAt(r, 1)))
			ops = append(ops, clientv3.OpDelete(slot), clientv3.OpDelete(queue), put)
		}
		if ckv != nil {
			c, err := decodeComputer(ckv, id)
			if err != nil {
				return nil, nil, err
			}
			fn(&c)
			c.UpdatedAt = norm(s.now())
			put, err := putJSON(k, storedComputer(c))
			if err != nil {
				return nil, nil, err
			}
			ops = append(ops, put)
			out = c
		}
		if len(ops) == 0 {
			return nil, nil, errSkip
		}
		return cmps, ops, nil
	})
	return out, err
}

// ComputerSlots returns the ids of the Computers that hold a slot, sorted.
func (s *Store) ComputerSlots(ctx context.Context) ([]string, error) {
	ss, err := list[slotRec](ctx, s, "computerslots", "slots")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, x := range ss {
		out = append(out, x.ComputerID)
	}
	slices.Sort(out)
	return out, nil
}

// EnqueueComputer puts Computer id at the end of the start queue (where it
// stays if it is queued already) and applies fn to its record, in one
// transaction (fn runs again when another writer got in between). It
// returns the 1-based position.
func (s *Store) EnqueueComputer(ctx context.Context, id string, fn func(*store.Computer)) (int, store.Computer, error) {
	var (
		pos int
		out store.Computer
	)
	k, queue, seq := s.computerKey(id), s.key("computerqueue", id), s.seqKey()
	reads := []clientv3.Op{clientv3.OpGet(k), clientv3.OpGet(seq), clientv3.OpGet(s.dir("computerqueue"), clientv3.WithPrefix())}
	err := s.rmw(ctx, "enqueue", reads, func(_ context.Context, r *clientv3.TxnResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		ckv := kvAt(r, 0)
		c, err := decodeComputer(ckv, id)
		if err != nil {
			return nil, nil, err
		}
		q, err := decodeSeq(kvAt(r, 1))
		if err != nil {
			return nil, nil, err
		}
		now := norm(s.now())
		var seqs []int64
		own := int64(0)
		for _, kv := range kvsAt(r, 2) {
			e, err := decodeKV[queueRec](kv, "queue entry")
			if err != nil {
				return nil, nil, err
			}
			seqs = append(seqs, e.Seq)
			if e.ComputerID == id {
				own = e.Seq
			}
		}
		cmps := []clientv3.Cmp{unchanged(k, ckv), unchanged(seq, kvAt(r, 1))}
		var ops []clientv3.Op
		if own == 0 {
			q.Last++
			own = q.Last
			seqs = append(seqs, own)
			putQ, err := putJSON(queue, queueRec{ComputerID: id, Seq: own, QueuedAt: now})
			if err != nil {
				return nil, nil, err
			}
			putSeq, err := putJSON(seq, q)
			if err != nil {
				return nil, nil, err
			}
			ops = append(ops, putQ, putSeq)
		}
		pos = 0
		for _, x := range seqs {
			if x <= own {
				pos++
			}
		}
		fn(&c)
		c.UpdatedAt = now
		put, err := putJSON(k, storedComputer(c))
		if err != nil {
			return nil, nil, err
		}
		out = c
		return cmps, append(ops, put), nil
	})
	if err != nil {
		return 0, store.Computer{}, err
	}
	return pos, out, nil
}

// ComputerQueue returns the ids of the queued Computers, first first.
func (s *Store) ComputerQueue(ctx context.Context) ([]string, error) {
	qs, err := list[queueRec](ctx, s, "computerqueue", "queue")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(qs, func(a, b queueRec) int { return cmp.Compare(a.Seq, b.Seq) })
	var out []string
	for _, q := range qs {
		out = append(out, q.ComputerID)
	}
	return out, nil
}
