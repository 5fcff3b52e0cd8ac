package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWebhooks(t *testing.T) {
	s, dir := openTest(t)
	ctx := t.Context()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	a := Webhook{ID: "wh_a", Sealed: []byte{1, 2, 3}, MinSeverity: "high", Note: "pager", CreatedAt: t0}
	b := Webhook{ID: "wh_b", Sealed: []byte{4}, MinSeverity: "info", CreatedAt: t0.Add(time.Second)}
	for _, w := range []Webhook{a, b} {
		if err := s.PutWebhook(ctx, w); err != nil {
			t.Fatalf("PutWebhook(%s): %v", w.ID, err)
		}
	}
	if err := s.PutWebhook(ctx, a); !errors.Is(err, ErrConflict) {
		t.Errorf("PutWebhook of an existing id: %v, want ErrConflict", err)
	}
	// A failure, then (in another batch) a delivery that clears the error;
	// a delta for a deleted webhook is dropped.
	if err := s.AddWebhookCounts(ctx, map[string]WebhookCounts{
		"wh_a": {Failed: 2, DeadLettered: 1, LastError: "HTTP 500"},
		"gone": {Delivered: 1},
	}); err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(time.Minute)
	if err := s.AddWebhookCounts(ctx, map[string]WebhookCounts{
		"wh_a": {Delivered: 3, ClearError: true, LastDeliveryAt: t1},
		"wh_b": {Failed: 1, LastError: "connection refused"},
	}); err != nil {
		t.Fatal(err)
	}
	a.WebhookCounts = WebhookCounts{Delivered: 3, Failed: 2, DeadLettered: 1, LastDeliveryAt: t1}
	b.WebhookCounts = WebhookCounts{Failed: 1, LastError: "connection refused"}

	// The webhooks and their counts survive reopening the store.
	s.Close()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	got, err := s.Webhooks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]Webhook{a, b}, got); d != "" {
		t.Errorf("Webhooks (-want +got):\n%s", d)
	}
	if err := s.DeleteWebhook(ctx, "wh_a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWebhook(ctx, "wh_a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteWebhook again: %v, want ErrNotFound", err)
	}
	if got, _ := s.Webhooks(ctx); len(got) != 1 || got[0].ID != "wh_b" {
		t.Errorf("after delete: %+v", got)
	}
}
