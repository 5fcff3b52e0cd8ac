package gate

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/oidc"
	"github.com/berth-dev/berth/internal/sessions"
)

// flow is a sign-in under way, sealed in the flow cookie (host-only, for
// ten minutes): the browser carries it to the callback, and only berth
// can read or forge it.
type flow struct {
	Kind     string `json:"k"` // "oidc" or "scoped"
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Return   string `json:"r"`
	Created  int64  `json:"t"`
	Policy   string `json:"f"` // the identity fingerprint the flow started under
}

const (
	kindOIDC   = "oidc"
	kindScoped = "scoped"
)

func (g *Gate) flowAD(host string) []byte {
	return []byte("berth-auth-flow-v1\x00" + g.dep + "\x00" + host)
}

// setFlow starts a flow: it sets the flow cookie.
func (g *Gate) setFlow(q *req, f flow) {
	raw, _ := json.Marshal(f)
	sealed := g.m.o.Key.Seal(raw, g.flowAD(q.host))
	http.SetCookie(q.w, &http.Cookie{
		Name: flowCookieName, Value: base64.RawURLEncoding.EncodeToString(sealed),
		Path: g.base + "/", MaxAge: int(flowTTL / time.Second),
		HttpOnly: true, Secure: q.secure, SameSite: http.SameSiteLaxMode,
	})
}

// readFlow opens the request's flow cookie, if it has a live one.
func (g *Gate) readFlow(q *req) (flow, bool) {
	c, err := q.r.Cookie(flowCookieName)
	if err != nil {
		return flow{}, false
	}
	sealed, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return flow{}, false
	}
	raw, err := g.m.o.Key.Open(sealed, g.flowAD(q.host))
	if err != nil {
		return flow{}, false
	}
	var f flow
	if json.Unmarshal(raw, &f) != nil {
		return flow{}, false
	}
	if age := g.m.o.Now().Sub(time.Unix(f.Created, 0)); age < -time.Minute || age > flowTTL {
		return flow{}, false
	}
	return f, true
}

func (g *Gate) clearFlow(q *req) {
	http.SetCookie(q.w, &http.Cookie{Name: flowCookieName, Value: "", Path: g.base + "/", MaxAge: -1,
		HttpOnly: true, Secure: q.secure, SameSite: http.SameSiteLaxMode})
}

// method is one way for a browser to sign in.
type method struct {
	label string
	start func() int
}

// methods are the ways a browser can sign in at this gate.
func (g *Gate) methods(q *req, id *identity, ret string) []method {
	var ms []method
	if id.signIn {
		label := "Sign in with Google"
		if !id.google {
			label = "Sign in with " + issuerLabel(id.oidc.Issuer)
		}
		ms = append(ms, method{label, func() int { return g.startOIDC(q, id, ret) }})
	}
	if j := id.jwtSpec; id.jwt != nil && j != nil {
		if j.AuthorizeURL != "" && j.TokenURL != "" {
			ms = append(ms, method{"Sign in with " + issuerLabel(j.AuthorizeURL), func() int { return g.startScoped(q, id, ret) }})
		} else if j.LoginURL != "" {
			ms = append(ms, method{"Sign in with " + issuerLabel(j.LoginURL), func() int { return g.hosted(q, id, ret) }})
		}
	}
	return ms
}

func issuerLabel(iss string) string {
	if u, err := url.Parse(iss); err == nil && u.Host != "" {
		return u.Host
	}
	return "your identity provider"
}

// signIn answers a request that presented nothing the gate accepts.
func (g *Gate) signIn(q *req, id *identity, ret string) int {
	if q.browser {
		ms := g.methods(q, id, ret)
		switch len(ms) {
		case 0:
		case 1:
			return ms[0].start()
		default:
			return g.choose(q, ms, ret)
		}
	}
	q.w.Header().Set("WWW-Authenticate", `Bearer realm="berth"`)
	if id.signIn {
		return g.denyJSON(q, "no-credential", http.StatusUnauthorized, map[string]any{
			"error": "authentication required", "login_url": q.origin() + g.base + "/login",
		})
	}
	var accepts []string
	if id.appToken {
		accepts = append(accepts, "app-token")
	}
	if id.jwt != nil {
		accepts = append(accepts, "jwt")
	}
	if accepts == nil {
		accepts = []string{}
	}
	return g.denyJSON(q, "no-credential", http.StatusUnauthorized, map[string]any{
		"error": "authentication required", "accepts": accepts,
		"detail": "present " + strings.Join(acceptWords(accepts), " or ") + " as Authorization: Bearer",
	})
}

func acceptWords(as []string) []string {
	var out []string
	for _, a := range as {
		switch a {
		case "app-token":
			out = append(out, "an app-token that admits this deployment")
		case "jwt":
			out = append(out, "a JWT from this deployment's issuer")
		}
	}
	if out == nil {
		out = []string{"a credential"}
	}
	return out
}

// choose shows the choice page.
func (g *Gate) choose(q *req, ms []method, ret string) int {
	g.m.metrics.add("signin", "choice")
	d := pageData{Title: "Sign in", Message: "Choose how to sign in to " + q.host + "."}
	for i, m := range ms {
		d.Choices = append(d.Choices, choice{m.label, g.base + "/login?via=" + fmt.Sprint(i) + "&rd=" + url.QueryEscape(ret)})
	}
	page(q.w, http.StatusUnauthorized, d)
	return http.StatusUnauthorized
}

// login is <base>/login: a fresh sign-in, returning to rd (a path on this
// host) or to /.
func (g *Gate) login(q *req, id *identity, ret string) int {
	qs := q.r.URL.Query()
	if rd := qs.Get("rd"); safeReturn(rd) {
		ret = rd
	}
	ms := g.methods(q, id, ret)
	if v := qs.Get("via"); v != "" {
		for i, m := range ms {
			if fmt.Sprint(i) == v {
				return m.start()
			}
		}
	}
	switch len(ms) {
	case 0:
		q.browser = false
		return g.signIn(q, id, ret)
	case 1:
		return ms[0].start()
	}
	return g.choose(q, ms, ret)
}

// safeReturn reports a return path that stays on this host: it starts with
// one slash and is not a scheme-relative URL.
func safeReturn(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") && !strings.HasPrefix(p, "/\\") &&
		!strings.ContainsAny(p, "\r\n\x00")
}

// redirectURI is where the issuer sends the browser back.
func (g *Gate) redirectURI(q *req) string {
	if g.redirectURL != "" {
		return g.redirectURL
	}
	return q.origin() + g.base + "/callback"
}

// oidcProvider resolves the issuer and the client secret.
func (g *Gate) oidcProvider(ctx context.Context, id *identity) (*oidc.Provider, error) {
	cfg := id.oidc
	if ref := id.clientSecret; ref != nil {
		if g.m.o.Secrets == nil {
			return nil, errNoSecrets
		}
		v, err := g.m.o.Secrets.Value(ctx, nsOr(ref.Namespace, g.ns), ref.Secret, ref.Key)
		if err != nil {
			return nil, fmt.Errorf("the client secret could not be read: %w", err)
		}
		cfg.ClientSecret = v
	}
	return g.m.oidc.Provider(ctx, cfg)
}

func nsOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// startOIDC sends a browser to the issuer.
func (g *Gate) startOIDC(q *req, id *identity, ret string) int {
	ctx, cancel := context.WithTimeout(q.ctx(), exchangeTimeout)
	defer cancel()
	p, err := g.oidcProvider(ctx, id)
	if err != nil {
		g.m.o.Log.Warn("sign-in could not start", "deployment", g.dep, "err", err)
		return g.deny(q, "signin-unavailable", http.StatusBadGateway, "sign-in is unavailable: the identity provider could not be reached\n")
	}
	f := oidc.NewFlow()
	g.setFlow(q, flow{Kind: kindOIDC, State: f.State, Nonce: f.Nonce, Verifier: f.Verifier, Return: ret,
		Created: g.m.o.Now().Unix(), Policy: id.fingerprint})
	g.m.metrics.add("signin", "oidc")
	return redirect(q, p.AuthCodeURL(f, g.redirectURI(q)))
}

// hosted sends a browser to the JWT issuer's hosted sign-in.
func (g *Gate) hosted(q *req, id *identity, ret string) int {
	j := id.jwtSpec
	param := j.LoginRedirectParam
	if param == "" {
		param = "redirect_uri"
	}
	sep := "?"
	if strings.Contains(j.LoginURL, "?") {
		sep = "&"
	}
	g.m.metrics.add("signin", "hosted")
	return redirect(q, j.LoginURL+sep+url.QueryEscape(param)+"="+url.QueryEscape(q.origin()+ret))
}

// scopedConfig is the scoped JWT sign-in's OAuth client: the gate's origin
// is its client id, and it asks for the deployment's namespace.
func (g *Gate) scopedConfig(q *req, id *identity) *oauth2.Config {
	return &oauth2.Config{
		ClientID:    q.origin(),
		Endpoint:    oauth2.Endpoint{AuthURL: id.jwtSpec.AuthorizeURL, TokenURL: id.jwtSpec.TokenURL, AuthStyle: oauth2.AuthStyleInParams},
		RedirectURL: g.redirectURI(q),
		Scopes:      []string{"namespace:" + g.ns},
	}
}

// startScoped sends a browser through the scoped JWT sign-in.
func (g *Gate) startScoped(q *req, id *identity, ret string) int {
	f := oidc.NewFlow()
	g.setFlow(q, flow{Kind: kindScoped, State: f.State, Verifier: f.Verifier, Return: ret,
		Created: g.m.o.Now().Unix(), Policy: id.fingerprint})
	g.m.metrics.add("signin", "scoped")
	return redirect(q, g.scopedConfig(q, id).AuthCodeURL(f.State, oauth2.S256ChallengeOption(f.Verifier)))
}

// callback is <base>/callback: the issuer's answer.
func (g *Gate) callback(q *req, id *identity) int {
	qs := q.r.URL.Query()
	if e := qs.Get("error"); e != "" {
		g.m.event(g.ev(q, "signin-failed", "the identity provider answered "+e))
		return g.deny(q, "signin-error", http.StatusForbidden, fmt.Sprintf("sign-in was not completed (%s)\n", stripControl(e)))
	}
	code, state := qs.Get("code"), qs.Get("state")
	if code == "" || state == "" {
		return g.deny(q, "signin-bad-callback", http.StatusBadRequest, "the sign-in callback needs code and state\n")
	}
	f, ok := g.readFlow(q)
	if !ok || f.Policy != id.fingerprint {
		// No flow (expired, another browser, or the policy changed since):
		// start afresh.
		q.browser = true
		return g.login(q, id, "/")
	}
	if subtle.ConstantTimeCompare([]byte(state), []byte(f.State)) != 1 {
		g.m.event(g.ev(q, "signin-state", "the callback's state does not match the flow's"))
		return g.deny(q, "signin-state", http.StatusBadRequest, "the sign-in state did not match\n")
	}
	g.clearFlow(q)
	ctx, cancel := context.WithTimeout(q.ctx(), exchangeTimeout)
	defer cancel()
	var w who
	var issuer string
	switch f.Kind {
	case kindOIDC:
		if !id.signIn {
			return g.deny(q, "signin-bad-callback", http.StatusBadRequest, "this gate has no OpenID Connect sign-in\n")
		}
		p, err := g.oidcProvider(ctx, id)
		if err != nil {
			return g.deny(q, "signin-unavailable", http.StatusBadGateway, "sign-in is unavailable: the identity provider could not be reached\n")
		}
		ident, err := p.Exchange(ctx, oidc.Flow{State: f.State, Nonce: f.Nonce, Verifier: f.Verifier}, code, g.redirectURI(q))
		if err != nil {
			g.m.event(g.ev(q, "signin-failed", err.Error()))
			g.m.o.Log.Warn("sign-in failed", "deployment", g.dep, "err", err)
			return g.deny(q, "signin-exchange", http.StatusForbidden, "sign-in failed: the identity provider's answer could not be verified\n")
		}
		if err := oidc.Allowed(ident, id.google, id.domains, id.emails); err != nil {
			ev := g.ev(q, "signin-denied", err.Error())
			ev.Subject = cmp.Or(ident.Email, ident.Subject)
			g.m.event(ev)
			return g.deny(q, "signin-denied", http.StatusForbidden, err.Error()+"\n")
		}
		w, issuer = who{ident.Subject, ident.Email, ident.Name}, ident.Issuer
	case kindScoped:
		if id.jwt == nil || id.jwtSpec.TokenURL == "" {
			return g.deny(q, "signin-bad-callback", http.StatusBadRequest, "this gate has no scoped sign-in\n")
		}
		tok, err := g.scopedConfig(q, id).Exchange(ctx, code, oauth2.VerifierOption(f.Verifier))
		if err != nil {
			g.m.event(g.ev(q, "signin-failed", "token exchange: "+err.Error()))
			return g.deny(q, "signin-exchange", http.StatusForbidden, "sign-in failed: the issuer refused the code\n")
		}
		raw := tok.AccessToken
		if it, ok := tok.Extra("id_token").(string); ok && raw == "" {
			raw = it
		}
		c, err := id.jwt.v.Verify(ctx, raw)
		if err != nil {
			g.m.event(g.ev(q, "gate-jwt", "scoped sign-in: "+err.Error()))
			return g.deny(q, "signin-exchange", http.StatusForbidden, "sign-in failed: the issuer's token was refused\n")
		}
		host, _ := c.All["gateHost"].(string)
		ns, _ := c.All["namespace"].(string)
		if !strings.EqualFold(host, q.host) || ns != g.ns {
			g.m.event(g.ev(q, "gate-jwt", "scoped sign-in: the token does not name this host and namespace"))
			return g.deny(q, "signin-denied", http.StatusForbidden, "sign-in failed: the issuer's token is for another host or namespace\n")
		}
		w, issuer = who{c.Subject, c.Email, c.Name}, id.jwtSpec.Issuer
	default:
		return g.deny(q, "signin-bad-callback", http.StatusBadRequest, "the sign-in state did not match\n")
	}
	secret, s, err := g.m.o.Sessions.Create(ctx, sessions.Session{
		Deployment: g.dep, Namespace: g.ns, Fingerprint: id.fingerprint, Issuer: issuer,
		Subject: w.subject, Email: w.email, Name: w.name,
	}, g.ttl)
	if err != nil {
		g.m.o.Log.Error("could not create a session", "deployment", g.dep, "err", err)
		return g.deny(q, "session-store", http.StatusServiceUnavailable, "sign-in succeeded, but the session could not be saved; try again\n")
	}
	if g.sessionScope != "" {
		if _, err := g.mintScoped(ctx, s); err != nil {
			g.m.o.Log.Error("could not mint the session's token", "deployment", g.dep, "err", err)
		}
	}
	g.setSessionCookie(q, id, secret, g.ttl)
	g.m.metrics.add("signin", "complete")
	ret := f.Return
	if !safeReturn(ret) {
		ret = "/"
	}
	return redirect(q, ret)
}

// mintScoped mints the app-token of a session (session_scope), keeps it in
// memory for the session's life and records its id on the session.
func (g *Gate) mintScoped(ctx context.Context, s sessions.Session) (string, error) {
	secs := int64(g.ttl / time.Second)
	if !s.ExpiresAt.IsZero() {
		secs = int64(s.ExpiresAt.Sub(g.m.o.Now()) / time.Second)
	}
	secs = max(secs, 60)
	by := &auth.Principal{Kind: auth.Operator, User: "gate:" + g.dep}
	mv, err := g.m.o.Tokens.Mint(ctx, by, apitype.NewToken{
		Name: "session " + s.ID, Admin: g.sessionScope, Namespace: g.ns,
		Deployments: []string{g.dep}, ExpiresInSecs: &secs,
	})
	if err != nil {
		return "", err
	}
	old := s.TokenID
	if err := g.m.o.Sessions.SetTokenID(ctx, s.ID, mv.ID); err != nil {
		g.m.o.Tokens.Revoke(ctx, by, mv.ID)
		return "", err
	}
	g.m.scopedTokens.Store(s.ID, mv.Token)
	if old != "" && old != mv.ID {
		g.m.o.Tokens.Revoke(ctx, by, old)
	}
	return mv.Token, nil
}

// EndSession is the sessions' OnEnd: the session's token goes with it.
func (m *Manager) EndSession(s sessions.Session) {
	m.scopedTokens.Delete(s.ID)
	if s.TokenID != "" && m.o.Tokens != nil {
		by := &auth.Principal{Kind: auth.Operator, User: "gate:" + s.Deployment}
		if err := m.o.Tokens.Revoke(context.Background(), by, s.TokenID); err != nil && !isNotFound(err) {
			m.o.Log.Warn("could not revoke a session's token", "session", s.ID, "token", s.TokenID, "err", err)
		}
	}
}

func isNotFound(err error) bool {
	var we interface{ StatusCode() int }
	if errors.As(err, &we) {
		return we.StatusCode() == http.StatusNotFound
	}
	return strings.Contains(err.Error(), "no token")
}

// cookieName is the session cookie's name on this request: `__Host-`
// prefixed when host-only over TLS.
func (g *Gate) cookieName(q *req, id *identity) string {
	if q.secure && g.cookieDomainFor(q, id) == "" {
		return "__Host-" + g.cookie
	}
	return g.cookie
}

// cookieDomainFor is the Domain of the session cookie: the gate's
// cookie_domain when the host lies within it, else "" (host-only).
func (g *Gate) cookieDomainFor(q *req, id *identity) string {
	d := id.cookieDomain
	if d != "" && (q.host == d || strings.HasSuffix(q.host, "."+d)) {
		return d
	}
	return ""
}

func (g *Gate) setSessionCookie(q *req, id *identity, secret string, ttl time.Duration) {
	http.SetCookie(q.w, &http.Cookie{
		Name: g.cookieName(q, id), Value: secret, Path: "/", Domain: g.cookieDomainFor(q, id),
		MaxAge: int(ttl / time.Second), HttpOnly: true, Secure: q.secure, SameSite: http.SameSiteLaxMode,
	})
}

func (g *Gate) clearSessionCookie(q *req, id *identity) {
	http.SetCookie(q.w, &http.Cookie{
		Name: g.cookieName(q, id), Value: "", Path: "/", Domain: g.cookieDomainFor(q, id),
		MaxAge: -1, HttpOnly: true, Secure: q.secure, SameSite: http.SameSiteLaxMode,
	})
}

// session finds the request's live session.
func (g *Gate) session(q *req, id *identity) (sessions.Session, bool) {
	if g.m.o.Sessions == nil {
		return sessions.Session{}, false
	}
	c, err := q.r.Cookie(g.cookieName(q, id))
	if err != nil || c.Value == "" {
		return sessions.Session{}, false
	}
	return g.m.o.Sessions.Lookup(c.Value, g.dep, id.fingerprint)
}

// allowSession lets a request with a session through: identity headers,
// the session's token, and the session cookie kept from the upstream.
func (g *Gate) allowSession(q *req, id *identity, s sessions.Session) int {
	g.m.metrics.add("allow", "session")
	removeCookie(q.r, g.cookieName(q, id))
	g.setIdentity(q.r, who{s.Subject, s.Email, s.Name})
	if g.sessionScope != "" {
		tok, ok := g.m.scopedTokens.Load(s.ID)
		if !ok {
			// Minted before a restart (the token lives only in memory):
			// mint it again.
			raw, err := g.mintScoped(q.ctx(), s)
			if err != nil {
				g.m.o.Log.Error("could not mint the session's token", "deployment", g.dep, "err", err)
				return g.deny(q, "session-token", http.StatusServiceUnavailable, "your session's token could not be issued; try again\n")
			}
			tok = raw
		}
		q.r.Header["Authorization"] = []string{"Bearer " + tok.(string)}
	}
	q.credentialed = true
	return 0
}

// removeCookie drops one cookie from the request's Cookie headers.
func removeCookie(r *http.Request, name string) {
	vs := r.Header["Cookie"]
	if len(vs) == 0 {
		return
	}
	var kept []string
	for _, c := range r.Cookies() {
		if c.Name != name {
			kept = append(kept, c.Name+"="+c.Value)
		}
	}
	if len(kept) == 0 {
		delete(r.Header, "Cookie")
		return
	}
	r.Header["Cookie"] = []string{strings.Join(kept, "; ")}
}

// logout is <base>/logout: the session ends (with ?everywhere=1, every
// session of the same person at this deployment), the cookie is cleared,
// and the browser goes back to rd or /.
func (g *Gate) logout(q *req, id *identity) int {
	ctx := q.ctx()
	if s, ok := g.session(q, id); ok {
		if q.r.URL.Query().Get("everywhere") == "1" {
			if _, err := g.m.o.Sessions.RevokeSubject(ctx, g.dep, s.Subject); err != nil {
				g.m.o.Log.Warn("could not sign out everywhere", "deployment", g.dep, "err", err)
			}
		}
		if err := g.m.o.Sessions.Revoke(ctx, s.ID); err != nil {
			g.m.o.Log.Warn("could not end a session", "deployment", g.dep, "err", err)
		}
	}
	g.clearSessionCookie(q, id)
	g.m.metrics.add("signin", "logout")
	ret := q.r.URL.Query().Get("rd")
	if !safeReturn(ret) {
		ret = "/"
	}
	return redirect(q, ret)
}
