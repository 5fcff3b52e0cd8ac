package etcdfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The Computer index: <prefix>computerhosts/<id> names the host a
// Computer lives on. Computer ids are fleet-unique through it: a host
// claims an id (create-only) before it creates the Computer, and releases
// the claim when it deletes it. The keys are on no lease: a Computer
// outlives its host's restarts, and so does its place in the index.

// ErrComputerClaimed is what ClaimComputer answers an id another host
// holds.
var ErrComputerClaimed = errors.New("etcdfleet: the Computer id is held by another host")

// ComputerHost is a Computer's entry in the index.
type ComputerHost struct {
	Host      string `json:"host"`
	Namespace string `json:"namespace,omitempty"`
}

func (m *Member) computerHostKey(id string) string { return m.o.Prefix + "computerhosts/" + id }

// ClaimComputer claims Computer id (of namespace ns) for this host. It is
// idempotent for this host (a claim it holds already succeeds, its
// namespace kept); an id another host holds is ErrComputerClaimed.
func (m *Member) ClaimComputer(ctx context.Context, id, ns string) error {
	if id == "" {
		return errors.New("etcdfleet: ClaimComputer: empty id")
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	k := m.computerHostKey(id)
	v, _ := json.Marshal(ComputerHost{Host: m.ID(), Namespace: ns})
	r, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(v))).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return fmt.Errorf("etcdfleet: claiming Computer %s: %w", id, err)
	}
	if r.Succeeded {
		return nil
	}
	kvs := r.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		// Deleted between the compare and the get: a Txn does both at
		// one revision, so this cannot be; refuse rather than guess.
		return fmt.Errorf("etcdfleet: claiming Computer %s: the claim changed under the claim", id)
	}
	var h ComputerHost
	if err := json.Unmarshal(kvs[0].Value, &h); err != nil {
		return fmt.Errorf("etcdfleet: %s: %w", k, err)
	}
	if h.Host != m.ID() {
		return ErrComputerClaimed
	}
	return nil
}

// ComputerHost reads Computer id's entry in the index; ok is false when no
// host holds it.
func (m *Member) ComputerHost(ctx context.Context, id string) (h ComputerHost, ok bool, err error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	k := m.computerHostKey(id)
	g, err := m.cli.Get(ctx, k)
	if err != nil {
		return ComputerHost{}, false, fmt.Errorf("etcdfleet: reading where Computer %s lives: %w", id, err)
	}
	if len(g.Kvs) == 0 {
		return ComputerHost{}, false, nil
	}
	if err := json.Unmarshal(g.Kvs[0].Value, &h); err != nil {
		return ComputerHost{}, false, fmt.Errorf("etcdfleet: %s: %w", k, err)
	}
	return h, true, nil
}

// ReleaseComputer removes Computer id's claim when this host holds it; a
// claim of another host's (or none) is left alone.
func (m *Member) ReleaseComputer(ctx context.Context, id string) error {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	k := m.computerHostKey(id)
	for {
		g, err := m.cli.Get(ctx, k)
		if err != nil {
			return fmt.Errorf("etcdfleet: releasing Computer %s: %w", id, err)
		}
		if len(g.Kvs) == 0 {
			return nil
		}
		var h ComputerHost
		if err := json.Unmarshal(g.Kvs[0].Value, &h); err != nil {
			return fmt.Errorf("etcdfleet: %s: %w", k, err)
		}
		if h.Host != m.ID() {
			return nil
		}
		r, err := m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", g.Kvs[0].ModRevision)).
			Then(clientv3.OpDelete(k)).Commit()
		if err != nil {
			return fmt.Errorf("etcdfleet: releasing Computer %s: %w", id, err)
		}
		if r.Succeeded {
			return nil
		}
	}
}
