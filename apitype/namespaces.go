package apitype

import "encoding/json"

// NamespaceEntry is the contract's NamespaceEntry.
//
// `GET /namespaces` — one namespace the credential can see.
type NamespaceEntry struct {
	Namespace string `json:"namespace"`
	// How many of its deployments this credential may view.
	Deployments int `json:"deployments"`
	// Whether it was declared, rather than only named by a deployment.
	Declared    bool   `json:"declared"`
	Description string `json:"description,omitempty"`
	CreatedAt   *int64 `json:"created_at,omitempty"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [NamespaceEntry.Extra].
func (v NamespaceEntry) MarshalJSON() ([]byte, error) {
	type plain NamespaceEntry
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [NamespaceEntry.Extra].
func (v *NamespaceEntry) UnmarshalJSON(data []byte) error {
	type plain NamespaceEntry
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}
