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
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/route"
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

// ErrConflict is returned for a domain that overlaps one assigned to
// another namespace.
var ErrConflict = errors.New("namespaces: conflict")

// FieldError is a validation failure of one field.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Store is the set of declared namespaces and providers. Safe for
// concurrent use (the database serialises writes).
type Store struct {
	db DB
	mu sync.Mutex // serialises Declare, so two overlapping domains cannot both pass the check
	// changed runs after every write to the providers (the gates resolve
	// provider_ref from a snapshot the server reloads then).
	changed func()
}

// New returns the set over db.
func New(db DB) *Store { return &Store{db: db} }

// OnProvidersChanged sets f to run after every auth provider write.
func (s *Store) OnProvidersChanged(f func()) { s.changed = f }

func (s *Store) notify() {
	if s.changed != nil {
		s.changed()
	}
}

// Namespace is one declared namespace.
type Namespace struct {
	Name        string
	Description string
	Domains     []string // see Domains
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

// Declare declares a namespace (or updates a declared one's description
// and, when n names them, its domains, keeping its creation time) and
// reports whether it was created. A domain that overlaps one of another
// namespace (the same name, a parent or a subdomain) is an ErrConflict.
func (s *Store) Declare(ctx context.Context, n apitype.NamespaceSpec) (Namespace, bool, error) {
	if err := CheckName(n.Name); err != nil {
		return Namespace{}, false, err
	}
	if len(n.Description) > 1024 {
		return Namespace{}, false, &FieldError{"description", "must be at most 1024 bytes"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.List(ctx)
	if err != nil {
		return Namespace{}, false, err
	}
	var domains []string
	if n.Domains != nil {
		if domains, err = checkDomains(*n.Domains); err != nil {
			return Namespace{}, false, err
		}
	}
	for _, o := range all {
		switch {
		case o.Name == n.Name && n.Domains == nil:
			domains = o.Domains // absent: keep them
		case o.Name != n.Name:
			for i, d := range domains {
				for _, od := range o.Domains {
					if route.Covers(d, od) || route.Covers(od, d) {
						return Namespace{}, false, fmt.Errorf("%w: domains[%d]: %q overlaps %q, assigned to namespace %q; a host belongs to one namespace", ErrConflict, i, d, od, o.Name)
					}
				}
			}
		}
	}
	r, created, err := s.db.PutNamespace(ctx, store.Namespace{Name: n.Name, Description: n.Description, Domains: domains})
	return Namespace(r), created, err
}

// MaxDomains bounds the domains of one namespace.
const MaxDomains = 64

// checkDomains validates and normalizes domains: lowercase host names,
// without trailing dots, each once.
func checkDomains(ds []string) ([]string, error) {
	if len(ds) > MaxDomains {
		return nil, &FieldError{"domains", fmt.Sprintf("at most %d domains, got %d", MaxDomains, len(ds))}
	}
	out := make([]string, 0, len(ds))
	for i, d := range ds {
		field := fmt.Sprintf("domains[%d]", i)
		if strings.HasPrefix(d, "*.") || strings.HasPrefix(d, ".") {
			return nil, &FieldError{field, fmt.Sprintf("%q: write the domain itself (%q); it covers its subdomains", d, strings.TrimLeft(d, "*."))}
		}
		n := strings.TrimSuffix(strings.ToLower(d), ".")
		if n == "" {
			return nil, &FieldError{field, "must not be empty"}
		}
		if msg := spec.CheckHost(n); msg != "" {
			return nil, &FieldError{field, msg}
		}
		if slices.Contains(out, n) {
			return nil, &FieldError{field, fmt.Sprintf("%q is listed twice", d)}
		}
		for _, o := range out {
			if route.Covers(o, n) || route.Covers(n, o) {
				return nil, &FieldError{field, fmt.Sprintf("%q overlaps %q; list only the parent", d, o)}
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// Domains returns the domains assigned to each declared namespace that has
// any, by namespace name.
func (s *Store) Domains(ctx context.Context) (map[string][]string, error) {
	all, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, n := range all {
		if len(n.Domains) > 0 {
			out[n.Name] = n.Domains
		}
	}
	return out, nil
}

// Remove forgets a declared namespace.
func (s *Store) Remove(ctx context.Context, name string) error {
	err := s.db.DeleteNamespace(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: no declared namespace %q", ErrNotFound, name)
	}
	if err == nil {
		s.notify() // its providers may have gone with it
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
	s.notify()
	out, err := view(r)
	return out, created, err
}

// DeleteProvider removes a provider.
func (s *Store) DeleteProvider(ctx context.Context, ns, name string) error {
	err := s.db.DeleteAuthProvider(ctx, ns, name)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: no auth provider %q in namespace %q", ErrNotFound, name, ns)
	}
	if err == nil {
		s.notify()
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
	if err := foldHelpers(v); err != nil {
		return err
	}
	if len(v.Provider.Providers) == 0 {
		return &FieldError{"provider", "required: one or more of google, app-token, jwt"}
	}
	if err := checkIssuer(v); err != nil {
		return err
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

// The request-only helpers of POST /auth-providers (app-lb.md §2.3): keys
// beside the provider that fill in its jwt, folded in and not stored.
var helperKeys = []string{"preset", "secret", "jwks_url", "require", "cookie", "login_url",
	"login_redirect_param", "authorize_url", "token_url"}

// foldHelpers folds the request-only helpers into v.JWT and refuses any
// other key the contract does not name, except berth's `issuer` (the
// OpenID Connect issuer of a google-provider sign-in).
func foldHelpers(v *apitype.AuthProviderView) error {
	extra := v.Extra
	for k := range extra {
		if k != "issuer" && !slices.Contains(helperKeys, k) {
			return &FieldError{k, "not a field of an auth provider"}
		}
	}
	str := func(k string) (string, error) {
		raw, ok := extra[k]
		if !ok {
			return "", nil
		}
		var s string
		if json.Unmarshal(raw, &s) != nil || s == "" {
			return "", &FieldError{k, "must be a non-empty string"}
		}
		return s, nil
	}
	has := func(k string) bool { _, ok := extra[k]; return ok }
	preset, err := str("preset")
	if err != nil {
		return err
	}
	jwtHelper := false
	for _, k := range helperKeys {
		if k != "preset" && has(k) {
			jwtHelper = true
		}
	}
	if preset == "" && !jwtHelper {
		return nil
	}
	j := v.JWT
	switch preset {
	case "":
		if j == nil && !has("secret") && !has("jwks_url") {
			return &FieldError{"jwt", "required: the helpers (require, cookie, login_url, …) tweak a jwt, and this provider has none"}
		}
	case "heyo-jwks", "heyo":
		if j == nil {
			j = &apitype.JwtSpec{}
		}
		if len(j.Algorithms) == 0 {
			j.Algorithms = []string{"RS256"}
			if preset == "heyo" {
				j.Algorithms = []string{"HS256"}
			}
		}
		if preset == "heyo-jwks" && j.JWKSURL == "" && !has("jwks_url") {
			return &FieldError{"jwks_url", "required with preset heyo-jwks (berth has no Heyo auth URL to derive it from)"}
		}
		if preset == "heyo" && j.Secret == nil && !has("secret") {
			return &FieldError{"secret", "required with preset heyo (the HS256 key, as a secret reference)"}
		}
	default:
		return &FieldError{"preset", fmt.Sprintf("unknown preset %q (berth knows heyo-jwks and heyo)", preset)}
	}
	if j == nil {
		j = &apitype.JwtSpec{}
	}
	if raw, ok := extra["secret"]; ok {
		var ref apitype.SecretRef
		if json.Unmarshal(raw, &ref) != nil {
			var name string
			if json.Unmarshal(raw, &name) != nil || name == "" {
				return &FieldError{"secret", "must be a secret reference {secret, key?} or a secret's name"}
			}
			ref = apitype.SecretRef{Secret: name}
		}
		j.Secret = &ref
	}
	for k, dst := range map[string]*string{"jwks_url": &j.JWKSURL, "cookie": &j.Cookie, "login_url": &j.LoginURL,
		"login_redirect_param": &j.LoginRedirectParam, "authorize_url": &j.AuthorizeURL, "token_url": &j.TokenURL} {
		s, err := str(k)
		if err != nil {
			return err
		}
		if s != "" {
			*dst = s
		}
	}
	if raw, ok := extra["require"]; ok {
		var req map[string]json.RawMessage
		if json.Unmarshal(raw, &req) != nil {
			return &FieldError{"require", "must be an object of claim to value or list of values"}
		}
		if j.Require == nil {
			j.Require = map[string]json.RawMessage{}
		}
		maps.Copy(j.Require, req) // merged, the helper's values winning
	}
	v.JWT = j
	if !v.Provider.Has(apitype.ProviderJWT) {
		v.Provider.Providers = append(v.Provider.Providers, apitype.ProviderJWT)
	}
	for _, k := range helperKeys {
		delete(v.Extra, k)
	}
	if len(v.Extra) == 0 {
		v.Extra = nil
	}
	return nil
}

// checkIssuer checks berth's `issuer`: an OpenID Connect issuer for the
// google provider's sign-in, https (http only on loopback).
func checkIssuer(v *apitype.AuthProviderView) error {
	raw, ok := v.Extra["issuer"]
	if !ok {
		return nil
	}
	var iss string
	if json.Unmarshal(raw, &iss) != nil || iss == "" {
		return &FieldError{"issuer", "must be the OpenID Connect issuer's URL"}
	}
	if !v.Provider.Has(apitype.ProviderGoogle) {
		return &FieldError{"issuer", "only meaningful with the google provider (OpenID Connect sign-in)"}
	}
	if msg := spec.IssuerURLProblem(iss); msg != "" {
		return &FieldError{"issuer", msg}
	}
	return nil
}
