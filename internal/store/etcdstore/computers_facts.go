package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// factRec is a stored fact (computerfacts/<id>/<seq>).
type factRec struct {
	Seq    int64
	At     int64
	Dedupe string `json:",omitempty"`
	Body   []byte
}

// pad is n as 20 digits, so that keys sort as the numbers do.
func pad(n int64) string { return fmt.Sprintf("%020d", n) }

// padAt is a Unix ms time as 20 digits that sort as the (signed) times do.
func padAt(at int64) string { return fmt.Sprintf("%020d", uint64(at)^(1<<63)) }

func (s *Store) factSeqKey(id string) string { return s.key("computerfactseq", id) }
func (s *Store) factDir(id string) string    { return s.key("computerfacts", id) + "/" }
func (s *Store) factKey(id string, seq int64) string {
	return s.key("computerfacts", id, pad(seq))
}
func (s *Store) dedupeKey(id, dedupe string) string {
	return s.key("computerfactdedupe", id, dedupe)
}

// factReads are the reads factWrites needs for facts of Computer id: its
// seq counter, then the dedupe key of each fact that has one.
func (s *Store) factReads(id string, facts []store.NewComputerFact) []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpGet(s.factSeqKey(id))}
	for _, f := range facts {
		if f.Dedupe != "" {
			ops = append(ops, clientv3.OpGet(s.dedupeKey(id, f.Dedupe)))
		}
	}
	return ops
}

// factWrites appends facts to the log of Computer id, given the responses
// to factReads at r.Responses[at:]: the comparisons (the seq counter
// unchanged: every append rewrites it, so no other append got in between)
// and writes, and each fact's seq (0 when dropped as a duplicate).
func (s *Store) factWrites(id string, facts []store.NewComputerFact, r *clientv3.TxnResponse, at int) ([]clientv3.Cmp, []clientv3.Op, []int64, error) {
	if len(facts) == 0 {
		return nil, nil, nil, nil
	}
	seqKey := s.factSeqKey(id)
	seqKV := kvAt(r, at)
	var last int64
	if seqKV != nil {
		if err := json.Unmarshal(seqKV.Value, &last); err != nil {
			return nil, nil, nil, fmt.Errorf("etcdstore: corrupt fact seq of computer %q: %w", id, err)
		}
	}
	var (
		ops  []clientv3.Op
		seqs = make([]int64, len(facts))
		seen = map[string]bool{}
		i    = at + 1
	)
	for n, f := range facts {
		if f.Dedupe != "" {
			dup := kvAt(r, i) != nil || seen[f.Dedupe]
			i++
			if dup {
				continue
			}
			seen[f.Dedupe] = true
		}
		last++
		seqs[n] = last
		put, err := putJSON(s.factKey(id, last), factRec{Seq: last, At: f.At, Dedupe: f.Dedupe, Body: f.Body})
		if err != nil {
			return nil, nil, nil, err
		}
		ops = append(ops, put, clientv3.OpPut(s.key("computerfactsbytime", padAt(f.At), id, pad(last)), f.Dedupe))
		if f.Dedupe != "" {
			ops = append(ops, clientv3.OpPut(s.dedupeKey(id, f.Dedupe), fmt.Sprint(last)))
		}
	}
	if len(ops) == 0 {
		return nil, nil, seqs, nil
	}
	ops = append(ops, clientv3.OpPut(seqKey, fmt.Sprint(last)))
	return []clientv3.Cmp{unchanged(seqKey, seqKV)}, ops, seqs, nil
}

// AppendComputerFact appends a fact to a Computer's log with the next
// sequence number, in one transaction that commits only if no other fact
// of that Computer was appended since its counter was read (so sequence
// numbers have neither gaps nor duplicates). With a non-empty dedupe key,
// a fact whose key was appended before is dropped (appended false, seq 0).
// With mustExist, an unknown Computer is an error wrapping
// store.ErrNotFound.
func (s *Store) AppendComputerFact(ctx context.Context, computerID, dedupe string, at int64, body []byte, mustExist bool) (int64, bool, error) {
	if computerID == "" {
		return 0, false, errors.New("etcdstore: fact: computer id must not be empty")
	}
	facts := []store.NewComputerFact{{Dedupe: dedupe, At: at, Body: body}}
	k := s.computerKey(computerID)
	reads := append([]clientv3.Op{clientv3.OpGet(k)}, s.factReads(computerID, facts)...)
	var seq int64
	err := s.rmw(ctx, fmt.Sprintf("facts of computer %q", computerID), reads, func(_ context.Context, r *clientv3.TxnResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		seq = 0
		var cmps []clientv3.Cmp
		if mustExist {
			kv := kvAt(r, 0)
			if kv == nil {
				return nil, nil, notFoundComputer(computerID)
			}
			cmps = append(cmps, sameKey(k, kv))
		}
		fc, fo, seqs, err := s.factWrites(computerID, facts, r, 1)
		if err != nil {
			return nil, nil, err
		}
		if seqs[0] == 0 {
			return nil, nil, errSkip
		}
		seq = seqs[0]
		return append(cmps, fc...), fo, nil
	})
	if err != nil {
		return 0, false, err
	}
	return seq, seq != 0, nil
}

// ComputerFacts returns up to limit facts of a Computer with a sequence
// number above after, in order (a negative limit: all of them).
func (s *Store) ComputerFacts(ctx context.Context, computerID string, after int64, limit int) ([]store.ComputerFact, error) {
	if limit == 0 || after == math.MaxInt64 {
		return nil, nil
	}
	after = max(after, 0)
	ctx, cancel := opctx(ctx)
	defer cancel()
	dir := s.factDir(computerID)
	opts := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(dir))}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	r, err := s.cli.Get(ctx, s.factKey(computerID, after+1), opts...)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: read facts: %w", err)
	}
	var out []store.ComputerFact
	for _, kv := range r.Kvs {
		f, err := decodeKV[factRec](kv, "fact")
		if err != nil {
			return nil, err
		}
		if f.Body == nil {
			f.Body = []byte{}
		}
		out = append(out, store.ComputerFact{Seq: f.Seq, Body: f.Body})
	}
	return out, nil
}

// LastComputerFactSeq returns the last sequence number given to a fact of
// the Computer (0 when none ever was).
func (s *Store) LastComputerFactSeq(ctx context.Context, computerID string) (int64, error) {
	var seq int64
	if _, err := s.get(ctx, s.factSeqKey(computerID), "fact seq", &seq); err != nil {
		return 0, err
	}
	return seq, nil
}

// factsPerDelete is how many facts one retention transaction deletes (three
// keys each).
const factsPerDelete = maxTxnOps / 3

// DeleteComputerFactsBefore deletes the facts recorded before at (Unix ms)
// and returns how many. It deletes in transactions of at most
// factsPerDelete facts (each fact with its time index and dedupe keys,
// whole or not at all), oldest first; a fact appended meanwhile with an
// older time may be left.
func (s *Store) DeleteComputerFactsBefore(ctx context.Context, at int64) (int64, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	dir := s.dir("computerfactsbytime")
	end := s.key("computerfactsbytime", padAt(at))
	var n int64
	for {
		r, err := s.cli.Get(ctx, dir, clientv3.WithRange(end), clientv3.WithLimit(factsPerDelete))
		if err != nil {
			return n, fmt.Errorf("etcdstore: expire facts: %w", err)
		}
		if len(r.Kvs) == 0 {
			return n, nil
		}
		var (
			cmps []clientv3.Cmp
			ops  []clientv3.Op
		)
		for _, kv := range r.Kvs {
			parts := strings.Split(strings.TrimPrefix(string(kv.Key), dir), "/")
			if len(parts) != 3 {
				return n, fmt.Errorf("etcdstore: corrupt fact index key %s", kv.Key)
			}
			id, err := url.PathUnescape(parts[1])
			if err != nil {
				return n, fmt.Errorf("etcdstore: corrupt fact index key %s: %w", kv.Key, err)
			}
			cmps = append(cmps, unchanged(string(kv.Key), kv))
			ops = append(ops, clientv3.OpDelete(string(kv.Key)), clientv3.OpDelete(s.key("computerfacts", id)+"/"+parts[2]))
			if d := string(kv.Value); d != "" {
				ops = append(ops, clientv3.OpDelete(s.dedupeKey(id, d)))
			}
		}
		t, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return n, fmt.Errorf("etcdstore: expire facts: %w", err)
		}
		if t.Succeeded {
			n += int64(len(r.Kvs))
		}
	}
}
