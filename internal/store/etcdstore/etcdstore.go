package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// Defaults.
const (
	// DefaultPrefix is the key prefix Open uses when given "".
	DefaultPrefix = "/berth/store/"
	// DefaultOpTimeout bounds each call whose context has no deadline.
	DefaultOpTimeout = 10 * time.Second
)

// maxTxnOps is etcd's default --max-txn-ops: no transaction this package
// sends has more operations (or comparisons) than this.
const maxTxnOps = 128

// Store is the etcd-backed store. It is safe for concurrent use. The
// client stays the caller's: Store has nothing to close.
type Store struct {
	cli    *clientv3.Client
	prefix string
	// host is the host this handle is of: its own records (every kind not
	// in store.SharedKinds) live under hostPrefix.
	host       string
	hostPrefix string
	// openRev is the revision Open read at: WatchShared starts after it.
	openRev int64
	// now is the clock for bookkeeping timestamps.
	now func() time.Time
}

// shared are the kinds whose keys every host sharing the store shares
// (store.SharedKinds) and the one shared singleton, the secret key check
// (every host seals with the same key).
var shared = func() map[string]bool {
	m := map[string]bool{kindSecretKeyCheck: true}
	for _, k := range store.SharedKinds {
		m[k] = true
	}
	return m
}()

const kindSecretKeyCheck = "secretkeycheck"

// Open returns the store of host keeping its keys under prefix
// (DefaultPrefix when ""; a missing trailing '/' is added) in the cluster
// cli talks to. Several hosts may share one store: the records of
// store.SharedKinds (and the secret key check) are every host's, each at
// prefix + kind + "/" + …; every other record is host's own, at prefix +
// "hosts/" + host + "/" + kind + "/" + …, and no other host sees it. Host
// must be non-empty, without '/' or control characters. Open reads once
// to check the cluster answers; WatchShared starts at that read's
// revision.
func Open(ctx context.Context, cli *clientv3.Client, prefix, host string) (*Store, error) {
	if cli == nil {
		return nil, errors.New("etcdstore: client must not be nil")
	}
	if err := validHost(host); err != nil {
		return nil, err
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	s := &Store{cli: cli, prefix: prefix, host: host, hostPrefix: prefix + hostsDir + url.PathEscape(host) + "/", now: time.Now}
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: reading %s: %w", prefix, err)
	}
	s.openRev = r.Header.Revision
	return s, nil
}

// hostsDir, under the prefix, holds each host's own records.
const hostsDir = "hosts/"

// validHost refuses a host id that is empty, names a path step, or holds
// a '/' or a control character.
func validHost(host string) error {
	switch {
	case host == "":
		return errors.New("etcdstore: host: a host id is required")
	case host == "." || host == "..":
		return fmt.Errorf("etcdstore: host %q: not a host id", host)
	case len(host) > 253:
		return fmt.Errorf("etcdstore: host %q: longer than 253 bytes", host)
	}
	for _, c := range host {
		if c == '/' || c < 0x20 || c == 0x7f {
			return fmt.Errorf("etcdstore: host %q: no '/' or control characters allowed", host)
		}
	}
	return nil
}

// Host is the host id the store was opened for.
func (s *Store) Host() string { return s.host }

func opctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultOpTimeout)
}

// base is where kind's keys begin: the prefix for a shared kind, this
// host's own directory under it for every other. Every key the store
// reads or writes is built here (through key or dir), so no method can
// put a host's record where the others see it, or the reverse.
func (s *Store) base(kind string) string {
	if k, _, _ := strings.Cut(kind, "/"); shared[k] {
		return s.prefix
	}
	return s.hostPrefix
}

// key is base + kind + "/" + each part path-escaped.
func (s *Store) key(kind string, parts ...string) string {
	var b strings.Builder
	b.WriteString(s.base(kind))
	b.WriteString(kind)
	for _, p := range parts {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(p))
	}
	return b.String()
}

// dir is the prefix every key of kind shares.
func (s *Store) dir(kind string) string { return s.base(kind) + kind + "/" }

// norm is a timestamp as the SQLite store gives it back: UTC, no
// monotonic reading.
func norm(t time.Time) time.Time { return t.UTC().Round(0) }

// list decodes every value under kind's directory (or, given parts, the
// directory of kind's keys beginning with them).
func list[T any](ctx context.Context, s *Store, kind, what string, parts ...string) ([]T, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	dir := s.dir(kind)
	if len(parts) > 0 {
		dir = s.key(kind, parts...) + "/"
	}
	r, err := s.cli.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list %s: %w", what, err)
	}
	var out []T
	for _, kv := range r.Kvs {
		var v T
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return nil, fmt.Errorf("etcdstore: corrupt %s at %s: %w", what, kv.Key, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// get decodes the value at key into v; found is false when there is none.
func (s *Store) get(ctx context.Context, key, what string, v any) (found bool, err error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("etcdstore: read %s: %w", what, err)
	}
	if len(r.Kvs) == 0 {
		return false, nil
	}
	if err := json.Unmarshal(r.Kvs[0].Value, v); err != nil {
		return false, fmt.Errorf("etcdstore: corrupt %s: %w", what, err)
	}
	return true, nil
}

// errSkip, from a decide function, ends update without writing.
var errSkip = errors.New("skip")

// update is a read-modify-write of one key in one transaction: decide
// sees the current value (nil when absent) and returns the new one; the
// put commits only if the key has not changed since it was read, and
// otherwise decide runs again on what the other writer left.
func (s *Store) update(ctx context.Context, key, what string, decide func(cur []byte) ([]byte, error)) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("etcdstore: read %s: %w", what, err)
	}
	kv := first(r.Kvs)
	for {
		var cur []byte
		var mod int64
		if kv != nil {
			cur, mod = kv.Value, kv.ModRevision
		}
		val, err := decide(cur)
		if errors.Is(err, errSkip) {
			return nil
		}
		if err != nil {
			return err
		}
		t, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
			Then(clientv3.OpPut(key, string(val))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: write %s: %w", what, err)
		}
		if t.Succeeded {
			return nil
		}
		kv = first(t.Responses[0].GetResponseRange().Kvs)
	}
}

// remove deletes key in one transaction, or returns an error wrapping
// notFound when there was nothing to delete.
func (s *Store) remove(ctx context.Context, key, what string, notFound error) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	t, err := s.cli.Txn(ctx).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: delete %s: %w", what, err)
	}
	if t.Responses[0].GetResponseDeleteRange().Deleted == 0 {
		return fmt.Errorf("%w: %s", notFound, what)
	}
	return nil
}

func first(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

// chunks splits xs into runs of at most n.
func chunks[T any](xs []T, n int) [][]T {
	var out [][]T
	for len(xs) > n {
		out = append(out, xs[:n])
		xs = xs[n:]
	}
	if len(xs) > 0 {
		out = append(out, xs)
	}
	return out
}
