package etcdstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store"
)

// TestLeaderLossKeepsAcknowledgedWrites: writers keep putting deployments
// into a three-member cluster; its leader is stopped mid-run; writes pause
// and resume on the two left, and every put that returned nil is there
// afterwards with its content. A put that failed may or may not be.
func TestLeaderLossKeepsAcknowledgedWrites(t *testing.T) {
	c := etcdtest.Start(t, 3)
	s, err := Open(t.Context(), c.Client(t), "", "h1")
	if err != nil {
		t.Fatal(err)
	}
	const writers = 4
	var (
		mu     sync.Mutex
		acked  = map[string][]byte{} // id → spec of every acknowledged put
		nAcked atomic.Int64
		nErr   atomic.Int64
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%05d", w, i)
				spec := fmt.Appendf(nil, `{"writer":%d,"seq":%d}`, w, i)
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				_, err := s.PutDeployment(ctx, store.Deployment{ID: id, Namespace: "d", Spec: spec}, true, 0)
				cancel()
				if err != nil {
					nErr.Add(1)
					continue
				}
				mu.Lock()
				acked[id] = spec
				mu.Unlock()
				nAcked.Add(1)
			}
		})
	}
	defer func() { // the writers end however the test does
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s (%d acknowledged, %d failed)", what, nAcked.Load(), nErr.Load())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("writes before the stop", func() bool { return nAcked.Load() >= 100 })
	leader := -1
	waitFor("a leader", func() bool { leader = c.Leader(); return leader >= 0 })
	atStop := nAcked.Load()
	c.StopMember(leader)
	t.Logf("stopped leader m%d after %d acknowledged writes", leader, atStop)
	waitFor("writes after the stop", func() bool { return nAcked.Load() >= atStop+100 })
	close(stop)
	wg.Wait()
	t.Logf("%d writes acknowledged, %d failed", nAcked.Load(), nErr.Load())

	// Read back through a client of the surviving members only.
	var eps []string
	for i, m := range c.Members {
		if i != leader {
			eps = append(eps, m.Endpoints()...)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := Open(t.Context(), cli, "", "h1")
	if err != nil {
		t.Fatal(err)
	}
	list, err := r.Deployments(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]store.Deployment{}
	for _, d := range list {
		stored[d.ID] = d
	}
	for id, spec := range acked {
		d, ok := stored[id]
		switch {
		case !ok:
			t.Errorf("acknowledged deployment %s is missing", id)
		case string(d.Spec) != string(spec) || d.Revision != 1 || d.Namespace != "d":
			t.Errorf("acknowledged deployment %s = %+v (spec %s), want spec %s at revision 1", id, d, d.Spec, spec)
		}
	}
	if len(stored) < len(acked) {
		t.Errorf("%d deployments stored, fewer than the %d acknowledged", len(stored), len(acked))
	}
}
