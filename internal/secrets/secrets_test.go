package secrets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

func openStore(t *testing.T, dir string, key Key) (*Store, *store.Store, error) {
	t.Helper()
	db, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := Open(context.Background(), db, key, WithClock(func() time.Time { return time.Unix(1_700_000_000, 0) }))
	return s, db, err
}

func mustKey(t *testing.T, m string) Key {
	t.Helper()
	k, err := ParseKey(m)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParseKey(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	k := mustKey(t, " "+hex64+"\n")
	if k[0] != 0xab || k[31] != 0xab {
		t.Errorf("64 hex characters were not decoded: %x", k)
	}
	if mustKey(t, "passphrase") == mustKey(t, "passphrase2") {
		t.Error("different passphrases gave the same key")
	}
	if _, err := ParseKey("  "); err == nil {
		t.Error("an empty key was accepted")
	}
}

func TestLoadKeyFile(t *testing.T) {
	dir := t.TempDir()
	k1, src, err := LoadKey("", dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, KeyFileName)
	if src != path {
		t.Errorf("source = %q, want %q", src, path)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v; want 0600", fi.Mode(), err)
	}
	k2, _, err := LoadKey("", dir)
	if err != nil || k1 != k2 {
		t.Fatalf("second load gave another key (%v)", err)
	}
	if k3, src, _ := LoadKey("material", dir); k3 == k1 || src != "BERTH_SECRET_KEY" {
		t.Error("BERTH_SECRET_KEY did not win over the key file")
	}
	os.Chmod(path, 0o644)
	if _, _, err := LoadKey("", dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable key file was accepted: %v", err)
	}
}

func TestSecretsLifecycle(t *testing.T) {
	ctx := context.Background()
	s, _, err := openStore(t, t.TempDir(), mustKey(t, "k"))
	if err != nil {
		t.Fatal(err)
	}
	sum, created, err := s.Put(ctx, apitype.SecretSpec{ID: "db", Namespace: "team-a", Description: "database", Data: map[string]string{"password": "hunter2", "user": "app"}})
	if err != nil || !created {
		t.Fatalf("Put: %v, created %v", err, created)
	}
	desc := "database"
	want := apitype.SecretSummary{ID: "db", Namespace: "team-a", Description: &desc, Keys: []string{"password", "user"}, UpdatedAt: 1_700_000_000, EncryptedAtRest: true}
	if diff := cmp.Diff(want, sum); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if _, created, _ := s.Put(ctx, apitype.SecretSpec{ID: "db", Namespace: "team-a", Data: map[string]string{"password": "x"}}); created {
		t.Error("replace reported created")
	}
	if _, err := s.Get(ctx, "team-b", "db"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get in another namespace: %v, want ErrNotFound", err)
	}
	newVal := "y"
	sum, err = s.Patch(ctx, "team-a", "db", apitype.SecretPatch{Data: map[string]*string{"password": nil, "token": &newVal}})
	if err != nil || strings.Join(sum.Keys, ",") != "token" {
		t.Fatalf("Patch: %+v, %v", sum, err)
	}
	var fe *FieldError
	if _, err := s.Patch(ctx, "team-a", "db", apitype.SecretPatch{Data: map[string]*string{"token": nil}}); !errors.As(err, &fe) {
		t.Errorf("patch to no keys: %v, want a FieldError", err)
	}
	for _, bad := range []apitype.SecretSpec{
		{ID: "", Data: map[string]string{"k": "v"}},
		{ID: "a..b", Data: map[string]string{"k": "v"}},
		{ID: "x", Namespace: "Team", Data: map[string]string{"k": "v"}},
		{ID: "x"},
		{ID: "x", Data: map[string]string{"bad key": "v"}},
		{ID: strings.Repeat("x", 65), Data: map[string]string{"k": "v"}},
	} {
		if _, _, err := s.Put(ctx, bad); !errors.As(err, &fe) {
			t.Errorf("Put(%+v) = %v, want a FieldError", bad, err)
		}
	}
	if err := s.Delete(ctx, "team-a", "db"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "team-a", "db"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
}

func TestWrongKeyIsRefusedAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, db, err := openStore(t, dir, mustKey(t, "right"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Put(ctx, apitype.SecretSpec{ID: "db", Data: map[string]string{"pw": "v"}}); err != nil {
		t.Fatal(err)
	}
	before, _ := db.SealedSecrets(ctx)
	check, _ := db.SecretKeyCheck(ctx)
	if _, err := Open(ctx, db, mustKey(t, "wrong")); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Open with the wrong key: %v, want ErrWrongKey", err)
	}
	after, _ := db.SealedSecrets(ctx)
	check2, _ := db.SecretKeyCheck(ctx)
	if diff := cmp.Diff(before, after); diff != "" || string(check) != string(check2) {
		t.Errorf("a refused open changed the sealed data (-before +after):\n%s", diff)
	}
	// Even with no secret stored, the key check catches a different key.
	_, db2, err := openStore(t, t.TempDir(), mustKey(t, "first"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, db2, mustKey(t, "second")); !errors.Is(err, ErrWrongKey) {
		t.Errorf("empty store, other key: %v, want ErrWrongKey", err)
	}
	// A row moved to another address no longer opens.
	row := before[0]
	row.ID = "renamed"
	if _, err := db.PutSealedSecret(ctx, row); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "default", "renamed"); !errors.Is(err, ErrWrongKey) {
		t.Errorf("a row copied under another id opened: %v", err)
	}
}

func TestSealUsesAFreshNonce(t *testing.T) {
	s, _, err := openStore(t, t.TempDir(), mustKey(t, "k"))
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.seal([]byte("same"), aad("ns", "id")), s.seal([]byte("same"), aad("ns", "id"))
	if string(a) == string(b) {
		t.Error("two seals of the same plaintext are identical")
	}
	if pt, err := s.open(a, aad("ns", "id")); err != nil || string(pt) != "same" {
		t.Errorf("open = %q, %v", pt, err)
	}
	if _, err := s.open(a[:10], aad("ns", "id")); err == nil {
		t.Error("a truncated value opened")
	}
}

func TestResolveEnv(t *testing.T) {
	ctx := context.Background()
	s, _, err := openStore(t, t.TempDir(), mustKey(t, "k"))
	if err != nil {
		t.Fatal(err)
	}
	put := func(ns, id string, data map[string]string) {
		if _, _, err := s.Put(ctx, apitype.SecretSpec{ID: id, Namespace: ns, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	put("team-a", "db", map[string]string{"password": "pw", "db.host": "h"})
	put("team-a", "one", map[string]string{"token": "t"})
	put("team-b", "db", map[string]string{"password": "other"})

	got, err := s.ResolveEnv(ctx, "team-a", []apitype.SecretEnv{
		{Secret: "db", Key: "password"},
		{Secret: "db", Key: "password", As: "PGPASSWORD"},
		{Secret: "one", As: "API_TOKEN"},
		{Secret: "db"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"PASSWORD": "pw", "PGPASSWORD": "pw", "API_TOKEN": "t", "DB_HOST": "h"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ResolveEnv (-want +got):\n%s", diff)
	}
	merged := MergeEnv(map[string]string{"PASSWORD": "literal", "X": "1"}, got)
	if merged["PASSWORD"] != "pw" || merged["X"] != "1" {
		t.Errorf("MergeEnv: the secret must win over a literal: %v", merged)
	}
	errs := []struct {
		refs []apitype.SecretEnv
		is   error
		msg  string
	}{
		{[]apitype.SecretEnv{{Secret: "missing"}}, ErrNotFound, `no secret "missing" in namespace "team-a"`},
		{[]apitype.SecretEnv{{Secret: "db", Key: "nope"}}, ErrNoKey, `has no key "nope"`},
		{[]apitype.SecretEnv{{Secret: "db", Namespace: "team-b"}}, nil, "outside the deployment's namespace"},
		{[]apitype.SecretEnv{{Secret: "db", As: "X"}}, nil, "holds 2 keys"},
	}
	for _, e := range errs {
		_, err := s.ResolveEnv(ctx, "team-a", e.refs)
		if err == nil || e.is != nil && !errors.Is(err, e.is) || !strings.Contains(err.Error(), e.msg) {
			t.Errorf("ResolveEnv(%+v) = %v, want an error containing %q", e.refs, err, e.msg)
		}
	}
}

func TestReferencedBy(t *testing.T) {
	specs := []apitype.DeploymentSpec{
		{ID: "web", Namespace: "team-a", VM: &apitype.VmSpec{EnvFrom: []apitype.SecretEnv{{Secret: "db", Namespace: "team-a"}}}},
		{ID: "build", Namespace: "team-a", Build: &apitype.BuildSpec{Auth: &apitype.SecretRef{Secret: "db"}}},
		{ID: "gate", Namespace: "team-a", Auth: &apitype.AuthGate{JWT: &apitype.JwtSpec{Secret: &apitype.SecretRef{Secret: "db"}}}},
		{ID: "other-ns", Namespace: "team-b", VM: &apitype.VmSpec{EnvFrom: []apitype.SecretEnv{{Secret: "db"}}}},
		{ID: "unrelated", Namespace: "team-a"},
	}
	if diff := cmp.Diff([]string{"build", "gate", "web"}, ReferencedBy(specs, "team-a", "db")); diff != "" {
		t.Errorf("ReferencedBy (-want +got):\n%s", diff)
	}
	if got := ReferencedBy(specs, "default", "db"); got != nil {
		t.Errorf("default namespace: %v, want none", got)
	}
}
