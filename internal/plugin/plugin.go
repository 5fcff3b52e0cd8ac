// Package plugin hosts berth's compiled-in plugins (app-lb.md §2.3,
// "plugins"): the operator switches each on or off for the fleet and gives
// it a config its JSON Schema accepts; a per-namespace plugin is also
// installed by each namespace that wants it, with a config of its own; and
// requests to /namespaces/{ns}/plugins/{id}/{rest...} are dispatched to the
// plugin when both switches are on.
//
// A plugin is a [Plugin], in a package of its own (obsplugin is the first).
// [Host] keeps the records (package store, through [Records]), validates
// configs against the schemas, and answers the wire views of package
// apitype; package admin serves it behind the gate's walls.
//
// Configs are stored as JSON in the clear: a plugin that needs a secret
// takes the name of a berth secret in its config, never the secret itself.
package plugin

import (
	"context"
	"encoding/json"
	"net/http"
)

// Info describes a plugin. It is fixed for the life of the process.
type Info struct {
	// ID names the plugin in paths and records ("obs"): lowercase letters,
	// digits and dashes.
	ID          string
	Name        string
	Description string
	// ConfigSchema is the JSON Schema (draft 2020-12 unless it says
	// otherwise) of the fleet-level config. It must accept {} — the config
	// of a plugin nobody has configured yet.
	ConfigSchema json.RawMessage
	// InstallSchema, when set, makes the plugin per-namespace: namespaces
	// install it, each with a config this schema accepts ({} included).
	// Nil: the plugin serves every namespace once it is enabled.
	InstallSchema json.RawMessage
	// DefaultEnabled switches the plugin on while no record says
	// otherwise (a fresh berth); the operator's switch, once stored, wins.
	DefaultEnabled bool
}

// PerNamespace reports whether namespaces install the plugin themselves.
func (i Info) PerNamespace() bool { return i.InstallSchema != nil }

// Plugin is a compiled-in plugin.
type Plugin interface {
	Info() Info
	// Apply is told the fleet-level config: with enabled true when the
	// plugin is switched on (at start, when a record says so) and each time
	// its config changes while it is on; with enabled false when it is
	// switched off. The config has passed ConfigSchema. An error does not
	// undo the switch: it is the plugin's last_error until an Apply
	// succeeds.
	Apply(ctx context.Context, enabled bool, config json.RawMessage) error
	// Status is whatever the plugin reports about itself, as JSON; nil is
	// null.
	Status() json.RawMessage
	// ServeHTTP serves one namespace's request. The host has checked the
	// caller's walls, that the plugin is enabled and (if per-namespace)
	// installed in the namespace. r.URL.Path is the rest of the path after
	// /namespaces/{ns}/plugins/{id}, starting with "/" ("/" for none);
	// [Namespace] and [InstallConfig] of r.Context() say whose request it
	// is. Errors should be the admin API's envelope {"error": "..."}.
	http.Handler
}

type callKey struct{}

type call struct {
	namespace string
	config    json.RawMessage
}

// WithCall returns ctx carrying the namespace a plugin request is for and
// that namespace's install config (nil for a plugin that is not
// per-namespace). The host sets it before calling Plugin.ServeHTTP.
func WithCall(ctx context.Context, namespace string, config json.RawMessage) context.Context {
	return context.WithValue(ctx, callKey{}, call{namespace, config})
}

// Namespace is the namespace a plugin request is for; "" outside one.
func Namespace(ctx context.Context) string {
	c, _ := ctx.Value(callKey{}).(call)
	return c.namespace
}

// InstallConfig is the install config of the namespace a plugin request
// is for (nil outside one, and for a plugin that is not per-namespace).
func InstallConfig(ctx context.Context) json.RawMessage {
	c, _ := ctx.Value(callKey{}).(call)
	return c.config
}
