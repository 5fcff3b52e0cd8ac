package sessions_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/clocktest"
	"github.com/berth-dev/berth/internal/sessions"
	"github.com/berth-dev/berth/internal/store"
)

type world struct {
	dir   string
	st    *store.Store
	clk   *clocktest.Clock
	mu    sync.Mutex
	ended map[string]int
}

func newWorld(t *testing.T) *world {
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &world{dir: dir, st: st, clk: clocktest.New(time.Unix(1_800_000_000, 0)), ended: map[string]int{}}
}

func (w *world) open(t *testing.T) *sessions.Manager {
	m, err := sessions.New(context.Background(), w.st, sessions.Options{
		Idle: time.Hour, Now: w.clk.Now,
		OnEnd: func(s sessions.Session) { w.mu.Lock(); w.ended[s.ID]++; w.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func create(t *testing.T, m *sessions.Manager, dep, sub string, ttl time.Duration) (string, sessions.Session) {
	secret, s, err := m.Create(context.Background(), sessions.Session{Deployment: dep, Namespace: "ns", Fingerprint: "fp", Subject: sub}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return secret, s
}

// TestLifetime: a session is found by its secret at its deployment under
// its fingerprint only, until it expires or idles; lookups slide the idle
// expiry; each end runs OnEnd once.
func TestLifetime(t *testing.T) {
	w := newWorld(t)
	m := w.open(t)
	secret, s := create(t, m, "app", "alice", 3*time.Hour)
	if _, ok := m.Lookup(secret, "app", "fp"); !ok {
		t.Fatal("a new session is not found")
	}
	for _, c := range []struct{ secret, dep, fp string }{{secret + "x", "app", "fp"}, {secret, "other", "fp"}, {secret, "app", "fp2"}} {
		if _, ok := m.Lookup(c.secret, c.dep, c.fp); ok {
			t.Errorf("found with %+v", c)
		}
	}
	// Used every 50 minutes, it outlives the one-hour idle limit...
	for range 3 {
		w.clk.Add(50 * time.Minute)
		if _, ok := m.Lookup(secret, "app", "fp"); !ok {
			t.Fatal("a session in use idled out")
		}
	}
	// ...but not its absolute expiry (3 h).
	w.clk.Add(40 * time.Minute)
	if _, ok := m.Lookup(secret, "app", "fp"); ok {
		t.Fatal("found past its expiry")
	}
	m.Sweep(context.Background())
	// Idle: unused for an hour.
	idle, is := create(t, m, "app", "bob", 10*time.Hour)
	w.clk.Add(61 * time.Minute)
	if _, ok := m.Lookup(idle, "app", "fp"); ok {
		t.Fatal("found after idling an hour")
	}
	m.Sweep(context.Background())
	m.Sweep(context.Background())
	if w.ended[s.ID] != 1 || w.ended[is.ID] != 1 {
		t.Errorf("OnEnd counts %v, want 1 each", w.ended)
	}
	if n := len(m.List("")); n != 0 {
		t.Errorf("%d sessions listed after both ended", n)
	}
}

// TestRevoke: one, a person's everywhere, and by policy.
func TestRevoke(t *testing.T) {
	w := newWorld(t)
	m := w.open(t)
	ctx := context.Background()
	a1, s1 := create(t, m, "app", "alice", time.Hour)
	a2, _ := create(t, m, "app", "alice", time.Hour)
	b, _ := create(t, m, "app", "bob", time.Hour)
	other, _ := create(t, m, "other", "alice", time.Hour)
	if err := m.Revoke(ctx, s1.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Revoke(ctx, s1.ID); err != nil {
		t.Errorf("revoking a gone session: %v", err)
	}
	if _, ok := m.Lookup(a1, "app", "fp"); ok {
		t.Error("a revoked session is found")
	}
	if n, err := m.RevokeSubject(ctx, "app", "alice"); err != nil || n != 1 {
		t.Errorf("RevokeSubject = %d, %v; want 1", n, err)
	}
	if _, ok := m.Lookup(a2, "app", "fp"); ok {
		t.Error("signed out everywhere, still found")
	}
	if _, ok := m.Lookup(other, "other", "fp"); !ok {
		t.Error("another deployment's session of the same person ended")
	}
	if n, _ := m.Invalidate(ctx, "app", "fp"); n != 0 {
		t.Errorf("Invalidate with the same fingerprint ended %d", n)
	}
	if n, _ := m.Invalidate(ctx, "app", "new"); n != 1 {
		t.Errorf("Invalidate with a new fingerprint ended %d, want bob's", n)
	}
	if _, ok := m.Lookup(b, "app", "fp"); ok {
		t.Error("invalidated, still found")
	}
}

// TestRestart: sessions survive a restart (a new Manager over the same
// store), and the store holds no secret.
func TestRestart(t *testing.T) {
	w := newWorld(t)
	m := w.open(t)
	secret, s := create(t, m, "app", "alice", time.Hour)
	if err := m.SetTokenID(context.Background(), s.ID, "tok123"); err != nil {
		t.Fatal(err)
	}
	m.Close()
	m2 := w.open(t)
	got, ok := m2.Lookup(secret, "app", "fp")
	if !ok || got.ID != s.ID || got.TokenID != "tok123" || got.Subject != "alice" {
		t.Fatalf("after restart: %+v %v", got, ok)
	}
	err := filepath.Walk(w.dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		raw, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(raw), secret) {
			t.Errorf("%s holds a session's secret", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkLookup is the request path's cost of a session.
func BenchmarkLookup(b *testing.B) {
	st, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	m, err := sessions.New(context.Background(), st, sessions.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	secret, _, err := m.Create(context.Background(), sessions.Session{Deployment: "app", Fingerprint: "fp", Subject: "a"}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := m.Lookup(secret, "app", "fp"); !ok {
			b.Fatal("not found")
		}
	}
}
