package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrClaimed is Claim's answer when another berth holds the store's part
// of this host.
var ErrClaimed = errors.New("etcdstore: the store is in use by another berth")

// Claim is one berth's hold on its host's part of a store: the key
// prefix+"hosts/<host>/holder", naming it, on a lease a session keeps
// alive. Berths of different hosts share one store, each holding its own
// host's key; a second berth with the same host id would write the same
// host's records (Computers, jobs, rollouts, ...) as the first without
// knowing of its changes, so it is refused rather than left to diverge.
type Claim struct {
	sess   *concurrency.Session
	key    string
	holder string
}

// Claim makes holder the one user of the store's host (the host Open was
// given), its hold on a lease of ttl (at least a second) kept alive until
// Release or until etcd cannot be reached for that long (Done). A key
// left by the same holder (a berth restarted before its old lease lapsed)
// is taken over; another holder's is refused with ErrClaimed, naming it,
// and so is every claim while a berth of an earlier version holds the
// whole store (prefix+"holder"). Holder is what tells a restart from a second berth: it should name the
// berth (its host id and data dir, say), not only the host.
func (s *Store) Claim(ctx context.Context, holder string, ttl time.Duration) (*Claim, error) {
	if holder == "" {
		return nil, errors.New("etcdstore: a holder is required")
	}
	secs := max(int((ttl+time.Second-1)/time.Second), 1)
	ctx, cancel := opctx(ctx)
	defer cancel()
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(secs), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: claiming the store: %w", err)
	}
	c := &Claim{sess: sess, key: s.key("holder"), holder: holder}
	legacy := s.legacyHolderKey()
	noLegacy := clientv3.Compare(clientv3.CreateRevision(legacy), "=", 0)
	for {
		r, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0), noLegacy).
			Then(clientv3.OpPut(c.key, holder, clientv3.WithLease(sess.Lease()))).
			Else(clientv3.OpGet(c.key), clientv3.OpGet(legacy)).Commit()
		if err != nil {
			sess.Close()
			return nil, fmt.Errorf("etcdstore: claiming the store: %w", err)
		}
		if r.Succeeded {
			return c, nil
		}
		if old := r.Responses[1].GetResponseRange().Kvs; len(old) > 0 {
			sess.Close()
			return nil, fmt.Errorf("%w: %s holds all of %s (a berth of an earlier version, one berth per store): stop it first", ErrClaimed, old[0].Value, s.prefix)
		}
		kvs := r.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // gone meanwhile
		}
		if string(kvs[0].Value) != holder {
			sess.Close()
			return nil, fmt.Errorf("%w: %s holds host %s of %s (one berth per host id: give this one another --host-id)", ErrClaimed, kvs[0].Value, s.host, s.prefix)
		}
		// Our own, from before a restart: move it to this session's lease.
		t, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(c.key), "=", kvs[0].ModRevision), noLegacy).
			Then(clientv3.OpPut(c.key, holder, clientv3.WithLease(sess.Lease()))).Commit()
		if err != nil {
			sess.Close()
			return nil, fmt.Errorf("etcdstore: claiming the store: %w", err)
		}
		if t.Succeeded {
			return c, nil
		}
	}
}

// legacyHolderKey is where a berth of an earlier version (every key at
// the prefix, one berth per store) claims the whole store: while it is
// there, Claim refuses every host.
func (s *Store) legacyHolderKey() string { return s.prefix + "holder" }

// Done is closed when the hold is lost: its lease lapsed (etcd could not
// be reached for its TTL) or was revoked. Another berth of the same host
// may claim it from then on; Claim again to know.
func (c *Claim) Done() <-chan struct{} { return c.sess.Done() }

// Release gives the host's part of the store up: the holder key goes with
// the lease.
func (c *Claim) Release() error { return c.sess.Close() }
