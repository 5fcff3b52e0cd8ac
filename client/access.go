package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/berth-dev/berth/apitype"
)

// Token is an app-token as the /tokens routes describe it: the contract's
// TokenSummary. Who minted it is [Client.TokenProvenance].
type Token struct {
	apitype.TokenSummary
}

// MintedToken is the reply to [Client.MintToken]. Token is the secret
// itself, `berth_<id>_<secret>`: the server shows it this once and keeps
// only a hash.
type MintedToken struct {
	Token
	Secret string `json:"token"`
}

var (
	errNoTokenID  = errors.New("client: empty token id")
	errNoSecretID = errors.New("client: empty secret id")
	errNoName     = errors.New("client: empty name")
)

// WhoAmI reports what the server makes of the client's credential
// (`GET /whoami`).
func (c *Client) WhoAmI(ctx context.Context) (*apitype.WhoAmI, error) {
	var w apitype.WhoAmI
	if _, err := c.send(ctx, http.MethodGet, "/whoami", nil, nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// Tokens lists the tokens the caller may manage, sorted by id.
func (c *Client) Tokens(ctx context.Context) ([]Token, error) {
	var ts []Token
	if _, err := c.send(ctx, http.MethodGet, "/tokens", nil, nil, &ts); err != nil {
		return nil, err
	}
	return ts, nil
}

// Token returns one token.
func (c *Client) Token(ctx context.Context, id string) (*Token, error) {
	if id == "" {
		return nil, errNoTokenID
	}
	var t Token
	if _, err := c.send(ctx, http.MethodGet, "/tokens/"+url.PathEscape(id), nil, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// TokenProvenance reports who minted a token
// (`GET /tokens/:id/provenance`, berth's own route: the contract's
// TokenSummary does not declare `minted_by`).
func (c *Client) TokenProvenance(ctx context.Context, id string) (*apitype.TokenProvenance, error) {
	if id == "" {
		return nil, errNoTokenID
	}
	var p apitype.TokenProvenance
	if _, err := c.send(ctx, http.MethodGet, "/tokens/"+url.PathEscape(id)+"/provenance", nil, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// MintToken mints an app-token (`POST /tokens`).
func (c *Client) MintToken(ctx context.Context, req apitype.NewToken) (*MintedToken, error) {
	if req.Deployments == nil {
		req.Deployments = []string{}
	}
	var m MintedToken
	if _, err := c.send(ctx, http.MethodPost, "/tokens", nil, req, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// PatchToken changes a token's name, scope, namespace, deployments or
// expiry (`PATCH /tokens/:id`).
func (c *Client) PatchToken(ctx context.Context, id string, p apitype.TokenPatch) (*Token, error) {
	if id == "" {
		return nil, errNoTokenID
	}
	var t Token
	if _, err := c.send(ctx, http.MethodPatch, "/tokens/"+url.PathEscape(id), nil, p, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// RevokeToken deletes a token; the next request presenting it is refused.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	if id == "" {
		return errNoTokenID
	}
	_, err := c.send(ctx, http.MethodDelete, "/tokens/"+url.PathEscape(id), nil, nil, nil)
	return err
}

// secretPath is /secrets/<id>, with ?namespace= when ns is not empty.
func secretPath(ns, id string, extra url.Values) string {
	q := url.Values{}
	if ns != "" {
		q.Set("namespace", ns)
	}
	for k, v := range extra {
		q[k] = v
	}
	p := "/secrets"
	if id != "" {
		p += "/" + url.PathEscape(id)
	}
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

// Secrets lists the secrets the caller can reach, in namespace ns when it
// is not empty. Values are never returned, only key names.
func (c *Client) Secrets(ctx context.Context, ns string) ([]apitype.SecretSummary, error) {
	var ss []apitype.SecretSummary
	if _, err := c.send(ctx, http.MethodGet, secretPath(ns, "", nil), nil, nil, &ss); err != nil {
		return nil, err
	}
	return ss, nil
}

// Secret returns the summary of one secret. An empty ns means the
// server's default: the caller's own namespace for a namespace token,
// otherwise "default".
func (c *Client) Secret(ctx context.Context, ns, id string) (*apitype.SecretSummary, error) {
	if id == "" {
		return nil, errNoSecretID
	}
	var s apitype.SecretSummary
	if _, err := c.send(ctx, http.MethodGet, secretPath(ns, id, nil), nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// PutSecret creates or replaces a secret (`PUT /secrets/:id`).
func (c *Client) PutSecret(ctx context.Context, spec apitype.SecretSpec) (*apitype.SecretSummary, error) {
	if spec.ID == "" {
		return nil, errNoSecretID
	}
	var s apitype.SecretSummary
	if _, err := c.send(ctx, http.MethodPut, secretPath(spec.Namespace, spec.ID, nil), nil, spec, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// PatchSecret sets keys of a secret and removes those whose value is nil.
func (c *Client) PatchSecret(ctx context.Context, ns, id string, p apitype.SecretPatch) (*apitype.SecretSummary, error) {
	if id == "" {
		return nil, errNoSecretID
	}
	var s apitype.SecretSummary
	if _, err := c.send(ctx, http.MethodPatch, secretPath(ns, id, nil), nil, p, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteSecret deletes a secret. The server refuses (409, see
// [IsConflict]) while deployments reference it, unless force is set.
func (c *Client) DeleteSecret(ctx context.Context, ns, id string, force bool) error {
	if id == "" {
		return errNoSecretID
	}
	var extra url.Values
	if force {
		extra = url.Values{"force": {"true"}}
	}
	_, err := c.send(ctx, http.MethodDelete, secretPath(ns, id, extra), nil, nil, nil)
	return err
}

// Namespaces lists the namespaces the caller can see, sorted by name.
func (c *Client) Namespaces(ctx context.Context) ([]apitype.NamespaceEntry, error) {
	var ns []apitype.NamespaceEntry
	if _, err := c.send(ctx, http.MethodGet, "/namespaces", nil, nil, &ns); err != nil {
		return nil, err
	}
	return ns, nil
}

// CreateNamespace declares a namespace, or updates a declared one's
// description (fleet credentials only).
func (c *Client) CreateNamespace(ctx context.Context, spec apitype.NamespaceSpec) (*apitype.NamespaceEntry, error) {
	if spec.Name == "" {
		return nil, errNoName
	}
	var n apitype.NamespaceEntry
	if _, err := c.send(ctx, http.MethodPost, "/namespaces", nil, spec, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// DeleteNamespace forgets a declared namespace that holds no deployments.
func (c *Client) DeleteNamespace(ctx context.Context, name string) error {
	if name == "" {
		return errNoName
	}
	_, err := c.send(ctx, http.MethodDelete, "/namespaces/"+url.PathEscape(name), nil, nil, nil)
	return err
}

// AuthProviders lists the auth providers the caller can see, in namespace
// ns when it is not empty.
func (c *Client) AuthProviders(ctx context.Context, ns string) ([]apitype.AuthProviderView, error) {
	p := "/auth-providers"
	if ns != "" {
		p += "?" + url.Values{"namespace": {ns}}.Encode()
	}
	var ps []apitype.AuthProviderView
	if _, err := c.send(ctx, http.MethodGet, p, nil, nil, &ps); err != nil {
		return nil, err
	}
	return ps, nil
}

func providerPath(ns, name string) string {
	return "/auth-providers/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
}

// AuthProvider returns one auth provider.
func (c *Client) AuthProvider(ctx context.Context, ns, name string) (*apitype.AuthProviderView, error) {
	if ns == "" || name == "" {
		return nil, errNoName
	}
	var v apitype.AuthProviderView
	if _, err := c.send(ctx, http.MethodGet, providerPath(ns, name), nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// PutAuthProvider declares or replaces an auth provider
// (`POST /auth-providers`).
func (c *Client) PutAuthProvider(ctx context.Context, v apitype.AuthProviderView) (*apitype.AuthProviderView, error) {
	if v.Name == "" {
		return nil, errNoName
	}
	var out apitype.AuthProviderView
	if _, err := c.send(ctx, http.MethodPost, "/auth-providers", nil, v, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteAuthProvider removes an auth provider no deployment inherits.
func (c *Client) DeleteAuthProvider(ctx context.Context, ns, name string) error {
	if ns == "" || name == "" {
		return errNoName
	}
	_, err := c.send(ctx, http.MethodDelete, providerPath(ns, name), nil, nil, nil)
	return err
}

// IsTooManyRequests reports whether err is a 429: the server's brake has
// refused this address for a while after repeated failed credentials.
func IsTooManyRequests(err error) bool { return StatusCode(err) == http.StatusTooManyRequests }

// Sessions lists the sign-in sessions of deployment ("" for every
// deployment the credential reaches).
func (c *Client) Sessions(ctx context.Context, deployment string) ([]apitype.SessionView, error) {
	p := "/sessions"
	if deployment != "" {
		p += "?" + url.Values{"deployment": {deployment}}.Encode()
	}
	var out []apitype.SessionView
	if _, err := c.send(ctx, http.MethodGet, p, nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// RevokeSession ends one sign-in session.
func (c *Client) RevokeSession(ctx context.Context, id string) error {
	if id == "" {
		return errNoName
	}
	_, err := c.send(ctx, http.MethodDelete, "/sessions/"+url.PathEscape(id), nil, nil, nil)
	return err
}

// RevokeSubjectSessions signs subject out everywhere at deployment and
// returns how many sessions ended.
func (c *Client) RevokeSubjectSessions(ctx context.Context, deployment, subject string) (int, error) {
	var out apitype.SessionsRevoked
	q := url.Values{"deployment": {deployment}, "subject": {subject}}.Encode()
	if _, err := c.send(ctx, http.MethodDelete, "/sessions?"+q, nil, nil, &out); err != nil {
		return 0, err
	}
	return out.Revoked, nil
}
