package client_test

import (
	"context"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
	berth "github.com/berth-dev/berth/internal/server"
	"github.com/berth-dev/berth/internal/server/servertest"
)

// gatedServer starts a real berth with an operator password on loopback.
func gatedServer(t *testing.T) string {
	t.Helper()
	return servertest.Start(t, berth.Options{AdminPassword: "pw"}, nil)
}

func TestAccessRoutes(t *testing.T) {
	ctx := context.Background()
	url := gatedServer(t)
	anon, _ := client.New(url)
	if _, err := anon.WhoAmI(ctx); !client.IsUnauthorized(err) {
		t.Fatalf("WhoAmI without a credential: %v, want 401", err)
	}
	op, err := client.New(url, client.WithBasicAuth("admin", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	who, err := op.WhoAmI(ctx)
	if err != nil || who.Caller != "operator" {
		t.Fatalf("operator WhoAmI: %+v, %v", who, err)
	}

	secs := int64(3600)
	m, err := op.MintToken(ctx, apitype.NewToken{Name: "team", Admin: apitype.ScopeAdmin, Namespace: "team-a", ExpiresInSecs: &secs})
	if err != nil || !strings.HasPrefix(m.Secret, "berth_") || m.ExpiresAt == nil {
		t.Fatalf("MintToken: %+v, %v", m, err)
	}
	if p, err := op.TokenProvenance(ctx, m.ID); err != nil || p.ID != m.ID || p.MintedBy != "user:admin" {
		t.Errorf("TokenProvenance: %+v, %v", p, err)
	}
	team, _ := client.New(url, client.WithToken(m.Secret))
	if who, err := team.WhoAmI(ctx); err != nil || who.Namespace != "team-a" || !who.Confined {
		t.Fatalf("token WhoAmI: %+v, %v", who, err)
	}
	ts, err := team.Tokens(ctx)
	if err != nil || len(ts) != 1 || ts[0].ID != m.ID {
		t.Errorf("Tokens as the namespace admin: %+v, %v", ts, err)
	}
	if tk, err := op.PatchToken(ctx, m.ID, apitype.TokenPatch{Name: "team-a"}); err != nil || tk.Name != "team-a" {
		t.Errorf("PatchToken: %+v, %v", tk, err)
	}
	if tk, err := op.Token(ctx, m.ID); err != nil || tk.Name != "team-a" {
		t.Errorf("Token: %+v, %v", tk, err)
	}

	// Secrets through the namespace token; its namespace is the default.
	s, err := team.PutSecret(ctx, apitype.SecretSpec{ID: "db", Data: map[string]string{"password": "pw1"}})
	if err != nil || s.Namespace != "team-a" || !s.EncryptedAtRest {
		t.Fatalf("PutSecret: %+v, %v", s, err)
	}
	v := "u"
	if s, err := team.PatchSecret(ctx, "", "db", apitype.SecretPatch{Data: map[string]*string{"user": &v}}); err != nil || strings.Join(s.Keys, ",") != "password,user" {
		t.Errorf("PatchSecret: %+v, %v", s, err)
	}
	if list, err := op.Secrets(ctx, "team-a"); err != nil || len(list) != 1 {
		t.Errorf("Secrets: %+v, %v", list, err)
	}
	if _, err := team.Secret(ctx, "default", "db"); !client.IsForbidden(err) {
		t.Errorf("Secret behind another wall: %v, want 403", err)
	}
	if _, err := op.Secret(ctx, "team-a", "nope"); !client.IsNotFound(err) {
		t.Errorf("missing secret: %v, want 404", err)
	}

	// Namespaces and auth providers.
	if n, err := op.CreateNamespace(ctx, apitype.NamespaceSpec{Name: "team-b", Description: "b"}); err != nil || !n.Declared {
		t.Errorf("CreateNamespace: %+v, %v", n, err)
	}
	if _, err := team.CreateNamespace(ctx, apitype.NamespaceSpec{Name: "team-c"}); !client.IsForbidden(err) {
		t.Errorf("CreateNamespace by a namespace token: %v, want 403", err)
	}
	if ns, err := team.Namespaces(ctx); err != nil || len(ns) != 1 || ns[0].Namespace != "team-a" {
		t.Errorf("Namespaces as the namespace admin: %+v, %v", ns, err)
	}
	if err := op.DeleteNamespace(ctx, "team-b"); err != nil {
		t.Error(err)
	}
	pv := apitype.AuthProviderView{Name: "tokens", Provider: apitype.Providers(apitype.ProviderAppToken)}
	if got, err := team.PutAuthProvider(ctx, pv); err != nil || got.Namespace != "team-a" {
		t.Fatalf("PutAuthProvider: %+v, %v", got, err)
	}
	if got, err := team.AuthProvider(ctx, "team-a", "tokens"); err != nil || !got.Provider.Has(apitype.ProviderAppToken) {
		t.Errorf("AuthProvider: %+v, %v", got, err)
	}
	if ps, err := op.AuthProviders(ctx, "team-a"); err != nil || len(ps) != 1 {
		t.Errorf("AuthProviders: %+v, %v", ps, err)
	}
	if err := team.DeleteAuthProvider(ctx, "team-a", "tokens"); err != nil {
		t.Error(err)
	}
	if err := team.DeleteSecret(ctx, "", "db", true); err != nil {
		t.Error(err)
	}
	if err := op.RevokeToken(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := team.WhoAmI(ctx); !client.IsUnauthorized(err) {
		t.Errorf("revoked token: %v, want 401", err)
	}
	if _, err := op.Token(ctx, ""); err == nil {
		t.Error("an empty token id was sent")
	}
}
