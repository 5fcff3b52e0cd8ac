// Package namespaces keeps the namespaces declared on berth and the auth
// providers declared on them (app-lb.md §2.3, "Namespaces, auth
// providers").
//
// A namespace exists as soon as a deployment names it; declaring one (POST
// /namespaces) gives it a description and a creation time, and lets it
// exist before its first deployment. An auth provider is the identity half
// of a sign-in gate (providers, OAuth client, allow-lists, JWT rules),
// declared once on a namespace and inherited by its deployments' gates
// through `auth.provider_ref`. Providers are stored and validated here;
// the data plane enforces them when sign-in gates arrive.
package namespaces

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/store"
)

// DB is the persistence the namespace set needs (implemented by
// *store.Store).
type DB interface {
	Namespaces(ctx context.Context) ([]store.Namespace, error)
	PutNamespace(ctx context.Context, n store.Namespace) (store.Namespace, bool, error)
	DeleteNamespace(ctx context.Context, name string) error
	AuthProviders(ctx context.Context) ([]store.AuthProvider, error)
	PutAuthProvider(ctx context.Context, p store.AuthProvider) (store.AuthProvider, bool, error)
	DeleteAuthProvider(ctx context.Context, namespace, name string) error
}

// ErrNotFound is returned for a namespace or provider that is not declared.
var ErrNotFound = errors.New("namespaces: not declared")

// FieldError is a validation failure of one field.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Store is the set of declared namespaces and providers. Safe for
// concurrent use (the database serialises writes).
type Store struct{ db DB }

// New returns the set over db.
func New(db DB) *Store { return &Store{db: db} }

// Namespace is one declared namespace.
type Namespace struct {
	Name        string
	Description string
	CreatedAt   time.Time
}

// CheckName reports whether ns is a valid namespace name: 1–63 characters
// of a-z, 0-9 and '-', as deployment specs require.
func CheckName(ns string) error {
	if ns == "" {
		return &FieldError{"name", "required"}
	}
	if len(ns) > spec.MaxNSLen {
		return &FieldError{"name", fmt.Sprintf("longer than %d characters", spec.MaxNSLen)}
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return &FieldError{"name", fmt.Sprintf("%q is not a valid namespace name (allowed: a-z 0-9 -)", ns)}
		}
	}
	return nil
}

// List returns the declared namespaces, sorted by name.
func (s *Store) List(ctx context.Context) ([]Namespace, error) {
	rows, err := s.db.Namespaces(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Namespace, len(rows))
	for i, r := range rows {
		out[i] = Namespace(r)
	}
	return out, nil
}

// Declare declares a namespace (or updates a declared one's description,
// keeping its creation time) and reports whether it was created.
func (s *Store) Declare(ctx context.Context, n apitype.NamespaceSpec) (Namespace, bool, error) {
	if err := CheckName(n.Name); err != nil {
		return Namespace{}, false, err
	}
	if len(n.Description) > 1024 {
		return Namespace{}, false, &FieldError{"description", "must be at most 1024 bytes"}
	}
	r, created, err := s.db.PutNamespace(ctx, store.Namespace{Name: n.Name, Description: n.Description})
	return Namespace(r), created, err
}

// Remove forgets a declared namespace.
func (s *Store) Remove(ctx context.Context, name string) error {
	err := s.db.DeleteNamespace(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: no declared namespace %q", ErrNotFound, name)
	}
	return err
}

// Providers returns every declared auth provider, sorted by namespace and
// name.
func (s *Store) Providers(ctx context.Context) ([]apitype.AuthProviderView, error) {
	rows, err := s.db.AuthProviders(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]apitype.AuthProviderView, 0, len(rows))
	for _, r := range rows {
		v, err := view(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func view(r store.AuthProvider) (apitype.AuthProviderView, error) {
	var v apitype.AuthProviderView
	if err := json.Unmarshal(r.Spec, &v); err != nil {
		return v, fmt.Errorf("namespaces: stored auth provider %s/%s does not decode: %w", r.Namespace, r.Name, err)
	}
	v.Namespace, v.Name, v.CreatedAt = r.Namespace, r.Name, r.CreatedAt.Unix()
	return v, nil
}

// Provider returns one provider.
func (s *Store) Provider(ctx context.Context, ns, name string) (apitype.AuthProviderView, error) {
	ps, err := s.Providers(ctx)
	if err != nil {
		return apitype.AuthProviderView{}, err
	}
	for _, p := range ps {
		if p.Namespace == ns && p.Name == name {
			return p, nil
		}
	}
	return apitype.AuthProviderView{}, fmt.Errorf("%w: no auth provider %q in namespace %q", ErrNotFound, name, ns)
}

// PutProvider validates and stores a provider (its namespace defaults to
// "default"), keeping the creation time of one it replaces, and reports
// whether it was created. Secret references are bound to the provider's
// namespace, as they are on deployment specs.
func (s *Store) PutProvider(ctx context.Context, v apitype.AuthProviderView) (apitype.AuthProviderView, bool, error) {
	if v.Namespace == "" {
		v.Namespace = spec.DefaultNamespace
	}
	if err := CheckProvider(&v); err != nil {
		return apitype.AuthProviderView{}, false, err
	}
	v.CreatedAt = 0
	raw, err := json.Marshal(v)
	if err != nil {
		return apitype.AuthProviderView{}, false, err
	}
	r, created, err := s.db.PutAuthProvider(ctx, store.AuthProvider{Namespace: v.Namespace, Name: v.Name, Spec: raw})
	if err != nil {
		return apitype.AuthProviderView{}, false, fmt.Errorf("the auth provider was not saved: %w", err)
	}
	out, err := view(r)
	return out, created, err
}

// DeleteProvider removes a provider.
func (s *Store) DeleteProvider(ctx context.Context, ns, name string) error {
	err := s.db.DeleteAuthProvider(ctx, ns, name)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: no auth provider %q in namespace %q", ErrNotFound, name, ns)
	}
	return err
}

// CheckProvider validates a provider with the very rules a deployment's
// sign-in gate is held to (package spec), by checking a gate that carries
// the provider's identity fields; it also stamps secret references with
// the provider's namespace.
func CheckProvider(v *apitype.AuthProviderView) error {
	if err := CheckName(v.Namespace); err != nil {
		return &FieldError{"namespace", strings.TrimPrefix(err.Error(), "name: ")}
	}
	if msg := nameProblem(v.Name); msg != "" {
		return &FieldError{"name", msg}
	}
	if len(v.Provider.Providers) == 0 {
		return &FieldError{"provider", "required: one or more of google, app-token, jwt"}
	}
	gate := &apitype.AuthGate{
		Provider: v.Provider, ClientID: v.ClientID, ClientSecret: v.ClientSecret,
		AllowedDomains: v.AllowedDomains, AllowedEmails: v.AllowedEmails,
		JWT: v.JWT, CookieDomain: v.CookieDomain,
	}
	probe := apitype.DeploymentSpec{
		ID: "provider-check", Namespace: v.Namespace,
		Routes:    []apitype.RouteRule{{PathPrefix: "/"}},
		Upstreams: []string{"127.0.0.1:1"},
		Auth:      gate,
	}
	spec.Normalize(&probe, spec.Options{})
	if err := spec.ValidateGate(&probe, spec.Options{}); err != nil {
		var fe *spec.FieldError
		if errors.As(err, &fe) {
			return &FieldError{strings.TrimPrefix(fe.Field, "auth."), fe.Msg}
		}
		return err
	}
	// Normalize stamped the references through the shared pointers; keep
	// the rest of the gate's normal form too.
	v.ClientSecret, v.JWT = probe.Auth.ClientSecret, probe.Auth.JWT
	return nil
}

func nameProblem(s string) string {
	switch {
	case s == "":
		return "required"
	case len(s) > 64:
		return "longer than 64 characters"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("%q has invalid character %q (allowed: A-Z a-z 0-9 . _ -)", s, c)
		}
	}
	return ""
}

// ProviderUsers returns the ids of the deployments among specs whose gate
// inherits provider name of namespace ns, sorted.
func ProviderUsers(specs []apitype.DeploymentSpec, ns, name string) []string {
	var out []string
	for _, sp := range specs {
		if sp.Auth != nil && sp.Auth.ProviderRef == name && spec.Namespace(&sp) == ns {
			out = append(out, sp.ID)
		}
	}
	slices.Sort(out)
	return out
}
