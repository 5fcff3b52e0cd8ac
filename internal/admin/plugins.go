package admin

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/web"
)

// routePlugins registers the plugin routes (app-lb.md §2.3, "plugins"):
// the fleet-level records for the operator, a namespace's installs and
// the dispatch of /namespaces/{name}/plugins/{id}/{rest...} to the plugin.
func (a *API) routePlugins() {
	a.handle("GET /api/plugins", tierView, wallFleet, a.listPlugins)
	a.handle("GET /api/plugins/{id}", tierView, wallFleet, a.getPlugin)
	a.handle("PUT /api/plugins/{id}", tierCRUD, wallFleet, a.putPlugin)
	a.handle("POST /api/plugins/{id}/enable", tierCRUD, wallFleet, a.switchPlugin(true))
	a.handle("POST /api/plugins/{id}/disable", tierCRUD, wallFleet, a.switchPlugin(false))
	a.handle("GET /api/plugins/{id}/installs", tierView, wallFleet, a.pluginInstalls)
	a.handle("GET /namespaces/{name}/plugins", tierView, wallNarrow, a.namespacePlugins)
	a.handle("GET /namespaces/{name}/plugins/{id}", tierView, wallNarrow, a.namespacePlugin)
	a.handle("PUT /namespaces/{name}/plugins/{id}", tierCRUD, wallNarrow, a.installPlugin)
	a.handle("DELETE /namespaces/{name}/plugins/{id}", tierCRUD, wallNarrow, a.uninstallPlugin)
	// A plugin's own routes: reads at the view tier, anything else at the
	// admin tier (app-lb: V,N for GET, C,N for the rest).
	a.handle("GET /namespaces/{name}/plugins/{id}/{rest...}", tierView, wallNarrow, a.dispatchPlugin)
	a.handle("/namespaces/{name}/plugins/{id}/{rest...}", tierCRUD, wallNarrow, a.dispatchPlugin)
}

// newNamespace reports whether ns is new to the fleet: no deployment
// lives there and it is not declared. A deployment write that brings it
// into being installs the enabled per-namespace plugins there
// (installPlugins; app-lb installs them on register) — only then, so a
// namespace that uninstalled a plugin does not get it back with its next
// deploy.
func (a *API) newNamespace(ctx context.Context, ns string) bool {
	if a.o.Plugins == nil {
		return false
	}
	if a.o.Registry.HasNamespace(ns) {
		return false
	}
	if a.o.Namespaces != nil {
		decl, err := a.o.Namespaces.List(ctx)
		if err != nil {
			a.o.Log.Error("could not read the namespaces; the enabled plugins are not installed in a new one", "namespace", ns, "err", err)
			return false
		}
		if slices.ContainsFunc(decl, func(n namespaces.Namespace) bool { return n.Name == ns }) {
			return false // declared: it got them then
		}
	}
	return true
}

// installPlugins installs the enabled per-namespace plugins in ns, new to
// the fleet with deployment id. The write has happened, so a failure is
// logged, not the write's error.
func (a *API) installPlugins(ctx context.Context, ns, id string) {
	if err := a.o.Plugins.NamespaceKnown(ctx, ns); err != nil {
		a.o.Log.Error("the enabled plugins were not installed in a new namespace", "deployment", id, "namespace", ns, "err", err)
	}
}

func (a *API) plugins() (*plugin.Host, error) {
	if a.o.Plugins == nil {
		return nil, unavailable("plugins")
	}
	return a.o.Plugins, nil
}

func (a *API) listPlugins(w http.ResponseWriter, r *http.Request) error {
	h, err := a.plugins()
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, h.Plugins())
	return nil
}

func (a *API) getPlugin(w http.ResponseWriter, r *http.Request) error {
	h, err := a.plugins()
	if err != nil {
		return err
	}
	v, err := h.Plugin(r.PathValue("id"))
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}

// pluginPut is the body of PUT /api/plugins/{id}.
type pluginPut struct {
	Enabled *bool           `json:"enabled"`
	Config  json.RawMessage `json:"config,omitempty"`
}

func (a *API) putPlugin(w http.ResponseWriter, r *http.Request) error {
	h, err := a.plugins()
	if err != nil {
		return err
	}
	var req pluginPut
	if err := web.ReadClosedJSON(w, r, &req, apitype.UnknownKey); err != nil {
		return err
	}
	if req.Enabled == nil {
		return web.Invalid("enabled", "required (true or false)")
	}
	u := plugin.Update{Enabled: *req.Enabled, Config: req.Config}
	if u.Enabled {
		if u.Namespaces, err = a.knownNamespaces(r); err != nil {
			return err
		}
	}
	v, err := h.Set(r.Context(), r.PathValue("id"), u)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}

// switchPlugin is POST /api/plugins/{id}/enable|disable: the switch alone,
// the config kept.
func (a *API) switchPlugin(on bool) web.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		h, err := a.plugins()
		if err != nil {
			return err
		}
		u := plugin.Update{Enabled: on}
		if on {
			if u.Namespaces, err = a.knownNamespaces(r); err != nil {
				return err
			}
		}
		v, err := h.Set(r.Context(), r.PathValue("id"), u)
		if err != nil {
			return err
		}
		web.WriteJSON(w, http.StatusOK, v)
		return nil
	}
}

// knownNamespaces are the namespaces enabling a per-namespace plugin
// installs it in: the declared ones and those deployments live in.
func (a *API) knownNamespaces(r *http.Request) ([]string, error) {
	all := map[string]bool{}
	for _, e := range a.o.Registry.List() {
		all[namespace(e)] = true
	}
	if a.o.Namespaces != nil {
		decl, err := a.o.Namespaces.List(r.Context())
		if err != nil {
			return nil, &web.Error{Status: http.StatusInternalServerError, Message: "could not read the namespaces", Err: err}
		}
		for _, n := range decl {
			all[n.Name] = true
		}
	}
	return slices.Sorted(maps.Keys(all)), nil
}

func (a *API) pluginInstalls(w http.ResponseWriter, r *http.Request) error {
	h, err := a.plugins()
	if err != nil {
		return err
	}
	v, err := h.Installs(r.PathValue("id"))
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}

// pluginWall checks the caller against namespace ns before any plugin is
// looked up, so that a namespace the caller cannot reach answers one 403
// whatever plugin it names and whatever is installed there (no existence
// oracle); installing and uninstalling need an admin of the whole
// namespace.
func pluginWall(p *auth.Principal, ns string, install bool) error {
	if !p.Reaches(ns) {
		return web.Errorf(http.StatusForbidden, "this credential cannot reach namespace %q's plugins", ns)
	}
	if install && !p.Administers(ns) {
		return web.Errorf(http.StatusForbidden, "installing a plugin needs an admin credential for all of namespace %q", ns)
	}
	if err := namespaces.CheckName(ns); err != nil {
		return web.Errorf(http.StatusBadRequest, "%q is not a valid namespace name", ns)
	}
	return nil
}

func (a *API) namespacePlugins(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("name")
	if err := pluginWall(caller(r), ns, false); err != nil {
		return err
	}
	h, err := a.plugins()
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, h.ForNamespace(ns))
	return nil
}

func (a *API) namespacePlugin(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("name")
	if err := pluginWall(caller(r), ns, false); err != nil {
		return err
	}
	h, err := a.plugins()
	if err != nil {
		return err
	}
	v, err := h.InNamespace(ns, r.PathValue("id"))
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}

// pluginInstall is the body of PUT /namespaces/{name}/plugins/{id}.
type pluginInstall struct {
	Config json.RawMessage `json:"config,omitempty"`
}

func (a *API) installPlugin(w http.ResponseWriter, r *http.Request) error {
	ns, p := r.PathValue("name"), caller(r)
	if err := pluginWall(p, ns, true); err != nil {
		return err
	}
	h, err := a.plugins()
	if err != nil {
		return err
	}
	var req pluginInstall
	if r.ContentLength != 0 { // no body installs with {}
		if err := web.ReadClosedJSON(w, r, &req, apitype.UnknownKey); err != nil {
			return err
		}
	}
	v, err := h.Install(r.Context(), ns, r.PathValue("id"), installer(p), req.Config)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}

// installer is how an install records p (`installed_by`): `token:<id>`
// for an app-token, absent for the operator (apitype.NamespacePlugin).
func installer(p *auth.Principal) string {
	if p.Kind == auth.AppToken {
		return p.Name()
	}
	return ""
}

func (a *API) uninstallPlugin(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("name")
	if err := pluginWall(caller(r), ns, true); err != nil {
		return err
	}
	h, err := a.plugins()
	if err != nil {
		return err
	}
	v, err := h.Uninstall(r.Context(), ns, r.PathValue("id"))
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}

func (a *API) dispatchPlugin(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("name")
	if err := pluginWall(caller(r), ns, false); err != nil {
		return err
	}
	h, err := a.plugins()
	if err != nil {
		return err
	}
	return h.Serve(w, r, ns, r.PathValue("id"), r.PathValue("rest"))
}
