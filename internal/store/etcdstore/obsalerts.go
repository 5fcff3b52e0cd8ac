package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// ObsAlerts returns every obs alert rule, oldest first (ties by id).
func (s *Store) ObsAlerts(ctx context.Context) ([]store.ObsAlert, error) {
	as, err := list[store.ObsAlert](ctx, s, "obsalerts", "obs alerts")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(as, func(a, b store.ObsAlert) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return as, nil
}

// PutObsAlert inserts a rule in one transaction; an existing id is an
// error wrapping store.ErrConflict.
func (s *Store) PutObsAlert(ctx context.Context, a store.ObsAlert) error {
	if a.ID == "" || a.Namespace == "" || len(a.Sealed) == 0 {
		return errors.New("etcdstore: an obs alert needs an id, a namespace and its sealed webhook")
	}
	a.CreatedAt = norm(a.CreatedAt)
	body, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("etcdstore: obs alert %q: %w", a.ID, err)
	}
	exists, err := s.create(ctx, s.key("obsalerts", a.ID), fmt.Sprintf("obs alert %q", a.ID), body)
	if err != nil {
		return err
	}
	if exists {
		return fmt.Errorf("etcdstore: obs alert %q: %w", a.ID, store.ErrConflict)
	}
	return nil
}

// DeleteObsAlert removes namespace ns's rule id, in one transaction that
// commits only if the rule read is still the one stored, or returns an
// error wrapping store.ErrNotFound (also when the rule is another
// namespace's).
func (s *Store) DeleteObsAlert(ctx context.Context, ns, id string) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	key := s.key("obsalerts", id)
	r, err := s.cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("etcdstore: read obs alert %q: %w", id, err)
	}
	kv := first(r.Kvs)
	for {
		if kv == nil {
			return fmt.Errorf("etcdstore: obs alert %q: %w", id, store.ErrNotFound)
		}
		var a store.ObsAlert
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			return fmt.Errorf("etcdstore: corrupt obs alert %q: %w", id, err)
		}
		if a.Namespace != ns {
			return fmt.Errorf("etcdstore: obs alert %q: %w", id, store.ErrNotFound)
		}
		t, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(key)).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: delete obs alert %q: %w", id, err)
		}
		if t.Succeeded {
			return nil
		}
		kv = first(t.Responses[0].GetResponseRange().Kvs)
	}
}
