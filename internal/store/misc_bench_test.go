package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/store"
)

func benchSQLite(b *testing.B) *store.Store {
	s, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkAddWebhookCounts is one webhook's delivery count bump, beside
// package etcdstore's BenchmarkAddWebhookCounts.
func BenchmarkAddWebhookCounts(b *testing.B) {
	s := benchSQLite(b)
	ctx := context.Background()
	if err := s.PutWebhook(ctx, store.Webhook{ID: "w", Sealed: []byte{1}, CreatedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := s.AddWebhookCounts(ctx, map[string]store.WebhookCounts{"w": {Delivered: 1}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutSecurityAlerts is one new alert stored with the trim to the
// newest 1000, on a store already holding 1000, beside package
// etcdstore's BenchmarkPutSecurityAlerts.
func BenchmarkPutSecurityAlerts(b *testing.B) {
	s := benchSQLite(b)
	ctx := context.Background()
	const keep = 1000
	var id int64
	next := func() store.SecurityAlert {
		id++
		return store.SecurityAlert{ID: id, Rule: "web.sqli", Severity: "high", LastTs: id, JSON: fmt.Appendf(nil, `{"id":%d}`, id)}
	}
	for range keep / 100 {
		batch := make([]store.SecurityAlert, 100)
		for i := range batch {
			batch[i] = next()
		}
		if err := s.PutSecurityAlerts(ctx, batch, keep); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if err := s.PutSecurityAlerts(ctx, []store.SecurityAlert{next()}, keep); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTouchSessions is one touch of 100 sessions' last-seen times,
// beside package etcdstore's BenchmarkTouchSessions.
func BenchmarkTouchSessions(b *testing.B) {
	s := benchSQLite(b)
	ctx := context.Background()
	t0 := time.Now()
	seen := map[string]time.Time{}
	for i := range 100 {
		id := fmt.Sprintf("s%03d", i)
		if err := s.PutSession(ctx, store.Session{ID: id, SecretSHA256: "h" + id, CreatedAt: t0, ExpiresAt: t0, LastSeenAt: t0}); err != nil {
			b.Fatal(err)
		}
		seen[id] = t0
	}
	for b.Loop() {
		if err := s.TouchSessions(ctx, seen); err != nil {
			b.Fatal(err)
		}
	}
}
