package gate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/oidc"
)

var errNoSecrets = errors.New("no secret store")

// identitySpec is the identity half of a gate: its own fields, or a
// namespace provider's.
type identitySpec struct {
	providers    []apitype.AuthProvider
	clientID     string
	clientSecret *apitype.SecretRef
	domains      []string
	emails       []string
	jwt          *apitype.JwtSpec
	cookieDomain string
	issuer       string // OpenID Connect issuer; "" = Google
}

// identity is a compiled identity half.
type identity struct {
	name         string // the provider's name, for a provider_ref
	err          error  // the provider does not compile: the gate fails closed
	appToken     bool
	signIn       bool // OpenID Connect sign-in (the `google` provider)
	google       bool // the issuer is Google's: hd for allowed_domains
	oidc         oidc.Config
	clientSecret *apitype.SecretRef
	domains      []string
	emails       []string
	jwtSpec      *apitype.JwtSpec
	jwt          *verifierEntry
	cookieDomain string
	fingerprint  string
}

// compileIdentity compiles the identity half of a gate in namespace ns.
func (m *Manager) compileIdentity(ns string, s identitySpec) (*identity, error) {
	id := &identity{
		clientSecret: s.clientSecret, domains: s.domains, emails: s.emails,
		jwtSpec: s.jwt, cookieDomain: strings.ToLower(strings.TrimPrefix(s.cookieDomain, ".")),
	}
	ps := s.providers
	if len(ps) == 0 {
		ps = []apitype.AuthProvider{apitype.ProviderGoogle} // a gate from before app-tokens
	}
	for _, p := range ps {
		switch p {
		case apitype.ProviderAppToken:
			id.appToken = true
		case apitype.ProviderGoogle:
			id.signIn = s.clientID != ""
			id.google = s.issuer == ""
			iss := s.issuer
			if iss == "" {
				iss = m.o.GoogleIssuer
			}
			id.oidc = oidc.Config{Issuer: iss, ClientID: s.clientID, Google: id.google}
		case apitype.ProviderJWT:
			if s.jwt == nil {
				return nil, errors.New("the jwt provider needs jwt")
			}
			v, err := m.verifier(ns, s.jwt)
			if err != nil {
				return nil, err
			}
			id.jwt = v
		}
	}
	id.fingerprint = fingerprint(ns, s)
	return id, nil
}

// fingerprint identifies an identity policy: sessions signed in under one
// are honoured only while the gate's policy has the same fingerprint
// (app-lb.md §3.6's policy fingerprint, over more fields: the issuer and
// the JWT rules too, since a session of the scoped JWT sign-in rests on
// them).
func fingerprint(ns string, s identitySpec) string {
	lower := func(xs []string) []string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[i] = strings.ToLower(strings.TrimSpace(x))
		}
		slices.Sort(out)
		return out
	}
	ps := make([]string, len(s.providers))
	for i, p := range s.providers {
		ps[i] = string(p)
	}
	slices.Sort(ps)
	doc := struct {
		NS        string           `json:"ns"`
		Providers []string         `json:"p"`
		Issuer    string           `json:"iss"`
		Client    string           `json:"c"`
		Domains   []string         `json:"d"`
		Emails    []string         `json:"e"`
		Cookie    string           `json:"cd"`
		JWT       *apitype.JwtSpec `json:"j"`
	}{ns, ps, s.issuer, s.clientID, lower(s.domains), lower(s.emails), strings.ToLower(s.cookieDomain), s.jwt}
	sum := sha256.Sum256([]byte(canonicalJSON(doc)))
	return hex.EncodeToString(sum[:12])
}

// canonicalJSON is v's JSON with object keys sorted (encoding/json sorts
// map keys; structs keep their field order, which is fixed).
func canonicalJSON(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var any any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if d.Decode(&any) != nil {
		return string(raw)
	}
	out, _ := json.Marshal(any)
	return string(out)
}

// unquote decodes a JSON string.
func unquote(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// identity returns the gate's identity half: its own, or its provider's
// from the current snapshot (nil when the provider is not declared).
func (g *Gate) identity() *identity {
	if g.inline != nil {
		return g.inline
	}
	return (*g.m.providers.Load())[g.ns+"/"+g.ref]
}
