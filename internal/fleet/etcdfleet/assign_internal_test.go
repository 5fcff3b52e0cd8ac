package etcdfleet

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
)

// TestAssignmentWatchResyncsAfterCompaction: the revisions the watch
// needs are compacted away between its list and its watch (meanwhile the
// host's unit moved): the watch fails with ErrCompacted, lists again and
// delivers the move.
func TestAssignmentWatchResyncsAfterCompaction(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := c.Client(t)
	m, err := Join(ctx, cli, Host{ID: "h"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave(context.Background())
	term, err := m.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if err := term.Assign(ctx, Assignment{Unit: "u", Host: "h"}); err != nil {
		t.Fatal(err)
	}
	var (
		once      sync.Once
		compacted = make(chan error, 1)
	)
	testHookAssignWatch = func(rev int64) {
		once.Do(func() {
			// The unit moves, and the history goes.
			if err := term.Assign(ctx, Assignment{Unit: "u", Host: "other"}); err != nil {
				t.Error(err)
			}
			if err := term.Assign(ctx, Assignment{Unit: "v", Host: "other"}); err != nil {
				t.Error(err)
			}
			g, err := cli.Get(ctx, "x")
			if err == nil {
				_, err = cli.Compact(ctx, g.Header.Revision)
			}
			compacted <- err
		})
	}
	// The watch's own error, as the loop logs it.
	err = m.watchAssignmentsOnce(ctx, func(a Assignment) bool { return a.Host == "h" }, func([]Assignment) {})
	if !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("the watch over compacted revisions: %v, want ErrCompacted", err)
	}
	if err := <-compacted; err != nil {
		t.Fatal(err)
	}
	// WatchAssignments lists again and carries on.
	wctx, wcancel := context.WithCancel(ctx)
	once = sync.Once{}
	if err := term.Assign(ctx, Assignment{Unit: "u", Host: "h"}); err != nil {
		t.Fatal(err)
	}
	ch := m.WatchAssignments(wctx, "h")
	select {
	case first := <-ch:
		if len(first) != 1 || first[0].Unit != "u" {
			t.Fatalf("first list %+v", first)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no first list")
	}
	if err := <-compacted; err != nil {
		t.Fatal(err)
	}
	select {
	case as := <-ch:
		if len(as) != 0 {
			t.Fatalf("after the resync: %+v, want u gone", as)
		}
	case <-time.After(30 * time.Second):
		t.Error("no list after the compaction")
	}
	wcancel()
	for range ch { // the watch's goroutine is done with the hook
	}
	testHookAssignWatch = nil
}
