package auth

import (
	"context"
	"slices"
	"time"

	"github.com/berth-dev/berth/apitype"
)

// Kind is what sort of caller a Principal is; the values are those
// `GET /whoami` reports in `caller`.
type Kind string

// The caller kinds. Nobody is the zero value: a request that reached a
// handler without passing the gate, which may do nothing.
const (
	Nobody   Kind = ""
	Ungated  Kind = "ungated"
	Operator Kind = "operator"
	AppToken Kind = "app-token"
)

// Token is an app-token as the server knows it, without its secret.
type Token struct {
	ID          string
	Name        string
	Admin       apitype.AdminScope
	Namespace   string   // "" when unconfined
	Deployments []string // ids, or ["*"]; empty on a namespace token means all of it
	CreatedAt   time.Time
	ExpiresAt   time.Time // zero: never
	LastUsedAt  time.Time // zero: never
	MintedBy    string
	// OpenAdmin: minted or last changed while the admin API had no
	// operator password (see TokensConfig.Open).
	OpenAdmin bool
	// Fleet: a fleet token, valid on every host of the fleet (kept in
	// etcd, not in this host's store; see Tokens.UseFleet). MirroredFrom
	// is the host that minted it when that is another host.
	Fleet        bool
	MirroredFrom string
}

// Summary is the token's wire form.
func (t *Token) Summary() apitype.TokenSummary {
	s := apitype.TokenSummary{
		ID: t.ID, Name: t.Name, Admin: t.Admin, Namespace: t.Namespace,
		Deployments: slices.Clone(t.Deployments), CreatedAt: t.CreatedAt.Unix(),
	}
	if s.Deployments == nil {
		s.Deployments = []string{}
	}
	if !t.ExpiresAt.IsZero() {
		v := t.ExpiresAt.Unix()
		s.ExpiresAt = &v
	}
	if !t.LastUsedAt.IsZero() {
		v := t.LastUsedAt.Unix()
		s.LastUsedAt = &v
	}
	if t.Fleet {
		yes := true
		s.Fleet, s.MirroredFrom = &yes, t.MirroredFrom
	}
	return s
}

// TokenView is a token as the /tokens routes answer: on the wire exactly
// the contract's TokenSummary, which declares no `minted_by` (and no index
// signature). MintedBy travels only on berth's own
// `GET /tokens/{id}/provenance` (apitype.TokenProvenance).
type TokenView struct {
	apitype.TokenSummary
	MintedBy string `json:"-"`
}

// Provenance is the token's berth-only provenance.
func (v TokenView) Provenance() apitype.TokenProvenance {
	return apitype.TokenProvenance{ID: v.ID, MintedBy: v.MintedBy}
}

// MintedView is the reply to a mint: the view plus the token, shown once.
type MintedView struct {
	TokenView
	Token string `json:"token"`
}

// View is the token's reply form.
func (t *Token) View() TokenView { return TokenView{TokenSummary: t.Summary(), MintedBy: t.MintedBy} }

// expired reports whether the token is past its expiry at now.
func (t *Token) expired(now time.Time) bool {
	return !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt)
}

// Principal is the caller of one admin request.
type Principal struct {
	Kind  Kind
	User  string // the operator's user name
	Token *Token // the app-token presented, when Kind is AppToken
}

// Name is how the principal is recorded in `minted_by` and the log:
// `token:<id>`, `user:<name>` or `ungated`.
func (p *Principal) Name() string {
	switch p.Kind {
	case AppToken:
		return "token:" + p.Token.ID
	case Operator:
		return "user:" + p.User
	case Ungated:
		return "ungated"
	}
	return "nobody"
}

// Scope is the principal's admin scope. The operator and an ungated caller
// have every right; Nobody has none.
func (p *Principal) Scope() apitype.AdminScope {
	switch p.Kind {
	case Operator, Ungated:
		return apitype.ScopeAdmin
	case AppToken:
		return p.Token.Admin
	}
	return apitype.ScopeNone
}

// Satisfies reports whether the principal's scope is at least want
// (app-lb.md §7.2: admin ⊇ view ⊇ none).
func (p *Principal) Satisfies(want apitype.AdminScope) bool {
	return satisfies(p.Scope(), want)
}

func satisfies(have, want apitype.AdminScope) bool {
	switch want {
	case apitype.ScopeNone:
		return true
	case apitype.ScopeView:
		return have == apitype.ScopeView || have == apitype.ScopeAdmin
	case apitype.ScopeAdmin:
		return have == apitype.ScopeAdmin
	}
	return false
}

// Confined reports whether the principal is behind a namespace wall.
func (p *Principal) Confined() bool {
	return p.Kind == AppToken && p.Token.Namespace != ""
}

// Fleet reports whether the principal covers the whole fleet: the
// operator, an ungated caller, or an unconfined token scoped to "*".
func (p *Principal) Fleet() bool {
	switch p.Kind {
	case Operator, Ungated:
		return true
	case AppToken:
		return p.Token.Namespace == "" && slices.Contains(p.Token.Deployments, "*")
	}
	return false
}

// Touches reports whether the principal reaches deployment id, which lives
// in namespace ns (app-lb.md §7.3): an unconfined token must name the id or
// "*"; a confined one needs the deployment in its namespace and its
// deployment list empty or naming it.
func (p *Principal) Touches(id, ns string) bool {
	switch p.Kind {
	case Operator, Ungated:
		return true
	case AppToken:
		t := p.Token
		named := slices.Contains(t.Deployments, id) || slices.Contains(t.Deployments, "*")
		if t.Namespace == "" {
			return named
		}
		return t.Namespace == ns && (len(t.Deployments) == 0 || named)
	}
	return false
}

// Reaches reports whether the principal may see the namespace-level objects
// of ns (its secrets, auth providers and tokens): fleet principals reach
// every namespace, a confined token reaches its own, and an unconfined
// token scoped to particular deployments reaches none.
func (p *Principal) Reaches(ns string) bool {
	if p.Fleet() {
		return true
	}
	return p.Confined() && p.Token.Namespace == ns
}

// Administers reports whether the principal may make namespace-wide writes
// in ns (secrets, auth providers, minting): admin scope over the fleet, or
// a confined admin token whose deployments are empty or "*".
func (p *Principal) Administers(ns string) bool {
	if !p.Satisfies(apitype.ScopeAdmin) {
		return false
	}
	if p.Fleet() {
		return true
	}
	t := p.Token
	return p.Confined() && t.Namespace == ns && (len(t.Deployments) == 0 || slices.Contains(t.Deployments, "*"))
}

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal the gate put in ctx. Without one it
// returns a Nobody principal, which may do nothing: a handler registered
// without the gate fails closed.
func FromContext(ctx context.Context) *Principal {
	if p, ok := ctx.Value(ctxKey{}).(*Principal); ok && p != nil {
		return p
	}
	return &Principal{Kind: Nobody}
}
