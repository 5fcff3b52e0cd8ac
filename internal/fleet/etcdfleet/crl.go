package etcdfleet

import (
	"bytes"
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The fleet CA's certificate revocation list (DER), under crl, on no
// lease: the fleet's first host publishes it (berth fleet revoke) and
// every host's hop refuses the certificates it lists. etcdfleet carries
// its bytes only; the hosts check its signature against the fleet CA.
func (m *Member) crlKey() string { return m.o.Prefix + "crl" }

// PutCRL publishes the CRL der, unless etcd holds it already.
func (m *Member) PutCRL(ctx context.Context, der []byte) error {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	cur, err := m.cli.Get(ctx, m.crlKey())
	if err != nil {
		return err
	}
	if len(cur.Kvs) == 1 && bytes.Equal(cur.Kvs[0].Value, der) {
		return nil
	}
	_, err = m.cli.Put(ctx, m.crlKey(), string(der))
	return err
}

// CRL is the published CRL; nil when there is none.
func (m *Member) CRL(ctx context.Context) ([]byte, int64, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	r, err := m.cli.Get(ctx, m.crlKey())
	if err != nil {
		return nil, 0, err
	}
	if len(r.Kvs) == 0 {
		return nil, r.Header.Revision, nil
	}
	return r.Kvs[0].Value, r.Header.Revision, nil
}

// WatchCRL calls fn with the published CRL, first as it is (when there
// is one), then at every change, until ctx ends. A watch that fails
// reads the key again and carries on.
func (m *Member) WatchCRL(ctx context.Context, fn func(der []byte)) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := m.watchCRLOnce(ctx, fn)
		if ctx.Err() != nil {
			return
		}
		m.o.Log.Warn("fleet: watching the fleet CRL; reading it again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (m *Member) watchCRLOnce(ctx context.Context, fn func([]byte)) error {
	der, rev, err := m.CRL(ctx)
	if err != nil {
		return err
	}
	if der != nil {
		fn(der)
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for w := range m.cli.Watch(wctx, m.crlKey(), clientv3.WithRev(rev+1)) {
		if err := w.Err(); err != nil {
			return err
		}
		for _, ev := range w.Events {
			if ev.Type == clientv3.EventTypePut {
				fn(ev.Kv.Value)
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("the watch ended")
}
