package web

import (
	"log/slog"
	"net/http"
)

// ServeMux serves r through mux, answering in the envelope where mux has
// no pattern for it: a path the mux knows with another method is a 405
// with the mux's Allow header; a route the server does not have at all is
// a 501 "<METHOD> <path> is not supported by this server". Not 404: app-lb's
// clients read a 404 as "that resource does not exist" (a missing
// deployment), which a route this server lacks is not. 404 stays for a
// route that exists whose resource is missing.
func ServeMux(log *slog.Logger, mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	h, pattern := mux.Handler(r)
	if pattern != "" {
		mux.ServeHTTP(w, r) // sets the path values h needs
		return
	}
	// No pattern matched: the mux would answer a plain-text 404, or 405
	// with an Allow header. Keep its 405 (and Allow).
	probe := &statusProbe{header: http.Header{}}
	h.ServeHTTP(probe, r)
	if probe.status == http.StatusMethodNotAllowed {
		allow := probe.header.Get("Allow")
		w.Header().Set("Allow", allow)
		WriteError(log, w, r, Errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow))
		return
	}
	WriteError(log, w, r, Errorf(http.StatusNotImplemented, "%s %s is not supported by this server", r.Method, r.URL.Path))
}

// statusProbe records what a handler would answer, discarding the body.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int)        { p.status = code }
