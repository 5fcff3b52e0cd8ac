package namespaces

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

func open(t *testing.T) *Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(st)
}

func TestCheckName(t *testing.T) {
	for _, tt := range []struct {
		name string
		want string // "" for valid; else in the message
	}{
		{"team-a", ""},
		{"a", ""},
		{strings.Repeat("a", 63), ""},
		{"", "required"},
		{strings.Repeat("a", 64), "longer than 63"},
		{"Team", "not a valid namespace name"},
		{"a_b", "not a valid namespace name"},
		{"../x", "not a valid namespace name"},
	} {
		err := CheckName(tt.name)
		var fe *FieldError
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckName(%q): %v", tt.name, err)
		case tt.want != "" && (!errors.As(err, &fe) || fe.Field != "name" || !strings.Contains(fe.Msg, tt.want)):
			t.Errorf("CheckName(%q): %v, want a name error containing %q", tt.name, err, tt.want)
		}
	}
}

// TestDeclare: a declaration creates, a second one updates the description
// and keeps the creation time and (when it names none) the domains; a bad
// field is a FieldError naming it and stores nothing; Remove forgets it.
func TestDeclare(t *testing.T) {
	s, ctx := open(t), t.Context()
	ds := []string{"a.example"}
	n, created, err := s.Declare(ctx, apitype.NamespaceSpec{Name: "team-a", Description: "first", Domains: &ds})
	if err != nil || !created || n.Name != "team-a" || n.Description != "first" || n.CreatedAt.IsZero() {
		t.Fatalf("create: %+v, created %v, %v", n, created, err)
	}
	m, created, err := s.Declare(ctx, apitype.NamespaceSpec{Name: "team-a", Description: "second"})
	if err != nil || created || m.Description != "second" || !m.CreatedAt.Equal(n.CreatedAt) || !slices.Equal(m.Domains, ds) {
		t.Fatalf("update: %+v, created %v, %v; want the description changed, the rest kept", m, created, err)
	}
	none := []string{}
	if m, _, err = s.Declare(ctx, apitype.NamespaceSpec{Name: "team-a", Domains: &none}); err != nil || len(m.Domains) != 0 {
		t.Errorf("an empty domain list: %+v, %v; want the domains cleared", m, err)
	}

	for _, tt := range []struct {
		spec  apitype.NamespaceSpec
		field string
	}{
		{apitype.NamespaceSpec{Name: "Bad"}, "name"},
		{apitype.NamespaceSpec{Name: "ok", Description: strings.Repeat("x", 1025)}, "description"},
	} {
		_, _, err := s.Declare(ctx, tt.spec)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("Declare(%.20q): %v, want a %s error", tt.spec.Name, err, tt.field)
		}
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "team-a" {
		t.Errorf("List = %+v, %v; want only team-a", list, err)
	}

	if err := s.Remove(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "team-a"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"team-a"`) {
		t.Errorf("second Remove: %v, want ErrNotFound naming it", err)
	}
}

func google(ns, name string) apitype.AuthProviderView {
	return apitype.AuthProviderView{
		Namespace: ns, Name: name, Provider: apitype.Providers(apitype.ProviderGoogle), ClientID: "cid",
		ClientSecret: &apitype.SecretRef{Secret: "oauth", Namespace: "someone-else"}, AllowedDomains: []string{"example.com"},
	}
}

// TestProviders: a provider is validated with the gate's rules (a bad
// field is named without the "auth." of a gate), defaults to namespace
// "default", binds its secret references to its own namespace whatever it
// was sent, keeps its creation time when replaced, and is found, listed and
// deleted by namespace and name.
func TestProviders(t *testing.T) {
	s, ctx := open(t), t.Context()
	v, created, err := s.PutProvider(ctx, google("", "corp"))
	if err != nil || !created {
		t.Fatalf("PutProvider: created %v, %v", created, err)
	}
	if v.Namespace != "default" || v.ClientSecret == nil || v.ClientSecret.Namespace != "default" || v.CreatedAt == 0 {
		t.Errorf("stored %+v (secret %+v); want namespace default, the secret bound to it", v, v.ClientSecret)
	}
	again, created, err := s.PutProvider(ctx, google("", "corp"))
	if err != nil || created || again.CreatedAt != v.CreatedAt {
		t.Errorf("replace: created %v, created_at %d (was %d), %v", created, again.CreatedAt, v.CreatedAt, err)
	}
	if _, _, err := s.PutProvider(ctx, google("team-a", "corp")); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		v     apitype.AuthProviderView
		field string
	}{
		{google("Bad NS", "corp"), "namespace"},
		{google("default", ""), "name"},
		{google("default", "a/b"), "name"},
		{apitype.AuthProviderView{Name: "x"}, "provider"},
		{apitype.AuthProviderView{Name: "x", Provider: apitype.Providers(apitype.ProviderAppToken), ClientID: "cid"}, "client_id"},
	} {
		_, _, err := s.PutProvider(ctx, tt.v)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("PutProvider(%q/%q): %v, want a %s error", tt.v.Namespace, tt.v.Name, err, tt.field)
		}
	}

	all, err := s.Providers(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("Providers = %+v, %v; want 2", all, err)
	}
	if p, err := s.Provider(ctx, "team-a", "corp"); err != nil || p.Namespace != "team-a" || p.ClientSecret.Namespace != "team-a" {
		t.Errorf("Provider(team-a, corp) = %+v, %v", p, err)
	}
	if _, err := s.Provider(ctx, "team-b", "corp"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a provider of another namespace: %v, want ErrNotFound", err)
	}
	if err := s.DeleteProvider(ctx, "team-a", "corp"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProvider(ctx, "team-a", "corp"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second DeleteProvider: %v, want ErrNotFound", err)
	}
	if _, err := s.Provider(ctx, "default", "corp"); err != nil {
		t.Errorf("deleting team-a's corp removed default's: %v", err)
	}
}

// TestProviderUsers lists the deployments of the provider's namespace that
// inherit it, and only those.
func TestProviderUsers(t *testing.T) {
	gate := func(id, ns, ref string) apitype.DeploymentSpec {
		return apitype.DeploymentSpec{ID: id, Namespace: ns, Auth: &apitype.AuthGate{ProviderRef: ref}}
	}
	specs := []apitype.DeploymentSpec{
		gate("web", "", "corp"), gate("api", "default", "corp"), gate("other", "team-a", "corp"),
		gate("elsewhere", "default", "partners"), {ID: "open"},
	}
	if got := ProviderUsers(specs, "default", "corp"); !slices.Equal(got, []string{"api", "web"}) {
		t.Errorf("ProviderUsers = %v, want [api web]", got)
	}
	if got := ProviderUsers(specs, "team-b", "corp"); len(got) != 0 {
		t.Errorf("ProviderUsers of another namespace = %v", got)
	}
}
