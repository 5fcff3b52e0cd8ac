package etcdstore

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestSuite runs the backend suite shared with the SQLite store on a real
// etcd member, each subtest under a prefix of its own, as host h1; then
// every key the suite left is where its kind belongs (checkLayout).
func TestSuite(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) storetest.Backend {
		s, err := Open(t.Context(), cli, fmt.Sprintf("/test/%d/", n.Add(1)), "h1")
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
	checkLayout(t, cli, "/test/", "deployments", "tokens", "secretkeycheck", "grants")
}

func TestOpen(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	if _, err := Open(t.Context(), nil, "", "h1"); err == nil || !strings.Contains(err.Error(), "client") {
		t.Errorf("Open(nil client) = %v, want an error naming the client", err)
	}
	s, err := Open(t.Context(), cli, "", "h1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutDeployment(t.Context(), store.Deployment{ID: "a/b", Spec: []byte(`{}`)}, true, 0); err != nil {
		t.Fatal(err)
	}
	// The key layout doc.go describes: default prefix, escaped id.
	r, err := cli.Get(t.Context(), DefaultPrefix+"deployments/a%2Fb")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("key of deployment a/b: %v, %v", r, err)
	}
	// Another prefix is another store.
	o, err := Open(t.Context(), cli, "/elsewhere", "h1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Deployment(t.Context(), "a/b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deployment seen under another prefix: %v", err)
	}
}

// TestGuardRulesMany: more ids than one etcd transaction takes.
func TestGuardRulesMany(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s, err := Open(t.Context(), c.Client(t), "", "h1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const n = 2*maxTxnOps + 3
	var ids []string
	hits := map[string]store.GuardHits{}
	for i := range n {
		id := fmt.Sprintf("r%04d", i)
		ids = append(ids, id)
		hits[id] = store.GuardHits{Delta: int64(i)}
		if err := s.PutGuardRule(ctx, store.GuardRule{ID: id, Action: "block", CreatedAt: s.now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddGuardHits(ctx, hits); err != nil {
		t.Fatalf("AddGuardHits of %d rules: %v", n, err)
	}
	rules, err := s.GuardRules(ctx)
	if err != nil || len(rules) != n {
		t.Fatalf("GuardRules: %d, %v", len(rules), err)
	}
	for _, r := range rules {
		if r.Hits != hits[r.ID].Delta {
			t.Errorf("rule %s: hits %d, want %d", r.ID, r.Hits, hits[r.ID].Delta)
		}
	}
	if err := s.DeleteGuardRules(ctx, ids); err != nil {
		t.Fatalf("DeleteGuardRules of %d ids: %v", n, err)
	}
	if rules, err := s.GuardRules(ctx); err != nil || len(rules) != 0 {
		t.Errorf("after deleting all: %d rules, %v", len(rules), err)
	}
}
