package apitype

import "encoding/json"

// AdminScope is the contract's AdminScope.
//
// What a token may do on the admin API.
type AdminScope string

// The AdminScope values the contract names.
const (
	ScopeNone  AdminScope = "none"
	ScopeView  AdminScope = "view"
	ScopeAdmin AdminScope = "admin"
)

// TokenSummary describes an app-token without its secret.
type TokenSummary struct {
	ID    string     `json:"id"`
	Name  string     `json:"name"`
	Admin AdminScope `json:"admin"`
	// The namespace this token is confined to, if any. Inside it, an empty
	// `deployments` list means every deployment there; outside it the token
	// reaches nothing.
	Namespace string `json:"namespace,omitempty"`
	// Deployment ids, or `["*"]` for all of them.
	Deployments []string `json:"deployments"`
	CreatedAt   int64    `json:"created_at"`
	ExpiresAt   *int64   `json:"expires_at,omitempty"`
	// `undefined` also means "not used since the store was last written" — the
	// stamp is flushed opportunistically, not per request.
	LastUsedAt *int64 `json:"last_used_at,omitempty"`
	// Minted at a control plane and valid on every server that mirrors it.
	Fleet *bool `json:"fleet,omitempty"`
	// Set when this server holds the token only as a mirror: the control plane
	// it came from, which is where it is changed or revoked.
	MirroredFrom string `json:"mirrored_from,omitempty"`
}

// MintedToken is the contract's MintedToken.
//
// The reply to a mint. **`token` is the only time the secret is returned** —
// app-lb stores only its hash and no endpoint reads it back.
type MintedToken struct {
	TokenSummary
	Token string `json:"token"`
}

// TokenProvenance is berth's own `GET /tokens/:id/provenance`: who minted
// the token, which the contract's TokenSummary does not declare. MintedBy
// is `token:<id>`, `user:<name>` or `ungated`.
type TokenProvenance struct {
	ID       string `json:"id"`
	MintedBy string `json:"minted_by"`
}

// WhoAmI is the contract's WhoAmI.
//
// `GET /whoami` — what the server makes of the credential presented. Needs no
// tier, so it answers even for a token every other route refuses.
type WhoAmI struct {
	// `ungated`, `operator`, `app-token` or `federated`.
	Caller string `json:"caller"`
	// `none`, `view`, `admin` — or `unchecked` on an ungated listener.
	AdminScope string `json:"admin_scope"`
	// Whether this credential may use the fleet-wide routes.
	Fleet bool `json:"fleet"`
	// Whether it is behind a namespace wall.
	Confined bool         `json:"confined"`
	May      WhoAmIMay    `json:"may"`
	Token    *WhoAmIToken `json:"token,omitempty"`
	// An app-token's namespace, when it is confined to one.
	Namespace string `json:"namespace,omitempty"`
	// `["*"]` is every deployment; empty on a namespace token is all of it.
	Deployments   []string `json:"deployments,omitempty"`
	ExpiresAt     *int64   `json:"expires_at,omitempty"`
	ExpiresInSecs *int64   `json:"expires_in_secs,omitempty"`
	// A federated caller's identity, as the auth service reported it.
	Subject json.RawMessage `json:"subject,omitempty"`
	// A federated caller's namespaces and its tier in each.
	Namespaces map[string]string `json:"namespaces,omitempty"`
	Detail     string            `json:"detail,omitempty"`
	Note       string            `json:"note,omitempty"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [WhoAmI.Extra].
func (v WhoAmI) MarshalJSON() ([]byte, error) {
	type plain WhoAmI
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [WhoAmI.Extra].
func (v *WhoAmI) UnmarshalJSON(data []byte) error {
	type plain WhoAmI
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// WhoAmIMay says which route tiers the credential may use.
type WhoAmIMay struct {
	ReadViewRoutes bool `json:"read_view_routes"`
	UseAdminRoutes bool `json:"use_admin_routes"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [WhoAmIMay.Extra].
func (v WhoAmIMay) MarshalJSON() ([]byte, error) {
	type plain WhoAmIMay
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [WhoAmIMay.Extra].
func (v *WhoAmIMay) UnmarshalJSON(data []byte) error {
	type plain WhoAmIMay
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// WhoAmIToken identifies the app-token presented, when one was.
type WhoAmIToken struct {
	ID   string `json:"id"`
	Name string `json:"name"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [WhoAmIToken.Extra].
func (v WhoAmIToken) MarshalJSON() ([]byte, error) {
	type plain WhoAmIToken
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [WhoAmIToken.Extra].
func (v *WhoAmIToken) UnmarshalJSON(data []byte) error {
	type plain WhoAmIToken
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}
