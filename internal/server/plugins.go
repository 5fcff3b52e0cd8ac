package server

import (
	"context"
	"net/http"

	"github.com/berth-dev/berth/internal/obs"
	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/plugin/obsplugin"
)

// openPlugins is the host of berth's compiled-in plugins, their records in
// the store. obs serves api, the telemetry API (nil: obsplugin's 409 "the
// obs plugin is not configured"); extra are hosted besides it.
func openPlugins(ctx context.Context, st Store, api http.Handler, extra ...plugin.Plugin) (*plugin.Host, error) {
	if api != nil {
		api = obsNamespace(api)
	}
	return plugin.New(ctx, plugin.Options{Records: st, Plugins: append([]plugin.Plugin{obsplugin.New(api)}, extra...)})
}

// obsNamespace hands the plugin host's namespace of a request to package
// obs' handler, which reads it from its own context key.
func obsNamespace(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(obs.WithNamespace(r.Context(), plugin.Namespace(r.Context()))))
	})
}
