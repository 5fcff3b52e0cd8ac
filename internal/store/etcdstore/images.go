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

// Images returns every image, sorted by name.
func (s *Store) Images(ctx context.Context) ([]store.Image, error) {
	ims, err := list[store.Image](ctx, s, "images", "images")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ims, func(a, b store.Image) int { return cmp.Compare(a.Name, b.Name) })
	return ims, nil
}

// Image returns one image, or an error wrapping store.ErrNotFound.
func (s *Store) Image(ctx context.Context, name string) (store.Image, error) {
	var im store.Image
	found, err := s.get(ctx, s.key("images", name), fmt.Sprintf("image %q", name), &im)
	if err != nil {
		return store.Image{}, err
	}
	if !found {
		return store.Image{}, fmt.Errorf("etcdstore: image %q: %w", name, store.ErrNotFound)
	}
	return im, nil
}

// PutImage inserts im or replaces the image of the same name, in one
// transaction, and returns it as stored. A zero CreatedAt is set to now;
// with keepPinned the replaced image's pin is kept (a read-modify-write
// that commits only if the image did not change since it was read).
func (s *Store) PutImage(ctx context.Context, im store.Image, keepPinned bool) (store.Image, error) {
	if im.Name == "" || im.Digest == "" {
		return store.Image{}, errors.New("etcdstore: an image needs a name and a digest")
	}
	if im.CreatedAt.IsZero() {
		im.CreatedAt = s.now()
	}
	im.CreatedAt = norm(im.CreatedAt)
	var out store.Image
	err := s.update(ctx, s.key("images", im.Name), fmt.Sprintf("image %q", im.Name), func(cur []byte) ([]byte, error) {
		out = im
		if keepPinned && cur != nil {
			var old store.Image
			if err := json.Unmarshal(cur, &old); err != nil {
				return nil, fmt.Errorf("etcdstore: corrupt image %q: %w", im.Name, err)
			}
			out.Pinned = out.Pinned || old.Pinned
		}
		return json.Marshal(out)
	})
	if err != nil {
		return store.Image{}, err
	}
	return out, nil
}

// PinImage sets an image's pinned flag in one read-modify-write
// transaction, or fails with an error wrapping store.ErrNotFound.
func (s *Store) PinImage(ctx context.Context, name string, pinned bool) error {
	return s.update(ctx, s.key("images", name), fmt.Sprintf("image %q", name), func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, fmt.Errorf("etcdstore: image %q: %w", name, store.ErrNotFound)
		}
		var im store.Image
		if err := json.Unmarshal(cur, &im); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt image %q: %w", name, err)
		}
		im.Pinned = pinned
		return json.Marshal(im)
	})
}

// DeleteImage removes an image's name and reports whether another name
// still refers to its digest, in one transaction that commits only if
// what it read still holds: the image is unchanged and either one other
// name sharing the digest is unchanged (shared) or no image was written
// since (not shared). It fails with an error wrapping store.ErrNotFound
// for unknown names.
func (s *Store) DeleteImage(ctx context.Context, name string) (digest string, shared bool, err error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	key, dir := s.key("images", name), s.dir("images")
	for {
		r, err := s.cli.Get(ctx, dir, clientv3.WithPrefix())
		if err != nil {
			return "", false, fmt.Errorf("etcdstore: delete image %q: %w", name, err)
		}
		var (
			mod   int64
			other clientv3.Cmp
		)
		digest, shared = "", false
		ims := make([]store.Image, len(r.Kvs))
		for i, kv := range r.Kvs {
			if err := json.Unmarshal(kv.Value, &ims[i]); err != nil {
				return "", false, fmt.Errorf("etcdstore: corrupt image at %s: %w", kv.Key, err)
			}
			if string(kv.Key) == key {
				mod, digest = kv.ModRevision, ims[i].Digest
			}
		}
		if mod == 0 {
			return "", false, fmt.Errorf("etcdstore: image %q: %w", name, store.ErrNotFound)
		}
		for i, kv := range r.Kvs {
			if string(kv.Key) != key && ims[i].Digest == digest {
				shared, other = true, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)
				break
			}
		}
		if !shared {
			other = clientv3.Compare(clientv3.ModRevision(dir), "<", r.Header.Revision+1).WithPrefix()
		}
		t, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", mod), other).
			// With it, what SQLite's foreign keys delete with an image: its
			// pull record, the namespaces that resolved it, its run config.
			Then(clientv3.OpDelete(key),
				clientv3.OpDelete(s.key("pulledimages", name)),
				clientv3.OpDelete(s.key("pulledimagens", name)+"/", clientv3.WithPrefix()),
				clientv3.OpDelete(s.key("imageconfigs", name))).
			Commit()
		if err != nil {
			return "", false, fmt.Errorf("etcdstore: delete image %q: %w", name, err)
		}
		if t.Succeeded {
			return digest, shared, nil
		}
	}
}
