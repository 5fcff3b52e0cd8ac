package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/berth-dev/berth/internal/fleet/etcdembed"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/etcdstore"
)

// EtcdStoreOptions keep berth's store in etcd (berth serve --store
// etcd://host:2379,…[/prefix]) instead of the SQLite store in DataDir.
// The client's TLS is the fleet's (FleetOptions' CA, certificate and key,
// or fleet.json's).
type EtcdStoreOptions struct {
	// Endpoints are etcd's client URLs; empty keeps the SQLite store.
	Endpoints []string
	// Prefix is the store's key prefix; default etcdstore.DefaultPrefix.
	Prefix string
	// ClaimTTL is the lease the store's claim lives on; default 10 s.
	ClaimTTL time.Duration
}

// The etcd backend offers everything berth keeps, as the SQLite one does
// (store.go).
var _ Store = (*etcdstore.Store)(nil)
var _ sharedStore = (*etcdstore.Store)(nil)

// storeMarker, in a data dir whose store is on etcd, names it.
const storeMarker = "store-on-etcd"

// checkNotOnEtcd refuses to open a SQLite store in a data dir whose
// store is on etcd: it would start empty.
func checkNotOnEtcd(dataDir string) error {
	b, err := os.ReadFile(filepath.Join(dataDir, storeMarker))
	if err != nil {
		return nil
	}
	return fmt.Errorf("server: %s keeps its store on etcd (%s, as %s says): start it with --store etcd://…, or remove %s to begin an empty SQLite store", dataDir, strings.TrimSpace(string(b)), storeMarker, storeMarker)
}

// etcdBacked is the store on etcd with what holds it open.
type etcdBacked struct {
	// member is this host's embedded etcd member when the store lives
	// on it, started before the store; the fleet takes it over.
	member *etcdembed.Server
	cli    *clientv3.Client
	st     *etcdstore.Store
	holder string
	ttl    time.Duration
	claim  *etcdstore.Claim
}

// openEtcdStore connects to etcd, opens the store as this host's (its
// host id: fleet.json's or --host-id, else <data-dir>/host-id) and claims
// the host's part of it for this berth. Berths of other hosts share the
// store's shared records (store.SharedKinds); a second berth with this
// host id is refused, as it would write this host's records too.
func openEtcdStore(ctx context.Context, o Options) (Store, *etcdBacked, error) {
	if _, err := os.Stat(filepath.Join(o.DataDir, store.FileName)); err == nil {
		// Starting on etcd would start empty, the records left behind.
		return nil, nil, fmt.Errorf("server: %s holds a SQLite store (%s): --store etcd:// would start with none of its records; moving them is not supported yet: keep --store sqlite, or give etcd another data dir", o.DataDir, store.FileName)
	}
	f, err := o.Fleet.FromDataDir(o.DataDir)
	if err != nil {
		return nil, nil, err
	}
	b := &etcdBacked{ttl: o.StoreEtcd.ClaimTTL}
	if f.enabled() {
		if err := f.Check(); err != nil {
			return nil, nil, err
		}
		// The store may live on this host's own member (--etcd-dev, or
		// the first host's): it must be up first.
		if b.member, err = startFleetMember(ctx, f, o.DataDir, o.Log); err != nil {
			return nil, nil, err
		}
	}
	tlsConf, err := etcdTLS(f)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (Store, *etcdBacked, error) {
		if b.cli != nil {
			b.cli.Close()
		}
		if b.member != nil {
			b.member.Close()
		}
		return nil, nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: o.StoreEtcd.Endpoints, DialTimeout: 5 * time.Second, TLS: tlsConf, Logger: zap.NewNop(),
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
	})
	if err != nil {
		return fail(fmt.Errorf("server: the etcd store's client: %w", err))
	}
	b.cli = cli
	if b.ttl <= 0 {
		b.ttl = 10 * time.Second
	}
	host := f.HostID
	if host == "" {
		if host, err = loadHostID(o.DataDir); err != nil {
			return fail(err)
		}
	}
	// The holder names this berth, not only its host: a restart on the
	// same data dir takes its own claim over, another berth with the same
	// host id is refused.
	b.holder = claimHolder(host, o.DataDir)
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if b.st, err = etcdstore.Open(octx, cli, o.StoreEtcd.Prefix, host); err != nil {
		return fail(fmt.Errorf("server: the etcd store at %s: %w", strings.Join(o.StoreEtcd.Endpoints, ","), err))
	}
	if b.claim, err = b.st.Claim(octx, b.holder, b.ttl); err != nil {
		return fail(fmt.Errorf("server: %w", err))
	}
	// The data dir remembers where its store is, so that a start without
	// --store cannot begin an empty SQLite store beside it.
	marker := strings.Join(o.StoreEtcd.Endpoints, ",") + " " + o.StoreEtcd.Prefix + "\n"
	if err := os.WriteFile(filepath.Join(o.DataDir, storeMarker), []byte(marker), 0o600); err != nil {
		return fail(fmt.Errorf("server: %w", err))
	}
	return b.st, b, nil
}

// claimHolder is the holder a berth of host on dataDir claims its host's
// part of the store as: "<host> (<machine>:<data dir>)".
func claimHolder(host, dataDir string) string {
	machine, _ := os.Hostname()
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	return fmt.Sprintf("%s (%s:%s)", host, machine, dataDir)
}

// keepClaim claims the store again whenever the claim lapses (etcd out of
// reach for its TTL), until ctx ends; it answers on lost when another
// berth of this host id took it meanwhile: this one must stop, or both
// would write this host's records.
func (b *etcdBacked) keepClaim(ctx context.Context, s *Server, lost chan<- error) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.claim.Done():
		}
		s.log.Warn("the etcd store's claim lapsed; claiming it again", "holder", b.holder)
		for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
			c, err := b.st.Claim(ctx, b.holder, b.ttl)
			if err == nil {
				b.claim = c
				break
			}
			if errors.Is(err, etcdstore.ErrClaimed) {
				lost <- fmt.Errorf("server: this host's part of the etcd store was claimed by another berth while this one could not reach etcd: %w", err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
	}
}

func (b *etcdBacked) close() error {
	if b.claim != nil {
		b.claim.Release()
	}
	err := b.cli.Close()
	if b.member != nil {
		b.member.Close()
	}
	return err
}

// storeMember is the embedded etcd member the store started; nil when
// the store is not on etcd or on no member of this host's.
func (s *Server) storeMember() *etcdembed.Server {
	if s.etcdStore == nil {
		return nil
	}
	return s.etcdStore.member
}
