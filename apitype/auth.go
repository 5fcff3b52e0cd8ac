package apitype

import "encoding/json"

// AuthGate is a deployment's sign-in gate, in front of its routes.
type AuthGate struct {
	Provider ProviderList `json:"provider,omitzero"`
	// Required for `google`, meaningless without it.
	ClientID       string     `json:"client_id,omitempty"`
	ClientSecret   *SecretRef `json:"client_secret,omitempty"`
	AllowedDomains []string   `json:"allowed_domains,omitempty"`
	AllowedEmails  []string   `json:"allowed_emails,omitempty"`
	// Path prefixes the *sign-in* gate does not sit in front of, and what app-lb
	// requires instead. `public` is the only scope that admits a request
	// presenting no credential; a bare string written by hand means `admin`.
	PublicPaths []PublicPath `json:"public_paths,omitempty"`
	// When set, signing in at this gate mints an app-token with this scope and
	// app-lb presents it upstream for the life of the session — so an upstream
	// that authenticates for itself can accept a signed-in person without its
	// own authentication being turned off. Absent means no token is minted.
	SessionScope    AdminScope `json:"session_scope,omitempty"`
	BasePath        string     `json:"base_path,omitempty"`
	SessionTTLSecs  *int       `json:"session_ttl_secs,omitempty"`
	CookieName      string     `json:"cookie_name,omitempty"`
	CookieDomain    string     `json:"cookie_domain,omitempty"`
	RedirectURL     string     `json:"redirect_url,omitempty"`
	ForwardIdentity *bool      `json:"forward_identity,omitempty"`
	// How to verify a JWT, when `jwt` is among the providers.
	JWT *JwtSpec `json:"jwt,omitempty"`
	// Inherit the identity half of this gate — `provider`, the OAuth credentials
	// and allow-lists, `jwt`, `cookie_domain` — from a named provider declared on
	// the deployment's namespace, resolved live on every request. When set, this
	// gate carries only the route-scoped fields (`public_paths`, `session_scope`,
	// `base_path`, `cookie_name`, `redirect_url`, `forward_identity`,
	// `session_ttl_secs`); setting an identity field alongside it is refused.
	ProviderRef string `json:"provider_ref,omitempty"`
}

// AuthProvider is one way an [AuthGate] admits a request.
type AuthProvider string

// The AuthProvider values the contract names.
const (
	ProviderGoogle   AuthProvider = "google"
	ProviderAppToken AuthProvider = "app-token"
	ProviderJWT      AuthProvider = "jwt"
)

// PublicPath is the contract's PublicPath.
//
// One entry in [AuthGate.public_paths].
type PublicPath struct {
	Path string `json:"path"`
	// `public` | `none` | `view` | `admin`. The lower three mirror an app-token's
	// `admin` scope; `public` is the only one that needs no credential.
	Scope PathScope `json:"scope"`
}

// JwtSpec is the contract's JwtSpec.
//
// How a gate verifies a JWT somebody else issued, and which ones it lets past.
//
// The `jwt` provider holds no state: there is no session cookie and no token
// table, because the credential carries its own proof. Everything the gate needs
// is therefore configuration — which key, which algorithm, which issuer, which
// claim is the user, which claims must hold — which is also what makes one gate
// front the Heyo auth API, an Auth0 tenant or a Keycloak realm.
//
// Exactly one of `secret`, `public_key` and `jwks_url` is set.
type JwtSpec struct {
	// HMAC shared secret (the `HS*` algorithms), as a secret-store reference.
	Secret *SecretRef `json:"secret,omitempty"`
	// An inline PEM public key or certificate, for `RS*`/`PS*`/`ES*`.
	PublicKey string `json:"public_key,omitempty"`
	// The issuer's JWKS endpoint, for a provider that rotates keys.
	JWKSURL string `json:"jwks_url,omitempty"`
	// The signature algorithms this gate accepts, e.g. `["HS256"]`.
	//
	// Required, with no default: the algorithm is named in the token's own header,
	// and a verifier that trusted that would accept an unsigned token.
	Algorithms []string `json:"algorithms"`
	// The `iss` a token must carry, exactly. Required.
	Issuer string `json:"issuer"`
	// The `aud` a token must carry, if the issuer sets one.
	Audience string `json:"audience,omitempty"`
	// Claims a token must satisfy on top of verifying. A value or a list of them
	// per claim: a list is an OR within that claim, and the map is an AND across
	// claims. A claim that is itself a list — scopes, roles, groups — is satisfied
	// by containing one of the wanted values.
	Require map[string]json.RawMessage `json:"require,omitempty"`
	// Which claim is forwarded as `x-auth-request-user`. Defaults to `sub`.
	SubjectClaim string `json:"subject_claim,omitempty"`
	// Which claim is forwarded as `x-auth-request-email`. Defaults to `email`.
	EmailClaim string `json:"email_claim,omitempty"`
	// Which claim is forwarded as `x-auth-request-name`. Defaults to `name`.
	NameClaim string `json:"name_claim,omitempty"`
	// Clock skew allowed on `exp`/`nbf`, in seconds. Capped at 300.
	LeewaySecs *int `json:"leeway_secs,omitempty"`
	// A cookie to read the token from when there is no `Authorization` header —
	// the only way a browser page navigation can carry one. The header wins when
	// both are present.
	Cookie string `json:"cookie,omitempty"`
	// Heyo Auth `/api/auth/login` endpoint for browser email/password sign-in.
	// Requires `cookie`; app-lb stores neither passwords nor refresh tokens.
	LoginEndpoint string `json:"login_endpoint,omitempty"`
	// Hosted sign-in: where to redirect a token-less *browser* (a request that
	// accepts HTML). The issuer signs the person in, sets the JWT in `cookie`, and
	// redirects back to the URL passed in `login_redirect_param`; app-lb keeps no
	// session of its own. A program still gets a 401. Requires `cookie`, and must
	// be `https://` (loopback `http://` aside).
	LoginURL string `json:"login_url,omitempty"`
	// The query parameter the hosted sign-in reads the return URL from. Only with `login_url`; defaults to `redirect_uri`.
	LoginRedirectParam string `json:"login_redirect_param,omitempty"`
	// Scoped sign-in: the issuer's OAuth authorization endpoint. With
	// `token_url`, a token-less browser is sent through an authorization-code
	// flow (PKCE S256) asking for this deployment's namespace; the token that
	// comes back must name this host (`gateHost`) and namespace, and app-lb keeps
	// a host-only session. Cannot be combined with a `cookie_domain` realm.
	AuthorizeURL string `json:"authorize_url,omitempty"`
	// Scoped sign-in: the issuer's token endpoint, called server to server.
	TokenURL string `json:"token_url,omitempty"`
}

// AuthProviderView is the contract's AuthProviderView.
//
// `GET /auth-providers` — a declared identity provider.
type AuthProviderView struct {
	Name           string       `json:"name"`
	Namespace      string       `json:"namespace"`
	Description    string       `json:"description,omitempty"`
	CreatedAt      int64        `json:"created_at"`
	Provider       ProviderList `json:"provider"`
	ClientID       string       `json:"client_id,omitempty"`
	ClientSecret   *SecretRef   `json:"client_secret,omitempty"`
	AllowedDomains []string     `json:"allowed_domains,omitempty"`
	AllowedEmails  []string     `json:"allowed_emails,omitempty"`
	JWT            *JwtSpec     `json:"jwt,omitempty"`
	CookieDomain   string       `json:"cookie_domain,omitempty"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [AuthProviderView.Extra].
func (v AuthProviderView) MarshalJSON() ([]byte, error) {
	type plain AuthProviderView
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [AuthProviderView.Extra].
func (v *AuthProviderView) UnmarshalJSON(data []byte) error {
	type plain AuthProviderView
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// PathScope is what a public path requires instead of the sign-in gate.
type PathScope string

// The PathScope values the contract names.
const (
	PathPublic PathScope = "public"
	PathNone   PathScope = "none"
	PathView   PathScope = "view"
	PathAdmin  PathScope = "admin"
)

// SessionView is a sign-in session of a deployment's gate, as
// `GET /sessions` lists it (a berth extension: app-lb's sessions are
// stateless). Times are unix seconds.
type SessionView struct {
	ID         string `json:"id"`
	Deployment string `json:"deployment"`
	Namespace  string `json:"namespace"`
	Subject    string `json:"subject"`
	Email      string `json:"email,omitempty"`
	Name       string `json:"name,omitempty"`
	Issuer     string `json:"issuer,omitempty"`
	CreatedAt  int64  `json:"created_at"`
	ExpiresAt  int64  `json:"expires_at"`
	LastSeenAt int64  `json:"last_seen_at"`
}

// SessionsRevoked is the answer to `DELETE /sessions?deployment=&subject=`.
type SessionsRevoked struct {
	Revoked int `json:"revoked"`
}
