package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// pullsDir is the prefix of every pull of deployment: its mount pulls at
// pulls/<deployment>/<path>, its artifact pull (path "") at the prefix
// itself, so that one prefix delete forgets them all with the deployment.
func (s *Store) pullsDir(deployment string) string { return s.key("pulls", deployment) + "/" }

func (s *Store) pullKey(deployment, path string) string { return s.key("pulls", deployment, path) }

func checkPull(p store.MountPull) error {
	if p.StripComponents < 0 {
		return fmt.Errorf("etcdstore: pull %s of %q: strip_components %d is negative", p.Path, p.Deployment, p.StripComponents)
	}
	return nil
}

// MountPulls returns the recorded pulls of deployment's mounts, by path.
func (s *Store) MountPulls(ctx context.Context, deployment string) ([]store.MountPull, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Get(ctx, s.pullsDir(deployment), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list mount pulls of %q: %w", deployment, err)
	}
	var out []store.MountPull
	for _, kv := range r.Kvs {
		var p store.MountPull
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt mount pull at %s: %w", kv.Key, err)
		}
		if p.Path != "" {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b store.MountPull) int { return cmp.Compare(a.Path, b.Path) })
	return out, nil
}

// PutMountPulls replaces the recorded pulls of deployment with ps (each
// naming that deployment), in one transaction that commits only if the
// deployment exists and none of its pulls changed since read: a path not
// in ps is forgotten, the artifact pull is kept. It returns an error
// wrapping store.ErrNotFound if there is no such deployment. ps of more
// than 120 pulls is refused (one transaction could not take it).
func (s *Store) PutMountPulls(ctx context.Context, deployment string, ps []store.MountPull) error {
	at := norm(s.now())
	puts := map[string]string{}
	for _, p := range ps {
		if p.Deployment != deployment {
			return fmt.Errorf("etcdstore: mount pull of %q given for %q", p.Deployment, deployment)
		}
		if err := checkPull(p); err != nil {
			return err
		}
		k := s.pullKey(deployment, p.Path)
		if _, dup := puts[k]; dup {
			return fmt.Errorf("etcdstore: put mount pull %s of %q: path given twice", p.Path, deployment)
		}
		p.PulledAt = at
		body, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("etcdstore: mount pull %s of %q: %w", p.Path, deployment, err)
		}
		puts[k] = string(body)
	}
	if len(ps) > 120 {
		return fmt.Errorf("etcdstore: put mount pulls of %q: %d pulls, at most 120", deployment, len(ps))
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	dir, dep, artifact := s.pullsDir(deployment), s.key("deployments", deployment), s.pullKey(deployment, "")
	for {
		r, err := s.cli.Txn(ctx).Then(clientv3.OpGet(dep, clientv3.WithCountOnly()), clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: read mount pulls of %q: %w", deployment, err)
		}
		if r.Responses[0].GetResponseRange().Count == 0 {
			return fmt.Errorf("%w: deployment %q", store.ErrNotFound, deployment)
		}
		var ops []clientv3.Op
		for _, kv := range r.Responses[1].GetResponseRange().Kvs {
			k := string(kv.Key)
			if k == artifact {
				if _, ok := puts[k]; ok {
					// SQLite's primary key (deployment, path) refuses it.
					return fmt.Errorf("etcdstore: put mount pull of %q: path \"\" is the artifact pull's, already recorded", deployment)
				}
				continue
			}
			if _, ok := puts[k]; !ok {
				ops = append(ops, clientv3.OpDelete(k))
			}
		}
		if len(ops)+len(puts) > maxTxnOps {
			return fmt.Errorf("etcdstore: put mount pulls of %q: %d writes in one transaction, at most %d", deployment, len(ops)+len(puts), maxTxnOps)
		}
		for _, k := range slices.Sorted(maps.Keys(puts)) {
			ops = append(ops, clientv3.OpPut(k, puts[k]))
		}
		t, err := s.cli.Txn(ctx).If(txnKeyStored(dep), txnDirUnchanged(dir, r.Header.Revision)).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: put mount pulls of %q: %w", deployment, err)
		}
		if t.Succeeded {
			return nil
		}
	}
}

// ArtifactPull returns the recorded pull of deployment's artifact section
// (Path ""), and whether there is one.
func (s *Store) ArtifactPull(ctx context.Context, deployment string) (store.MountPull, bool, error) {
	var p store.MountPull
	found, err := s.get(ctx, s.pullKey(deployment, ""), fmt.Sprintf("the artifact pull of %q", deployment), &p)
	if err != nil || !found {
		return store.MountPull{}, false, err
	}
	return p, true, nil
}

// PutArtifactPull records p (Path "") as the pull of p.Deployment's
// artifact section, replacing the last, in one transaction that commits
// only if the deployment exists (an error wrapping store.ErrNotFound
// otherwise).
func (s *Store) PutArtifactPull(ctx context.Context, p store.MountPull) error {
	if p.Path != "" {
		return fmt.Errorf("etcdstore: an artifact pull has no path (got %q)", p.Path)
	}
	if err := checkPull(p); err != nil {
		return err
	}
	p.PulledAt = norm(s.now())
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("etcdstore: the artifact pull of %q: %w", p.Deployment, err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	t, err := s.cli.Txn(ctx).If(txnKeyStored(s.key("deployments", p.Deployment))).
		Then(clientv3.OpPut(s.pullKey(p.Deployment, ""), string(body))).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: put the artifact pull of %q: %w", p.Deployment, err)
	}
	if !t.Succeeded {
		return fmt.Errorf("%w: deployment %q", store.ErrNotFound, p.Deployment)
	}
	return nil
}
