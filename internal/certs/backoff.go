package certs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"time"

	"github.com/caddyserver/certmagic"
)

// failure is the backoff of one order label, persisted as JSON in the
// storage at backoffKey so that a restart (or a peer on shared storage)
// keeps it.
type failure struct {
	Label     string    `json:"label"`
	Failures  int       `json:"failures"`
	RetryAt   time.Time `json:"retry_at"`
	LastError string    `json:"last_error"`
}

// backoffPrefix is per issuer: another CA's failures say nothing about
// this one.
func (m *Manager) backoffPrefix() string {
	return path.Join("berth", "backoff", certmagic.StorageKeys.Safe(m.issuerKey))
}

func (m *Manager) backoffKey(label string) string {
	return path.Join(m.backoffPrefix(), certmagic.StorageKeys.Safe(label)+".json")
}

// backoffDelay is the wait after the n-th consecutive failure.
func backoffDelay(n int) time.Duration {
	d := BackoffBase
	for i := 1; i < n && d < BackoffMax; i++ {
		d *= 2
	}
	return min(d, BackoffMax)
}

// maxErrorLen bounds LastError (ACME problems can be long).
const maxErrorLen = 512

func (m *Manager) failure(label string) *failure {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.failures[label]; f != nil {
		c := *f
		return &c
	}
	return nil
}

func (m *Manager) recordFailure(label string, renewal bool, err error) failure {
	m.mu.Lock()
	f := m.failures[label]
	if f == nil {
		f = &failure{Label: label}
		m.failures[label] = f
	}
	f.Failures++
	f.RetryAt = m.now().Add(backoffDelay(f.Failures)).UTC()
	f.LastError = err.Error()
	if len(f.LastError) > maxErrorLen {
		f.LastError = f.LastError[:maxErrorLen] + "…"
	}
	if renewal {
		m.renewFailures[label]++
	}
	c := *f
	m.mu.Unlock()
	b, _ := json.Marshal(c)
	if err := m.storage.Store(context.Background(), m.backoffKey(label), b); err != nil {
		m.log.Warn("certs: cannot persist the backoff", "name", label, "err", err)
	}
	return c
}

func (m *Manager) recordSuccess(label string) {
	m.mu.Lock()
	_, had := m.failures[label]
	delete(m.failures, label)
	m.mu.Unlock()
	if had {
		if err := m.storage.Delete(context.Background(), m.backoffKey(label)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("certs: cannot clear the persisted backoff", "name", label, "err", err)
		}
	}
}

// loadFailures reads the persisted backoff of this issuer.
func (m *Manager) loadFailures(ctx context.Context) error {
	keys, err := m.storage.List(ctx, m.backoffPrefix(), false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("certs: read the persisted backoff: %w", err)
	}
	for _, k := range keys {
		b, err := m.storage.Load(ctx, k)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("certs: read the persisted backoff %s: %w", k, err)
		}
		var f failure
		if err := json.Unmarshal(b, &f); err != nil || f.Label == "" {
			m.log.Warn("certs: ignoring a corrupt backoff record", "key", k, "err", err)
			continue
		}
		m.failures[f.Label] = &f
	}
	return nil
}
