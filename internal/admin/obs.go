package admin

import (
	"net/http"

	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/obs"
	"github.com/berth-dev/berth/internal/web"
)

// routeObs registers the obs plugin's API (package obs) at
// /namespaces/{ns}/plugins/obs/api/…: reads at the view tier, alert rule
// changes at crud.
func (a *API) routeObs() {
	a.handle("GET /namespaces/{ns}/plugins/obs/api/{rest...}", tierView, wallNarrow, a.obsAPI)
	a.handle("POST /namespaces/{ns}/plugins/obs/api/{rest...}", tierCRUD, wallNarrow, a.obsAPI)
	a.handle("DELETE /namespaces/{ns}/plugins/obs/api/{rest...}", tierCRUD, wallNarrow, a.obsAPI)
}

// obsAPI checks the caller against the namespace before anything of its
// telemetry is looked at — a namespace a confined caller cannot reach
// answers one 403 whatever exists there — and hands the request to the
// obs handler with the namespace in its context and the path relative to
// the plugin. Which deployments the caller sees there is the handler's
// Visible (the deployment wall).
func (a *API) obsAPI(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("ns")
	if p := caller(r); p.Confined() && !p.Reaches(ns) {
		return web.Errorf(http.StatusForbidden, "this credential cannot reach namespace %q's telemetry", ns)
	}
	if err := namespaces.CheckName(ns); err != nil {
		return web.Errorf(http.StatusBadRequest, "%q is not a valid namespace name", ns)
	}
	if a.o.Obs == nil {
		return web.Errorf(http.StatusConflict, "the obs plugin is not configured")
	}
	r2 := r.Clone(obs.WithNamespace(r.Context(), ns))
	r2.URL.Path, r2.URL.RawPath = "/api/"+r.PathValue("rest"), ""
	a.o.Obs.ServeHTTP(w, r2)
	return nil
}
