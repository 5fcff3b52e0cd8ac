package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// rolloutsDir is the prefix of deployment's rollouts:
// rollouts/<deployment>/<operation id>.
func (s *Store) rolloutsDir(deployment string) string { return s.key("rollouts", deployment) + "/" }

// storedRollout is a rollout as read back, with the revision that created
// its key, which orders rollouts as the SQLite store's seq does.
type storedRollout struct {
	store.Rollout
	seq int64
}

func decodeRollouts(kvs []*mvccpb.KeyValue) ([]storedRollout, error) {
	out := make([]storedRollout, 0, len(kvs))
	for _, kv := range kvs {
		var r store.Rollout
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt rollout at %s: %w", kv.Key, err)
		}
		out = append(out, storedRollout{r, kv.CreateRevision})
	}
	slices.SortFunc(out, func(a, b storedRollout) int { return cmp.Compare(a.seq, b.seq) })
	return out, nil
}

// checkRolloutStatus refuses what the SQLite store's CHECK constraint
// does.
func checkRolloutStatus(r store.Rollout) error {
	switch r.Status {
	case "running", "succeeded", "failed", "reconciliation_required":
		return nil
	}
	return fmt.Errorf("etcdstore: rollout %q of %q: status %q is not running, succeeded, failed or reconciliation_required", r.OperationID, r.Deployment, r.Status)
}

// normRollout is r as the SQLite store gives it back: an empty
// settlement or spec is nil, times in UTC.
func normRollout(r store.Rollout) store.Rollout {
	for _, b := range []*[]byte{&r.FailureSettlement, &r.SourceSpec, &r.FallbackSpec} {
		if len(*b) == 0 {
			*b = nil
		}
	}
	r.CreatedAt, r.UpdatedAt = norm(r.CreatedAt), norm(r.UpdatedAt)
	return r
}

// PutRollout records a new operation and trims the deployment's history to
// its newest keep operations (running ones are never trimmed), in one
// transaction that commits only if none of the deployment's rollouts
// changed since read. It returns an error wrapping store.ErrConflict when
// the deployment already has an operation of that id, and one wrapping
// store.ErrNotFound when the deployment does not exist. A history of more
// than 125 rollouts past keep is trimmed 125 at a time (each transaction
// whole; the first one with the insert).
func (s *Store) PutRollout(ctx context.Context, r store.Rollout, keep int) (store.Rollout, error) {
	// What the SQLite store's constraints refuse, refused after the checks
	// it makes first (an existing id, a missing deployment).
	var invalid error
	switch {
	case r.SourceSpec == nil:
		invalid = fmt.Errorf("etcdstore: rollout %q of %q: source_spec must not be nil", r.OperationID, r.Deployment)
	case r.FallbackSpec == nil:
		invalid = fmt.Errorf("etcdstore: rollout %q of %q: fallback_spec must not be nil", r.OperationID, r.Deployment)
	default:
		invalid = checkRolloutStatus(r)
	}
	now := norm(s.now())
	r.CreatedAt, r.UpdatedAt = now, now
	r = normRollout(r)
	body, err := json.Marshal(r)
	if err != nil {
		return store.Rollout{}, fmt.Errorf("etcdstore: rollout %q: %w", r.OperationID, err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	key, dir, dep := s.key("rollouts", r.Deployment, r.OperationID), s.rolloutsDir(r.Deployment), s.key("deployments", r.Deployment)
	for first := true; ; {
		g, err := s.cli.Txn(ctx).Then(clientv3.OpGet(dep, clientv3.WithCountOnly()), clientv3.OpGet(dir, clientv3.WithPrefix())).Commit()
		if err != nil {
			return store.Rollout{}, fmt.Errorf("etcdstore: read rollouts of %q: %w", r.Deployment, err)
		}
		rs, err := decodeRollouts(g.Responses[1].GetResponseRange().Kvs)
		if err != nil {
			return store.Rollout{}, err
		}
		var ops []clientv3.Op
		cmps := []clientv3.Cmp{txnDirUnchanged(dir, g.Header.Revision)}
		if first {
			if slices.ContainsFunc(rs, func(x storedRollout) bool { return x.OperationID == r.OperationID }) {
				return store.Rollout{}, fmt.Errorf("%w: rollout %q of %q exists", store.ErrConflict, r.OperationID, r.Deployment)
			}
			if g.Responses[0].GetResponseRange().Count == 0 {
				return store.Rollout{}, fmt.Errorf("%w: deployment %q", store.ErrNotFound, r.Deployment)
			}
			if invalid != nil {
				return store.Rollout{}, invalid
			}
			rs = append(rs, storedRollout{r, g.Header.Revision + 1})
			ops = append(ops, clientv3.OpPut(key, string(body)))
			cmps = append(cmps, txnKeyAbsent(key), txnKeyStored(dep))
		}
		var gone []string
		if keep > 0 {
			// Not among the newest keep, and not running.
			for _, x := range rs[:max(0, len(rs)-keep)] {
				if x.Status != "running" {
					gone = append(gone, x.OperationID)
				}
			}
		}
		more := len(gone) > maxTxnOps-3
		if more {
			gone = gone[:maxTxnOps-3]
		}
		for _, id := range gone {
			ops = append(ops, clientv3.OpDelete(s.key("rollouts", r.Deployment, id)))
		}
		if len(ops) == 0 {
			return r, nil
		}
		t, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return store.Rollout{}, fmt.Errorf("etcdstore: put rollout %q: %w", r.OperationID, err)
		}
		if t.Succeeded {
			first = false
			if !more {
				return r, nil
			}
		}
	}
}

// UpdateRollout stores the state of an existing operation (status, phase,
// readiness, previous stopped, error, settlement; its update time), in
// one transaction that commits only if the operation is unchanged since
// read. It returns an error wrapping store.ErrNotFound when there is none.
func (s *Store) UpdateRollout(ctx context.Context, r store.Rollout) error {
	now := norm(s.now())
	return s.update(ctx, s.key("rollouts", r.Deployment, r.OperationID), fmt.Sprintf("rollout %q of %q", r.OperationID, r.Deployment), func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, fmt.Errorf("%w: rollout %q of %q", store.ErrNotFound, r.OperationID, r.Deployment)
		}
		if err := checkRolloutStatus(r); err != nil {
			return nil, err
		}
		var x store.Rollout
		if err := json.Unmarshal(cur, &x); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt rollout %q of %q: %w", r.OperationID, r.Deployment, err)
		}
		x.Status, x.Phase, x.ReadinessVerified, x.PreviousStopped = r.Status, r.Phase, r.ReadinessVerified, r.PreviousStopped
		x.Error, x.FailureSettlement, x.UpdatedAt = r.Error, r.FailureSettlement, now
		return json.Marshal(normRollout(x))
	})
}

// Rollout returns one operation, or an error wrapping store.ErrNotFound.
func (s *Store) Rollout(ctx context.Context, deployment, operation string) (store.Rollout, error) {
	var r store.Rollout
	found, err := s.get(ctx, s.key("rollouts", deployment, operation), fmt.Sprintf("rollout %q of %q", operation, deployment), &r)
	if err != nil {
		return store.Rollout{}, err
	}
	if !found {
		return store.Rollout{}, fmt.Errorf("%w: rollout %q of %q", store.ErrNotFound, operation, deployment)
	}
	return r, nil
}

func (s *Store) rollouts(ctx context.Context, dir string) ([]storedRollout, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	g, err := s.cli.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list rollouts: %w", err)
	}
	return decodeRollouts(g.Kvs)
}

// Rollouts returns a deployment's operations, newest first, at most limit
// (every one when limit is negative, as SQLite's LIMIT).
func (s *Store) Rollouts(ctx context.Context, deployment string, limit int) ([]store.Rollout, error) {
	rs, err := s.rollouts(ctx, s.rolloutsDir(deployment))
	if err != nil {
		return nil, err
	}
	var out []store.Rollout
	for i := len(rs) - 1; i >= 0 && (limit < 0 || len(out) < limit); i-- {
		out = append(out, rs[i].Rollout)
	}
	return out, nil
}

// RunningRollouts returns every operation still running, oldest first.
func (s *Store) RunningRollouts(ctx context.Context) ([]store.Rollout, error) {
	rs, err := s.rollouts(ctx, s.dir("rollouts"))
	if err != nil {
		return nil, err
	}
	var out []store.Rollout
	for _, r := range rs {
		if r.Status == "running" {
			out = append(out, r.Rollout)
		}
	}
	return out, nil
}

// replicaRecord is the value at replicas/<replica id>.
type replicaRecord struct {
	Replica, Deployment, KeyDigest string
}

// RecordReplica records the template digest of a deployment replica
// (fleet.ReplicaRecords), replacing the replica's last record, in one
// transaction.
func (s *Store) RecordReplica(ctx context.Context, deployment, id, keyDigest string) error {
	body, err := json.Marshal(replicaRecord{id, deployment, keyDigest})
	if err != nil {
		return fmt.Errorf("etcdstore: record replica %q: %w", id, err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).Then(clientv3.OpPut(s.key("replicas", id), string(body))).Commit(); err != nil {
		return fmt.Errorf("etcdstore: record replica %q: %w", id, err)
	}
	return nil
}

// ReplicaDigests returns the recorded template digests of a deployment's
// replicas, by replica id (an empty, non-nil map when none).
func (s *Store) ReplicaDigests(ctx context.Context, deployment string) (map[string]string, error) {
	rs, err := list[replicaRecord](ctx, s, "replicas", "replica templates")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range rs {
		if r.Deployment == deployment {
			out[r.Replica] = r.KeyDigest
		}
	}
	return out, nil
}

// ForgetReplica drops a stopped replica's record, in one transaction;
// forgetting an unknown one is not an error.
func (s *Store) ForgetReplica(ctx context.Context, id string) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).Then(clientv3.OpDelete(s.key("replicas", id))).Commit(); err != nil {
		return fmt.Errorf("etcdstore: forget replica %q: %w", id, err)
	}
	return nil
}
