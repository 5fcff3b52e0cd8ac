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

// PluginRecords returns every stored plugin record, sorted by id.
func (s *Store) PluginRecords(ctx context.Context) ([]store.PluginRecord, error) {
	ps, err := list[store.PluginRecord](ctx, s, "plugins", "plugins")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ps, func(a, b store.PluginRecord) int { return cmp.Compare(a.ID, b.ID) })
	return ps, nil
}

// PluginInstalls returns every install, sorted by plugin and namespace.
func (s *Store) PluginInstalls(ctx context.Context) ([]store.PluginInstall, error) {
	ins, err := list[store.PluginInstall](ctx, s, "plugininstalls", "plugin installs")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ins, func(a, b store.PluginInstall) int {
		return cmp.Or(cmp.Compare(a.Plugin, b.Plugin), cmp.Compare(a.Namespace, b.Namespace))
	})
	return ins, nil
}

// installsPerTxn leaves each nested transaction its two operations.
const installsPerTxn = maxTxnOps / 2

func checkInstall(in store.PluginInstall) error {
	if in.Plugin == "" || in.Namespace == "" || len(in.Config) == 0 {
		return errors.New("etcdstore: a plugin install needs a plugin, a namespace and a config")
	}
	return nil
}

// PutPluginRecord replaces the record of p.ID and, in the same
// transaction, adds the installs in add that do not exist yet (an
// existing install of the same plugin and namespace is kept as it is;
// of two in add for the same namespace the first counts). Each install
// is a nested transaction creating its key only if absent. etcd gives
// nested transactions only what the outer one leaves of its 128
// operations, so a transaction holds at most 64: more than 63 installs
// commit in further transactions, after the one with the record.
func (s *Store) PutPluginRecord(ctx context.Context, p store.PluginRecord, add []store.PluginInstall) error {
	if p.ID == "" || len(p.Config) == 0 {
		return errors.New("etcdstore: a plugin record needs an id and a config")
	}
	body, err := json.Marshal(store.PluginRecord{ID: p.ID, Enabled: p.Enabled, Config: bytes.Clone(p.Config), UpdatedAt: p.UpdatedAt})
	if err != nil {
		return fmt.Errorf("etcdstore: plugin %q: %w", p.ID, err)
	}
	ops := []clientv3.Op{clientv3.OpPut(s.key("plugins", p.ID), string(body))}
	seen := map[string]bool{}
	for _, in := range add {
		if in.Plugin != p.ID {
			return fmt.Errorf("etcdstore: install of plugin %q put with plugin %q", in.Plugin, p.ID)
		}
		if err := checkInstall(in); err != nil {
			return err
		}
		if seen[in.Namespace] {
			continue
		}
		seen[in.Namespace] = true
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("etcdstore: install of plugin %q in %q: %w", in.Plugin, in.Namespace, err)
		}
		k := s.key("plugininstalls", in.Plugin, in.Namespace)
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(k, string(b))}, nil))
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	for _, part := range chunks(ops, installsPerTxn) {
		if _, err := s.cli.Txn(ctx).Then(part...).Commit(); err != nil {
			return fmt.Errorf("etcdstore: put plugin %q: %w", p.ID, err)
		}
	}
	return nil
}

// PutPluginInstall inserts or replaces one namespace's install, in one
// transaction.
func (s *Store) PutPluginInstall(ctx context.Context, in store.PluginInstall) error {
	if err := checkInstall(in); err != nil {
		return err
	}
	what := fmt.Sprintf("install of plugin %q in %q", in.Plugin, in.Namespace)
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("etcdstore: %s: %w", what, err)
	}
	return s.put(ctx, s.key("plugininstalls", in.Plugin, in.Namespace), what, b)
}

// DeletePluginInstall removes one namespace's install of a plugin, in one
// transaction; none is no error.
func (s *Store) DeletePluginInstall(ctx context.Context, plugin, namespace string) error {
	return s.deleteKeys(ctx, []string{s.key("plugininstalls", plugin, namespace)},
		fmt.Sprintf("install of plugin %q in %q", plugin, namespace))
}
