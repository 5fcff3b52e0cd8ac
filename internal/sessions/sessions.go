// Package sessions keeps the sign-in sessions of deployments' auth gates
// (package gate) server-side, so that one can be listed and revoked, where
// app-lb's stateless cookies cannot.
//
// A session's cookie carries a random 256-bit secret; the store holds only
// its SHA-256, and the in-memory set is keyed by that hash, so a lookup
// compares no secret byte by byte (no timing oracle) and a copy of the
// database signs nobody in. Every live session is in memory: the request
// path costs a hash and a map read, no SQL.
//
// A session ends at its absolute expiry (the gate's session_ttl_secs), when
// it has been idle for Options.Idle, when revoked (one, or every session
// of a person at a deployment: sign out everywhere), or when its
// deployment's identity policy changes (Invalidate). Creations and ends are
// durable before they are acknowledged; the last-seen times behind idle
// expiry are written in batches every flushEvery, so after a crash a
// session may look up to that much less idle than it was.
package sessions

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/store"
)

// Store is what the sessions need of package store.
type Store interface {
	Sessions(ctx context.Context) ([]store.Session, error)
	PutSession(ctx context.Context, s store.Session) error
	TouchSessions(ctx context.Context, seen map[string]time.Time) error
	DeleteSessions(ctx context.Context, ids []string) error
}

// Session is one session, without its secret.
type Session struct {
	ID          string
	Deployment  string
	Namespace   string
	Fingerprint string
	Issuer      string
	Subject     string
	Email       string
	Name        string
	TokenID     string
	CreatedAt   time.Time
	ExpiresAt   time.Time
	LastSeen    time.Time
}

// ErrNotFound is a session that does not exist (or has ended).
var ErrNotFound = errors.New("no such session")

// Options configure a Manager.
type Options struct {
	// Idle ends a session not used for this long; 0: DefaultIdle.
	Idle time.Duration
	// MaxPerDeployment bounds a deployment's sessions; creating one more
	// ends its least recently seen. 0: DefaultMaxPerDeployment.
	MaxPerDeployment int
	// OnEnd runs once for every session that ends (revoked, expired, idle,
	// invalidated), after it is gone from the store.
	OnEnd func(Session)
	Now   func() time.Time
	Log   *slog.Logger
}

// Defaults.
const (
	DefaultIdle             = 7 * 24 * time.Hour
	DefaultMaxPerDeployment = 100_000
	flushEvery              = time.Minute
)

// Manager is the session set. Safe for concurrent use.
type Manager struct {
	st Store
	o  Options

	// wmu serialises the writes of sessions (their store write and the
	// change in memory) with Reload.
	wmu    sync.Mutex
	mu     sync.Mutex
	byHash map[string]*entry
	byID   map[string]*entry
	seen   map[string]time.Time // last-seen times not yet written
	timer  *time.Timer
	closed bool
}

type entry struct {
	hash string
	s    Session
}

// New loads the stored sessions (dropping the ones that ended while berth
// was down) and starts the sweep.
func New(ctx context.Context, st Store, o Options) (*Manager, error) {
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.MaxPerDeployment <= 0 {
		o.MaxPerDeployment = DefaultMaxPerDeployment
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{st: st, o: o, byHash: map[string]*entry{}, byID: map[string]*entry{}, seen: map[string]time.Time{}}
	rows, err := st.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	now := o.Now()
	var dead []Session
	for _, r := range rows {
		e := &entry{hash: r.SecretSHA256, s: Session{
			ID: r.ID, Deployment: r.Deployment, Namespace: r.Namespace, Fingerprint: r.Fingerprint, Issuer: r.Issuer,
			Subject: r.Subject, Email: r.Email, Name: r.Name, TokenID: r.TokenID,
			CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, LastSeen: r.LastSeenAt,
		}}
		if m.endedAt(&e.s, now) {
			dead = append(dead, e.s)
			continue
		}
		m.byHash[e.hash], m.byID[e.s.ID] = e, e
	}
	if err := m.drop(ctx, dead); err != nil {
		return nil, err
	}
	m.timer = time.AfterFunc(flushEvery, m.tick)
	return m, nil
}

func (m *Manager) endedAt(s *Session, now time.Time) bool {
	return !now.Before(s.ExpiresAt) || now.Sub(s.LastSeen) >= m.o.Idle
}

// Close writes the pending last-seen times and stops the sweep.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	m.timer.Stop()
	m.mu.Unlock()
	m.flush(context.Background())
}

func hashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// Create stores a new session lasting ttl and returns its secret (the
// cookie's value), durable before it returns.
func (m *Manager) Create(ctx context.Context, s Session, ttl time.Duration) (string, Session, error) {
	var raw [32]byte
	var id [6]byte
	rand.Read(raw[:])
	rand.Read(id[:])
	secret := base64.RawURLEncoding.EncodeToString(raw[:])
	now := m.o.Now()
	s.ID = hex.EncodeToString(id[:])
	s.CreatedAt, s.LastSeen, s.ExpiresAt = now, now, now.Add(ttl)
	e := &entry{hash: hashSecret(secret), s: s}
	m.wmu.Lock()
	if err := m.st.PutSession(ctx, m.row(e)); err != nil {
		m.wmu.Unlock()
		return "", Session{}, err
	}
	m.mu.Lock()
	m.byHash[e.hash], m.byID[s.ID] = e, e
	evict := m.overflowLocked(s.Deployment)
	m.mu.Unlock()
	m.wmu.Unlock()
	if evict != nil {
		m.end(ctx, func(x *Session) bool { return x.ID == evict.ID })
	}
	return secret, s, nil
}

// overflowLocked returns the least recently seen session of dep when it
// has more than MaxPerDeployment.
func (m *Manager) overflowLocked(dep string) *Session {
	n := 0
	var oldest *Session
	for _, e := range m.byID {
		if e.s.Deployment != dep {
			continue
		}
		n++
		if oldest == nil || e.s.LastSeen.Before(oldest.LastSeen) {
			oldest = &e.s
		}
	}
	if n <= m.o.MaxPerDeployment {
		return nil
	}
	c := *oldest
	return &c
}

func (m *Manager) row(e *entry) store.Session {
	s := e.s
	return store.Session{ID: s.ID, SecretSHA256: e.hash, Deployment: s.Deployment, Namespace: s.Namespace,
		Fingerprint: s.Fingerprint, Issuer: s.Issuer, Subject: s.Subject, Email: s.Email, Name: s.Name,
		TokenID: s.TokenID, CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt, LastSeenAt: s.LastSeen}
}

// Lookup returns the live session of secret at deployment, signed in under
// fingerprint, and marks it seen (the sliding idle expiry).
func (m *Manager) Lookup(secret, deployment, fingerprint string) (Session, bool) {
	h := hashSecret(secret)
	now := m.o.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byHash[h]
	if e == nil || e.s.Deployment != deployment || e.s.Fingerprint != fingerprint || m.endedAt(&e.s, now) {
		return Session{}, false
	}
	if now.Sub(e.s.LastSeen) >= time.Second {
		e.s.LastSeen = now
		m.seen[e.s.ID] = now
	}
	return e.s, true
}

// Get returns a live session by id.
func (m *Manager) Get(id string) (Session, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byID[id]
	if e == nil {
		return Session{}, false
	}
	return e.s, true
}

// SetTokenID records the app-token minted for a session.
func (m *Manager) SetTokenID(ctx context.Context, id, tokenID string) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.mu.Lock()
	e := m.byID[id]
	if e == nil {
		m.mu.Unlock()
		return ErrNotFound
	}
	e.s.TokenID = tokenID
	row := m.row(e)
	m.mu.Unlock()
	return m.st.PutSession(ctx, row)
}

// List returns the live sessions of deployment ("" for all), oldest first.
func (m *Manager) List(deployment string) []Session {
	now := m.o.Now()
	m.mu.Lock()
	out := make([]Session, 0)
	for _, e := range m.byID {
		if (deployment == "" || e.s.Deployment == deployment) && !m.endedAt(&e.s, now) {
			out = append(out, e.s)
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Revoke ends one session; one already gone is not an error.
func (m *Manager) Revoke(ctx context.Context, id string) error {
	_, err := m.end(ctx, func(s *Session) bool { return s.ID == id })
	return err
}

// RevokeSubject ends every session of subject at deployment ("" for every
// deployment): sign out everywhere.
func (m *Manager) RevokeSubject(ctx context.Context, deployment, subject string) (int, error) {
	return m.end(ctx, func(s *Session) bool {
		return s.Subject == subject && (deployment == "" || s.Deployment == deployment)
	})
}

// Invalidate ends every session of deployment not signed in under
// keepFingerprint ("" ends them all: the deployment was deleted).
func (m *Manager) Invalidate(ctx context.Context, deployment, keepFingerprint string) (int, error) {
	return m.end(ctx, func(s *Session) bool {
		return s.Deployment == deployment && (keepFingerprint == "" || s.Fingerprint != keepFingerprint)
	})
}

// end removes the sessions pred picks, durably, then runs OnEnd for each.
func (m *Manager) end(ctx context.Context, pred func(*Session) bool) (int, error) {
	m.mu.Lock()
	var dead []Session
	for _, e := range m.byID {
		if pred(&e.s) {
			dead = append(dead, e.s)
		}
	}
	m.mu.Unlock()
	if len(dead) == 0 {
		return 0, nil
	}
	return len(dead), m.drop(ctx, dead)
}

// drop deletes dead from the store and memory, then tells OnEnd.
func (m *Manager) drop(ctx context.Context, dead []Session) error {
	if len(dead) == 0 {
		return nil
	}
	ids := make([]string, len(dead))
	for i, s := range dead {
		ids[i] = s.ID
	}
	m.wmu.Lock()
	if err := m.st.DeleteSessions(ctx, ids); err != nil {
		m.wmu.Unlock()
		return err
	}
	m.mu.Lock()
	for _, id := range ids {
		m.forgetLocked(id)
	}
	m.mu.Unlock()
	m.wmu.Unlock()
	if m.o.OnEnd != nil {
		for _, s := range dead {
			m.o.OnEnd(s)
		}
	}
	return nil
}

// Sweep ends the sessions past their expiry or idle, and writes the
// pending last-seen times. The Manager runs it every minute.
func (m *Manager) Sweep(ctx context.Context) {
	now := m.o.Now()
	if _, err := m.end(ctx, func(s *Session) bool { return m.endedAt(s, now) }); err != nil {
		m.o.Log.Warn("sessions: sweep", "err", err)
	}
	m.flush(ctx)
}

func (m *Manager) flush(ctx context.Context) {
	m.mu.Lock()
	seen := m.seen
	m.seen = map[string]time.Time{}
	m.mu.Unlock()
	if err := m.st.TouchSessions(ctx, seen); err != nil {
		m.o.Log.Warn("sessions: could not record when sessions were last used", "err", err)
	}
}

func (m *Manager) tick() {
	m.Sweep(context.Background())
	m.mu.Lock()
	if !m.closed {
		m.timer.Reset(flushEvery)
	}
	m.mu.Unlock()
}

// forgetLocked drops session id from memory. m.mu is held.
func (m *Manager) forgetLocked(id string) {
	if e := m.byID[id]; e != nil {
		delete(m.byHash, e.hash)
		delete(m.byID, id)
	}
	delete(m.seen, id)
}

// Reload brings the sessions held in memory in line with the store,
// without writing it: on a store several hosts share, the sessions
// another host created (live ones), changed (its token, its last use: the
// later of the stored one and this host's counts) or ended. A session
// ended elsewhere ends here too, OnEnd included. It serialises with this
// host's writes.
func (m *Manager) Reload(ctx context.Context) error {
	m.wmu.Lock()
	rows, err := m.st.Sessions(ctx)
	if err != nil {
		m.wmu.Unlock()
		return err
	}
	now := m.o.Now()
	m.mu.Lock()
	stored := make(map[string]bool, len(rows))
	for _, r := range rows {
		stored[r.ID] = true
		if e := m.byID[r.ID]; e != nil {
			e.s.TokenID = r.TokenID
			if r.LastSeenAt.After(e.s.LastSeen) {
				e.s.LastSeen = r.LastSeenAt
			}
			continue
		}
		e := &entry{hash: r.SecretSHA256, s: Session{
			ID: r.ID, Deployment: r.Deployment, Namespace: r.Namespace, Fingerprint: r.Fingerprint, Issuer: r.Issuer,
			Subject: r.Subject, Email: r.Email, Name: r.Name, TokenID: r.TokenID,
			CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, LastSeen: r.LastSeenAt,
		}}
		if m.endedAt(&e.s, now) {
			continue // the sweep of whoever holds it ends it
		}
		m.byHash[e.hash], m.byID[e.s.ID] = e, e
	}
	var ended []Session
	for id, e := range m.byID {
		if !stored[id] {
			ended = append(ended, e.s)
			m.forgetLocked(id)
		}
	}
	m.mu.Unlock()
	m.wmu.Unlock()
	if m.o.OnEnd != nil {
		for _, s := range ended {
			m.o.OnEnd(s)
		}
	}
	return nil
}
