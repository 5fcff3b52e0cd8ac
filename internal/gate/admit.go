package gate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/jwtverify"
)

// Gate is one deployment's compiled sign-in gate.
type Gate struct {
	m            *Manager
	dep, ns      string
	base         string // without a trailing slash
	cookie       string
	ttl          time.Duration
	sessionScope apitype.AdminScope
	forward      bool
	redirectURL  string
	publics      []apitype.PublicPath // longest first
	ref          string               // provider_ref
	inline       *identity            // the gate's own identity half; nil with ref
}

// who is the identity a request was admitted with.
type who struct {
	subject, email, name string
}

// req is one request's view for the decision.
type req struct {
	w       http.ResponseWriter
	r       *http.Request
	secure  bool
	host    string
	browser bool
	// credentialed: admitted on a credential (an app-token, a JWT, a
	// session), not as a public path.
	credentialed bool
}

// Admit decides on r (the proxy's Gate): status 0 lets it through, and
// credentialed then says it was admitted on a valid credential rather than
// as a public path — the SIEM does not count such a caller's misses as
// probing.
func (g *Gate) Admit(w http.ResponseWriter, r *http.Request, secure bool) (status int, credentialed bool) {
	q := &req{w: w, r: r, secure: secure}
	status = g.admit(q)
	return status, status == 0 && q.credentialed
}

func (g *Gate) admit(q *req) int {
	r := q.r
	// Whatever happens next, no identity header of the client's survives.
	for k := range r.Header {
		if strings.HasPrefix(k, "X-Auth-Request-") {
			delete(r.Header, k)
		}
	}
	host := hostOnly(r.Host)
	q.host, q.browser = host, wantsHTML(r)
	if host == "" {
		return g.deny(q, "no-host", http.StatusBadRequest, "this deployment requires sign-in, which needs a Host header\n")
	}
	id := g.identity()
	if id == nil {
		return g.deny(q, "provider-missing", http.StatusInternalServerError,
			fmt.Sprintf("this deployment's sign-in gate inherits the auth provider %q, which is not declared in its namespace\n", g.ref))
	}
	if id.err != nil {
		return g.deny(q, "provider-invalid", http.StatusInternalServerError,
			fmt.Sprintf("this deployment's sign-in gate inherits the auth provider %q, which cannot be used: %v\n", g.ref, id.err))
	}
	path := r.URL.Path

	// 1. The gate's own endpoints.
	if rest, ok := strings.CutPrefix(path, g.base+"/"); ok {
		switch rest {
		case "callback":
			return g.callback(q, id)
		case "logout":
			return g.logout(q, id)
		case "login":
			return g.login(q, id, "/")
		}
	}

	bearer := bearerToken(r)
	var tok *auth.Token
	var tokErr error
	if bearer != "" && strings.HasPrefix(bearer, "berth_") {
		tok, tokErr = g.m.o.Tokens.Verify(r.Context(), bearer)
	}

	// 2. Public paths, for a path in its normal form only: an upstream
	// might resolve /healthz/../admin or /healthz%2F..%2Fadmin to a path
	// the public prefix does not cover.
	if pp, ok := g.public(path); ok && canonicalPath(r) {
		if pp.Scope == apitype.PathPublic {
			return g.allow(q, id, "public", nil)
		}
		tier := apitype.AdminScope(pp.Scope)
		if tok != nil {
			p := &auth.Principal{Kind: auth.AppToken, Token: tok}
			switch {
			case !p.Touches(g.dep, g.ns):
				return g.denyJSON(q, "path-token-deployment", http.StatusForbidden, map[string]any{
					"error": fmt.Sprintf("this token does not admit deployment %q", g.dep), "scope": tier,
				})
			case !p.Satisfies(tier):
				return g.denyJSON(q, "path-token-scope", http.StatusForbidden, map[string]any{
					"error": fmt.Sprintf("this token's admin scope is '%s', and this path needs '%s' or higher", tok.Admin, tier),
					"scope": tier,
				})
			}
			return g.allow(q, id, "path-token", nil)
		}
		if tier == apitype.ScopeNone && id.jwt != nil {
			if c, ok := g.jwt(q, id, bearer); ok {
				return g.allow(q, id, "path-jwt", c)
			}
		}
		if tokErr != nil {
			g.m.event(g.ev(q, "gate-token", tokErr.Error()))
		}
		q.w.Header().Set("WWW-Authenticate", `Bearer realm="berth"`)
		return g.denyJSON(q, "path-no-credential", http.StatusUnauthorized, map[string]any{
			"error": "authentication required", "scope": tier,
			"detail": fmt.Sprintf("this path needs an app-token with admin scope '%s' or higher that admits this deployment, as Authorization: Bearer berth_…", tier),
		})
	}

	// 3. App-tokens.
	if id.appToken && tok != nil && (&auth.Principal{Kind: auth.AppToken, Token: tok}).Touches(g.dep, g.ns) {
		return g.allow(q, id, "app-token", nil)
	}
	if tokErr != nil {
		g.m.event(g.ev(q, "gate-token", tokErr.Error()))
	}

	// 4. JWTs.
	if id.jwt != nil {
		if c, ok := g.jwt(q, id, bearer); ok {
			return g.allow(q, id, "jwt", c)
		}
	}

	// 5. A session.
	if s, ok := g.session(q, id); ok {
		return g.allowSession(q, id, s)
	}

	// 6. A valid token that does not admit this deployment.
	if tok != nil {
		return g.denyJSON(q, "token-scope", http.StatusForbidden, map[string]any{
			"error":             "insufficient_scope",
			"detail":            tokenScopeDetail(tok, g.dep),
			"deployment":        g.dep,
			"namespace":         g.ns,
			"token_id":          tok.ID,
			"token_admin_scope": tok.Admin,
			"token_namespace":   tok.Namespace,
		})
	}

	// 7. Sign in.
	return g.signIn(q, id, returnPath(r))
}

func tokenScopeDetail(t *auth.Token, dep string) string {
	if t.Namespace != "" {
		return fmt.Sprintf("this token is confined to namespace %q, and its deployment scope does not cover %q", t.Namespace, dep)
	}
	return fmt.Sprintf("this token's deployment scope does not cover %q", dep)
}

// public returns the public path entry that covers path, if any.
func (g *Gate) public(path string) (apitype.PublicPath, bool) {
	for _, pp := range g.publics {
		if pathHasPrefix(path, pp.Path) {
			return pp, true
		}
	}
	return apitype.PublicPath{}, false
}

// canonicalPath reports a request path with no dot segments, no empty
// segments and no encoded slash, backslash or dot.
func canonicalPath(r *http.Request) bool {
	p := r.URL.Path
	if strings.Contains(p, "//") || strings.Contains(p, "\\") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..") ||
		strings.Contains(p, "/./") || strings.Contains(p, "/../") {
		return false
	}
	raw := strings.ToLower(r.URL.RawPath)
	return !strings.Contains(raw, "%2f") && !strings.Contains(raw, "%5c") && !strings.Contains(raw, "%2e")
}

// pathHasPrefix is a prefix match on path segments' text, as app-lb's
// (a prefix "/api" covers "/api" and "/api/x", and also "/apiary": the
// contract says prefix; an entry meant as a directory ends in "/").
func pathHasPrefix(path, prefix string) bool { return strings.HasPrefix(path, prefix) }

// jwt verifies the request's JWT (the bearer, else the cookie) with the
// gate's rules and the gateHost/namespace claims.
func (g *Gate) jwt(q *req, id *identity, bearer string) (*jwtverify.Claims, bool) {
	raw := bearer
	if raw == "" || strings.HasPrefix(raw, "berth_") {
		raw = ""
		if name := id.jwtSpec.Cookie; name != "" {
			if c, err := q.r.Cookie(name); err == nil {
				raw = c.Value
			}
		}
	}
	if raw == "" {
		return nil, false
	}
	now := g.m.o.Now()
	id.jwt.used(now)
	c, ok := id.jwt.cache.get(raw, now)
	if !ok {
		var err error
		c, err = id.jwt.v.Verify(q.r.Context(), raw)
		if err != nil {
			reason := "invalid"
			var je *jwtverify.Error
			if errors.As(err, &je) {
				reason = string(je.Reason)
			}
			g.m.metrics.add("deny", "jwt-"+reason)
			g.m.event(g.ev(q, "gate-jwt", err.Error()))
			return nil, false
		}
		id.jwt.cache.put(raw, c, now)
	}
	if h, ok := c.All["gateHost"]; ok {
		if s, _ := h.(string); !strings.EqualFold(s, q.host) {
			g.m.metrics.add("deny", "jwt-gatehost")
			g.m.event(g.ev(q, "gate-jwt", "the token's gateHost claim names another host"))
			return nil, false
		}
	}
	if n, ok := c.All["namespace"]; ok {
		if s, _ := n.(string); s != g.ns {
			g.m.metrics.add("deny", "jwt-namespace")
			g.m.event(g.ev(q, "gate-jwt", "the token's namespace claim names another namespace"))
			return nil, false
		}
	}
	return c, true
}

// allow lets the request through with the identity c vouches for (nil:
// none).
func (g *Gate) allow(q *req, id *identity, reason string, c *jwtverify.Claims) int {
	g.m.metrics.add("allow", reason)
	q.credentialed = reason != "public"
	if c != nil {
		g.setIdentity(q.r, who{c.Subject, c.Email, c.Name})
	}
	return 0
}

// setIdentity sets the X-Auth-Request-* headers when the gate forwards
// identity.
func (g *Gate) setIdentity(r *http.Request, w who) {
	if !g.forward {
		return
	}
	r.Header["X-Auth-Request-User"] = []string{stripControl(w.subject)}
	if w.email != "" {
		r.Header["X-Auth-Request-Email"] = []string{stripControl(w.email)}
	}
	if w.name != "" {
		r.Header["X-Auth-Request-Name"] = []string{stripControl(w.name)}
	}
}

// stripControl removes control characters (a header value must not carry
// CR, LF or NUL; the forwarder would refuse the request).
func stripControl(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// ev is an Event about q.
func (g *Gate) ev(q *req, kind, reason string) Event {
	return Event{Kind: kind, Deployment: g.dep, Namespace: g.ns, Host: q.host, Source: peer(q.r), Reason: reason}
}

func peer(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// bearerToken is the request's Authorization: Bearer credential, or "".
func bearerToken(r *http.Request) string {
	v := r.Header.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// wantsHTML reports a browser: an Accept that names text/html.
func wantsHTML(r *http.Request) bool {
	for _, v := range r.Header["Accept"] {
		if strings.Contains(v, "text/html") {
			return true
		}
	}
	return false
}

// hostOnly is the request's host without a port, lowercased.
func hostOnly(h string) string {
	if h == "" {
		return ""
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	return strings.ToLower(h)
}

// returnPath is where a sign-in returns: the request's path and query.
func returnPath(r *http.Request) string {
	p := r.URL.EscapedPath()
	if p == "" {
		p = "/"
	}
	if r.URL.RawQuery != "" {
		p += "?" + r.URL.RawQuery
	}
	return p
}

// origin is scheme://host[:port] as the client addressed berth.
func (q *req) origin() string {
	if q.secure {
		return "https://" + q.r.Host
	}
	return "http://" + q.r.Host
}

// ctx is the request's context.
func (q *req) ctx() context.Context { return q.r.Context() }
