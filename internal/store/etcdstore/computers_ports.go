package etcdstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/store"
)

// portRec is an exposed port (computerports/<id>/<port>).
type portRec struct {
	ComputerID string
	store.ComputerPort
}

func (s *Store) portKey(id string, port int) string {
	return s.key("computerports", id, strconv.Itoa(port))
}

// PutComputerPort exposes (or re-exposes: its creation time stays) a port
// of a Computer, in one transaction that commits only if the Computer
// exists; an unknown Computer is an error wrapping store.ErrNotFound. As
// in the SQLite store, the port returned has the time of this call.
func (s *Store) PutComputerPort(ctx context.Context, computerID string, p store.ComputerPort) (store.ComputerPort, error) {
	p.CreatedAt = norm(s.now())
	k, pk := s.computerKey(computerID), s.portKey(computerID, p.Port)
	reads := []clientv3.Op{clientv3.OpGet(k), clientv3.OpGet(pk)}
	err := s.rmw(ctx, fmt.Sprintf("port %d of computer %q", p.Port, computerID), reads, func(_ context.Context, r *clientv3.TxnResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		ckv, pkv := kvAt(r, 0), kvAt(r, 1)
		if ckv == nil {
			return nil, nil, notFoundComputer(computerID)
		}
		rec := portRec{ComputerID: computerID, ComputerPort: p}
		if pkv != nil {
			old, err := decodeKV[portRec](pkv, "port")
			if err != nil {
				return nil, nil, err
			}
			rec.CreatedAt = old.CreatedAt
		}
		put, err := putJSON(pk, rec)
		if err != nil {
			return nil, nil, err
		}
		return []clientv3.Cmp{sameKey(k, ckv), unchanged(pk, pkv)}, []clientv3.Op{put}, nil
	})
	return p, err
}

// DeleteComputerPort unexposes a port; unexposing a port that is not
// exposed does nothing.
func (s *Store) DeleteComputerPort(ctx context.Context, computerID string, port int) error {
	ctx, cancel := opctx(ctx)
	defer cancel()
	if _, err := s.cli.Txn(ctx).Then(clientv3.OpDelete(s.portKey(computerID, port))).Commit(); err != nil {
		return fmt.Errorf("etcdstore: unexpose port: %w", err)
	}
	return nil
}

// ComputerPorts returns the exposed ports of a Computer, by port.
func (s *Store) ComputerPorts(ctx context.Context, computerID string) ([]store.ComputerPort, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Get(ctx, s.key("computerports", computerID)+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list ports: %w", err)
	}
	var out []store.ComputerPort
	for _, kv := range r.Kvs {
		p, err := decodeKV[portRec](kv, "port")
		if err != nil {
			return nil, err
		}
		out = append(out, p.ComputerPort)
	}
	slices.SortFunc(out, func(a, b store.ComputerPort) int { return cmp.Compare(a.Port, b.Port) })
	return out, nil
}

// ComputerPortsSigningInWith lists the exposed ports whose sign-in names
// auth provider name of namespace ns ("default" covers Computers of no
// namespace), as "<computer id>:<port>", sorted by Computer id and port.
// Ports and Computers are read at one revision.
func (s *Store) ComputerPortsSigningInWith(ctx context.Context, ns, name string) ([]string, error) {
	ctx, cancel := opctx(ctx)
	defer cancel()
	r, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.dir("computerports"), clientv3.WithPrefix()),
		clientv3.OpGet(s.dir("computers"), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: ports signing in with %q: %w", name, err)
	}
	nsOf := map[string]string{}
	for _, kv := range kvsAt(r, 1) {
		c, err := decodeKV[store.Computer](kv, "computer")
		if err != nil {
			return nil, err
		}
		nsOf[c.ID] = c.Namespace
	}
	var ps []portRec
	for _, kv := range kvsAt(r, 0) {
		p, err := decodeKV[portRec](kv, "port")
		if err != nil {
			return nil, err
		}
		cns, ok := nsOf[p.ComputerID]
		if ok && p.SignIn == name && (cns == ns || (ns == "default" && cns == "")) {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b portRec) int {
		return cmp.Or(cmp.Compare(a.ComputerID, b.ComputerID), cmp.Compare(a.Port, b.Port))
	})
	var out []string
	for _, p := range ps {
		out = append(out, p.ComputerID+":"+strconv.Itoa(p.Port))
	}
	return out, nil
}
