// Package storetest is a test suite every store backend must pass: the
// SQLite store (package store) and the etcd one (package etcdstore) run
// it, so both keep the same semantics for the entities it covers.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/internal/store"
)

// Backend is the slice of a store the suite covers: deployments,
// namespaces and auth providers, tokens, sealed secrets, guard rules and
// Computer grants.
type Backend interface {
	Deployments(ctx context.Context) ([]store.Deployment, error)
	Deployment(ctx context.Context, id string) (store.Deployment, error)
	PutDeployment(ctx context.Context, d store.Deployment, createOnly bool, ifRevision int64) (store.Deployment, error)
	DeleteDeployment(ctx context.Context, id string) error

	Namespaces(ctx context.Context) ([]store.Namespace, error)
	PutNamespace(ctx context.Context, n store.Namespace) (store.Namespace, bool, error)
	DeleteNamespace(ctx context.Context, name string) error
	AuthProviders(ctx context.Context) ([]store.AuthProvider, error)
	PutAuthProvider(ctx context.Context, p store.AuthProvider) (store.AuthProvider, bool, error)
	DeleteAuthProvider(ctx context.Context, namespace, name string) error

	Tokens(ctx context.Context) ([]store.Token, error)
	PutToken(ctx context.Context, t store.Token) error
	TouchToken(ctx context.Context, id string, at time.Time) error
	DeleteToken(ctx context.Context, id string) error

	SealedSecrets(ctx context.Context) ([]store.SealedSecret, error)
	SealedSecret(ctx context.Context, namespace, id string) (store.SealedSecret, error)
	PutSealedSecret(ctx context.Context, sec store.SealedSecret) (bool, error)
	DeleteSealedSecret(ctx context.Context, namespace, id string) error
	SecretKeyCheck(ctx context.Context) ([]byte, error)
	PutSecretKeyCheck(ctx context.Context, sealed []byte) error

	GuardRules(ctx context.Context) ([]store.GuardRule, error)
	PutGuardRule(ctx context.Context, x store.GuardRule) error
	DeleteGuardRules(ctx context.Context, ids []string) error
	AddGuardHits(ctx context.Context, hits map[string]store.GuardHits) error

	Grants(ctx context.Context, notBefore int64) ([]store.Grant, error)
	PutGrant(ctx context.Context, g store.Grant) error
	RevokeGrants(ctx context.Context, computerID string, at time.Time, ids ...string) ([]string, error)
	PruneGrants(ctx context.Context, before int64) (int64, error)
}

// Run runs the suite; open returns a fresh, empty backend for each
// subtest (its cleanup registered on that t).
func Run(t *testing.T, open func(t *testing.T) Backend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"DeploymentCRUD", testDeploymentCRUD},
		{"DeploymentSpecVerbatim", testDeploymentSpecVerbatim},
		{"DeploymentConflicts", testDeploymentConflicts},
		{"DeploymentInvalid", testDeploymentInvalid},
		{"DeploymentConcurrentCreate", testDeploymentConcurrentCreate},
		{"DeploymentConcurrentSameRevision", testDeploymentConcurrentSameRevision},
		{"DeploymentReadModifyWrite", testDeploymentReadModifyWrite},
		{"NamespacesAndProviders", testNamespacesAndProviders},
		{"Tokens", testTokens},
		{"Secrets", testSecrets},
		{"GuardRules", testGuardRules},
		{"Grants", testGrants},
		{"ConcurrentCreatedFlags", testConcurrentCreatedFlags},
		{"ConcurrentGuardHits", testConcurrentGuardHits},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func spec(n int) []byte { return fmt.Appendf(nil, `{"kind":"static","n":%d}`, n) }

// within fails t unless at lies in [lo, hi] and is UTC.
func within(t *testing.T, what string, at, lo, hi time.Time) {
	t.Helper()
	if at.Before(lo) || at.After(hi) || at.Location() != time.UTC {
		t.Errorf("%s = %v, want a UTC time set by the store in [%v, %v]", what, at, lo, hi)
	}
}

func testDeploymentCRUD(t *testing.T, s Backend) {
	ctx := t.Context()
	if got, err := s.Deployments(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Deployments on empty store = %v, %v; want none", got, err)
	}
	before := time.Now()
	b, err := s.PutDeployment(ctx, store.Deployment{ID: "b", Namespace: "ns1", Spec: spec(1), Revision: 42,
		CreatedAt: time.Unix(1, 0), UpdatedAt: time.Unix(2, 0)}, true, 0)
	if err != nil {
		t.Fatalf("create b: %v", err)
	}
	after := time.Now()
	if b.Revision != 1 || !b.CreatedAt.Equal(b.UpdatedAt) || b.ID != "b" || b.Namespace != "ns1" {
		t.Errorf("created b = %+v, want revision 1 and equal timestamps", b)
	}
	within(t, "CreatedAt", b.CreatedAt, before, after)
	// "a/x" and "a-x" sort around "a" differently as keys than as ids.
	var others []store.Deployment
	for i, id := range []string{"a/x", "a", "a-x"} {
		d, err := s.PutDeployment(ctx, store.Deployment{ID: id, Namespace: "ns2", Spec: spec(10 + i)}, false, 0)
		if err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		others = append(others, d)
	}
	got, err := s.Deployment(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, got); diff != "" {
		t.Errorf("Deployment(b) differs from PutDeployment's result (-put +get):\n%s", diff)
	}
	b2, err := s.PutDeployment(ctx, store.Deployment{ID: "b", Namespace: "ns3", Spec: spec(3)}, false, 0)
	if err != nil {
		t.Fatalf("replace b: %v", err)
	}
	if b2.Revision != 2 || b2.Namespace != "ns3" || string(b2.Spec) != string(spec(3)) {
		t.Errorf("after replace = %+v, want revision 2, ns3, spec 3", b2)
	}
	if !b2.CreatedAt.Equal(b.CreatedAt) {
		t.Errorf("CreatedAt changed on replace: %v → %v", b.CreatedAt, b2.CreatedAt)
	}
	if b2.UpdatedAt.Before(b.UpdatedAt) {
		t.Errorf("UpdatedAt went back on replace: %v → %v", b.UpdatedAt, b2.UpdatedAt)
	}
	list, err := s.Deployments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Deployment{others[1], others[2], others[0], b2} // a, a-x, a/x, b
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("Deployments, by id (-want +got):\n%s", diff)
	}
	if err := s.DeleteDeployment(ctx, "b"); err != nil {
		t.Fatalf("delete b: %v", err)
	}
	if _, err := s.Deployment(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Deployment(b) after delete: err = %v, want ErrNotFound", err)
	}
	if err := s.DeleteDeployment(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete of b: err = %v, want ErrNotFound", err)
	}
	if _, err := s.Deployment(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Deployment(missing): err = %v, want ErrNotFound", err)
	}
	if _, err := s.Deployment(ctx, "a/x"); err != nil {
		t.Errorf("deleting b touched a/x: %v", err)
	}
	// Recreating a deleted deployment starts its history afresh.
	b3, err := s.PutDeployment(ctx, store.Deployment{ID: "b", Spec: spec(4)}, true, 0)
	if err != nil {
		t.Fatalf("recreate b: %v", err)
	}
	if b3.Revision != 1 {
		t.Errorf("revision of recreated b = %d, want 1", b3.Revision)
	}
}

func testDeploymentSpecVerbatim(t *testing.T, s Backend) {
	raw := []byte("{\"z\":1,  \"a\":[true,null],\"s\":\"\u00e9\\u0000\"}")
	if _, err := s.PutDeployment(t.Context(), store.Deployment{ID: "x", Spec: raw}, false, 0); err != nil {
		t.Fatal(err)
	}
	raw[0] = '[' // the store must not alias the caller's slice
	got, err := s.Deployment(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"z\":1,  \"a\":[true,null],\"s\":\"\u00e9\\u0000\"}"; string(got.Spec) != want {
		t.Errorf("Spec = %q, want %q", got.Spec, want)
	}
}

func testDeploymentConflicts(t *testing.T, s Backend) {
	ctx := t.Context()
	for range 2 { // d ends at revision 2
		if _, err := s.PutDeployment(ctx, store.Deployment{ID: "d", Spec: spec(1)}, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name       string
		id         string
		createOnly bool
		ifRevision int64
		wantErr    error
		wantRev    int64
	}{
		{"create-only on existing", "d", true, 0, store.ErrConflict, 0},
		{"stale revision", "d", false, 1, store.ErrConflict, 0},
		{"future revision", "d", false, 3, store.ErrConflict, 0},
		{"revision on missing", "nope", false, 1, store.ErrConflict, 0},
		{"create-only wins over revision", "d", true, 2, store.ErrConflict, 0},
		{"matching revision", "d", false, 2, nil, 3},
		{"create-only on new", "new", true, 0, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := s.Deployment(ctx, tc.id)
			got, err := s.PutDeployment(ctx, store.Deployment{ID: tc.id, Spec: spec(99)}, tc.createOnly, tc.ifRevision)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				after, _ := s.Deployment(ctx, tc.id)
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("failed put changed the stored record (-before +after):\n%s", diff)
				}
				return
			}
			if got.Revision != tc.wantRev {
				t.Errorf("revision = %d, want %d", got.Revision, tc.wantRev)
			}
		})
	}
}

func testDeploymentInvalid(t *testing.T, s Backend) {
	ctx := t.Context()
	for _, tc := range []struct {
		name       string
		d          store.Deployment
		ifRevision int64
	}{
		{"empty id", store.Deployment{Spec: spec(1)}, 0},
		{"nil spec", store.Deployment{ID: "x"}, 0},
		{"bad json", store.Deployment{ID: "x", Spec: []byte(`{"a":`)}, 0},
		{"negative revision", store.Deployment{ID: "x", Spec: spec(1)}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.PutDeployment(ctx, tc.d, false, tc.ifRevision)
			if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				t.Fatalf("err = %v, want a validation error", err)
			}
		})
	}
	if list, err := s.Deployments(ctx); err != nil || len(list) != 0 {
		t.Errorf("after invalid puts, Deployments = %v, %v; want none", list, err)
	}
}

// race runs fn(i) for i in [0, n) at once and returns their errors.
func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// oneWinner fails t unless exactly one of errs is nil and every other
// wraps ErrConflict; it returns the winner's index.
func oneWinner(t *testing.T, errs []error) int {
	t.Helper()
	win := -1
	for i, err := range errs {
		switch {
		case err == nil && win >= 0:
			t.Errorf("writers %d and %d both succeeded", win, i)
		case err == nil:
			win = i
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("writer %d: %v, want ErrConflict", i, err)
		}
	}
	if win < 0 {
		t.Fatal("no writer succeeded")
	}
	return win
}

func testDeploymentConcurrentCreate(t *testing.T, s Backend) {
	ctx := t.Context()
	const writers = 8
	errs := race(writers, func(i int) error {
		_, err := s.PutDeployment(ctx, store.Deployment{ID: "c", Spec: spec(i)}, true, 0)
		return err
	})
	win := oneWinner(t, errs)
	got, err := s.Deployment(ctx, "c")
	if err != nil || got.Revision != 1 || string(got.Spec) != string(spec(win)) {
		t.Errorf("stored %+v, %v; want the winner's (%d) spec at revision 1", got, err, win)
	}
}

func testDeploymentConcurrentSameRevision(t *testing.T, s Backend) {
	ctx := t.Context()
	d, err := s.PutDeployment(ctx, store.Deployment{ID: "c", Spec: spec(0)}, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	const writers = 8
	errs := race(writers, func(i int) error {
		_, err := s.PutDeployment(ctx, store.Deployment{ID: "c", Spec: spec(100 + i)}, false, d.Revision)
		return err
	})
	win := oneWinner(t, errs)
	got, err := s.Deployment(ctx, "c")
	if err != nil || got.Revision != 2 || string(got.Spec) != string(spec(100+win)) {
		t.Errorf("stored %+v, %v; want the winner's (%d) spec at revision 2", got, err, win)
	}
}

// testDeploymentReadModifyWrite checks that ifRevision serialises
// read-modify-write cycles: no update is lost.
func testDeploymentReadModifyWrite(t *testing.T, s Backend) {
	ctx := t.Context()
	if _, err := s.PutDeployment(ctx, store.Deployment{ID: "c", Spec: []byte("0")}, true, 0); err != nil {
		t.Fatal(err)
	}
	const writers, increments = 4, 10
	errs := race(writers, func(int) error {
		for range increments {
			for {
				cur, err := s.Deployment(ctx, "c")
				if err != nil {
					return err
				}
				var n int
				fmt.Sscan(string(cur.Spec), &n)
				_, err = s.PutDeployment(ctx, store.Deployment{ID: "c", Spec: fmt.Append(nil, n+1)}, false, cur.Revision)
				if errors.Is(err, store.ErrConflict) {
					continue
				}
				if err != nil {
					return err
				}
				break
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	got, err := s.Deployment(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(writers * increments); string(got.Spec) != want {
		t.Errorf("counter = %s, want %s (lost updates)", got.Spec, want)
	}
	if want := int64(writers*increments + 1); got.Revision != want {
		t.Errorf("revision = %d, want %d", got.Revision, want)
	}
}

func testNamespacesAndProviders(t *testing.T, s Backend) {
	ctx := t.Context()
	before := time.Now()
	n, created, err := s.PutNamespace(ctx, store.Namespace{Name: "team-a", Description: "one"})
	after := time.Now()
	if err != nil || !created || n.Description != "one" {
		t.Fatalf("declare: %+v %v %v", n, created, err)
	}
	within(t, "namespace CreatedAt", n.CreatedAt, before, after)
	if n.Domains == nil || len(n.Domains) != 0 {
		t.Errorf("Domains of a namespace declared without = %#v, want empty non-nil", n.Domains)
	}
	n2, created, err := s.PutNamespace(ctx, store.Namespace{Name: "team-a", Description: "two", Domains: []string{"a.example"}, CreatedAt: time.Unix(1, 0)})
	if err != nil || created || !n2.CreatedAt.Equal(n.CreatedAt) || n2.Description != "two" {
		t.Errorf("redeclare: %+v %v %v; want CreatedAt %v kept", n2, created, err, n.CreatedAt)
	}
	m, _, err := s.PutNamespace(ctx, store.Namespace{Name: "team"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutNamespace(ctx, store.Namespace{}); err == nil {
		t.Error("PutNamespace without a name succeeded")
	}
	list, err := s.Namespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Namespace{m, n2}, list); diff != "" {
		t.Errorf("Namespaces, by name (-want +got):\n%s", diff)
	}

	p, created, err := s.PutAuthProvider(ctx, store.AuthProvider{Namespace: "team-a", Name: "corp", Spec: []byte(`{"provider": "jwt"}`)})
	if err != nil || !created {
		t.Fatalf("put provider: %v created %v", err, created)
	}
	p2, created, err := s.PutAuthProvider(ctx, store.AuthProvider{Namespace: "team-a", Name: "corp", Spec: []byte(`{"provider":"google"}`)})
	if err != nil || created || !p2.CreatedAt.Equal(p.CreatedAt) || string(p2.Spec) != `{"provider":"google"}` {
		t.Errorf("replace: %+v created %v err %v; want CreatedAt %v kept", p2, created, err, p.CreatedAt)
	}
	// (namespace, name) order, which differs from "namespace/name" order.
	q, _, err := s.PutAuthProvider(ctx, store.AuthProvider{Namespace: "team", Name: "z", Spec: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := s.PutAuthProvider(ctx, store.AuthProvider{Namespace: "team-a", Name: "a/b", Spec: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.AuthProviders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.AuthProvider{q, r, p2}, got); diff != "" {
		t.Errorf("AuthProviders, by namespace and name (-want +got):\n%s", diff)
	}
	for _, bad := range []store.AuthProvider{{Namespace: "team-a", Name: "x", Spec: []byte(`{`)}, {Name: "x", Spec: []byte(`{}`)}, {Namespace: "x", Spec: []byte(`{}`)}} {
		if _, _, err := s.PutAuthProvider(ctx, bad); err == nil {
			t.Errorf("PutAuthProvider(%+v) succeeded", bad)
		}
	}
	if err := s.DeleteAuthProvider(ctx, "team-a", "corp"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAuthProvider(ctx, "team-a", "corp"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second provider delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteNamespace(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("delete unknown namespace: %v, want ErrNotFound", err)
	}
	if err := s.DeleteNamespace(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	if list, err := s.Namespaces(ctx); err != nil || len(list) != 1 || list[0].Name != "team" {
		t.Errorf("after deleting team-a: %+v, %v", list, err)
	}
}

func testTokens(t *testing.T, s Backend) {
	ctx := t.Context()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	tok := store.Token{ID: "0123456789ab", Name: "ci", Admin: "view", Namespace: "team-a", Deployments: []string{"web"},
		SecretSHA256: "ff", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), MintedBy: "user:admin", OpenAdmin: true}
	other := store.Token{ID: "0000000000aa", Name: "bare", Admin: "none", SecretSHA256: "ee", CreatedAt: t0.In(time.FixedZone("x", 3600))}
	for _, x := range []store.Token{tok, other} {
		if err := s.PutToken(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutToken(ctx, store.Token{ID: "x"}); err == nil {
		t.Error("PutToken without a secret hash succeeded")
	}
	if err := s.TouchToken(ctx, tok.ID, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchToken(ctx, "never-stored", t0); err != nil {
		t.Errorf("TouchToken of a missing token: %v, want nil", err)
	}
	got, err := s.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok.LastUsedAt = t0.Add(time.Minute)
	other.Deployments = []string{}
	if diff := cmp.Diff([]store.Token{other, tok}, got); diff != "" {
		t.Errorf("Tokens, by id (-want +got):\n%s", diff)
	}
	for _, x := range got {
		if x.CreatedAt.Location() != time.UTC {
			t.Errorf("token %s CreatedAt in %v, want UTC", x.ID, x.CreatedAt.Location())
		}
	}
	tok.Name = "renamed"
	if err := s.PutToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Tokens(ctx); len(got) != 2 || got[1].Name != "renamed" {
		t.Errorf("after replace: %+v", got)
	}
	if err := s.DeleteToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteToken(ctx, tok.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
}

func testSecrets(t *testing.T, s Backend) {
	ctx := t.Context()
	if _, err := s.SecretKeyCheck(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("fresh key check: %v, want ErrNotFound", err)
	}
	if err := s.PutSecretKeyCheck(ctx, []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSecretKeyCheck(ctx, []byte{3}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second key check: %v, want ErrConflict (the first key is kept)", err)
	}
	if b, err := s.SecretKeyCheck(ctx); err != nil || string(b) != "\x01\x02" {
		t.Errorf("key check = %x, %v", b, err)
	}
	sec := store.SealedSecret{Namespace: "default", ID: "db", Sealed: []byte{9, 9}, UpdatedAt: time.Unix(5, 0).UTC()}
	if created, err := s.PutSealedSecret(ctx, sec); err != nil || !created {
		t.Fatalf("put: %v created %v", err, created)
	}
	sec.Sealed = []byte{8}
	if created, err := s.PutSealedSecret(ctx, sec); err != nil || created {
		t.Errorf("replace: %v created %v, want not created", err, created)
	}
	got, err := s.SealedSecret(ctx, "default", "db")
	if err != nil || string(got.Sealed) != "\x08" || !got.UpdatedAt.Equal(sec.UpdatedAt) {
		t.Errorf("get: %+v %v", got, err)
	}
	if _, err := s.SealedSecret(ctx, "other", "db"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("other namespace: %v, want ErrNotFound", err)
	}
	for _, bad := range []store.SealedSecret{{ID: "x", Sealed: []byte{1}}, {Namespace: "x", Sealed: []byte{1}}, {Namespace: "x", ID: "y"}} {
		if _, err := s.PutSealedSecret(ctx, bad); err == nil {
			t.Errorf("PutSealedSecret(%+v) succeeded", bad)
		}
	}
	dash := store.SealedSecret{Namespace: "default-x", ID: "a", Sealed: []byte{7}, UpdatedAt: time.Unix(6, 0).UTC()}
	slash := store.SealedSecret{Namespace: "default", ID: "a/b", Sealed: []byte{6}, UpdatedAt: time.Unix(7, 0).UTC()}
	for _, x := range []store.SealedSecret{dash, slash} {
		if _, err := s.PutSealedSecret(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.SealedSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.SealedSecret{slash, sec, dash}, list); diff != "" {
		t.Errorf("SealedSecrets, by namespace and id (-want +got):\n%s", diff)
	}
	if err := s.DeleteSealedSecret(ctx, "default", "db"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSealedSecret(ctx, "default", "db"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
}

// testGuardRules: put (insert and full replace), batched hits that only
// move the last hit forward, delete.
func testGuardRules(t *testing.T, s Backend) {
	ctx := t.Context()
	t0 := time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)
	a := store.GuardRule{ID: "aaaaaaaaaaaa", Action: "block", Client: "203.0.113.0/24", Note: "scanner", CreatedAt: t0}
	b := store.GuardRule{ID: "bbbbbbbbbbbb", Action: "allow", Host: "x.example", Method: "GET", PathPrefix: "/p",
		PathContains: "q", UserAgentContains: "curl", Deployment: "web",
		CreatedAt: t0.Add(time.Second), ExpiresAt: t0.Add(time.Hour), Hits: 3, LastHit: t0.Add(2 * time.Second)}
	// Same creation time as b: ordered after it by id.
	c := store.GuardRule{ID: "cccccccccccc", Action: "block", CreatedAt: t0.Add(time.Second)}
	for _, r := range []store.GuardRule{c, b, a} {
		if err := s.PutGuardRule(ctx, r); err != nil {
			t.Fatalf("PutGuardRule: %v", err)
		}
	}
	if err := s.PutGuardRule(ctx, store.GuardRule{ID: "x"}); err == nil {
		t.Error("PutGuardRule without a creation time succeeded")
	}
	got, err := s.GuardRules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.GuardRule{a, b, c}, got); diff != "" {
		t.Errorf("GuardRules, oldest first (-want +got):\n%s", diff)
	}
	a.ExpiresAt, a.Note = t0.Add(time.Minute), "longer"
	b.ExpiresAt = time.Time{}
	for _, r := range []store.GuardRule{a, b} {
		if err := s.PutGuardRule(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	late, early := t0.Add(time.Hour), t0.Add(time.Minute)
	if err := s.AddGuardHits(ctx, map[string]store.GuardHits{a.ID: {Delta: 2, LastHit: late}, b.ID: {Delta: 1, LastHit: early}, "gone": {Delta: 9, LastHit: late}}); err != nil {
		t.Fatalf("AddGuardHits: %v", err)
	}
	a.Hits, a.LastHit = 2, late
	b.Hits, b.LastHit = 4, early
	if err := s.AddGuardHits(ctx, map[string]store.GuardHits{b.ID: {Delta: 1, LastHit: t0}, c.ID: {Delta: 1}}); err != nil {
		t.Fatal(err)
	}
	b.Hits = 5 // an older LastHit does not move the last hit back
	c.Hits = 1 // a zero LastHit leaves it unset
	if got, err = s.GuardRules(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.GuardRule{a, b, c}, got); diff != "" {
		t.Errorf("GuardRules after hits (-want +got):\n%s", diff)
	}
	if err := s.DeleteGuardRules(ctx, []string{a.ID, "never-stored"}); err != nil {
		t.Fatalf("DeleteGuardRules: %v", err)
	}
	if got, err = s.GuardRules(ctx); err != nil || len(got) != 2 || got[0].ID != b.ID {
		t.Errorf("after deleting a: %+v, %v", got, err)
	}
}

func testGrants(t *testing.T, s Backend) {
	ctx := t.Context()
	at := time.Date(2026, 5, 1, 12, 0, 0, 5, time.UTC)
	put := []store.Grant{
		{ID: "g2", ComputerID: "c1", Payload: []byte(`{"gid": "g2"}`), ExpiresAt: 3000, IssuedAt: at},
		{ID: "g1", ComputerID: "c1", Payload: []byte(`{"gid":"g1"}`), ExpiresAt: 1000, IssuedAt: at},
		{ID: "g3", ComputerID: "c2", Payload: []byte(`{"gid":"g3"}`), ExpiresAt: 3000, IssuedAt: at},
	}
	for _, g := range put {
		if err := s.PutGrant(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutGrant(ctx, store.Grant{ID: "g1", ComputerID: "c1", Payload: []byte(`{}`), ExpiresAt: 5}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("reusing a grant id = %v, want ErrConflict", err)
	}
	for _, bad := range []store.Grant{{ID: "g9", ComputerID: "c1", Payload: []byte(`{`)}, {ComputerID: "c1", Payload: []byte(`{}`)}, {ID: "g9", Payload: []byte(`{}`)}} {
		if err := s.PutGrant(ctx, bad); err == nil {
			t.Errorf("PutGrant(%+v) succeeded", bad)
		}
	}
	gs, err := s.Grants(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Grant{put[1], put[0], put[2]}, gs); diff != "" {
		t.Errorf("Grants, by id, verbatim (-want +got):\n%s", diff)
	}
	ids := func(gs []store.Grant) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.ID)
		}
		return out
	}
	if gs, err := s.Grants(ctx, 2000); err != nil || !cmp.Equal(ids(gs), []string{"g2", "g3"}) {
		t.Errorf("Grants(notBefore 2000) = %v, %v; want g2, g3", ids(gs), err)
	}
	// By id: only the Computer's own grants, and the first revocation time
	// is kept.
	if _, err := s.RevokeGrants(ctx, "c2", at, "g1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoking c1's grant under c2 = %v, want ErrNotFound", err)
	}
	if _, err := s.RevokeGrants(ctx, "c1", at, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoking a missing grant = %v, want ErrNotFound", err)
	}
	if got, err := s.RevokeGrants(ctx, "c1", at, "g2"); err != nil || !cmp.Equal(got, []string{"g2"}) {
		t.Errorf("RevokeGrants(g2) = %v, %v", got, err)
	}
	if got, err := s.RevokeGrants(ctx, "c1", at.Add(time.Hour), "g2"); err != nil || !cmp.Equal(got, []string{"g2"}) {
		t.Errorf("revoking again = %v, %v; want g2", got, err)
	}
	// All of a Computer's: the ones still standing.
	if got, err := s.RevokeGrants(ctx, "c1", at); err != nil || !cmp.Equal(got, []string{"g1"}) {
		t.Errorf("RevokeGrants(c1) = %v, %v; want g1", got, err)
	}
	if got, err := s.RevokeGrants(ctx, "c1", at); err != nil || len(got) != 0 {
		t.Errorf("RevokeGrants(c1) with none standing = %v, %v; want none", got, err)
	}
	gs, _ = s.Grants(ctx, 0)
	for _, g := range gs {
		switch g.ID {
		case "g1", "g2":
			if !g.RevokedAt.Equal(at) {
				t.Errorf("%s revoked at %v, want %v", g.ID, g.RevokedAt, at)
			}
		case "g3":
			if !g.RevokedAt.IsZero() {
				t.Errorf("g3 of another Computer was revoked")
			}
		}
	}
	if n, err := s.PruneGrants(ctx, 2000); err != nil || n != 1 {
		t.Errorf("PruneGrants = %d, %v; want 1", n, err)
	}
	if gs, _ := s.Grants(ctx, 0); !cmp.Equal(ids(gs), []string{"g2", "g3"}) {
		t.Errorf("after prune: %v", ids(gs))
	}
}

// testConcurrentCreatedFlags: of writers racing to create one namespace,
// auth provider or secret, exactly one is told it created it.
func testConcurrentCreatedFlags(t *testing.T, s Backend) {
	ctx := t.Context()
	const writers = 8
	for _, tc := range []struct {
		name string
		put  func(i int) (bool, error)
	}{
		{"namespace", func(i int) (bool, error) {
			_, created, err := s.PutNamespace(ctx, store.Namespace{Name: "race", Description: fmt.Sprint(i)})
			return created, err
		}},
		{"auth provider", func(i int) (bool, error) {
			_, created, err := s.PutAuthProvider(ctx, store.AuthProvider{Namespace: "race", Name: "p", Spec: spec(i)})
			return created, err
		}},
		{"secret", func(i int) (bool, error) {
			return s.PutSealedSecret(ctx, store.SealedSecret{Namespace: "race", ID: "s", Sealed: []byte{byte(i + 1)}})
		}},
	} {
		var mu sync.Mutex
		var creators []int
		errs := race(writers, func(i int) error {
			created, err := tc.put(i)
			if created {
				mu.Lock()
				creators = append(creators, i)
				mu.Unlock()
			}
			return err
		})
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s writer %d: %v", tc.name, i, err)
			}
		}
		if len(creators) != 1 {
			t.Errorf("%s: writers %v were told they created it, want exactly one", tc.name, creators)
		}
	}
}

// testConcurrentGuardHits: batches of hits added at once are all counted.
func testConcurrentGuardHits(t *testing.T, s Backend) {
	ctx := t.Context()
	t0 := time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)
	if err := s.PutGuardRule(ctx, store.GuardRule{ID: "r", Action: "block", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	const writers, batches = 4, 10
	errs := race(writers, func(w int) error {
		for i := range batches {
			if err := s.AddGuardHits(ctx, map[string]store.GuardHits{"r": {Delta: 1, LastHit: t0.Add(time.Duration(w*batches+i) * time.Second)}}); err != nil {
				return err
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	rules, err := s.GuardRules(ctx)
	if err != nil || len(rules) != 1 {
		t.Fatalf("GuardRules = %+v, %v", rules, err)
	}
	if want := t0.Add((writers*batches - 1) * time.Second); rules[0].Hits != writers*batches || !rules[0].LastHit.Equal(want) {
		t.Errorf("after %d concurrent batches: hits %d, last hit %v; want %d, %v", writers*batches, rules[0].Hits, rules[0].LastHit, writers*batches, want)
	}
}
