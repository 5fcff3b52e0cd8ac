package admin

import (
	"net/http"

	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/web"
)

// artifactsInfo is GET /namespaces/{name}/artifacts (app-lb.md §2.3):
// whether the namespace has a store, whether the caller may publish to it,
// and the prefix its tags carry in the store.
func (a *API) artifactsInfo(w http.ResponseWriter, r *http.Request) error {
	ns, err := artifactWall(caller(r), r.PathValue("name"), false)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{
		"namespace": ns,
		"available": a.o.Artifacts != nil,
		"writable":  a.o.Artifacts != nil && caller(r).Administers(ns),
		"prefix":    ns + "/",
	})
	return nil
}

// artifacts serves the store's protocol (package artifact) through a
// namespace: GET|HEAD at the view tier, PUT|DELETE for admins of the
// whole namespace.
func (a *API) artifacts(w http.ResponseWriter, r *http.Request) error {
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	ns, err := artifactWall(caller(r), r.PathValue("name"), write)
	if err != nil {
		return err
	}
	if a.o.Artifacts == nil {
		return unavailable("artifact stores")
	}
	return a.o.Artifacts.Serve(w, r, ns, r.PathValue("rest"))
}

// artifactWall checks the caller against namespace ns before anything of
// the store is looked at, so that a namespace the caller cannot reach
// answers one 403 whatever exists there (no existence oracle).
func artifactWall(p *auth.Principal, ns string, write bool) (string, error) {
	if !p.Reaches(ns) {
		return "", web.Errorf(http.StatusForbidden, "this credential cannot reach namespace %q's artifacts", ns)
	}
	if write && !p.Administers(ns) {
		return "", web.Errorf(http.StatusForbidden, "publishing artifacts needs an admin credential for all of namespace %q", ns)
	}
	if err := namespaces.CheckName(ns); err != nil {
		return "", web.Errorf(http.StatusBadRequest, "%q is not a valid namespace name", ns)
	}
	return ns, nil
}
