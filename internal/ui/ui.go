// Package ui serves berth's web UI on the admin listener: the directory of
// public URLs (/), the dashboard (/dashboard, with a deployment's shell in
// a terminal), security alerts and guard rules (/siem), the disk census
// (/storage), the network topology (/network), the plugins (/plugins), the
// Computers (/ui/computers: the Computer API has /computers), sign-in
// (/login) and sign-out (/logout), and their static assets under /__ui/
// (app-lb.md §11). The assets are embedded in the binary; there is no
// build step (xterm.js is vendored: THIRD_PARTY.md).
//
// The pages hold no data: their scripts read the admin API (GET /metrics,
// /whoami, /deployments, /ingress, /certs, /security, /disks,
// /api/plugins, berth's own event stream GET /ui/events) and the Computer
// API (GET /computers, a Computer's facts stream, the usage ledger), and
// write through them (PATCH /deployments/{id}/scaling, PUT
// /deployments/{id}, POST and DELETE /security/rules, PATCH and DELETE
// /disks/{id}, POST /disks/{id}/archive, the plugin switches, configs and
// installs; the shell is the websocket GET /deployments/{id}/shell), with
// the browser's session as the credential. A session acts as the
// credential it was signed in with (the operator's password or an
// app-token; see Sessions and auth.BrowserSessions), so the admin API's
// tiers and walls apply to the pages unchanged: a namespace-confined token
// signed in sees its namespace only. API clients keep presenting Basic or
// Bearer credentials; a request with an Authorization header ignores the
// cookie.
//
// CSRF: the cookie is SameSite=Strict and HttpOnly; the admin listener's
// guard refuses a foreign Origin on every request (auth.Guard); every
// request a session makes that changes state must carry the session's CSRF
// token (X-CSRF-Token, or the form field on /logout), checked in constant
// time; and /login and /logout need an Origin header (which the guard has
// checked is the listener's own).
package ui

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/web"
)

//go:embed assets
var assets embed.FS

// Options configure the UI.
type Options struct {
	// Gate is the admin API's gate: a sign-in is checked by it (its brake
	// paces guessing at the password form as it does Basic credentials),
	// and it admits the pages' own requests.
	Gate     *auth.Gate
	Sessions *Sessions
	// AppName titles the pages; default "berth".
	AppName string
	Log     *slog.Logger
}

// UI is the web UI's http.Handler.
type UI struct {
	o     Options
	mux   *http.ServeMux
	pages *template.Template
	files map[string]asset
}

type asset struct {
	body  []byte
	etag  string
	ctype string
}

// New returns the UI.
func New(o Options) *UI {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.AppName == "" {
		o.AppName = "berth"
	}
	u := &UI{o: o, mux: http.NewServeMux(), files: map[string]asset{}}
	u.pages = template.Must(template.ParseFS(assets, "assets/*.html"))
	static, _ := fs.Sub(assets, "assets/static")
	fs.WalkDir(static, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := fs.ReadFile(static, p)
		sum := sha256.Sum256(b)
		u.files[p] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, ctype: contentType(p)}
		return nil
	})
	u.mux.Handle("GET /{$}", u.page("directory.html", "Directory"))
	u.mux.Handle("GET /dashboard", u.page("dashboard.html", "Dashboard"))
	u.mux.Handle("GET /siem", u.page("siem.html", "Security"))
	u.mux.Handle("GET /storage", u.page("storage.html", "Storage"))
	u.mux.Handle("GET /network", u.page("network.html", "Network"))
	u.mux.Handle("GET /plugins", u.page("plugins.html", "Plugins"))
	u.mux.Handle("GET "+ComputersPath, u.page("computers.html", "Computers"))
	u.mux.HandleFunc("GET /login", u.loginPage)
	u.mux.HandleFunc("POST /login", u.login)
	u.mux.HandleFunc("POST /logout", u.logout)
	u.mux.HandleFunc("GET /__ui/{file...}", u.static)
	return u
}

// Patterns are the paths the UI serves, for the admin listener's mux.
func Patterns() []string {
	return []string{"GET /{$}", "GET /dashboard", "/login", "POST /logout", "GET /__ui/",
		"GET /siem", "GET /storage",
		"GET /network",
		"GET /plugins",
		"GET " + ComputersPath,
	}
}

// ComputersPath is the Computers page's path: not /computers, which is the
// Computer API's (GET /computers lists them as JSON) on the same listener.
const ComputersPath = "/ui/computers"

func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	web.ServeMux(u.o.Log, u.mux, w, r)
}

func contentType(p string) string {
	switch path.Ext(p) {
	case ".css":
		return "text/css; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return "application/octet-stream"
}

// headers are every UI answer's: no framing, no inline script or style,
// connections to the admin listener only. A page's style-src also admits
// the <style> elements that carry its nonce: the terminal (xterm.js)
// builds its own, and the page's script stamps them with the nonce (see
// shell.js); a style attribute is still refused.
func headers(w http.ResponseWriter, nonce string) {
	h := w.Header()
	style := "'self'"
	if nonce != "" {
		style += " 'nonce-" + nonce + "'"
	}
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src "+style+"; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: under no-referrer a form POST is sent
	// with Origin: null, which the guard refuses.
	h.Set("Referrer-Policy", "same-origin")
}

func (u *UI) static(w http.ResponseWriter, r *http.Request) {
	a, ok := u.files[r.PathValue("file")]
	if !ok {
		web.WriteError(u.o.Log, w, r, web.Errorf(http.StatusNotFound, "no UI asset %q", r.PathValue("file")))
		return
	}
	headers(w, "")
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("ETag", a.etag)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

// view is what a page's template is given.
type view struct {
	App, Title, Page string
	CSRF, Who        string
	Error, User      string
	Next             string
	Gated            bool
	// Nonce is the page's style nonce (a fresh one every answer), for
	// the <style> elements its script makes.
	Nonce string
}

func (u *UI) render(w http.ResponseWriter, status int, name string, v view) {
	v.App = u.o.AppName
	var n [18]byte
	rand.Read(n[:])
	v.Nonce = base64.RawURLEncoding.EncodeToString(n[:])
	var b bytes.Buffer
	if err := u.pages.ExecuteTemplate(&b, name, v); err != nil {
		u.o.Log.Error("ui: rendering a page", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	headers(w, v.Nonce)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// page serves a page to a caller who may read the admin API's view tier;
// a browser that is not signed in is sent to sign in first.
func (u *UI) page(name, title string) http.Handler {
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := view{Title: title, Page: strings.TrimSuffix(name, ".html"), Gated: u.o.Gate.Gated()}
		if sec, ses, ok := u.o.Sessions.live(r); ok {
			s := describe(sec, ses)
			v.CSRF, v.Who = s.CSRF, s.Who
		}
		u.render(w, http.StatusOK, name, v)
	})
	gated := u.o.Gate.Wrap(auth.View, auth.NoWall, nil, serve)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" && u.o.Gate.Gated() {
			// No credential but the cookie, which the brake does not
			// pace (its secret cannot be guessed): an ended session, or
			// one whose token was revoked, signs in again.
			if _, err := u.o.Gate.Authenticate(r, false); err != nil {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.Path), http.StatusSeeOther)
				return
			}
		}
		gated.ServeHTTP(w, r)
	})
}

// next is where a sign-in goes on to: a path on this listener, never
// another site.
func next(v string) string {
	if v == "" || !strings.HasPrefix(v, "/") || strings.HasPrefix(v, "//") || strings.ContainsAny(v, "\\\r\n") {
		return "/dashboard"
	}
	return v
}

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	u.render(w, http.StatusOK, "login.html", view{Title: "Sign in", Page: "login", Next: next(r.URL.Query().Get("next")), Gated: u.o.Gate.Gated(), User: "admin"})
}

// maxForm bounds a sign-in form.
const maxForm = 16 << 10

// login is POST /login: the form's password (with its user) or app-token
// is presented to the gate as the API's Basic or Bearer credential would
// be, through its brake; when it admits the view tier, a session starts.
// A refusal is the sign-in page again, saying why, with the gate's status
// (and no Basic challenge: the browser must not pop a dialog over it).
func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Origin") == "" {
		u.render(w, http.StatusForbidden, "login.html", view{Title: "Sign in", Page: "login", Next: "/dashboard", Error: "Signing in needs a browser that sends an Origin header."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		u.render(w, http.StatusBadRequest, "login.html", view{Title: "Sign in", Page: "login", Next: "/dashboard", Error: "The sign-in form could not be read."})
		return
	}
	user, cred, to := strings.TrimSpace(r.PostForm.Get("user")), r.PostForm.Get("secret"), next(r.PostForm.Get("next"))
	again := view{Title: "Sign in", Page: "login", Next: to, User: user, Gated: u.o.Gate.Gated()}
	if cred == "" {
		again.Error = "Enter the operator password or an app-token."
		u.render(w, http.StatusBadRequest, "login.html", again)
		return
	}
	c := r.Clone(r.Context())
	c.Header = r.Header.Clone()
	c.Header.Del("Cookie")
	if strings.HasPrefix(cred, "berth_") {
		c.Header.Set("Authorization", "Bearer "+cred)
	} else {
		if user == "" {
			user = "admin"
		}
		c.SetBasicAuth(user, cred)
	}
	var started bool
	signedIn := r
	admitted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A new secret at every sign-in, and the session the browser
		// held before ends: no session outlives a sign-in over it.
		if err := u.o.Sessions.revoke(r.Context(), signedIn); err != nil {
			u.o.Log.Warn("ui: ending the session signed in over", "err", err)
		}
		if err := u.o.Sessions.create(r.Context(), w, r, auth.FromContext(r.Context())); err != nil {
			u.o.Log.Error("ui: starting a session", "err", err)
			http.Error(w, "the session could not be started", http.StatusInternalServerError)
			return
		}
		started = true
		http.Redirect(w, r, to, http.StatusSeeOther)
	})
	rec := &recorder{header: http.Header{}}
	u.o.Gate.Wrap(auth.View, auth.NoWall, nil, admitted).ServeHTTP(rec, c)
	if started {
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		return
	}
	switch rec.status {
	case http.StatusTooManyRequests:
		again.Error = "Too many failed sign-ins from this address or for this account."
		if s, err := strconv.Atoi(rec.header.Get("Retry-After")); err == nil {
			again.Error += " Try again in " + strconv.Itoa(s) + " seconds."
		}
	case http.StatusForbidden:
		again.Error = "This credential may not read the admin API: it needs admin scope view or admin."
	default:
		again.Error = "Wrong user, password or token."
		if !u.o.Gate.Gated() && !strings.HasPrefix(cred, "berth_") {
			again.Error = "This admin API has no operator password (BERTH_ADMIN_PASSWORD): sign in with an app-token, or open the pages without signing in."
		}
	}
	if rec.status == 0 || rec.status < 400 {
		rec.status = http.StatusUnauthorized
	}
	u.render(w, rec.status, "login.html", again)
}

// recorder keeps the gate's answer to a sign-in, to be passed on (a
// session started) or replaced by the sign-in page.
type recorder struct {
	header http.Header
	status int
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return len(b), nil
}

// logout is POST /logout: the session ends and its cookie is cleared.
// The form carries the session's CSRF token.
func (u *UI) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	r.ParseForm()
	if sec, _, ok := u.o.Sessions.live(r); ok {
		tok := r.PostForm.Get("csrf")
		if tok == "" {
			tok = r.Header.Get(CSRFHeader)
		}
		if r.Header.Get("Origin") == "" || !validCSRF(sec, tok) {
			headers(w, "")
			http.Error(w, "signing out needs the session's CSRF token (reload the page)", http.StatusForbidden)
			return
		}
		if err := u.o.Sessions.end(r.Context(), w, r); err != nil {
			u.o.Log.Error("ui: ending a session", "err", err)
			http.Error(w, "the session could not be ended", http.StatusInternalServerError)
			return
		}
	} else {
		http.SetCookie(w, u.o.Sessions.cookie(r, "", -1))
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
