package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/web"
)

// Tier is who may use a route at all (app-lb.md §2.1).
type Tier int

// The tiers, weakest first.
const (
	// Open routes check no credential (GET /healthz).
	Open Tier = iota
	// AnyCredential routes admit any valid credential, whatever its scope
	// (GET /whoami).
	AnyCredential
	// View routes need admin scope view or admin.
	View
	// CRUD routes need admin scope admin.
	CRUD
)

// Wall is the scope wall a route applies after its tier (app-lb.md §2.1).
type Wall uint8

// The walls. AllowQueryToken is not a wall but a modifier or-ed into one.
const (
	// NoWall: the tier is the whole check.
	NoWall Wall = iota
	// WallDeployment: the route's {id} path value names a deployment the
	// caller must touch.
	WallDeployment
	// WallNarrow: any caller passes; the handler narrows its answer with
	// the Principal in the request context.
	WallNarrow
	// WallFleet: only callers that cover the whole fleet pass.
	WallFleet

	// AllowQueryToken also accepts an app-token in the `app_token` query
	// parameter (the shell websocket only: browsers cannot set headers on
	// a websocket).
	AllowQueryToken Wall = 1 << 7
)

// Refusal messages, as app-lb words them.
const (
	msgNoScope    = "this token has no admin scope, so it cannot read the admin API"
	msgNotAdmin   = "this token's admin scope is not `admin`, which this route requires"
	msgFleetWide  = `this token is scoped to specific deployments, so it cannot use a fleet-wide route — mint one scoped to "*" if that is what you want`
	msgDeployment = "this token is not scoped to deployment %q"
)

// Locator finds the namespace of a deployment for the deployment wall.
type Locator interface {
	Locate(id string) (namespace string, ok bool)
}

// Config configures a Gate.
type Config struct {
	// User and Password are the operator's credential. An empty Password
	// leaves the gate off: callers without a credential are Ungated. User
	// defaults to "admin".
	User, Password string
	// Tokens verifies app-tokens; nil accepts none.
	Tokens *Tokens
	// Brake slows and then refuses addresses that keep failing; nil gets
	// NewBrake with the defaults.
	Brake *Brake
	Now   func() time.Time
	Log   *slog.Logger
	// Sessions resolves the browser sessions of the web UI (package ui):
	// a request with no Authorization header that carries a session
	// cookie acts as the credential the session was signed in with. Nil:
	// no browser sessions.
	Sessions BrowserSessions
	// Event receives every refused admin request (the SIEM's admin-plane
	// observations); nil drops them. It runs on the request path and must
	// not block.
	Event func(Event)
}

// Event is a refused admin request: Action is "admin-rejected" (no valid
// credential) or "admin-scope" (a valid one beyond its scope or wall).
// Source is the socket peer.
type Event struct {
	Action string
	Source netip.Addr
	Method string
	Path   string
	Scheme string // "basic", "bearer" or "none"
	Reason string
}

// event hands e to Config.Event.
func (g *Gate) event(r *http.Request, action, reason string) {
	if g.cfg.Event == nil {
		return
	}
	var src netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		src = ap.Addr().Unmap()
	}
	g.cfg.Event(Event{Action: action, Source: src, Method: r.Method, Path: r.URL.Path, Scheme: scheme(r), Reason: reason})
}

// scheme names the scheme of r's Authorization header.
func scheme(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if h == "" && r.URL.Query().Has("app_token") {
		return "bearer"
	}
	return web.AuthScheme(h)
}

// BrowserSessions are the signed-in browsers of the web UI, as the gate
// sees them (implemented by package ui).
type BrowserSessions interface {
	// Session resolves the session cookie r carries. present is false
	// when r carries none. Otherwise err is nil for a live session (whose
	// CSRF token r presents, on a method that changes state), ErrNoCredential
	// for an unknown or ended one, or an error wrapping ErrCSRF.
	Session(r *http.Request) (c SessionCredential, present bool, err error)
}

// SessionCredential is what a browser session was signed in with: the
// operator's password (User) or an app-token (TokenID). It holds no
// secret: the session acts as the credential while the credential itself
// would still be accepted.
type SessionCredential struct {
	User    string
	TokenID string
}

// ErrCSRF: a browser session's request that changes state did not
// present the session's CSRF token. Answered 403; it counts as no failed
// guess (the session cookie was genuine).
var ErrCSRF = errors.New("this request changes state, so it needs the session's CSRF token in the X-CSRF-Token header (reload the page)")

// Gate authenticates admin requests and enforces tiers and walls.
type Gate struct {
	evaluated atomic.Int64 // credentials evaluated, for tests of the brake
	cfg       Config
	gated     bool
	userHash  [32]byte
	passHash  [32]byte
}

// New returns a Gate.
func New(cfg Config) *Gate {
	if cfg.User == "" {
		cfg.User = "admin"
	}
	if cfg.Brake == nil {
		cfg.Brake = NewBrake(BrakeConfig{})
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Gate{
		cfg:      cfg,
		gated:    cfg.Password != "",
		userHash: sha256.Sum256([]byte(cfg.User)),
		passHash: sha256.Sum256([]byte(cfg.Password)),
	}
}

// Gated reports whether an operator password is set, so that callers
// without a credential are refused.
func (g *Gate) Gated() bool { return g.gated }

// Errors Authenticate returns.
var (
	// ErrNoCredential: nothing was presented on a gated server.
	ErrNoCredential = errors.New("auth: no credential")
	// ErrBadCredential: something was presented and it did not verify.
	ErrBadCredential = errors.New("auth: invalid credential")
)

// maxAuthHeader bounds the Authorization header parsed; real ones are far
// shorter, and a huge one is not worth hashing.
const maxAuthHeader = 4096

// ParseBasic parses an `Authorization: Basic …` value (standard base64 of
// "user:password"). It never panics, whatever it is given.
func ParseBasic(h string) (user, password string, ok bool) {
	scheme, rest, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Basic") || len(h) > maxAuthHeader {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return "", "", false
	}
	user, password, ok = strings.Cut(string(b), ":")
	if !ok {
		return "", "", false
	}
	return user, password, true
}

// bearer returns the credential of an `Authorization: Bearer …` value.
func bearer(h string) (string, bool) {
	scheme, rest, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	return rest, rest != ""
}

// Authenticate resolves the caller of r. allowQuery also accepts an
// app-token in the `app_token` query parameter. It returns ErrNoCredential
// or an error wrapping ErrBadCredential.
func (g *Gate) Authenticate(r *http.Request, allowQuery bool) (*Principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" && allowQuery {
		if t := r.URL.Query().Get("app_token"); t != "" {
			return g.token(r, t)
		}
	}
	if h == "" && g.cfg.Sessions != nil {
		if c, present, err := g.cfg.Sessions.Session(r); present && (err == nil || g.gated || errors.Is(err, ErrCSRF)) {
			if err != nil {
				return nil, err
			}
			return g.session(r, c)
		}
	}
	if h == "" {
		if g.gated {
			return nil, ErrNoCredential
		}
		return &Principal{Kind: Ungated}, nil
	}
	if len(h) > maxAuthHeader {
		return nil, fmt.Errorf("%w: Authorization header too long", ErrBadCredential)
	}
	if t, ok := bearer(h); ok {
		return g.token(r, t)
	}
	user, pass, ok := ParseBasic(h)
	if !ok {
		return nil, fmt.Errorf("%w: unsupported or malformed Authorization header", ErrBadCredential)
	}
	if !g.gated {
		return nil, fmt.Errorf("%w: no operator password is configured", ErrBadCredential)
	}
	uh, ph := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
	// Both comparisons always run, so the time taken says nothing about
	// which half was wrong.
	if subtle.ConstantTimeCompare(uh[:], g.userHash[:])&subtle.ConstantTimeCompare(ph[:], g.passHash[:]) != 1 {
		return nil, fmt.Errorf("%w: wrong operator user or password", ErrBadCredential)
	}
	return &Principal{Kind: Operator, User: g.cfg.User}, nil
}

// session is the principal of a live browser session: the operator, or
// the app-token it was signed in with while the token verifies.
func (g *Gate) session(r *http.Request, c SessionCredential) (*Principal, error) {
	if c.TokenID == "" {
		if !g.gated || c.User != g.cfg.User {
			return nil, ErrNoCredential // the operator's credential changed
		}
		return &Principal{Kind: Operator, User: g.cfg.User}, nil
	}
	if g.cfg.Tokens == nil {
		return nil, ErrNoCredential
	}
	t, err := g.cfg.Tokens.Live(r.Context(), c.TokenID)
	if err != nil {
		// Revoked or expired since sign-in: signed out, not a failed
		// guess.
		return nil, ErrNoCredential
	}
	return &Principal{Kind: AppToken, Token: t}, nil
}

func (g *Gate) token(r *http.Request, raw string) (*Principal, error) {
	if g.cfg.Tokens == nil {
		return nil, fmt.Errorf("%w: app-tokens are not enabled", ErrBadCredential)
	}
	t, err := g.cfg.Tokens.Verify(r.Context(), raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCredential, err)
	}
	return &Principal{Kind: AppToken, Token: t}, nil
}

// Wrap returns next behind the gate: the brake, then the credential, the
// tier and the wall. next finds the caller with FromContext. loc is needed
// only for WallDeployment.
func (g *Gate) Wrap(tier Tier, wall Wall, loc Locator, next http.Handler) http.Handler {
	if tier == Open {
		return next
	}
	allowQuery := wall&AllowQueryToken != 0
	wall &^= AllowQueryToken
	if wall == WallDeployment && loc == nil {
		panic("auth: WallDeployment needs a Locator") // programmer error at registration
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := g.admit(w, r, allowQuery)
		if !ok {
			return
		}
		if err := checkTier(p, tier); err != nil {
			g.refuse(w, r, p, err)
			return
		}
		switch wall {
		case WallFleet:
			if !p.Fleet() {
				g.refuse(w, r, p, web.Errorf(http.StatusForbidden, msgFleetWide))
				return
			}
		case WallDeployment:
			id := r.PathValue("id")
			ns, _ := loc.Locate(id)
			// A deployment that does not exist has no namespace, so a
			// confined caller is refused exactly as for a foreign one.
			if !p.Touches(id, ns) {
				g.refuse(w, r, p, web.Errorf(http.StatusForbidden, msgDeployment, id))
				return
			}
		}
		ctx := NewContext(r.Context(), p)
		if !p.Confined() {
			// The operator's own callers read the causes of server
			// errors (web.WriteError); a namespace's get a log reference.
			ctx = web.ShowCauses(ctx)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// admit runs the brake and authenticates r. A credential is always
// evaluated when the brake gives the request its turn, however locked out
// its address or target is, and a correct one always passes: lockouts only
// pace the evaluations (see Brake.Admit). When it returns false the answer
// is written.
func (g *Gate) admit(w http.ResponseWriter, r *http.Request, allowQuery bool) (*Principal, bool) {
	src, keyed := ClientKey(r.RemoteAddr)
	target, presented := credentialTarget(r, allowQuery)
	b := g.cfg.Brake
	var tk *Ticket
	if presented {
		var ok bool
		if tk, ok = b.Admit(r.Context(), src, keyed, target, g.cfg.Now()); !ok {
			// Not evaluated. The same 429 as a paced failure, so the
			// caller cannot tell whether its guess was looked at.
			g.tooMany(w, r, b.cfg.Pace)
			return nil, false
		}
		g.evaluated.Add(1)
	}
	defer tk.Release()
	p, err := g.Authenticate(r, allowQuery)
	switch {
	case err == nil:
		if presented {
			b.Succeeded(src, keyed, target, g.cfg.Now())
		}
		return p, true
	case errors.Is(err, ErrCSRF):
		g.refuse(w, r, &Principal{Kind: Nobody}, web.Errorf(http.StatusForbidden, "%s", err.Error()))
		return nil, false
	case errors.Is(err, ErrOpenAdminToken):
		// A genuine token, refused for when it was minted: no guess, so
		// no failure; its holder is told why.
		g.cfg.Log.Info("admin credential refused", "peer", src, "path", r.URL.Path, "reason", err)
		g.unauthorized(w, r, err.Error())
		return nil, false
	case errors.Is(err, ErrBadCredential):
		delay, locked := b.Failed(src, keyed, target, g.cfg.Now())
		g.cfg.Log.Info("admin credential refused", "peer", src, "target", target, "path", r.URL.Path, "reason", err, "locked_out", locked)
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
			}
			t.Stop()
		}
		if locked {
			g.tooMany(w, r, b.cfg.Pace)
		} else {
			g.unauthorized(w, r, "")
		}
		return nil, false
	default:
		g.unauthorized(w, r, "")
		return nil, false
	}
}

// credentialTarget names what the credential on r tries to be — the
// operator account, or the app-token with the id it carries — for the
// brake's per-target counts, and reports whether a credential is
// presented at all. A malformed one has no target (it can never be right).
func credentialTarget(r *http.Request, allowQuery bool) (target string, presented bool) {
	h := r.Header.Get("Authorization")
	if h == "" && allowQuery {
		h = r.URL.Query().Get("app_token")
		if h == "" {
			return "", false
		}
		h = "Bearer " + h
	}
	if h == "" {
		return "", false
	}
	if t, ok := bearer(h); ok {
		if id, _, err := ParseToken(t); err == nil {
			return "token:" + id, true
		}
		return "", true
	}
	if _, _, ok := ParseBasic(h); ok {
		return "operator", true
	}
	return "", true
}

func checkTier(p *Principal, tier Tier) error {
	switch tier {
	case View:
		if !p.Satisfies(apitype.ScopeView) {
			return web.Errorf(http.StatusForbidden, msgNoScope)
		}
	case CRUD:
		if !p.Satisfies(apitype.ScopeView) {
			return web.Errorf(http.StatusForbidden, msgNoScope)
		}
		if !p.Satisfies(apitype.ScopeAdmin) {
			return web.Errorf(http.StatusForbidden, msgNotAdmin)
		}
	}
	return nil
}

// unauthorized writes app-lb's 401: plain text, with a Basic challenge (when
// there is an operator password to answer it with) and a Bearer one. why,
// when not empty, follows on a second line.
func (g *Gate) unauthorized(w http.ResponseWriter, r *http.Request, why string) {
	reason := why
	if reason == "" {
		reason = "no valid credential"
	}
	g.event(r, "admin-rejected", reason)
	h := w.Header()
	if g.gated && !fromScript(r) {
		h.Add("WWW-Authenticate", `Basic realm="berth admin", charset="UTF-8"`)
	}
	h.Add("WWW-Authenticate", "Bearer")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	msg := "authentication required\n"
	if why != "" {
		msg += why + "\n"
	}
	w.Write([]byte(msg))
}

// fromScript reports whether r is a page script's request (fetch,
// EventSource: Sec-Fetch-Mode other than navigate) or a signed-in
// browser's whose session ended. Its 401 carries no Basic challenge, so
// the browser shows no password dialog over the page, which signs in by
// itself (app-lb: "fetches get Bearer only").
func fromScript(r *http.Request) bool {
	if m := r.Header.Get("Sec-Fetch-Mode"); m != "" && m != "navigate" {
		return true
	}
	return r.Header.Get("Authorization") == "" && hasSessionCookie(r)
}

// The web UI's session cookies (package ui names them): __Host-berth_ui
// over TLS, berth_ui on plain HTTP, where a __Host- cookie cannot be set.
const (
	SessionCookieTLS   = "__Host-berth_ui"
	SessionCookiePlain = "berth_ui"
)

func hasSessionCookie(r *http.Request) bool {
	return len(r.CookiesNamed(SessionCookieTLS)) > 0 || len(r.CookiesNamed(SessionCookiePlain)) > 0
}

func (g *Gate) refuse(w http.ResponseWriter, r *http.Request, p *Principal, err error) {
	g.event(r, "admin-scope", err.Error())
	g.cfg.Log.Info("admin request refused", "caller", p.Name(), "method", r.Method, "path", r.URL.Path, "reason", err)
	web.WriteError(g.cfg.Log, w, r, err)
}

func (g *Gate) tooMany(w http.ResponseWriter, r *http.Request, left time.Duration) {
	g.event(r, "admin-rejected", "too many failed credentials")
	secs := int64((left + time.Second - 1) / time.Second)
	web.WriteError(g.cfg.Log, w, r, &web.Error{
		Status:  http.StatusTooManyRequests,
		Message: fmt.Sprintf("too many failed credentials from this address or for this account; try again in %d seconds", secs),
		Header:  http.Header{"Retry-After": {strconv.FormatInt(secs, 10)}},
	})
}

// WhoAmI describes p for `GET /whoami` (app-lb.md §7.5).
func WhoAmI(p *Principal, now time.Time) apitype.WhoAmI {
	w := apitype.WhoAmI{
		Caller:   string(p.Kind),
		Fleet:    p.Fleet(),
		Confined: p.Confined(),
		May: apitype.WhoAmIMay{
			ReadViewRoutes: p.Satisfies(apitype.ScopeView),
			UseAdminRoutes: p.Satisfies(apitype.ScopeAdmin),
		},
	}
	switch p.Kind {
	case Ungated:
		w.AdminScope = "unchecked"
		w.Detail = "no operator password is configured, so this loopback listener admits every caller; set BERTH_ADMIN_PASSWORD to require credentials"
	case Operator:
		w.AdminScope = string(apitype.ScopeAdmin)
		w.Detail = fmt.Sprintf("the operator (HTTP Basic as %q)", p.User)
	case AppToken:
		t := p.Token
		w.AdminScope = string(t.Admin)
		w.Token = &apitype.WhoAmIToken{ID: t.ID, Name: t.Name}
		w.Namespace = t.Namespace
		w.Deployments = append([]string{}, t.Deployments...)
		if !t.ExpiresAt.IsZero() {
			at, in := t.ExpiresAt.Unix(), int64(t.ExpiresAt.Sub(now)/time.Second)
			w.ExpiresAt, w.ExpiresInSecs = &at, &in
		}
		if t.Admin == apitype.ScopeNone {
			w.Note = "this token has no admin scope: it is for data-plane gates only"
		}
	default:
		w.AdminScope = string(apitype.ScopeNone)
	}
	return w
}
