package etcdfleet_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
)

// TestCRLWatch: a host watching the CRL gets the one published before it
// started, then each new one another host publishes; publishing the same
// bytes again writes nothing.
func TestCRLWatch(t *testing.T) {
	c := etcdtest.Start(t, 1)
	alpha := join(t, c, "alpha", etcdfleet.Options{})
	beta := join(t, c, "beta", etcdfleet.Options{})
	if err := alpha.PutCRL(ctxT(t), []byte("crl-1")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got [][]byte
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		beta.WatchCRL(ctx, func(b []byte) { mu.Lock(); got = append(got, b); mu.Unlock() })
	}()
	defer func() { cancel(); <-done }()
	last := func() ([]byte, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return nil, 0
		}
		return got[len(got)-1], len(got)
	}
	waitFor(t, "the published CRL", func() bool { b, _ := last(); return bytes.Equal(b, []byte("crl-1")) })
	cli := c.Client(t)
	modRev := func() int64 {
		r, err := cli.Get(ctxT(t), etcdfleet.DefaultPrefix+"crl")
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("the CRL key: %v", err)
		}
		return r.Kvs[0].ModRevision
	}
	r1 := modRev()
	if err := alpha.PutCRL(ctxT(t), []byte("crl-1")); err != nil {
		t.Fatal(err)
	}
	if r2 := modRev(); r2 != r1 {
		t.Errorf("the same CRL published again moved the revision %d to %d", r1, r2)
	}
	if err := alpha.PutCRL(ctxT(t), []byte("crl-2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new CRL", func() bool { b, _ := last(); return bytes.Equal(b, []byte("crl-2")) })
	if _, n := last(); n != 2 {
		t.Errorf("the watcher saw %d CRLs, want 2", n)
	}
}
