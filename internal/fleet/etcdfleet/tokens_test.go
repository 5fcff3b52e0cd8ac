package etcdfleet_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
)

// tokenSink records what WatchTokens reports; its first reset blocks
// until release is closed.
type tokenSink struct {
	mu      sync.Mutex
	held    map[string]etcdfleet.TokenRecord
	resets  int
	first   chan struct{} // closed when the first reset arrives
	release chan struct{}
}

func (s *tokenSink) ResetFleetTokens(rev int64, recs []etcdfleet.TokenRecord) {
	s.mu.Lock()
	s.resets++
	n := s.resets
	s.held = map[string]etcdfleet.TokenRecord{}
	for _, r := range recs {
		s.held[r.ID] = r
	}
	s.mu.Unlock()
	if n == 1 {
		close(s.first)
		<-s.release
	}
}

func (s *tokenSink) PutFleetToken(rev int64, r etcdfleet.TokenRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[r.ID] = r
}

func (s *tokenSink) DeleteFleetToken(rev int64, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, id)
}

func (s *tokenSink) ids() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.held)), s.resets
}

func rec(id string) etcdfleet.TokenRecord {
	return etcdfleet.TokenRecord{ID: id, Name: id, Admin: "admin", Deployments: []string{"*"}, SecretSHA256: "ab" + id, Host: "alpha"}
}

// TestTokensWatch: the watch reports the tokens and their changes; one
// that falls behind etcd's compaction lists them again and ends up with
// etcd's set; a delete of an absent token is ErrNoToken.
func TestTokensWatch(t *testing.T) {
	c := etcdtest.Start(t, 1)
	m := join(t, c, "alpha", etcdfleet.Options{})
	for _, id := range []string{"t1", "t2"} {
		if _, err := m.PutToken(ctxT(t), rec(id)); err != nil {
			t.Fatal(err)
		}
	}
	s := &tokenSink{first: make(chan struct{}), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.WatchTokens(ctx, s) }()
	defer func() { cancel(); <-done }()

	// While the watcher is held in its first reset (it has listed t1 and
	// t2), t1 is revoked, t3 minted, and etcd compacts past all of it.
	<-s.first
	if _, err := m.DeleteToken(ctxT(t), "t1"); err != nil {
		t.Fatal(err)
	}
	rev, err := m.PutToken(ctxT(t), rec("t3"))
	if err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t)
	if _, err := cli.Compact(ctxT(t), rev); err != nil {
		t.Fatal(err)
	}
	close(s.release)
	waitFor(t, "the watch to list the tokens again", func() bool {
		ids, resets := s.ids()
		return resets >= 2 && slices.Equal(ids, []string{"t2", "t3"})
	})

	// Then it follows changes.
	if _, err := m.DeleteToken(ctxT(t), "t2"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutToken(ctxT(t), rec("t4")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watch to follow a revoke and a mint", func() bool {
		ids, _ := s.ids()
		return slices.Equal(ids, []string{"t3", "t4"})
	})
	if _, err := m.DeleteToken(ctxT(t), "t2"); !errors.Is(err, etcdfleet.ErrNoToken) {
		t.Fatalf("delete of an absent token: %v", err)
	}
	recs, _, err := m.Tokens(ctxT(t))
	if err != nil || len(recs) != 2 || recs[0].SecretSHA256 != "abt3" || recs[0].Host != "alpha" {
		t.Fatalf("tokens: %+v %v", recs, err)
	}
}
