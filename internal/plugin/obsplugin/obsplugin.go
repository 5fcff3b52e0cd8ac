// Package obsplugin is the `obs` plugin (app-lb.md §2.3, "Obs plugin"): a
// namespace's telemetry, served under /namespaces/{ns}/plugins/obs.
//
// It is a thin adapter: the telemetry API itself is an http.Handler given
// to [New]. The contract with that handler:
//
//   - It sees only paths under /api/ — /namespaces/{ns}/plugins/obs/api/fleet
//     arrives as r.URL.Path "/api/fleet", with the query untouched.
//   - The namespace is plugin.Namespace(r.Context()); it is also the path
//     value "ns", and the path after /api/ is the path value "rest"
//     (r.PathValue), as on the handler's interim route
//     /namespaces/{ns}/plugins/obs/api/{rest...}.
//   - The caller has been authenticated and walled to that namespace, and
//     obs is enabled (it is by default, and serves every namespace: there
//     is nothing to install, berth records every namespace's telemetry). GET arrives at the view tier, any
//     other method at the admin tier. The handler limits bodies itself
//     (app-lb: 64 KiB, 413 beyond) and answers errors in the envelope.
//
// Any other path is a 404, /ui included: berth serves no obs page of its
// own (the console is the UI's).
//
// Until a telemetry API is connected, the server builds the plugin with
// [NotConfigured], which answers 409 "the obs plugin is not configured".
package obsplugin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"

	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/web"
)

// ID is the plugin's id.
const ID = "obs"

// closed is the schema of a config with nothing to set: obs has no
// fleet-level or per-namespace settings of its own yet, and refuses any
// key rather than keep one it would ignore.
const closed = `{"type":"object","properties":{},"additionalProperties":false}`

// NotConfigured answers every request as app-lb does when obs has no
// telemetry backend: 409 "the obs plugin is not configured".
var NotConfigured http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	web.WriteError(discard, w, r, web.Errorf(http.StatusConflict, "the obs plugin is not configured"))
})

var discard = slog.New(slog.DiscardHandler) // its errors are 4xx: nothing to log

// Plugin is the obs plugin.
type Plugin struct {
	api        http.Handler
	configured bool
}

// New returns the obs plugin serving api (see the package doc for the
// contract); nil serves NotConfigured.
func New(api http.Handler) *Plugin {
	if api == nil {
		return &Plugin{api: NotConfigured}
	}
	return &Plugin{api: api, configured: true}
}

// Info implements plugin.Plugin.
func (*Plugin) Info() plugin.Info {
	return plugin.Info{
		ID:           ID,
		Name:         "Observability",
		Description:  "Per-namespace telemetry: request rates, latencies, logs and alerts of the namespace's deployments.",
		ConfigSchema: json.RawMessage(closed),
		// Every namespace's telemetry is recorded whatever the switch
		// says (berth's own store, nothing to install): obs serves every
		// namespace, and is on until the operator turns it off.
		DefaultEnabled: true,
	}
}

// Apply implements plugin.Plugin: obs has nothing to apply.
func (*Plugin) Apply(context.Context, bool, json.RawMessage) error { return nil }

// Status implements plugin.Plugin.
func (p *Plugin) Status() json.RawMessage {
	if !p.configured {
		return json.RawMessage(`{"configured":false}`)
	}
	return json.RawMessage(`{"configured":true}`)
}

// ServeHTTP implements plugin.Plugin.
func (p *Plugin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok {
		web.WriteError(discard, w, r, web.Errorf(http.StatusNotFound, "the obs plugin has no %s", r.URL.Path))
		return
	}
	r.SetPathValue("ns", plugin.Namespace(r.Context()))
	r.SetPathValue("rest", rest)
	p.api.ServeHTTP(w, r)
}
