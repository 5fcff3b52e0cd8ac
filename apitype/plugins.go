package apitype

import "encoding/json"

// PluginView is the contract's PluginView.
//
// `GET /api/plugins` — a built-in plugin, its stored record and its live status.
type PluginView struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	// JSON Schema for `config`. Advisory; app-lb validates on write.
	ConfigSchema json.RawMessage `json:"config_schema"`
	Enabled      bool            `json:"enabled"`
	// Kept while disabled, so re-enabling does not lose it.
	Config    json.RawMessage `json:"config"`
	UpdatedAt int64           `json:"updated_at"`
	// Why the last apply failed. A plugin can be enabled *and* failing.
	LastError string `json:"last_error,omitempty"`
	// Whatever the plugin reports about itself; the shape is per plugin.
	Status json.RawMessage `json:"status"`
	// Whether namespaces install this plugin themselves.
	PerNamespace *bool `json:"per_namespace,omitempty"`
	// The namespaces that have, for a per-namespace plugin.
	InstalledIn []string `json:"installed_in,omitempty"`
}

// NamespacePlugin is the contract's NamespacePlugin.
//
// `GET /namespaces/:ns/plugins` — a plugin as one namespace sees it. `enabled`
// is the operator's fleet switch; `installed` is this namespace's. A plugin
// does nothing for a namespace unless both are true.
type NamespacePlugin struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	Enabled     bool   `json:"enabled"`
	Installed   bool   `json:"installed"`
	InstalledAt *int64 `json:"installed_at,omitempty"`
	// `token:<id>` or `user:<id>`; absent for the operator.
	InstalledBy string          `json:"installed_by,omitempty"`
	Config      json.RawMessage `json:"config,omitempty"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [NamespacePlugin.Extra].
func (v NamespacePlugin) MarshalJSON() ([]byte, error) {
	type plain NamespacePlugin
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [NamespacePlugin.Extra].
func (v *NamespacePlugin) UnmarshalJSON(data []byte) error {
	type plain NamespacePlugin
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// NamespaceInstall is one namespace's install of a per-namespace plugin.
type NamespaceInstall struct {
	InstalledAt int64           `json:"installed_at"`
	InstalledBy *string         `json:"installed_by,omitempty"`
	Config      json.RawMessage `json:"config"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [NamespaceInstall.Extra].
func (v NamespaceInstall) MarshalJSON() ([]byte, error) {
	type plain NamespaceInstall
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [NamespaceInstall.Extra].
func (v *NamespaceInstall) UnmarshalJSON(data []byte) error {
	type plain NamespaceInstall
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// PluginInstalls is the contract's PluginInstalls.
//
// `GET /api/plugins/:id/installs` — fleet scope only.
type PluginInstalls struct {
	Plugin     string                      `json:"plugin"`
	Enabled    bool                        `json:"enabled"`
	Namespaces []string                    `json:"namespaces"`
	Installs   map[string]NamespaceInstall `json:"installs"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [PluginInstalls.Extra].
func (v PluginInstalls) MarshalJSON() ([]byte, error) {
	type plain PluginInstalls
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [PluginInstalls.Extra].
func (v *PluginInstalls) UnmarshalJSON(data []byte) error {
	type plain PluginInstalls
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}
