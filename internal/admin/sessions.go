package admin

import (
	"context"
	"net/http"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/sessions"
	"github.com/berth-dev/berth/internal/web"
)

// Sessions is what the operator API needs of the sign-in sessions.
type Sessions interface {
	List(deployment string) []sessions.Session
	Get(id string) (sessions.Session, bool)
	Revoke(ctx context.Context, id string) error
	RevokeSubject(ctx context.Context, deployment, subject string) (int, error)
}

func sessionView(s sessions.Session) apitype.SessionView {
	return apitype.SessionView{ID: s.ID, Deployment: s.Deployment, Namespace: s.Namespace, Subject: s.Subject,
		Email: s.Email, Name: s.Name, Issuer: s.Issuer, CreatedAt: s.CreatedAt.Unix(), ExpiresAt: s.ExpiresAt.Unix(),
		LastSeenAt: s.LastSeen.Unix()}
}

// listSessions is GET /sessions[?deployment=][&subject=]: the sessions of
// the deployments the caller touches (another's look like none).
func (a *API) listSessions(w http.ResponseWriter, r *http.Request) error {
	if a.o.Sessions == nil {
		return unavailable("sessions")
	}
	p := caller(r)
	dep, sub := r.URL.Query().Get("deployment"), r.URL.Query().Get("subject")
	out := []apitype.SessionView{}
	for _, s := range a.o.Sessions.List(dep) {
		if p.Touches(s.Deployment, s.Namespace) && (sub == "" || s.Subject == sub) {
			out = append(out, sessionView(s))
		}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// deleteSession is DELETE /sessions/{id}: one session ends. A session the
// caller cannot touch is answered as a missing one.
func (a *API) deleteSession(w http.ResponseWriter, r *http.Request) error {
	if a.o.Sessions == nil {
		return unavailable("sessions")
	}
	id := r.PathValue("id")
	s, ok := a.o.Sessions.Get(id)
	if !ok || !caller(r).Touches(s.Deployment, s.Namespace) {
		return web.Errorf(http.StatusNotFound, "no session %q", id)
	}
	if err := a.o.Sessions.Revoke(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// revokeSubject is DELETE /sessions?deployment=&subject=: a person signed
// out everywhere at a deployment.
func (a *API) revokeSubject(w http.ResponseWriter, r *http.Request) error {
	if a.o.Sessions == nil {
		return unavailable("sessions")
	}
	dep, sub := r.URL.Query().Get("deployment"), r.URL.Query().Get("subject")
	switch {
	case dep == "":
		return web.Errorf(http.StatusBadRequest, "deployment: required (the deployment whose sessions end)")
	case sub == "":
		return web.Errorf(http.StatusBadRequest, "subject: required (the person signed out everywhere)")
	}
	n := 0
	if e, ok := a.o.Registry.Get(dep); ok && visible(caller(r), e) {
		var err error
		if n, err = a.o.Sessions.RevokeSubject(r.Context(), dep, sub); err != nil {
			return err
		}
	}
	web.WriteJSON(w, http.StatusOK, apitype.SessionsRevoked{Revoked: n})
	return nil
}
