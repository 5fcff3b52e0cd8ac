package etcdstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// Namespaces returns the declared namespaces, sorted by name.
func (s *Store) Namespaces(ctx context.Context) ([]store.Namespace, error) {
	ns, err := list[store.Namespace](ctx, s, "namespaces", "namespaces")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ns, func(a, b store.Namespace) int { return cmp.Compare(a.Name, b.Name) })
	return ns, nil
}

// PutNamespace declares a namespace, or updates the description and
// domains of a declared one, keeping its CreatedAt. It returns the
// namespace as stored and whether it was created.
func (s *Store) PutNamespace(ctx context.Context, n store.Namespace) (store.Namespace, bool, error) {
	if n.Name == "" {
		return store.Namespace{}, false, errors.New("etcdstore: namespace name must not be empty")
	}
	now := norm(s.now())
	var (
		out     store.Namespace
		created bool
	)
	err := s.update(ctx, s.key("namespaces", n.Name), fmt.Sprintf("namespace %q", n.Name), func(cur []byte) ([]byte, error) {
		out = store.Namespace{Name: n.Name, Description: n.Description, Domains: slices.Clone(n.Domains), CreatedAt: now}
		if out.Domains == nil {
			out.Domains = []string{}
		}
		created = cur == nil
		if !created {
			var old store.Namespace
			if err := json.Unmarshal(cur, &old); err != nil {
				return nil, fmt.Errorf("etcdstore: corrupt namespace %q: %w", n.Name, err)
			}
			out.CreatedAt = old.CreatedAt
		}
		return json.Marshal(out)
	})
	if err != nil {
		return store.Namespace{}, false, err
	}
	return out, created, nil
}

// DeleteNamespace removes a declared namespace, or returns an error
// wrapping store.ErrNotFound.
func (s *Store) DeleteNamespace(ctx context.Context, name string) error {
	return s.remove(ctx, s.key("namespaces", name), "namespace "+name, store.ErrNotFound)
}

// AuthProviders returns every declared provider, sorted by namespace and
// name.
func (s *Store) AuthProviders(ctx context.Context) ([]store.AuthProvider, error) {
	ps, err := list[store.AuthProvider](ctx, s, "authproviders", "auth providers")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ps, func(a, b store.AuthProvider) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return ps, nil
}

// PutAuthProvider inserts or replaces a provider, keeping the CreatedAt of
// a replaced one. It returns the provider as stored and whether it was
// created.
func (s *Store) PutAuthProvider(ctx context.Context, p store.AuthProvider) (store.AuthProvider, bool, error) {
	if p.Namespace == "" || p.Name == "" {
		return store.AuthProvider{}, false, errors.New("etcdstore: an auth provider needs a namespace and a name")
	}
	if !json.Valid(p.Spec) {
		return store.AuthProvider{}, false, fmt.Errorf("etcdstore: auth provider %q: spec is not valid JSON", p.Name)
	}
	now := norm(s.now())
	var (
		out     store.AuthProvider
		created bool
	)
	err := s.update(ctx, s.key("authproviders", p.Namespace, p.Name), fmt.Sprintf("auth provider %q", p.Name), func(cur []byte) ([]byte, error) {
		out = store.AuthProvider{Namespace: p.Namespace, Name: p.Name, Spec: bytes.Clone(p.Spec), CreatedAt: now}
		created = cur == nil
		if !created {
			var old store.AuthProvider
			if err := json.Unmarshal(cur, &old); err != nil {
				return nil, fmt.Errorf("etcdstore: corrupt auth provider %q: %w", p.Name, err)
			}
			out.CreatedAt = old.CreatedAt
		}
		return json.Marshal(out)
	})
	if err != nil {
		return store.AuthProvider{}, false, err
	}
	return out, created, nil
}

// DeleteAuthProvider removes a provider, or returns an error wrapping
// store.ErrNotFound.
func (s *Store) DeleteAuthProvider(ctx context.Context, namespace, name string) error {
	return s.remove(ctx, s.key("authproviders", namespace, name), "auth provider "+namespace+"/"+name, store.ErrNotFound)
}

// Tokens returns every stored token, sorted by ID.
func (s *Store) Tokens(ctx context.Context) ([]store.Token, error) {
	ts, err := list[store.Token](ctx, s, "tokens", "tokens")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ts, func(a, b store.Token) int { return cmp.Compare(a.ID, b.ID) })
	return ts, nil
}

// normToken is t as the SQLite store gives it back: UTC times, a non-nil
// Deployments.
func normToken(t store.Token) store.Token {
	t.Deployments = slices.Clone(t.Deployments)
	if t.Deployments == nil {
		t.Deployments = []string{}
	}
	t.CreatedAt, t.ExpiresAt, t.LastUsedAt = norm(t.CreatedAt), norm(t.ExpiresAt), norm(t.LastUsedAt)
	return t
}

// PutToken inserts t or replaces the stored token with the same ID, in one
// transaction. Only the secret's hash (SecretSHA256) is ever stored.
func (s *Store) PutToken(ctx context.Context, t store.Token) error {
	if t.ID == "" || t.SecretSHA256 == "" {
		return errors.New("etcdstore: a token needs an id and a secret hash")
	}
	body, err := json.Marshal(normToken(t))
	if err != nil {
		return fmt.Errorf("etcdstore: token %q: %w", t.ID, err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).Then(clientv3.OpPut(s.key("tokens", t.ID), string(body))).Commit(); err != nil {
		return fmt.Errorf("etcdstore: put token %q: %w", t.ID, err)
	}
	return nil
}

// TouchToken records when a token was last used. A token that no longer
// exists is not an error: it was revoked while the request was in flight.
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	return s.update(ctx, s.key("tokens", id), fmt.Sprintf("token %q", id), func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, errSkip
		}
		var t store.Token
		if err := json.Unmarshal(cur, &t); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt token %q: %w", id, err)
		}
		t.LastUsedAt = norm(at)
		return json.Marshal(t)
	})
}

// DeleteToken removes a token, or returns an error wrapping
// store.ErrNotFound.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	return s.remove(ctx, s.key("tokens", id), "token "+id, store.ErrNotFound)
}

// SealedSecrets returns every stored secret, sorted by namespace and ID.
func (s *Store) SealedSecrets(ctx context.Context) ([]store.SealedSecret, error) {
	ss, err := list[store.SealedSecret](ctx, s, "secrets", "secrets")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ss, func(a, b store.SealedSecret) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID))
	})
	return ss, nil
}

// SealedSecret returns one secret, or an error wrapping store.ErrNotFound.
func (s *Store) SealedSecret(ctx context.Context, namespace, id string) (store.SealedSecret, error) {
	var sec store.SealedSecret
	found, err := s.get(ctx, s.key("secrets", namespace, id), fmt.Sprintf("secret %q", id), &sec)
	if err != nil {
		return store.SealedSecret{}, err
	}
	if !found {
		return store.SealedSecret{}, fmt.Errorf("%w: secret %q in namespace %q", store.ErrNotFound, id, namespace)
	}
	return sec, nil
}

// PutSealedSecret inserts or replaces a secret, in one transaction, and
// reports whether it was created.
func (s *Store) PutSealedSecret(ctx context.Context, sec store.SealedSecret) (created bool, err error) {
	if sec.ID == "" || sec.Namespace == "" || len(sec.Sealed) == 0 {
		return false, errors.New("etcdstore: a secret needs a namespace, an id and a sealed value")
	}
	sec.Sealed, sec.UpdatedAt = bytes.Clone(sec.Sealed), norm(sec.UpdatedAt)
	body, err := json.Marshal(sec)
	if err != nil {
		return false, fmt.Errorf("etcdstore: secret %q: %w", sec.ID, err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	// The put returns the previous value, so one transaction both writes
	// and tells whether there was one.
	t, err := s.cli.Txn(ctx).Then(clientv3.OpPut(s.key("secrets", sec.Namespace, sec.ID), string(body), clientv3.WithPrevKV())).Commit()
	if err != nil {
		return false, fmt.Errorf("etcdstore: put secret %q: %w", sec.ID, err)
	}
	return t.Responses[0].GetResponsePut().PrevKv == nil, nil
}

// DeleteSealedSecret removes a secret, or returns an error wrapping
// store.ErrNotFound.
func (s *Store) DeleteSealedSecret(ctx context.Context, namespace, id string) error {
	return s.remove(ctx, s.key("secrets", namespace, id), "secret "+namespace+"/"+id, store.ErrNotFound)
}

// SecretKeyCheck returns the sealed key check, or an error wrapping
// store.ErrNotFound when none has been written yet.
func (s *Store) SecretKeyCheck(ctx context.Context) ([]byte, error) {
	var b []byte
	found, err := s.get(ctx, s.key(kindSecretKeyCheck), "secret key check", &b)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: secret key check", store.ErrNotFound)
	}
	return b, nil
}

// PutSecretKeyCheck writes the sealed key check unless one exists, in one
// transaction; it returns an error wrapping store.ErrConflict when a check
// was already there.
func (s *Store) PutSecretKeyCheck(ctx context.Context, sealed []byte) error {
	if sealed == nil {
		return errors.New("etcdstore: the secret key check must not be nil")
	}
	body, err := json.Marshal(sealed)
	if err != nil {
		return fmt.Errorf("etcdstore: secret key check: %w", err)
	}
	ctx, cancel := opctx(ctx)
	defer cancel()
	k := s.key(kindSecretKeyCheck)
	t, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(body))).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: put secret key check: %w", err)
	}
	if !t.Succeeded {
		return fmt.Errorf("%w: a secret key check already exists", store.ErrConflict)
	}
	return nil
}
