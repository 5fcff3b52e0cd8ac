package ratelimit

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/web"
)

func openStore(t *testing.T, dir string, deployments ...string) *store.Store {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, id := range deployments {
		if _, err := st.PutDeployment(t.Context(), store.Deployment{ID: id, Spec: []byte(`{}`)}, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// TestManager: limits are validated, stored before Put returns, loaded by
// the next Manager, replaced with a fresh Limiter, deleted, and refused for
// a deployment that does not exist; Changed hears of every change.
func TestManager(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st := openStore(t, dir, "a", "b")
	var mu sync.Mutex
	var changed []string
	m, err := NewManager(ctx, st, Options{Changed: func(id string) {
		mu.Lock()
		changed = append(changed, id)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Get("a"); ok || m.Limiter("a") != nil {
		t.Fatal("a limit before any was put")
	}
	var fe *web.FieldError
	if _, err := m.Put(ctx, "a", apitype.RateLimit{}); !errors.As(err, &fe) {
		t.Fatalf("empty limit: %v, want a FieldError", err)
	}
	if _, err := m.Put(ctx, "nope", apitype.RateLimit{RequestsPerSec: 1}); !errors.Is(err, ErrNoDeployment) {
		t.Fatalf("missing deployment: %v, want ErrNoDeployment", err)
	}
	got, err := m.Put(ctx, "a", apitype.RateLimit{RequestsPerSec: 1.5})
	if want := (apitype.RateLimit{RequestsPerSec: 1.5, Burst: 2, MaxClients: DefaultMaxClients}); err != nil || got != want {
		t.Fatalf("Put = %+v, %v; want %+v", got, err, want)
	}
	if rl, ok := m.Get("a"); !ok || rl != got {
		t.Errorf("Get = %+v, %v", rl, ok)
	}
	first := m.Limiter("a")
	first.Enter(addrA)
	first.Enter(addrA)
	if ok, _ := first.Enter(addrA); ok {
		t.Fatal("admitted past the burst")
	}
	if _, err := m.Put(ctx, "b", apitype.RateLimit{ConcurrentPerClient: 3, MaxClients: 9}); err != nil {
		t.Fatal(err)
	}
	// A replace is a new Limiter: the counts start afresh.
	if _, err := m.Put(ctx, "a", apitype.RateLimit{RequestsPerSec: 1.5}); err != nil {
		t.Fatal(err)
	}
	if l := m.Limiter("a"); l == first {
		t.Fatal("the replaced limit kept its Limiter")
	} else if ok, _ := l.Enter(addrA); !ok {
		t.Fatal("the new Limiter carries the old one's counts")
	}

	// Durable: a Manager on the reopened store has both.
	st.Close()
	m2, err := NewManager(ctx, openStore(t, dir), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		a, _ := m.Get(id)
		b, ok := m2.Get(id)
		if !ok || a != b {
			t.Errorf("%s after reopening: %+v, %v; want %+v", id, b, ok, a)
		}
	}
	if err := m2.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := m2.Delete(ctx, "b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if _, ok := m2.Get("b"); ok {
		t.Error("a deleted limit is still there")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a", "b", "a"}; !slices.Equal(changed, want) {
		t.Errorf("Changed calls %q, want %q (failed writes tell nothing)", changed, want)
	}
}

// TestManagerForget: a deleted deployment's limit goes from the store with
// it, and Forget drops the Limiter, so the id created again has none.
func TestManagerForget(t *testing.T) {
	ctx := t.Context()
	st := openStore(t, t.TempDir(), "a")
	m, err := NewManager(ctx, st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(ctx, "a", apitype.RateLimit{ConcurrentPerClient: 1}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteDeployment(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	m.Forget("a")
	if m.Limiter("a") != nil {
		t.Fatal("Forget kept the Limiter")
	}
	if rows, err := st.RateLimits(ctx); err != nil || len(rows) != 0 {
		t.Fatalf("stored limits after the deployment's delete: %+v, %v", rows, err)
	}
}
