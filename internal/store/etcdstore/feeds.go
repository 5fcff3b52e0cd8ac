package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// FeedEvents returns every stored feed event, sorted by Seq (ties by id).
func (s *Store) FeedEvents(ctx context.Context) ([]store.FeedEvent, error) {
	es, err := list[store.FeedEvent](ctx, s, "feedevents", "feed events")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(es, func(a, b store.FeedEvent) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID)) })
	return es, nil
}

// SaveFeedEvents writes the feed events put (inserted, or replacing the
// one of the same id; of two with one id the later counts) and deletes
// the ids in drop (an id both put and dropped ends deleted, as in the
// SQLite store), Seq and every other field stored as given, in one
// transaction; a save of more than 128 keys commits in several
// transactions of at most 128 each, puts first.
func (s *Store) SaveFeedEvents(ctx context.Context, put []store.FeedEvent, drop []int64) error {
	dropped := map[int64]bool{}
	for _, id := range drop {
		dropped[id] = true
	}
	last := map[int64]int{}
	for i, e := range put {
		last[e.ID] = i
	}
	var ops []clientv3.Op
	for i, e := range put {
		if last[e.ID] != i || dropped[e.ID] {
			continue
		}
		body, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("etcdstore: feed event %d: %w", e.ID, err)
		}
		ops = append(ops, clientv3.OpPut(s.feedKey(e.ID), string(body)))
	}
	for id := range dropped {
		ops = append(ops, clientv3.OpDelete(s.feedKey(id)))
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	for _, part := range chunks(ops, maxTxnOps) {
		if _, err := s.cli.Txn(ctx).Then(part...).Commit(); err != nil {
			return fmt.Errorf("etcdstore: save feed events: %w", err)
		}
	}
	return nil
}

func (s *Store) feedKey(id int64) string { return s.key("feedevents", strconv.FormatInt(id, 10)) }
