package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// imagesRowKey is the key of the images row a pulled image and an image
// config belong to (the SQLite store's foreign keys to images (name)).
func (s *Store) imagesRowKey(name string) string { return s.key("images", name) }

// pulledNSDir is the prefix of the namespaces that resolved the pulled
// image name: pulledimagens/<name>/<namespace>, value the namespace.
func (s *Store) pulledNSDir(name string) string { return s.key("pulledimagens", name) + "/" }

// PulledImages returns every pulled image, by name, each with its
// namespaces (sorted), read at one revision.
func (s *Store) PulledImages(ctx context.Context) ([]store.PulledImage, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.dir("pulledimages"), clientv3.WithPrefix()),
		clientv3.OpGet(s.dir("pulledimagens"), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list pulled images: %w", err)
	}
	var out []store.PulledImage
	for _, kv := range r.Responses[0].GetResponseRange().Kvs {
		var p store.PulledImage
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt pulled image at %s: %w", kv.Key, err)
		}
		p.Namespaces = nil
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b store.PulledImage) int { return cmp.Compare(a.Name, b.Name) })
	byName := map[string]int{}
	for i, p := range out {
		byName[s.pulledNSDir(p.Name)] = i
	}
	for _, kv := range r.Responses[1].GetResponseRange().Kvs {
		k := string(kv.Key)
		dir := k[:strings.LastIndexByte(k, '/')+1]
		if i, ok := byName[dir]; ok {
			out[i].Namespaces = append(out[i].Namespaces, string(kv.Value))
		}
	}
	for i := range out {
		slices.Sort(out[i].Namespaces)
	}
	return out, nil
}

// PutPulledImage records p, replacing the record of the same name and its
// namespaces (a reference that moved is re-proven by each namespace), in
// one transaction that commits only if the images row of the name exists
// (an error wrapping store.ErrNotFound otherwise) and no namespace was
// added meanwhile. More than 120 namespaces are refused.
func (s *Store) PutPulledImage(ctx context.Context, p store.PulledImage) error {
	nss := slices.Compact(slices.Sorted(slices.Values(p.Namespaces)))
	if len(nss) > 120 {
		return fmt.Errorf("etcdstore: put pulled image %q: %d namespaces, at most 120", p.Name, len(nss))
	}
	rec := p
	rec.Namespaces = nil
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("etcdstore: pulled image %q: %w", p.Name, err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	dir, img := s.pulledNSDir(p.Name), s.imagesRowKey(p.Name)
	keep := map[string]bool{}
	for _, n := range nss {
		keep[dir+url.PathEscape(n)] = true
	}
	for {
		r, err := s.cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return fmt.Errorf("etcdstore: read pulled image %q: %w", p.Name, err)
		}
		ops := []clientv3.Op{clientv3.OpPut(s.key("pulledimages", p.Name), string(body))}
		for _, kv := range r.Kvs {
			if !keep[string(kv.Key)] {
				ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			}
		}
		if len(ops)+len(nss) > maxTxnOps {
			return fmt.Errorf("etcdstore: put pulled image %q: %d writes in one transaction, at most %d", p.Name, len(ops)+len(nss), maxTxnOps)
		}
		for _, n := range nss {
			ops = append(ops, clientv3.OpPut(dir+url.PathEscape(n), n))
		}
		t, err := s.cli.Txn(ctx).If(txnKeyStored(img), txnDirUnchanged(dir, r.Header.Revision)).
			Then(ops...).Else(clientv3.OpGet(img, clientv3.WithCountOnly())).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: put pulled image %q: %w", p.Name, err)
		}
		if t.Succeeded {
			return nil
		}
		if t.Responses[0].GetResponseRange().Count == 0 {
			return fmt.Errorf("etcdstore: put pulled image %q: %w: image %q", p.Name, store.ErrNotFound, p.Name)
		}
	}
}

// AddPulledNamespace records that namespace resolved the pulled image
// name (again is no error), in one transaction that commits only if the
// pulled image is recorded (an error wrapping store.ErrNotFound
// otherwise, where SQLite's foreign key refuses it).
func (s *Store) AddPulledNamespace(ctx context.Context, name, namespace string) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	t, err := s.cli.Txn(ctx).If(txnKeyStored(s.key("pulledimages", name))).
		Then(clientv3.OpPut(s.pulledNSDir(name)+url.PathEscape(namespace), namespace)).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: pulled image %q: %w", name, err)
	}
	if !t.Succeeded {
		return fmt.Errorf("etcdstore: pulled image %q: %w", name, store.ErrNotFound)
	}
	return nil
}

// DeletePulledImage forgets a pulled image's record and its namespaces, in
// one transaction (no error when none).
func (s *Store) DeletePulledImage(ctx context.Context, name string) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).Then(
		clientv3.OpDelete(s.key("pulledimages", name)),
		clientv3.OpDelete(s.pulledNSDir(name), clientv3.WithPrefix()),
	).Commit(); err != nil {
		return fmt.Errorf("etcdstore: delete pulled image %q: %w", name, err)
	}
	return nil
}

// RegistryCredentials lists a namespace's mappings, by host (an empty,
// non-nil slice when none).
func (s *Store) RegistryCredentials(ctx context.Context, namespace string) ([]store.RegistryCredential, error) {
	cs, err := list[store.RegistryCredential](ctx, s, "registrycredentials", "registry credentials", namespace)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		cs = []store.RegistryCredential{}
	}
	slices.SortFunc(cs, func(a, b store.RegistryCredential) int { return cmp.Compare(a.Host, b.Host) })
	return cs, nil
}

// RegistryCredential returns one mapping, or an error wrapping
// store.ErrNotFound (with the mapping's namespace and host filled in).
func (s *Store) RegistryCredential(ctx context.Context, namespace, host string) (store.RegistryCredential, error) {
	c := store.RegistryCredential{Namespace: namespace, Host: host}
	var got store.RegistryCredential
	found, err := s.get(ctx, s.key("registrycredentials", namespace, host), "registry credential", &got)
	if err != nil {
		return c, err
	}
	if !found {
		return c, fmt.Errorf("etcdstore: registry credential %s/%s: %w", namespace, host, store.ErrNotFound)
	}
	c.Secret = got.Secret
	return c, nil
}

// PutRegistryCredential creates or replaces a mapping, in one
// transaction. It stores what the SQLite store does: the id of the
// namespace's secret holding the credentials, never their value.
func (s *Store) PutRegistryCredential(ctx context.Context, c store.RegistryCredential) error {
	body, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("etcdstore: put registry credential: %w", err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).Then(clientv3.OpPut(s.key("registrycredentials", c.Namespace, c.Host), string(body))).Commit(); err != nil {
		return fmt.Errorf("etcdstore: put registry credential: %w", err)
	}
	return nil
}

// DeleteRegistryCredential removes a mapping, in one transaction, or fails
// with an error wrapping store.ErrNotFound.
func (s *Store) DeleteRegistryCredential(ctx context.Context, namespace, host string) error {
	return s.remove(ctx, s.key("registrycredentials", namespace, host), fmt.Sprintf("registry credential %s/%s", namespace, host), store.ErrNotFound)
}

// imageConfig is the value at imageconfigs/<name>.
type imageConfig struct {
	Name   string
	Config string
}

// ImageConfigs returns the recorded run defaults of built images: name →
// JSON (package image's Config); an empty, non-nil map when none.
func (s *Store) ImageConfigs(ctx context.Context) (map[string]string, error) {
	cs, err := list[imageConfig](ctx, s, "imageconfigs", "image configs")
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(cs))
	for _, c := range cs {
		out[c.Name] = c.Config
	}
	return out, nil
}

// PutImageConfig records the run defaults of the image name, in one
// transaction that commits only if its images row exists (an error
// wrapping store.ErrNotFound otherwise); config "" forgets them (no error
// when none).
func (s *Store) PutImageConfig(ctx context.Context, name, config string) error {
	key := s.key("imageconfigs", name)
	ctx, cancel := opctx(ctx)
	defer cancel()
	if config == "" {
		if _, err := s.cli.Txn(ctx).Then(clientv3.OpDelete(key)).Commit(); err != nil {
			return fmt.Errorf("etcdstore: put image config %q: %w", name, err)
		}
		return nil
	}
	body, err := json.Marshal(imageConfig{name, config})
	if err != nil {
		return fmt.Errorf("etcdstore: put image config %q: %w", name, err)
	}
	t, err := s.cli.Txn(ctx).If(txnKeyStored(s.imagesRowKey(name))).Then(clientv3.OpPut(key, string(body))).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: put image config %q: %w", name, err)
	}
	if !t.Succeeded {
		return fmt.Errorf("etcdstore: put image config %q: %w: image %q", name, store.ErrNotFound, name)
	}
	return nil
}
