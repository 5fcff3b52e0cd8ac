package ui

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/sessions"
	"github.com/berth-dev/berth/internal/store"
)

// Session lifetimes: a sign-in lasts at most DefaultTTL, and ends sooner
// when the browser has made no request for DefaultIdle (an open dashboard
// keeps it alive: its event stream re-authenticates every second).
const (
	DefaultTTL  = 12 * time.Hour
	DefaultIdle = 2 * time.Hour
	// maxSessions bounds the signed-in browsers; one more ends the least
	// recently seen.
	maxSessions = 10_000
	// fingerprint marks the web UI's sessions in the session set.
	fingerprint = "berth-ui"
	// CSRFHeader carries a session's CSRF token on the page's requests
	// that change state.
	CSRFHeader = "X-CSRF-Token"
)

// SessionOptions configure Sessions.
type SessionOptions struct {
	TTL, Idle time.Duration // 0: DefaultTTL, DefaultIdle
	Now       func() time.Time
}

// Sessions are the web UI's signed-in browsers. They are kept in memory
// only, keyed by the SHA-256 of the cookie's 256-bit secret (package
// sessions), so nothing of them is at rest and a restart of berth signs
// every browser out. Each acts as the credential it was signed in with
// (auth.BrowserSessions): the operator, or an app-token for as long as the
// token verifies. Safe for concurrent use.
type Sessions struct {
	m   *sessions.Manager
	ttl time.Duration
}

// NewSessions returns an empty session set; Close stops its sweep.
func NewSessions(o SessionOptions) (*Sessions, error) {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	m, err := sessions.New(context.Background(), memory{}, sessions.Options{Idle: o.Idle, MaxPerDeployment: maxSessions, Now: o.Now})
	if err != nil {
		return nil, err
	}
	return &Sessions{m: m, ttl: o.TTL}, nil
}

// Close stops the sweep of ended sessions.
func (s *Sessions) Close() { s.m.Close() }

// memory is the session set's store: none. package sessions keeps every
// live session in memory anyway; the web UI's are not written down.
type memory struct{}

func (memory) Sessions(context.Context) ([]store.Session, error)         { return nil, nil }
func (memory) PutSession(context.Context, store.Session) error           { return nil }
func (memory) TouchSessions(context.Context, map[string]time.Time) error { return nil }
func (memory) DeleteSessions(context.Context, []string) error            { return nil }

// CookieName is the session cookie's name on r's connection: the
// __Host- prefixed name over TLS; on plain HTTP (loopback) a __Host-
// cookie, which must be Secure, cannot be set, so the bare name.
func CookieName(r *http.Request) string {
	if r.TLS != nil {
		return auth.SessionCookieTLS
	}
	return auth.SessionCookiePlain
}

// secret returns the session secret r's cookie carries, if any.
func secret(r *http.Request) (string, bool) {
	c, err := r.Cookie(CookieName(r))
	if err != nil || c.Value == "" || len(c.Value) > 128 {
		return "", err == nil
	}
	return c.Value, true
}

// CSRFToken is the CSRF token of the session whose secret is given: an
// HMAC of a fixed label under the secret. The page holds it (the cookie
// is HttpOnly) and sends it on every request that changes state; it
// reveals nothing of the secret, and only the secret's holder can
// compute it, so another site's form or script cannot.
func CSRFToken(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("berth-ui csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// validCSRF compares the presented token with the session's in constant
// time.
func validCSRF(secret, presented string) bool {
	return hmac.Equal([]byte(CSRFToken(secret)), []byte(presented))
}

// safe reports whether method changes nothing.
func safe(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// Session implements auth.BrowserSessions.
func (s *Sessions) Session(r *http.Request) (auth.SessionCredential, bool, error) {
	sec, present := secret(r)
	if !present {
		return auth.SessionCredential{}, false, nil
	}
	ses, ok := s.m.Lookup(sec, "", fingerprint)
	if !ok {
		return auth.SessionCredential{}, true, auth.ErrNoCredential
	}
	if !safe(r.Method) && !validCSRF(sec, r.Header.Get(CSRFHeader)) {
		return auth.SessionCredential{}, true, auth.ErrCSRF
	}
	if ses.TokenID != "" {
		return auth.SessionCredential{TokenID: ses.TokenID}, true, nil
	}
	return auth.SessionCredential{User: ses.Name}, true, nil
}

// live returns r's session secret when it names a live session.
func (s *Sessions) live(r *http.Request) (string, sessions.Session, bool) {
	sec, ok := secret(r)
	if !ok {
		return "", sessions.Session{}, false
	}
	ses, ok := s.m.Lookup(sec, "", fingerprint)
	return sec, ses, ok
}

// create signs p in: a new session and its cookie on w.
func (s *Sessions) create(ctx context.Context, w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	ses := sessions.Session{Fingerprint: fingerprint, Subject: p.Name()}
	switch p.Kind {
	case auth.Operator:
		ses.Name = p.User
	case auth.AppToken:
		ses.TokenID, ses.Namespace = p.Token.ID, p.Token.Namespace
	}
	sec, _, err := s.m.Create(ctx, ses, s.ttl)
	if err != nil {
		return err
	}
	http.SetCookie(w, s.cookie(r, sec, int(s.ttl/time.Second)))
	return nil
}

// end signs r's browser out: its session ends and its cookie is cleared.
func (s *Sessions) end(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	if err := s.revoke(ctx, r); err != nil {
		return err
	}
	http.SetCookie(w, s.cookie(r, "", -1))
	return nil
}

// revoke ends the session r's cookie names, if it is live.
func (s *Sessions) revoke(ctx context.Context, r *http.Request) error {
	if _, ses, ok := s.live(r); ok {
		return s.m.Revoke(ctx, ses.ID)
	}
	return nil
}

// cookie is the session cookie: host-only, the whole admin API's path,
// HttpOnly, SameSite=Strict, Secure over TLS.
func (s *Sessions) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: CookieName(r), Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	}
}

// Signed describes a live session for the pages.
type signed struct {
	CSRF string
	Who  string // "operator admin", "token ci (namespace team-a)"
}

func describe(sec string, ses sessions.Session) signed {
	who := strings.TrimPrefix(ses.Subject, "user:")
	if ses.TokenID != "" {
		who = "token " + ses.TokenID
		if ses.Namespace != "" {
			who += " (namespace " + ses.Namespace + ")"
		}
	}
	return signed{CSRF: CSRFToken(sec), Who: who}
}
