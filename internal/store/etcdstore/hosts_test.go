package etcdstore

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store"
)

// watchInto runs s.WatchShared until the test ends, flattening each batch
// into the returned channel; the second channel gets WatchShared's return.
func watchInto(t *testing.T, s *Store) (<-chan store.Change, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan store.Change, 1024)
	done := make(chan error, 1)
	go func() {
		done <- s.WatchShared(ctx, func(cs []store.Change) {
			for _, c := range cs {
				ch <- c
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ch, done
}

// until collects changes from ch until one equal to last, and returns
// them all (last included).
func until(t *testing.T, ch <-chan store.Change, last store.Change) []store.Change {
	t.Helper()
	var got []store.Change
	deadline := time.After(30 * time.Second)
	for {
		select {
		case c := <-ch:
			got = append(got, c)
			if reflect.DeepEqual(c, last) {
				return got
			}
		case <-deadline:
			t.Fatalf("no change %+v within 30 s; got %+v", last, got)
		}
	}
}

func put(t *testing.T, s *Store, id string) {
	t.Helper()
	if _, err := s.PutDeployment(t.Context(), store.Deployment{ID: id, Namespace: "ns", Spec: []byte(`{}`)}, false, 0); err != nil {
		t.Fatal(err)
	}
}

// TestHostsShareOneStore: two hosts on one cluster and prefix share the
// fleet's records — a deployment, a token, a namespace, an auth provider
// written by a are b's too, and b's WatchShared reports each write and
// delete, in order, key parts unescaped (a's own watch as well) — while
// each host's own records (a Computer, a replica record, a job) stay its
// own: not listed by the other host, not reported, under hosts/<host>/.
func TestHostsShareOneStore(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	const prefix = "/fleetstore/"
	a, err := Open(t.Context(), cli, prefix, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), cli, prefix, "b")
	if err != nil {
		t.Fatal(err)
	}
	bch, _ := watchInto(t, b)
	ach, _ := watchInto(t, a)
	ctx := t.Context()

	put(t, a, "web/1")
	if d, err := b.Deployment(ctx, "web/1"); err != nil || d.Namespace != "ns" {
		t.Fatalf("b's view of a's deployment: %+v, %v", d, err)
	}
	if err := a.PutToken(ctx, store.Token{ID: "t1", Name: "ci", Admin: "admin", SecretSHA256: "ab", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.PutNamespace(ctx, store.Namespace{Name: "team"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.PutAuthProvider(ctx, store.AuthProvider{Namespace: "team", Name: "gh", Spec: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}

	// Host records, of a and of b.
	if _, err := a.CreateComputer(ctx, store.Computer{ID: "ca", Namespace: "team", State: "sleeping", Backings: "[]"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateComputer(ctx, store.Computer{ID: "cb", Namespace: "team", State: "sleeping", Backings: "[]"}); err != nil {
		t.Fatal(err)
	}
	if err := a.RecordReplica(ctx, "web/1", "r1", "digest"); err != nil {
		t.Fatal(err)
	}
	if err := a.InsertJob(ctx, store.Job{ID: "j1", Deployment: "web/1", Namespace: "ns", Kind: "deploy", Status: "done", Record: []byte(`{}`)}, 10, 100); err != nil {
		t.Fatal(err)
	}

	if err := a.DeleteToken(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteDeployment(ctx, "web/1"); err != nil {
		t.Fatal(err)
	}
	put(t, b, "end") // b's own write of a shared record is reported too

	want := []store.Change{
		{Kind: "deployments", Key: []string{"web/1"}},
		{Kind: "tokens", Key: []string{"t1"}},
		{Kind: "namespaces", Key: []string{"team"}},
		{Kind: "authproviders", Key: []string{"team", "gh"}},
		{Kind: "tokens", Key: []string{"t1"}, Deleted: true},
		{Kind: "deployments", Key: []string{"web/1"}, Deleted: true},
		{Kind: "deployments", Key: []string{"end"}},
	}
	for name, ch := range map[string]<-chan store.Change{"b": bch, "a": ach} {
		if got := until(t, ch, want[len(want)-1]); !reflect.DeepEqual(got, want) {
			t.Errorf("%s's WatchShared reported\n%+v\nwant\n%+v", name, got, want)
		}
	}

	// Each host lists its own Computers, replicas and jobs only.
	for _, x := range []struct {
		s    *Store
		want []string
	}{{a, []string{"ca"}}, {b, []string{"cb"}}} {
		cs, err := x.s.Computers(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range cs {
			ids = append(ids, c.ID)
		}
		if !reflect.DeepEqual(ids, x.want) {
			t.Errorf("host %s lists Computers %v, want %v", x.s.Host(), ids, x.want)
		}
	}
	if _, err := b.Computer(ctx, "ca"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("b's view of a's Computer: %v, want not found", err)
	}
	if rs, err := b.ReplicaDigests(ctx, "web/1"); err != nil || len(rs) != 0 {
		t.Errorf("b's replica records: %v, %v", rs, err)
	}
	if rs, err := a.ReplicaDigests(ctx, "web/1"); err != nil || rs["r1"] != "digest" {
		t.Errorf("a's replica records: %v, %v", rs, err)
	}
	if js, err := b.Jobs(ctx, ""); err != nil || len(js) != 0 {
		t.Errorf("b's jobs: %+v, %v", js, err)
	}
	if js, err := a.Jobs(ctx, ""); err != nil || len(js) != 1 || js[0].ID != "j1" {
		t.Errorf("a's jobs: %+v, %v", js, err)
	}
	// The namespace and token are b's as well.
	if ns, err := b.Namespaces(ctx); err != nil || len(ns) != 1 || ns[0].Name != "team" {
		t.Errorf("b's namespaces: %+v, %v", ns, err)
	}

	// The layout: shared records at the prefix, host records under
	// hosts/<host>/.
	for key, want := range map[string]bool{
		prefix + "namespaces/team":         true,
		prefix + "hosts/a/computers/ca":    true,
		prefix + "hosts/b/computers/cb":    true,
		prefix + "hosts/a/replicas/r1":     true,
		prefix + "computers/ca":            false,
		prefix + "hosts/a/namespaces/team": false,
		prefix + "authproviders/team/gh":   true,
		prefix + "deployments/end":         true,
		prefix + "hosts/b/deployments/end": false,
		prefix + "hosts/a/jobs/j1":         true,
		prefix + "jobs/j1":                 false,
	} {
		r, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(r.Kvs) == 1; got != want {
			t.Errorf("key %s exists: %v, want %v", key, got, want)
		}
	}
}

// TestSecretKeyCheckShared: the secret key check is one for every host,
// so a second host cannot begin its own with another key; writing it is
// not reported as a change.
func TestSecretKeyCheckShared(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	a, err := Open(t.Context(), cli, "", "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), cli, "", "b")
	if err != nil {
		t.Fatal(err)
	}
	bch, _ := watchInto(t, b)
	if err := a.PutSecretKeyCheck(t.Context(), []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.SecretKeyCheck(t.Context()); err != nil || string(got) != "sealed" {
		t.Fatalf("b's secret key check: %q, %v", got, err)
	}
	if err := b.PutSecretKeyCheck(t.Context(), []byte("other")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("b's own secret key check: %v, want a conflict", err)
	}
	put(t, a, "after")
	if got := until(t, bch, store.Change{Kind: "deployments", Key: []string{"after"}}); len(got) != 1 {
		t.Errorf("reported %+v, want only the deployment", got)
	}
}

// TestWatchSharedCompacted: a watch that would start at a revision etcd
// compacted away first hands fn Kind "" (reload everything), then the
// changes after it; and it returns ctx's error when ctx ends.
func TestWatchSharedCompacted(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	a, err := Open(t.Context(), cli, "", "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), cli, "", "b")
	if err != nil {
		t.Fatal(err)
	}
	put(t, a, "d1")
	put(t, a, "d2")
	r, err := cli.Get(t.Context(), "none")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(t.Context(), r.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ch := make(chan []store.Change, 16)
	done := make(chan error, 1)
	go func() { done <- b.WatchShared(ctx, func(cs []store.Change) { ch <- cs }) }()
	select {
	case cs := <-ch:
		if !reflect.DeepEqual(cs, []store.Change{{Kind: ""}}) {
			t.Fatalf("first batch after the compaction: %+v, want a reload", cs)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no batch after the compaction")
	}
	put(t, a, "d3")
	select {
	case cs := <-ch:
		if want := []store.Change{{Kind: "deployments", Key: []string{"d3"}}}; !reflect.DeepEqual(cs, want) {
			t.Fatalf("the batch after the reload: %+v, want %+v", cs, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no batch after d3")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchShared after its ctx ended: %v", err)
	}
}

// TestOpenHost: Open refuses a host id that is empty or holds a '/'.
func TestOpenHost(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	for _, h := range []string{"", "a/b", "..", "a\nb"} {
		if _, err := Open(t.Context(), cli, "", h); err == nil || !strings.Contains(err.Error(), "host") {
			t.Errorf("Open(host %q) = %v, want an error naming the host", h, err)
		}
	}
	s, err := Open(t.Context(), cli, "", "web-1.example")
	if err != nil || s.Host() != "web-1.example" {
		t.Fatalf("Open(web-1.example): %v", err)
	}
}

// TestClaimPerHost: berths of different hosts both hold their host's part
// of one store; a second holder of the same host is refused with
// ErrClaimed, naming the holder, while the first holds it; the same
// holder (a restart) takes its own key over; once released, another
// holder of that host gets it. A berth of an earlier version holding the
// whole store keeps every host out.
func TestClaimPerHost(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	open := func(host string) *Store {
		s, err := Open(t.Context(), cli, "", host)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a1, a2, b := open("a"), open("a"), open("b")
	ca, err := a1.Claim(t.Context(), "a (one)", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := b.Claim(t.Context(), "b (one)", 2*time.Second)
	if err != nil {
		t.Fatalf("host b's claim beside a's: %v", err)
	}
	defer cb.Release()
	if _, err := a2.Claim(t.Context(), "a (two)", 2*time.Second); !errors.Is(err, ErrClaimed) || !strings.Contains(err.Error(), "a (one)") {
		t.Fatalf("a second berth of host a: %v, want ErrClaimed naming a (one)", err)
	}
	again, err := a2.Claim(t.Context(), "a (one)", 2*time.Second)
	if err != nil {
		t.Fatalf("a restart of a (one) taking its claim over: %v", err)
	}
	ca.Release()
	again.Release()
	for key, want := range map[string]string{DefaultPrefix + "hosts/b/holder": "b (one)", DefaultPrefix + "hosts/a/holder": ""} {
		r, err := cli.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if len(r.Kvs) == 1 {
			got = string(r.Kvs[0].Value)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	cl, err := a2.Claim(t.Context(), "a (two)", 2*time.Second)
	if err != nil {
		t.Fatalf("host a once released: %v", err)
	}
	cl.Release()

	// A berth of an earlier version holds the whole store at
	// <prefix>holder: no host claims beside it, not even to take its own
	// key over.
	if _, err := cli.Put(t.Context(), DefaultPrefix+"holder", "old-berth"); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		s      *Store
		holder string
	}{{open("c"), "c (one)"}, {b, "b (one)"}} {
		if _, err := x.s.Claim(t.Context(), x.holder, 2*time.Second); !errors.Is(err, ErrClaimed) || !strings.Contains(err.Error(), "old-berth") || !strings.Contains(err.Error(), "earlier version") {
			t.Errorf("%s's claim beside an earlier berth: %v, want ErrClaimed naming it", x.holder, err)
		}
	}
	if _, err := cli.Delete(t.Context(), DefaultPrefix+"holder"); err != nil {
		t.Fatal(err)
	}
	cc, err := open("c").Claim(t.Context(), "c (one)", 2*time.Second)
	if err != nil {
		t.Fatalf("host c once the earlier berth is gone: %v", err)
	}
	cc.Release()
}

// checkLayout: every key under root/<n>/ (the stores a suite opened as
// host h1) is where its kind belongs: a shared kind's (store.SharedKinds,
// the secret key check) at the prefix, every other kind's under
// hosts/h1/; and the suite left keys of each kind of want.
func checkLayout(t *testing.T, cli *clientv3.Client, root string, want ...string) {
	t.Helper()
	r, err := cli.Get(context.Background(), root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	// Independent of the package's own table.
	isShared := map[string]bool{"secretkeycheck": true}
	for _, k := range store.SharedKinds {
		isShared[k] = true
	}
	kinds := map[string]bool{}
	for _, kv := range r.Kvs {
		_, rest, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), root), "/") // past the store's number
		local, isLocal := strings.CutPrefix(rest, "hosts/h1/")
		if !isLocal {
			local = rest
		}
		kind, _, _ := strings.Cut(local, "/")
		kinds[kind] = true
		if want := !isShared[kind]; isLocal != want {
			t.Errorf("key %s: under hosts/h1/ %v, want %v (kind %q)", kv.Key, isLocal, want, kind)
		}
	}
	if len(r.Kvs) == 0 {
		t.Errorf("no key under %s", root)
	}
	for _, k := range want {
		if !kinds[k] {
			t.Errorf("no key of kind %s under %s: %v", k, root, kinds)
		}
	}
}

// TestWatchSharedAcrossFailover: on a cluster of three, the watch goes on
// past the stop of the leader: a change written after it is reported, as
// the changes before it were.
func TestWatchSharedAcrossFailover(t *testing.T) {
	c := etcdtest.Start(t, 3)
	a, err := Open(t.Context(), c.Client(t), "", "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), c.Client(t), "", "b")
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := watchInto(t, b)
	put(t, a, "before")
	until(t, ch, store.Change{Kind: "deployments", Key: []string{"before"}})
	leader := c.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	c.StopMember(leader)
	// The write retries until a new leader answers.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := a.PutDeployment(t.Context(), store.Deployment{ID: "after", Namespace: "ns", Spec: []byte(`{}`)}, false, 0)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write after the leader stopped: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Reported, after a reload at worst.
	got := until(t, ch, store.Change{Kind: "deployments", Key: []string{"after"}})
	for _, x := range got[:len(got)-1] {
		if x.Kind != "" {
			t.Errorf("reported before the write after the failover: %+v", x)
		}
	}
}
