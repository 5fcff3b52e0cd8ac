package grant

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"github.com/berth-dev/berth/apitype/computertype"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/internal/clocktest"
	"github.com/berth-dev/berth/internal/store"
)

func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newIssuer(t *testing.T) (*Issuer, *clocktest.Clock, *store.Store, []byte) {
	t.Helper()
	dir := t.TempDir()
	key, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, dir)
	c := clocktest.New(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	i, err := New(context.Background(), Config{Key: key, Store: st, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return i, c, st, key
}

func request(c *clocktest.Clock, computer string, actions ...Action) Request {
	return Request{
		ComputerID: computer,
		Actions:    actions,
		ExpiresAt:  c.Now().Add(time.Hour),
		Provenance: Provenance{Actor: "agent-7", Via: "chat"},
	}
}

func TestIssueVerify(t *testing.T) {
	i, c, _, _ := newIssuer(t)
	ctx := context.Background()
	g, tok, err := i.Issue(ctx, request(c, "c1", FilesRead, Exec, Exec))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, Prefix) {
		t.Errorf("token %q does not start with %q", tok, Prefix)
	}
	// A set, in the contract's order, duplicates dropped.
	if diff := cmp.Diff([]Action{Exec, FilesRead}, g.Actions); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	got, err := i.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(g, got); diff != "" {
		t.Errorf("verified grant (-issued +verified):\n%s", diff)
	}
	want := computertype.ComputerGrant{ComputerID: "c1", Actions: []string{"exec", "files.read"}, ExpiresAt: c.Now().Add(time.Hour).UnixMilli(), Provenance: Provenance{Actor: "agent-7", Via: "chat"}}
	if diff := cmp.Diff(want, got.Contract()); diff != "" {
		t.Errorf("contract shape (-want +got):\n%s", diff)
	}
	// The contract shape has exactly the contract's keys.
	b, _ := json.Marshal(got.Contract())
	var keys map[string]any
	json.Unmarshal(b, &keys)
	for k := range keys {
		switch k {
		case "computerId", "actions", "expiresAt", "provenance":
		default:
			t.Errorf("contract JSON has key %q", k)
		}
	}

	for _, tc := range []struct {
		computer string
		action   Action
		want     error
	}{
		{"c1", Exec, nil},
		{"c1", FilesRead, nil},
		{"c1", FilesWrite, ErrDenied},
		{"c2", Exec, ErrOtherComputer},
	} {
		_, err := i.Authorize(tok, tc.computer, tc.action)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("Authorize(%s, %s) = %v, want %v", tc.computer, tc.action, err, tc.want)
		}
	}
}

func TestVerifyRefuses(t *testing.T) {
	i, c, _, _ := newIssuer(t)
	other, _, _, _ := newIssuer(t) // another key, another store
	ctx := context.Background()
	_, tok, err := i.Issue(ctx, request(c, "c1", Exec))
	if err != nil {
		t.Fatal(err)
	}
	_, otherTok, err := other.Issue(ctx, request(c, "c1", Exec))
	if err != nil {
		t.Fatal(err)
	}
	payload, sig, _ := strings.Cut(strings.TrimPrefix(tok, Prefix), ".")

	// A payload the holder rewrote (more actions), with the old signature.
	raw, _ := base64.RawURLEncoding.DecodeString(payload)
	var g map[string]any
	json.Unmarshal(raw, &g)
	g["actions"] = []string{"exec", "delete"}
	forged, _ := json.Marshal(g)
	forgedTok := Prefix + base64.RawURLEncoding.EncodeToString(forged) + "." + sig

	for _, tc := range []struct {
		name, token string
		want        error
	}{
		{"empty", "", ErrMalformed},
		{"app-token", "berth_0123456789ab_secret", ErrMalformed},
		{"no dot", Prefix + payload, ErrMalformed},
		{"empty signature", Prefix + payload + ".", ErrMalformed},
		{"short signature", Prefix + payload + ".AAAA", ErrMalformed},
		{"signature not base64", Prefix + payload + "." + strings.Repeat("!", 43), ErrMalformed},
		{"too long", Prefix + strings.Repeat("A", MaxToken), ErrMalformed},
		{"forged payload", forgedTok, ErrSignature},
		{"other key", otherTok, ErrSignature},
		{"flipped signature", Prefix + payload + "." + flip(sig), ErrSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := i.Verify(tc.token)
			if !errors.Is(err, tc.want) {
				t.Errorf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

// flip changes the first character of a base64url string to another
// valid one.
func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

func TestUnknownGrant(t *testing.T) {
	// Same key, another store: the signature verifies but this host never
	// issued the grant (say, the database was restored from a backup).
	dir := t.TempDir()
	key, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := clocktest.New(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	a, err := New(context.Background(), Config{Key: key, Store: openStore(t, filepath.Join(dir, "a")), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(context.Background(), Config{Key: key, Store: openStore(t, filepath.Join(dir, "b")), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	_, tok, err := a.Issue(context.Background(), request(c, "c1", Exec))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verify(tok); !errors.Is(err, ErrUnknown) {
		t.Errorf("Verify on another issuer = %v, want ErrUnknown", err)
	}
}

func TestExpiry(t *testing.T) {
	i, c, st, _ := newIssuer(t)
	_, tok, err := i.Issue(context.Background(), request(c, "c1", Exec))
	if err != nil {
		t.Fatal(err)
	}
	c.Add(time.Hour - time.Millisecond)
	if _, err := i.Verify(tok); err != nil {
		t.Fatalf("a millisecond before expiry: %v", err)
	}
	c.Add(time.Millisecond)
	if _, err := i.Verify(tok); !errors.Is(err, ErrExpired) {
		t.Errorf("at expiry: %v, want ErrExpired", err)
	}
	if got := i.List("c1"); len(got) != 0 {
		t.Errorf("List after expiry = %v, want none", got)
	}
	// The next issue, an hour on, deletes the expired row from the store.
	c.Add(pruneEvery)
	if _, _, err := i.Issue(context.Background(), request(c, "c1", Exec)); err != nil {
		t.Fatal(err)
	}
	rows, err := st.Grants(context.Background(), 0)
	if err != nil || len(rows) != 1 {
		t.Errorf("stored grants after a prune = %d, %v; want only the new one", len(rows), err)
	}
}

func TestRevoke(t *testing.T) {
	i, c, st, key := newIssuer(t)
	ctx := context.Background()
	g1, tok1, _ := i.Issue(ctx, request(c, "c1", Exec))
	c.Add(time.Millisecond) // List is oldest first
	_, tok2, _ := i.Issue(ctx, request(c, "c1", FilesRead))
	_, tok3, _ := i.Issue(ctx, request(c, "c2", Exec))

	if err := i.Revoke(ctx, "c2", g1.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking c1's grant under c2 = %v, want ErrNotFound", err)
	}
	if err := i.Revoke(ctx, "c1", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking an unknown grant = %v, want ErrNotFound", err)
	}
	if err := i.Revoke(ctx, "c1", g1.ID); err != nil {
		t.Fatal(err)
	}
	if err := i.Revoke(ctx, "c1", g1.ID); err != nil {
		t.Errorf("revoking twice = %v, want nil", err)
	}
	if _, err := i.Verify(tok1); !errors.Is(err, ErrRevoked) {
		t.Errorf("revoked grant verifies: %v", err)
	}
	if _, err := i.Verify(tok2); err != nil {
		t.Errorf("the other grant stopped verifying: %v", err)
	}

	// Revocation survives a restart (a new Issuer over the same store).
	j, err := New(ctx, Config{Key: key, Store: st, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Verify(tok1); !errors.Is(err, ErrRevoked) {
		t.Errorf("after reload, revoked grant: %v, want ErrRevoked", err)
	}
	if _, err := j.Verify(tok2); err != nil {
		t.Errorf("after reload, standing grant: %v", err)
	}
	st2 := j.List("c1")
	if len(st2) != 2 || st2[0].Grant.ID != g1.ID || st2[0].RevokedAt.IsZero() || !st2[1].RevokedAt.IsZero() {
		t.Errorf("List after reload = %+v", st2)
	}

	// Deleting a Computer revokes all its grants, and only its.
	n, err := j.RevokeComputer(ctx, "c1")
	if err != nil || n != 1 {
		t.Errorf("RevokeComputer = %d, %v; want 1 (one was already revoked)", n, err)
	}
	if _, err := j.Verify(tok2); !errors.Is(err, ErrRevoked) {
		t.Errorf("grant of a deleted Computer: %v, want ErrRevoked", err)
	}
	if _, err := j.Verify(tok3); err != nil {
		t.Errorf("another Computer's grant: %v", err)
	}
}

func TestIssueValidation(t *testing.T) {
	i, c, _, _ := newIssuer(t)
	ok := request(c, "c1", Exec)
	for _, tc := range []struct {
		name  string
		edit  func(*Request)
		field string
	}{
		{"no computer", func(r *Request) { r.ComputerID = "" }, "computerId"},
		{"no actions", func(r *Request) { r.Actions = nil }, "actions"},
		{"bad action", func(r *Request) { r.Actions = []Action{Exec, "rm -rf"} }, "actions[1]"},
		{"no expiry", func(r *Request) { r.ExpiresAt = time.Time{} }, "expiresAt"},
		{"past expiry", func(r *Request) { r.ExpiresAt = c.Now() }, "expiresAt"},
		{"too far", func(r *Request) { r.ExpiresAt = c.Now().Add(DefaultMaxTTL + time.Second) }, "expiresAt"},
		{"no actor", func(r *Request) { r.Provenance.Actor = " " }, "provenance.actor"},
		{"long via", func(r *Request) { r.Provenance.Via = strings.Repeat("v", 300) }, "provenance.via"},
		{"egress not JSON", func(r *Request) { r.Egress = json.RawMessage("{") }, "egress"},
		{"egress a string", func(r *Request) { r.Egress = json.RawMessage(`"all"`) }, "egress"},
		{"egress too big", func(r *Request) { r.Egress = json.RawMessage(`{"x":"` + strings.Repeat("a", MaxEgress) + `"}`) }, "egress"},
		{"egress a boolean", func(r *Request) { r.Egress = json.RawMessage(`true`) }, "egress"},
		{"egress unknown field", func(r *Request) { r.Egress = json.RawMessage(`{"allowed":[]}`) }, "egress.allowed"},
		{"egress bad rule", func(r *Request) { r.Egress = json.RawMessage(`{"allow":["ok.com","https://x.com/"]}`) }, "egress.allow[1]"},
		{"egress bad port", func(r *Request) { r.Egress = json.RawMessage(`{"deny":["x.com:99999"]}`) }, "egress.deny[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			_, _, err := i.Issue(context.Background(), r)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("Issue = %v, want a FieldError on %s", err, tc.field)
			}
		})
	}
	r := ok
	r.Egress = json.RawMessage(` { "allow" : ["example.com"] } `)
	g, tok, err := i.Issue(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if string(g.Egress) != `{"allow":["example.com"]}` {
		t.Errorf("egress = %s, want it compacted", g.Egress)
	}
	v, err := i.Verify(tok)
	if err != nil || string(v.Egress) != string(g.Egress) {
		t.Errorf("verified egress = %s, %v", v.Egress, err)
	}
}

func TestLookup(t *testing.T) {
	i, c, _, _ := newIssuer(t)
	ctx := context.Background()
	r := request(c, "c1", Exec)
	r.Egress = json.RawMessage(`{"allow":["example.com"]}`)
	g, _, err := i.Issue(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := i.Lookup("c1", g.ID)
	if err != nil || string(got.Egress) != `{"allow":["example.com"]}` || got.Provenance != g.Provenance {
		t.Fatalf("Lookup = %+v, %v", got, err)
	}
	if _, err := i.Lookup("c2", g.ID); !errors.Is(err, ErrUnknown) {
		t.Errorf("Lookup for another Computer: %v, want ErrUnknown", err)
	}
	if _, err := i.Lookup("c1", "nope"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Lookup of an unknown id: %v, want ErrUnknown", err)
	}
	if err := i.Revoke(ctx, "c1", g.ID); err != nil {
		t.Fatal(err)
	}
	got, err = i.Lookup("c1", g.ID)
	if !errors.Is(err, ErrRevoked) || got.Provenance != g.Provenance {
		t.Errorf("Lookup of a revoked grant = %+v, %v; want its provenance and ErrRevoked", got, err)
	}
	g2, _, err := i.Issue(ctx, request(c, "c1", Exec))
	if err != nil {
		t.Fatal(err)
	}
	c.Set(time.UnixMilli(g2.ExpiresAt))
	if _, err := i.Lookup("c1", g2.ID); !errors.Is(err, ErrExpired) {
		t.Errorf("Lookup of an expired grant: %v, want ErrExpired", err)
	}
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	k1, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	k2, err := LoadKey(dir)
	if err != nil || string(k1) != string(k2) || len(k1) != 32 {
		t.Errorf("second LoadKey = %x, %v; want the same 32-byte key %x", k2, err, k1)
	}
	os.Chmod(filepath.Join(dir, KeyFileName), 0o644)
	if _, err := LoadKey(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable key file: %v, want a refusal", err)
	}
	os.WriteFile(filepath.Join(dir, KeyFileName), []byte("short\n"), 0o600)
	os.Chmod(filepath.Join(dir, KeyFileName), 0o600)
	if _, err := LoadKey(dir); err == nil {
		t.Error("malformed key file accepted")
	}
	if _, err := New(context.Background(), Config{Key: []byte("short"), Store: openStore(t, t.TempDir())}); err == nil {
		t.Error("New accepted a short key")
	}
}
