package etcdfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fleet tokens: app-tokens valid on every host of the fleet. Each is kept
// under <prefix>tokens/<id> on no lease (a token outlives the host that
// minted it), as a TokenRecord: its grants and the hex SHA-256 of its
// secret, never the secret. Every host watches the prefix into memory;
// a revocation is a delete.

// ErrNoToken: DeleteToken of a token etcd does not hold.
var ErrNoToken = errors.New("etcdfleet: no such fleet token")

// TokenRecord is a fleet token as etcd holds it. Times are Unix seconds
// (ExpiresAt 0: never).
type TokenRecord struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Admin        string   `json:"admin"`
	Namespace    string   `json:"namespace,omitempty"`
	Deployments  []string `json:"deployments"`
	CreatedAt    int64    `json:"created_at"`
	ExpiresAt    int64    `json:"expires_at,omitempty"`
	SecretSHA256 string   `json:"secret_sha256"`
	// Host is the id of the host that minted the token.
	Host     string `json:"host"`
	MintedBy string `json:"minted_by,omitempty"`
	// OpenAdmin: minted or changed while its host's admin API had no
	// password; each host applies its own rule to it.
	OpenAdmin bool `json:"open_admin,omitempty"`
}

// TokenSink receives the fleet tokens as WatchTokens follows them: the
// whole set at a revision (at the start, and again whenever the watch
// had to start over), then each change with its revision.
type TokenSink interface {
	ResetFleetTokens(rev int64, recs []TokenRecord)
	PutFleetToken(rev int64, rec TokenRecord)
	DeleteFleetToken(rev int64, id string)
}

func (m *Member) tokensPrefix() string      { return m.o.Prefix + "tokens/" }
func (m *Member) tokenKey(id string) string { return m.tokensPrefix() + id }

// PutToken writes a fleet token and returns the revision of the write.
func (m *Member) PutToken(ctx context.Context, rec TokenRecord) (int64, error) {
	if rec.ID == "" || strings.Contains(rec.ID, "/") {
		return 0, fmt.Errorf("etcdfleet: fleet token id %q", rec.ID)
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	r, err := m.cli.Put(ctx, m.tokenKey(rec.ID), string(body))
	if err != nil {
		return 0, fmt.Errorf("etcdfleet: writing fleet token %s: %w", rec.ID, err)
	}
	return r.Header.Revision, nil
}

// DeleteToken revokes a fleet token on every host: ErrNoToken when etcd
// does not hold it.
func (m *Member) DeleteToken(ctx context.Context, id string) (int64, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	r, err := m.cli.Delete(ctx, m.tokenKey(id))
	if err != nil {
		return 0, fmt.Errorf("etcdfleet: deleting fleet token %s: %w", id, err)
	}
	if r.Deleted == 0 {
		return r.Header.Revision, ErrNoToken
	}
	return r.Header.Revision, nil
}

// Tokens lists the fleet tokens and says at which revision.
func (m *Member) Tokens(ctx context.Context) ([]TokenRecord, int64, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	r, err := m.cli.Get(ctx, m.tokensPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("etcdfleet: listing fleet tokens: %w", err)
	}
	out := make([]TokenRecord, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		if rec, ok := m.tokenRecord(kv); ok {
			out = append(out, rec)
		}
	}
	return out, r.Header.Revision, nil
}

func (m *Member) tokenRecord(kv *mvccpb.KeyValue) (TokenRecord, bool) {
	var rec TokenRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.ID != strings.TrimPrefix(string(kv.Key), m.tokensPrefix()) || rec.SecretSHA256 == "" {
		m.o.Log.Warn("fleet: unreadable fleet token record", "key", string(kv.Key), "err", err)
		return TokenRecord{}, false
	}
	return rec, true
}

// WatchTokens follows the fleet tokens into sink until ctx ends: the set
// first, then every change. A watch that fails or falls behind etcd's
// compaction lists the set again and carries on from there.
func (m *Member) WatchTokens(ctx context.Context, sink TokenSink) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := m.watchTokensOnce(ctx, sink)
		if ctx.Err() != nil {
			return
		}
		m.o.Log.Warn("fleet: watching the fleet tokens; listing them again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (m *Member) watchTokensOnce(ctx context.Context, sink TokenSink) error {
	recs, rev, err := m.Tokens(ctx)
	if err != nil {
		return err
	}
	sink.ResetFleetTokens(rev, recs)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for w := range m.cli.Watch(wctx, m.tokensPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := w.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return fmt.Errorf("the watch fell behind etcd's compaction (revision %d): %w", w.CompactRevision, err)
			}
			return err
		}
		for _, ev := range w.Events {
			switch ev.Type {
			case clientv3.EventTypePut:
				if rec, ok := m.tokenRecord(ev.Kv); ok {
					sink.PutFleetToken(ev.Kv.ModRevision, rec)
				} else { // fail closed: an unreadable change revokes
					sink.DeleteFleetToken(ev.Kv.ModRevision, strings.TrimPrefix(string(ev.Kv.Key), m.tokensPrefix()))
				}
			case clientv3.EventTypeDelete:
				sink.DeleteFleetToken(ev.Kv.ModRevision, strings.TrimPrefix(string(ev.Kv.Key), m.tokensPrefix()))
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("the watch ended")
}
