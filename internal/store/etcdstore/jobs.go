package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// txnDirUnchanged compares true while no key under dir has been written
// after revision rev (a write of any key there moves its ModRevision past
// rev). A deletion is not seen; the writers guarded with it all put a key
// whenever they delete one.
func txnDirUnchanged(dir string, rev int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(dir), "<", rev+1).WithPrefix()
}

// txnKeyStored compares true while key is stored.
func txnKeyStored(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
}

// txnKeyAbsent compares true while key is not stored.
func txnKeyAbsent(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
}

// storedJob is a job as read back, with the revision that created its
// key: the SQLite store's autoincrement seq (creation order, never
// reused) is etcd's CreateRevision, kept by every later put.
type storedJob struct {
	store.Job
	seq int64
}

func (s *Store) decodeJobs(kvs []*mvccpb.KeyValue) ([]storedJob, error) {
	out := make([]storedJob, 0, len(kvs))
	for _, kv := range kvs {
		var j store.Job
		if err := json.Unmarshal(kv.Value, &j); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt job at %s: %w", kv.Key, err)
		}
		out = append(out, storedJob{j, kv.CreateRevision})
	}
	// Newest first, as ORDER BY seq DESC.
	slices.SortFunc(out, func(a, b storedJob) int { return cmp.Compare(b.seq, a.seq) })
	return out, nil
}

// Jobs returns the stored jobs of deployment (every deployment's when
// empty), newest first (by creation).
func (s *Store) Jobs(ctx context.Context, deployment string) ([]store.Job, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Get(ctx, s.dir("jobs"), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list jobs: %w", err)
	}
	js, err := s.decodeJobs(r.Kvs)
	if err != nil {
		return nil, err
	}
	var out []store.Job
	for _, j := range js {
		if deployment == "" || j.Deployment == deployment {
			out = append(out, j.Job)
		}
	}
	return out, nil
}

// Job returns one stored job, or an error wrapping store.ErrNotFound.
func (s *Store) Job(ctx context.Context, id string) (store.Job, error) {
	var j store.Job
	found, err := s.get(ctx, s.key("jobs", id), fmt.Sprintf("job %q", id), &j)
	if err != nil {
		return store.Job{}, err
	}
	if !found {
		return store.Job{}, fmt.Errorf("etcdstore: job %q: %w", id, store.ErrNotFound)
	}
	return j, nil
}

// pruneJobs returns the ids the SQLite store's InsertJob deletes from js
// (newest first): per deployment dep, the finished jobs beyond the newest
// perDeployment less its running ones; then overall, the finished jobs
// beyond the newest total less all running ones. A bound <= 0 is none.
func pruneJobs(js []storedJob, dep string, perDeployment, total int) []string {
	gone := map[string]bool{}
	prune := func(in func(storedJob) bool, bound int) {
		running := 0
		for _, j := range js {
			if !gone[j.ID] && in(j) && j.Status == "running" {
				running++
			}
		}
		keep := max(0, bound-running)
		for _, j := range js {
			if gone[j.ID] || !in(j) || j.Status == "running" {
				continue
			}
			if keep > 0 {
				keep--
				continue
			}
			gone[j.ID] = true
		}
	}
	if perDeployment > 0 {
		prune(func(j storedJob) bool { return j.Deployment == dep }, perDeployment)
	}
	if total > 0 {
		prune(func(storedJob) bool { return true }, total)
	}
	var out []string
	for _, j := range js {
		if gone[j.ID] {
			out = append(out, j.ID)
		}
	}
	return out
}

// InsertJob stores a new job (an existing id is an error wrapping
// store.ErrConflict) and prunes the history in the same transaction to at
// most perDeployment jobs of j's deployment and total in all, oldest
// first, exactly as store.Store.InsertJob: a running job counts but is
// never pruned. The transaction commits only if no job was written since
// the history was read (else it decides again). Only when more than 125
// jobs are over the bounds at once are the ones beyond the first 125
// pruned in further transactions (each one whole), after the insert.
func (s *Store) InsertJob(ctx context.Context, j store.Job, perDeployment, total int) error {
	if j.ID == "" || !json.Valid(j.Record) {
		return errors.New("etcdstore: a job needs an id and a JSON record")
	}
	body, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("etcdstore: job %q: %w", j.ID, err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	key := s.key("jobs", j.ID)
	for {
		r, err := s.cli.Get(ctx, s.dir("jobs"), clientv3.WithPrefix())
		if err != nil {
			return fmt.Errorf("etcdstore: list jobs: %w", err)
		}
		js, err := s.decodeJobs(r.Kvs)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(js, func(x storedJob) bool { return x.ID == j.ID }) {
			return fmt.Errorf("etcdstore: job %q: %w", j.ID, store.ErrConflict)
		}
		// The new job is the newest; it may be pruned at once (a bound
		// filled with running jobs), as SQLite inserts then deletes it.
		all := append([]storedJob{{j, r.Header.Revision + 1}}, js...)
		gone := pruneJobs(all, j.Deployment, perDeployment, total)
		var ops []clientv3.Op
		if !slices.Contains(gone, j.ID) {
			ops = append(ops, clientv3.OpPut(key, string(body)))
		}
		gone = slices.DeleteFunc(gone, func(id string) bool { return id == j.ID })
		more := len(gone) > maxTxnOps-3
		if more {
			gone = gone[:maxTxnOps-3]
		}
		for _, id := range gone {
			ops = append(ops, clientv3.OpDelete(s.key("jobs", id)))
		}
		t, err := s.cli.Txn(ctx).If(txnKeyAbsent(key), txnDirUnchanged(s.dir("jobs"), r.Header.Revision)).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: put job %q: %w", j.ID, err)
		}
		if !t.Succeeded {
			continue
		}
		if more {
			return s.pruneJobs(ctx, j.Deployment, perDeployment, total)
		}
		return nil
	}
}

// pruneJobs prunes as InsertJob does, without inserting, until nothing is
// over the bounds.
func (s *Store) pruneJobs(ctx context.Context, dep string, perDeployment, total int) error {
	for {
		r, err := s.cli.Get(ctx, s.dir("jobs"), clientv3.WithPrefix())
		if err != nil {
			return fmt.Errorf("etcdstore: list jobs: %w", err)
		}
		js, err := s.decodeJobs(r.Kvs)
		if err != nil {
			return err
		}
		gone := pruneJobs(js, dep, perDeployment, total)
		if len(gone) == 0 {
			return nil
		}
		if len(gone) > maxTxnOps-1 {
			gone = gone[:maxTxnOps-1]
		}
		ops := make([]clientv3.Op, len(gone))
		for i, id := range gone {
			ops[i] = clientv3.OpDelete(s.key("jobs", id))
		}
		if _, err := s.cli.Txn(ctx).If(txnDirUnchanged(s.dir("jobs"), r.Header.Revision)).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("etcdstore: prune jobs: %w", err)
		}
	}
}

// UpdateJob replaces a job's status and record, in one transaction that
// commits only if the job is unchanged since read; a job no longer stored
// is an error wrapping store.ErrNotFound.
func (s *Store) UpdateJob(ctx context.Context, id, status string, record []byte) error {
	if !json.Valid(record) {
		return fmt.Errorf("etcdstore: job %q: the record is not JSON", id)
	}
	return s.update(ctx, s.key("jobs", id), fmt.Sprintf("job %q", id), func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, fmt.Errorf("etcdstore: job %q: %w", id, store.ErrNotFound)
		}
		var j store.Job
		if err := json.Unmarshal(cur, &j); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt job %q: %w", id, err)
		}
		j.Status, j.Record = status, record
		return json.Marshal(j)
	})
}

// Workflows returns every workflow, by id.
func (s *Store) Workflows(ctx context.Context) ([]store.Workflow, error) {
	ws, err := list[store.Workflow](ctx, s, "workflows", "workflows")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ws, func(a, b store.Workflow) int { return cmp.Compare(a.ID, b.ID) })
	return ws, nil
}

// PutWorkflow stores a workflow, in one transaction. With create, an
// existing id is an error wrapping store.ErrConflict; without, the
// workflow must exist (store.ErrNotFound otherwise).
func (s *Store) PutWorkflow(ctx context.Context, w store.Workflow, create bool) error {
	if w.ID == "" || !json.Valid(w.Spec) {
		return errors.New("etcdstore: a workflow needs an id and a JSON spec")
	}
	body, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("etcdstore: workflow %q: %w", w.ID, err)
	}
	key := s.key("workflows", w.ID)
	cond, miss := txnKeyStored(key), store.ErrNotFound
	if create {
		cond, miss = txnKeyAbsent(key), store.ErrConflict
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	t, err := s.cli.Txn(ctx).If(cond).Then(clientv3.OpPut(key, string(body))).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: put workflow %q: %w", w.ID, err)
	}
	if !t.Succeeded {
		return fmt.Errorf("etcdstore: workflow %q: %w", w.ID, miss)
	}
	return nil
}

// DeleteWorkflow removes a workflow, in one transaction, or returns an
// error wrapping store.ErrNotFound.
func (s *Store) DeleteWorkflow(ctx context.Context, id string) error {
	return s.remove(ctx, s.key("workflows", id), fmt.Sprintf("workflow %q", id), store.ErrNotFound)
}
