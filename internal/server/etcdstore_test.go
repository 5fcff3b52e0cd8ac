package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/etcdstore"
)

// TestEtcdStore: with Options.StoreEtcd (berth serve --store etcd://…)
// berth keeps its records in etcd, not in the data dir's SQLite store:
// a deployment, a token and a secret written through the API are etcd
// keys, and a berth started again on the same data dir (the same holder)
// finds them; a second berth with the same host id on the same store is
// refused, naming the holder; one of another host (sealing with the same
// secret key) shares the deployment; one on another prefix sees nothing.
func TestEtcdStore(t *testing.T) {
	c := etcdtest.Start(t, 1)
	onEtcd := func(prefix string) func(*Options) {
		return func(o *Options) {
			o.StoreEtcd = EtcdStoreOptions{Endpoints: c.Endpoints(), Prefix: prefix, ClaimTTL: 2 * time.Second}
		}
	}
	dir := t.TempDir()
	a := startWith(t, dir, onEtcd(""))
	if r := a.json("POST", "/deployments", `{"id":"web","routes":[{"host":"web.test"}],"upstreams":["127.0.0.1:9"]}`); r.code != 201 {
		t.Fatalf("deployment: %d %s", r.code, r.body)
	}
	var minted apitype.MintedToken
	if r := a.json("POST", "/tokens", `{"name":"ci","admin":"admin","deployments":["*"]}`); r.code != 201 || json.Unmarshal(r.body, &minted) != nil {
		t.Fatalf("token: %d %s", r.code, r.body)
	}
	if r := a.json("PUT", "/secrets/db", `{"data":{"password":"hunter2"}}`); r.code != 201 && r.code != 200 {
		t.Fatalf("secret: %d %s", r.code, r.body)
	}
	cli := c.Client(t)
	g, err := cli.Get(context.Background(), etcdstore.DefaultPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range g.Kvs {
		keys = append(keys, string(kv.Key))
		if strings.Contains(string(kv.Value), "hunter2") || strings.Contains(string(kv.Value), minted.Token) {
			t.Fatalf("%s holds a secret in plaintext: %s", kv.Key, kv.Value)
		}
	}
	all := strings.Join(keys, " ")
	hostA, err := loadHostID(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deployments/web", "tokens/", "secrets/", "hosts/" + hostA + "/holder"} {
		if !strings.Contains(all, etcdstore.DefaultPrefix+want) {
			t.Fatalf("no key %s%s in etcd: %s", etcdstore.DefaultPrefix, want, all)
		}
	}

	// A second berth with the same host id (its own data dir, a's host-id
	// and secret key) is refused while a holds its host.
	sameHost := t.TempDir()
	for _, f := range []string{"host-id", "secret.key"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sameHost, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o := Options{ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: sameHost, Log: slog.New(slog.DiscardHandler)}
	onEtcd("")(&o)
	if s, err := New(context.Background(), o); err == nil || !errors.Is(err, etcdstore.ErrClaimed) || !strings.Contains(err.Error(), hostA) {
		if s != nil {
			s.closeStore()
		}
		t.Fatalf("a second berth with host id %s on the claimed store: %v", hostA, err)
	}
	// One of another host, with the same secret key, shares the store's
	// deployments and tokens.
	otherHost := t.TempDir()
	key, err := os.ReadFile(filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(otherHost, "secret.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	peer := startWith(t, otherHost, onEtcd(""))
	if r := peer.do("GET", "/deployments/web", "", ""); r.code != 200 {
		t.Fatalf("web on another host of the store: %d %s", r.code, r.body)
	}
	if r := peer.do("GET", "/deployments", "", "", "Authorization", "Bearer "+minted.Token); r.code != 200 {
		t.Fatalf("the token on another host of the store: %d %s", r.code, r.body)
	}
	hostB, err := loadHostID(otherHost)
	if err != nil || hostB == hostA {
		t.Fatalf("the other host's id: %q, %v", hostB, err)
	}
	if g, err := cli.Get(context.Background(), etcdstore.DefaultPrefix+"hosts/"+hostB+"/holder"); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("the other host's claim: %v %v", g, err)
	}
	peer.stop()
	// One on another prefix is its own store.
	other := startWith(t, "", onEtcd("/berth/other/"))
	if r := other.do("GET", "/deployments/web", "", ""); r.code != 404 {
		t.Fatalf("web on another prefix: %d %s", r.code, r.body)
	}

	// Restarted on the same data dir, the berth finds its records.
	a.stop()
	b := startWith(t, dir, onEtcd(""))
	if r := b.do("GET", "/deployments/web", "", ""); r.code != 200 {
		t.Fatalf("web after the restart: %d %s", r.code, r.body)
	}
	if r := b.do("GET", "/deployments", "", "", "Authorization", "Bearer "+minted.Token); r.code != 200 {
		t.Fatalf("the token after the restart: %d %s", r.code, r.body)
	}
	b.stop()

	// The data dir remembers its store is on etcd: a start without
	// --store is refused rather than begun on an empty SQLite store; and a
	// data dir with a SQLite store is refused --store etcd://.
	try := func(dir string, mod func(*Options)) error {
		o := Options{ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: dir, Log: slog.New(slog.DiscardHandler)}
		if mod != nil {
			mod(&o)
		}
		s, err := New(context.Background(), o)
		if err == nil {
			s.closeStore()
			s.lock.release()
		}
		return err
	}
	if err := try(dir, nil); err == nil || !strings.Contains(err.Error(), "keeps its store on etcd") {
		t.Fatalf("a start on SQLite of an etcd data dir: %v", err)
	}
	sqliteDir := t.TempDir()
	db, err := store.Open(sqliteDir)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := try(sqliteDir, onEtcd("/berth/fresh/")); err == nil || !strings.Contains(err.Error(), "holds a SQLite store") {
		t.Fatalf("--store etcd on a SQLite data dir: %v", err)
	}
}

// TestEtcdStoreOnDevMember: with --etcd-dev and --store etcd:// naming
// the dev member, the member is up before the store opens on it, the
// store's records outlive a restart, and the member stops only after the
// store's last write (a clean Run end).
func TestEtcdStoreOnDevMember(t *testing.T) {
	ports, err := freeTCPPorts(2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dev := func(o *Options) {
		o.Fleet = FleetOptions{Dev: true, DevClientURL: "http://127.0.0.1:" + ports[0], DevPeerURL: "http://127.0.0.1:" + ports[1]}
		o.StoreEtcd = EtcdStoreOptions{Endpoints: []string{"127.0.0.1:" + ports[0]}, ClaimTTL: 2 * time.Second}
	}
	h := startWith(t, dir, dev)
	if r := h.json("POST", "/deployments", `{"id":"web","routes":[{"host":"web.test"}],"upstreams":["127.0.0.1:9"]}`); r.code != 201 {
		t.Fatalf("deployment: %d %s", r.code, r.body)
	}
	if hs := fleetHostsOf(t, h); len(hs.Hosts) != 1 {
		t.Fatalf("hosts: %+v", hs)
	}
	h.stop()
	if _, err := os.Stat(filepath.Join(dir, "berth.db")); err == nil {
		t.Fatal("a SQLite store was made beside the etcd one")
	}
	h = startWith(t, dir, dev)
	if r := h.do("GET", "/deployments/web", "", ""); r.code != 200 {
		t.Fatalf("web after the restart: %d %s", r.code, r.body)
	}
}
