package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/berth-dev/berth/internal/store"
)

// Webhooks returns every webhook, oldest first (ties by id).
func (s *Store) Webhooks(ctx context.Context) ([]store.Webhook, error) {
	ws, err := list[store.Webhook](ctx, s, "webhooks", "webhooks")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ws, func(a, b store.Webhook) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return ws, nil
}

// PutWebhook inserts a webhook in one transaction; an existing id is an
// error wrapping store.ErrConflict. Its counts are stored as given.
func (s *Store) PutWebhook(ctx context.Context, w store.Webhook) error {
	if w.ID == "" || len(w.Sealed) == 0 {
		return errors.New("etcdstore: a webhook needs an id and its sealed configuration")
	}
	w.CreatedAt, w.LastDeliveryAt = norm(w.CreatedAt), norm(w.LastDeliveryAt)
	w.ClearError = false // a delta's flag, not stored
	body, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("etcdstore: webhook %q: %w", w.ID, err)
	}
	exists, err := s.create(ctx, s.key("webhooks", w.ID), fmt.Sprintf("webhook %q", w.ID), body)
	if err != nil {
		return err
	}
	if exists {
		return fmt.Errorf("etcdstore: webhook %q: %w", w.ID, store.ErrConflict)
	}
	return nil
}

// DeleteWebhook removes a webhook in one transaction, or returns an error
// wrapping store.ErrNotFound.
func (s *Store) DeleteWebhook(ctx context.Context, id string) error {
	return s.remove(ctx, s.key("webhooks", id), fmt.Sprintf("webhook %q", id), store.ErrNotFound)
}

// AddWebhookCounts adds deltas to the webhooks' counts: the numbers are
// added, a set LastError or LastDeliveryAt replaces the stored one, and
// ClearError empties the stored error unless LastError sets one. It is a
// read-modify-write in one transaction per 128 webhooks that commits only
// if none of them changed since it was read. A delta for a webhook that
// no longer exists is dropped.
func (s *Store) AddWebhookCounts(ctx context.Context, deltas map[string]store.WebhookCounts) error {
	return updateRecords(ctx, s, "webhooks", "webhook", "webhook counts", deltas, func(w *store.Webhook, d store.WebhookCounts) {
		w.Delivered += d.Delivered
		w.Failed += d.Failed
		w.DeadLettered += d.DeadLettered
		switch {
		case d.LastError != "":
			w.LastError = d.LastError
		case d.ClearError:
			w.LastError = ""
		}
		if !d.LastDeliveryAt.IsZero() {
			w.LastDeliveryAt = norm(d.LastDeliveryAt)
		}
	})
}
