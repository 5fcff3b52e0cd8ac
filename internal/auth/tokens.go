package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/web"
)

// TokenStore is the persistence Tokens needs (implemented by *store.Store).
type TokenStore interface {
	Tokens(ctx context.Context) ([]store.Token, error)
	PutToken(ctx context.Context, t store.Token) error
	TouchToken(ctx context.Context, id string, at time.Time) error
	DeleteToken(ctx context.Context, id string) error
}

// Errors Verify returns. The gate answers all of them with the same 401, so
// a caller cannot tell an unknown id from a wrong secret; they differ only
// in the log.
var (
	ErrUnknownToken = errors.New("auth: no such token, or the secret does not match")
	ErrExpiredToken = errors.New("auth: token expired")
	// ErrOpenAdminToken: the token was minted (or last changed) while the
	// admin API had no password, and now it has one. Unlike the others
	// it is answered with its reason: the presenter holds the real token.
	ErrOpenAdminToken = errors.New("this token was minted while the admin API had no password, so anyone on the host could have minted it; it is refused now that a password is set — mint a new one")
)

// DefaultTenantMaxTTL caps the lifetime of tokens minted by namespace
// credentials (app-lb.md §7.4: APP_LB_TENANT_TOKEN_MAX_TTL_SECS).
const DefaultTenantMaxTTL = 90 * 24 * time.Hour

// MaxTokenName is the longest token name accepted.
const MaxTokenName = 128

// touchEvery bounds how often a token's last_used_at is written: the stamp
// is informational, and a database write per request would cost more than
// it tells.
const touchEvery = time.Minute

// TokensConfig configures Tokens.
type TokensConfig struct {
	Store TokenStore
	// TenantMaxTTL caps (and defaults) the lifetime of tokens minted or
	// patched by namespace-confined callers; default DefaultTenantMaxTTL.
	TenantMaxTTL time.Duration
	// Open: the admin API has no operator password, so any local caller
	// may mint. Tokens minted or patched while Open are marked, and a
	// Tokens that is not Open refuses marked tokens (ErrOpenAdminToken):
	// a password must not leave in force a token anyone could have made.
	Open bool
	Now  func() time.Time
	Log  *slog.Logger
}

// Tokens is the app-token set: minting, the management routes' rules, and
// verification. It keeps every token in memory, written through to the
// store, so verification costs no database read and a revocation is seen
// by the very next request. Safe for concurrent use.
type Tokens struct {
	cfg TokensConfig

	wmu sync.Mutex // serialises writes (store first, then memory)

	mu   sync.Mutex // guards byID and the fleet fields below
	byID map[string]*tokenEntry

	// The fleet (UseFleet; nil without one), this host's id in it, the
	// fleet revision the mirror has reached, and a channel closed (and
	// replaced) each time it moves on.
	fleet     FleetTokenStore
	self      string
	mirrorRev int64
	mirrored  chan struct{}
}

type tokenEntry struct {
	tok     Token
	hash    string
	flushed time.Time // last_used_at as last written to the store
	// fleet: a fleet token, held as the fleet reports it and not in the
	// store; host minted it.
	fleet bool
	host  string
}

// NewTokens loads the stored tokens.
func NewTokens(ctx context.Context, cfg TokensConfig) (*Tokens, error) {
	if cfg.Store == nil {
		return nil, errors.New("auth: NewTokens needs a store")
	}
	if cfg.TenantMaxTTL <= 0 {
		cfg.TenantMaxTTL = DefaultTenantMaxTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	rows, err := cfg.Store.Tokens(ctx)
	if err != nil {
		return nil, fmt.Errorf("auth: load tokens: %w", err)
	}
	ts := &Tokens{cfg: cfg, byID: map[string]*tokenEntry{}, mirrored: make(chan struct{})}
	refused := 0
	for _, r := range rows {
		ts.byID[r.ID] = &tokenEntry{tok: fromRow(r), hash: r.SecretSHA256, flushed: r.LastUsedAt}
		if r.OpenAdmin && !cfg.Open {
			refused++
		}
	}
	if refused > 0 {
		cfg.Log.Warn("app-tokens minted while the admin API had no password are refused now that it has one; revoke them and mint new ones", "tokens", refused)
	}
	return ts, nil
}

func fromRow(r store.Token) Token {
	return Token{
		ID: r.ID, Name: r.Name, Admin: apitype.AdminScope(r.Admin), Namespace: r.Namespace,
		Deployments: r.Deployments, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		LastUsedAt: r.LastUsedAt, MintedBy: r.MintedBy, OpenAdmin: r.OpenAdmin,
	}
}

func toRow(t Token, hash string) store.Token {
	return store.Token{
		ID: t.ID, Name: t.Name, Admin: string(t.Admin), Namespace: t.Namespace,
		Deployments: t.Deployments, SecretSHA256: hash, CreatedAt: t.CreatedAt,
		ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt, MintedBy: t.MintedBy, OpenAdmin: t.OpenAdmin,
	}
}

// Verify checks a presented token and returns a copy of what it grants. It
// returns ErrMalformedToken, ErrUnknownToken, ErrExpiredToken or
// ErrOpenAdminToken.
func (ts *Tokens) Verify(ctx context.Context, raw string) (*Token, error) {
	id, secret, err := ParseToken(raw)
	if err != nil {
		return nil, err
	}
	got := hashSecret(secret)
	return ts.use(ctx, id, func(hash string) bool { return subtle.ConstantTimeCompare([]byte(got), []byte(hash)) == 1 })
}

// Live returns token id as Verify returns it to the token's holder, but
// without its secret: a browser session of the web UI (package ui)
// signed in with a token holds its id, and acts as the token for as long
// as Verify would accept it (not revoked, not expired).
func (ts *Tokens) Live(ctx context.Context, id string) (*Token, error) {
	return ts.use(ctx, id, func(string) bool { return true })
}

// use returns token id when proven accepts its stored hash, marking it
// used.
func (ts *Tokens) use(ctx context.Context, id string, proven func(hash string) bool) (*Token, error) {
	now := ts.cfg.Now()
	ts.mu.Lock()
	e := ts.byID[id]
	if e == nil || !proven(e.hash) {
		ts.mu.Unlock()
		return nil, ErrUnknownToken
	}
	if e.tok.expired(now) {
		ts.mu.Unlock()
		return nil, ErrExpiredToken
	}
	if e.tok.OpenAdmin && !ts.cfg.Open {
		ts.mu.Unlock()
		return nil, ErrOpenAdminToken
	}
	e.tok.LastUsedAt = now
	// A fleet token's use is this host's to know: it is not in the store.
	flush := !e.fleet && now.Sub(e.flushed) >= touchEvery
	if flush {
		e.flushed = now
	}
	tok := clone(e.tok)
	ts.mu.Unlock()
	if flush {
		if err := ts.cfg.Store.TouchToken(ctx, id, now); err != nil {
			ts.cfg.Log.Warn("could not record token use", "token", id, "err", err)
		}
	}
	return &tok, nil
}

func clone(t Token) Token {
	t.Deployments = slices.Clone(t.Deployments)
	return t
}

// Mint creates a token for req on behalf of by, enforcing app-lb.md §7.4
// for callers below the fleet. The reply holds the token string; it is the
// only time the secret exists outside the caller.
func (ts *Tokens) Mint(ctx context.Context, by *Principal, req apitype.NewToken) (MintedView, error) {
	now := ts.cfg.Now()
	t := Token{
		Name: strings.TrimSpace(req.Name), Admin: req.Admin, Namespace: req.Namespace,
		Deployments: slices.Clone(req.Deployments), CreatedAt: now.Truncate(time.Second), MintedBy: by.Name(),
		OpenAdmin: ts.cfg.Open,
	}
	if t.Admin == "" {
		t.Admin = apitype.ScopeNone
	}
	if t.Deployments == nil {
		t.Deployments = []string{}
	}
	if err := checkToken(&t); err != nil {
		return MintedView{}, err
	}
	fleet, self := ts.fleetStore()
	isFleet := req.Fleet != nil && *req.Fleet
	if isFleet {
		if fleet == nil {
			return MintedView{}, errNoFleet()
		}
		if !by.Fleet() {
			return MintedView{}, web.Errorf(http.StatusForbidden, "only a fleet-wide credential mints fleet tokens: this one is confined to a namespace or scoped to specific deployments")
		}
	}
	if req.ExpiresInSecs != nil {
		if *req.ExpiresInSecs <= 0 {
			return MintedView{}, web.Invalid("expires_in_secs", "must be positive, got %d", *req.ExpiresInSecs)
		}
		if *req.ExpiresInSecs > int64(100*365*24*3600) {
			return MintedView{}, web.Invalid("expires_in_secs", "must be at most 100 years")
		}
		t.ExpiresAt = t.CreatedAt.Add(time.Duration(*req.ExpiresInSecs) * time.Second)
	}
	if by.Confined() && t.Namespace == "" {
		return MintedView{}, web.Errorf(http.StatusForbidden, "a namespace credential mints namespace tokens: set `namespace` to the one you administer")
	}
	if err := ts.mayHold(by, &t, now, true); err != nil {
		return MintedView{}, err
	}
	raw, id, hash := newToken()
	t.ID = id
	ts.wmu.Lock()
	defer ts.wmu.Unlock()
	if isFleet {
		if err := ts.publish(ctx, fleet, FleetToken{Token: t, SecretSHA256: hash, Host: self}); err != nil {
			return MintedView{}, err
		}
		t.Fleet = true
		return MintedView{TokenView: t.View(), Token: raw}, nil
	}
	if err := ts.cfg.Store.PutToken(ctx, toRow(t, hash)); err != nil {
		return MintedView{}, &web.Error{Status: http.StatusInternalServerError, Message: "the token was not saved", Err: err}
	}
	ts.mu.Lock()
	ts.byID[id] = &tokenEntry{tok: t, hash: hash}
	ts.mu.Unlock()
	return MintedView{TokenView: t.View(), Token: raw}, nil
}

// mayHold checks that by may give a token the grants of t (after a mint or
// a patch): confined callers only within a namespace they administer, with
// an expiry within the cap; callers scoped to particular deployments only
// within those. defaultTTL fills in a confined caller's missing expiry.
func (ts *Tokens) mayHold(by *Principal, t *Token, now time.Time, defaultTTL bool) error {
	switch {
	case by.Fleet():
		if !by.Satisfies(apitype.ScopeAdmin) {
			return web.Errorf(http.StatusForbidden, "this token's admin scope is not `admin`, which this route requires")
		}
		return nil
	case by.Confined():
		if t.Namespace == "" {
			return web.Errorf(http.StatusForbidden, "a namespace credential cannot lift a token out of its namespace")
		}
		if !by.Administers(t.Namespace) {
			return web.Errorf(http.StatusForbidden, "this credential does not administer namespace %q", t.Namespace)
		}
		max := ts.cfg.TenantMaxTTL
		if t.ExpiresAt.IsZero() {
			if !defaultTTL {
				return web.Errorf(http.StatusForbidden, "a namespace token must expire")
			}
			t.ExpiresAt = t.CreatedAt.Add(max)
		}
		if t.ExpiresAt.Sub(now) > max+time.Second {
			return web.Errorf(http.StatusBadRequest, "a namespace token may live at most %d seconds (%d days)", int64(max/time.Second), int64(max/(24*time.Hour)))
		}
		return nil
	case by.Kind == AppToken:
		own := by.Token.Deployments
		if !by.Satisfies(apitype.ScopeAdmin) {
			return web.Errorf(http.StatusForbidden, "this token's admin scope is not `admin`, which this route requires")
		}
		if t.Namespace != "" || len(t.Deployments) == 0 || slices.ContainsFunc(t.Deployments, func(d string) bool { return d == "*" || !slices.Contains(own, d) }) {
			return web.Errorf(http.StatusForbidden, "this token is scoped to specific deployments, so it can only mint tokens for some of %s", strings.Join(own, ", "))
		}
		return nil
	}
	return web.Errorf(http.StatusForbidden, "this caller may not mint tokens")
}

// checkToken validates the caller-supplied fields of a token.
func checkToken(t *Token) error {
	switch {
	case t.Name == "":
		return web.Invalid("name", "a token needs a name — it is how you know what to revoke")
	case len(t.Name) > MaxTokenName:
		return web.Invalid("name", "must be at most %d characters", MaxTokenName)
	}
	switch t.Admin {
	case apitype.ScopeNone, apitype.ScopeView, apitype.ScopeAdmin:
	default:
		return web.Invalid("admin", "%q is not one of none, view, admin", t.Admin)
	}
	if t.Namespace != "" {
		if msg := namespaceProblem(t.Namespace); msg != "" {
			return web.Invalid("namespace", "%s", msg)
		}
	}
	for i, d := range t.Deployments {
		if d == "*" {
			if len(t.Deployments) > 1 {
				return web.Invalid(fmt.Sprintf("deployments[%d]", i), `"*" already means every deployment; list it alone`)
			}
			continue
		}
		if msg := idProblem(d); msg != "" {
			return web.Invalid(fmt.Sprintf("deployments[%d]", i), "must be a deployment id or \"*\": %s", msg)
		}
	}
	return nil
}

// manages reports whether by may see and change t: fleet callers every
// token, a namespace administrator the tokens of its namespace, and a
// token scoped to deployments itself and the tokens it minted.
func manages(by *Principal, t *Token) bool {
	switch {
	case by.Fleet():
		return true
	case by.Confined():
		return t.Namespace != "" && by.Administers(t.Namespace)
	case by.Kind == AppToken:
		return t.ID == by.Token.ID || t.MintedBy == by.Name()
	}
	return false
}

func noToken(id string) error { return web.Errorf(http.StatusNotFound, "no token %q", id) }

// List returns the tokens by may see, sorted by id, after removing expired
// ones (which can never be used again).
func (ts *Tokens) List(ctx context.Context, by *Principal) ([]TokenView, error) {
	ts.sweep(ctx)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := []TokenView{}
	now := ts.cfg.Now()
	for _, e := range ts.byID {
		if manages(by, &e.tok) && !e.tok.expired(now) {
			out = append(out, e.tok.View())
		}
	}
	slices.SortFunc(out, func(a, b TokenView) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// sweep deletes expired tokens.
func (ts *Tokens) sweep(ctx context.Context) {
	now := ts.cfg.Now()
	ts.wmu.Lock()
	defer ts.wmu.Unlock()
	ts.mu.Lock()
	var dead, deadFleet []string
	for id, e := range ts.byID {
		switch {
		case e.tok.expired(now) && e.fleet:
			deadFleet = append(deadFleet, id)
		case e.tok.expired(now):
			dead = append(dead, id)
		}
	}
	fleet := ts.fleet
	ts.mu.Unlock()
	// An expired fleet token is removed from the fleet, and leaves here
	// when the fleet reports it gone (refused meanwhile: it is expired).
	for _, id := range deadFleet {
		if _, err := fleet.DeleteFleetToken(ctx, id); err != nil && !errors.Is(err, ErrNoFleetToken) {
			ts.cfg.Log.Warn("could not remove an expired fleet token", "token", id, "err", err)
		}
	}
	for _, id := range dead {
		if err := ts.cfg.Store.DeleteToken(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			ts.cfg.Log.Warn("could not remove an expired token", "token", id, "err", err)
			continue
		}
		ts.mu.Lock()
		delete(ts.byID, id)
		ts.mu.Unlock()
	}
}

// Get returns one token by may see; a token it may not see is a 404, the
// same as one that does not exist.
func (ts *Tokens) Get(ctx context.Context, by *Principal, id string) (TokenView, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	e := ts.byID[id]
	if e == nil || !manages(by, &e.tok) {
		return TokenView{}, noToken(id)
	}
	return e.tok.View(), nil
}

// Patch changes a token's name, scope, namespace, deployments or expiry.
// Its secret never changes: revoke and mint to rotate.
func (ts *Tokens) Patch(ctx context.Context, by *Principal, id string, p apitype.TokenPatch) (TokenView, error) {
	now := ts.cfg.Now()
	ts.wmu.Lock()
	defer ts.wmu.Unlock()
	ts.mu.Lock()
	e := ts.byID[id]
	if e == nil || !manages(by, &e.tok) {
		ts.mu.Unlock()
		return TokenView{}, noToken(id)
	}
	t, hash, isFleet, origin := clone(e.tok), e.hash, e.fleet, e.host
	fleet, self := ts.fleet, ts.self
	ts.mu.Unlock()
	if isFleet && origin != self {
		return TokenView{}, web.Errorf(http.StatusConflict, "%s is a fleet token mirrored from %s; change it there (or revoke it, which any host of the fleet can)", id, origin)
	}

	if p.Name != "" {
		t.Name = strings.TrimSpace(p.Name)
	}
	if p.Admin != "" {
		t.Admin = p.Admin
	}
	if p.Namespace.IsNull() {
		t.Namespace = ""
	} else if ns, ok := p.Namespace.Get(); ok {
		t.Namespace = ns
	}
	if p.Deployments != nil {
		t.Deployments = slices.Clone(p.Deployments)
	}
	if p.ExpiresAt.IsNull() {
		t.ExpiresAt = time.Time{}
	} else if at, ok := p.ExpiresAt.Get(); ok {
		t.ExpiresAt = time.Unix(at, 0)
	}
	if err := checkToken(&t); err != nil {
		return TokenView{}, err
	}
	if err := ts.mayHold(by, &t, now, false); err != nil {
		return TokenView{}, err
	}
	// A token widened while anyone could widen it is no better than one
	// minted then.
	t.OpenAdmin = t.OpenAdmin || ts.cfg.Open
	if isFleet {
		pub := clone(t)
		pub.Fleet, pub.MirroredFrom = false, ""
		if err := ts.publish(ctx, fleet, FleetToken{Token: pub, SecretSHA256: hash, Host: origin}); err != nil {
			return TokenView{}, err
		}
		return t.View(), nil
	}
	if err := ts.cfg.Store.PutToken(ctx, toRow(t, hash)); err != nil {
		return TokenView{}, &web.Error{Status: http.StatusInternalServerError, Message: "the token was not saved", Err: err}
	}
	ts.mu.Lock()
	if cur := ts.byID[id]; cur != nil {
		t.LastUsedAt = cur.tok.LastUsedAt
		cur.tok = t
	}
	ts.mu.Unlock()
	return t.View(), nil
}

// Revoke deletes a token. The next request presenting it is refused.
func (ts *Tokens) Revoke(ctx context.Context, by *Principal, id string) error {
	ts.wmu.Lock()
	defer ts.wmu.Unlock()
	ts.mu.Lock()
	e := ts.byID[id]
	ok := e != nil && manages(by, &e.tok)
	isFleet, fleet := ok && e.fleet, ts.fleet
	ts.mu.Unlock()
	if !ok {
		return noToken(id)
	}
	if isFleet {
		// Revoked on every host: the fleet deletes it, and each host's
		// mirror drops it.
		rev, err := fleet.DeleteFleetToken(ctx, id)
		if err != nil && !errors.Is(err, ErrNoFleetToken) {
			return &web.Error{Status: http.StatusServiceUnavailable, Message: "the fleet token was not revoked: etcd could not be written", Err: err, Header: http.Header{"Retry-After": {"5"}}}
		}
		ts.awaitMirror(ctx, rev)
		return nil
	}
	if err := ts.cfg.Store.DeleteToken(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the token was not revoked", Err: err}
	}
	ts.mu.Lock()
	delete(ts.byID, id)
	ts.mu.Unlock()
	return nil
}

// idProblem checks a deployment id as package spec does (kept local: auth
// must not depend on validation internals).
func idProblem(id string) string {
	switch {
	case id == "":
		return "required"
	case len(id) > 128:
		return "longer than 128 characters"
	case id[0] == '.' || id[0] == '-':
		return fmt.Sprintf("%q must not start with '.' or '-'", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("%q has invalid character %q (allowed: A-Z a-z 0-9 . _ -)", id, c)
		}
	}
	return ""
}

// CheckNamespace reports whether ns is a valid namespace name: 1–63
// characters of a-z, 0-9 and '-', as deployment specs require.
func CheckNamespace(ns string) error {
	if msg := namespaceProblem(ns); msg != "" {
		return errors.New(msg)
	}
	return nil
}

func namespaceProblem(ns string) string {
	switch {
	case ns == "":
		return "required"
	case len(ns) > 63:
		return "longer than 63 characters"
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Sprintf("%q has invalid character %q (allowed: a-z 0-9 -)", ns, c)
		}
	}
	return ""
}

// Reload brings the tokens held in memory in line with the store, without
// writing it: on a store several hosts share, the tokens another host
// minted, changed or revoked. A token's last use is the later of the
// stored one and this host's. Fleet tokens (mirrored from the fleet, not
// stored) are left alone. It serialises with this host's writes.
func (ts *Tokens) Reload(ctx context.Context) error {
	ts.wmu.Lock()
	defer ts.wmu.Unlock()
	rows, err := ts.cfg.Store.Tokens(ctx)
	if err != nil {
		return fmt.Errorf("auth: reload tokens: %w", err)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	stored := make(map[string]bool, len(rows))
	for _, r := range rows {
		stored[r.ID] = true
		cur := ts.byID[r.ID]
		if cur != nil && cur.fleet {
			continue
		}
		e := &tokenEntry{tok: fromRow(r), hash: r.SecretSHA256, flushed: r.LastUsedAt}
		if cur != nil && cur.tok.LastUsedAt.After(e.tok.LastUsedAt) {
			e.tok.LastUsedAt, e.flushed = cur.tok.LastUsedAt, cur.flushed
		}
		ts.byID[r.ID] = e
	}
	for id, e := range ts.byID {
		if !e.fleet && !stored[id] {
			delete(ts.byID, id)
		}
	}
	return nil
}
