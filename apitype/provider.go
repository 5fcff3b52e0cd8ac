package apitype

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ProviderList is the `provider` field of [AuthGate] and [AuthProviderView]:
// `AuthProvider | AuthProvider[]` on the wire. The providers are
// alternatives — any one of them admits a request.
//
// It decodes from a bare string or an array and remembers which it was, so
// a decoded value re-encodes in its original form. A list built in Go with
// exactly one provider encodes as a bare string, the form app-lb writes.
type ProviderList struct {
	Providers []AuthProvider
	// AsArray makes a one-element list encode as an array. It is set when
	// the list was decoded from an array.
	AsArray bool
}

// Providers returns a ProviderList of ps.
func Providers(ps ...AuthProvider) ProviderList { return ProviderList{Providers: ps} }

// Has reports whether p is one of the providers.
func (l ProviderList) Has(p AuthProvider) bool {
	for _, q := range l.Providers {
		if q == p {
			return true
		}
	}
	return false
}

// IsZero reports an empty list, which omitzero omits.
func (l ProviderList) IsZero() bool { return len(l.Providers) == 0 && !l.AsArray }

// MarshalJSON writes a bare string for one provider (unless AsArray) and an
// array otherwise.
func (l ProviderList) MarshalJSON() ([]byte, error) {
	if len(l.Providers) == 1 && !l.AsArray {
		return json.Marshal(l.Providers[0])
	}
	if l.Providers == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(l.Providers)
}

// UnmarshalJSON accepts a string or an array of strings.
func (l *ProviderList) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case bytes.Equal(data, []byte("null")):
		return nil
	case len(data) > 0 && data[0] == '"':
		var p AuthProvider
		if err := json.Unmarshal(data, &p); err != nil {
			return err
		}
		*l = ProviderList{Providers: []AuthProvider{p}}
		return nil
	case len(data) > 0 && data[0] == '[':
		var ps []AuthProvider
		if err := json.Unmarshal(data, &ps); err != nil {
			return fmt.Errorf("auth provider list: %w", err)
		}
		*l = ProviderList{Providers: ps, AsArray: true}
		return nil
	}
	return fmt.Errorf("auth provider: want a string or an array of strings, got %.40s", data)
}

// UnmarshalJSON accepts the object form and also a bare string, which a
// gate written by hand uses to mean {"path": s, "scope": "admin"}.
func (p *PublicPath) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*p = PublicPath{Path: s, Scope: PathAdmin}
		return nil
	}
	type plain PublicPath
	return json.Unmarshal(data, (*plain)(p))
}
