package apitype

// Request bodies the admin API accepts that app-lb documents but the
// contract (types.d.ts) does not declare. They are not contract types, so the
// contract test does not hold them to it; their shapes follow app-lb's route
// table.

// DrainRequest is the body of `PUT /deployments/:id/upstreams/:upstream/drain`.
type DrainRequest struct {
	// Force drains even when no other healthy upstream is accepting.
	Force *bool `json:"force,omitempty"`
	// Reason is shown in [UpstreamTrafficStatus.Reason]; at most 512 bytes.
	Reason string `json:"reason,omitempty"`
}

// ExecRequest is the body of `POST /deployments/:id/exec`.
type ExecRequest struct {
	// Command is a shell command line, run with the guest's shell.
	Command string `json:"command"`
	// Cwd is the working directory inside the guest.
	Cwd string `json:"cwd,omitempty"`
	// Env adds environment variables for this command.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutSecs defaults to 60 and is clamped to 1..3600.
	TimeoutSecs *int `json:"timeout_secs,omitempty"`
	// Wake starts a VM when none is running. Absent means true.
	Wake *bool `json:"wake,omitempty"`
	// SandboxID picks one VM; absent picks any ready one.
	SandboxID string `json:"sandbox_id,omitempty"`
}

// NewToken is the body of `POST /tokens`.
type NewToken struct {
	Name  string     `json:"name"`
	Admin AdminScope `json:"admin"`
	// Namespace confines the token to one namespace.
	Namespace string `json:"namespace,omitempty"`
	// Deployments are deployment ids, or ["*"] for all of them.
	Deployments []string `json:"deployments"`
	// ExpiresInSecs is the lifetime from now; absent never expires.
	ExpiresInSecs *int64 `json:"expires_in_secs,omitempty"`
	// Fleet mints a token valid on every server that mirrors this one.
	Fleet *bool `json:"fleet,omitempty"`
}

// TokenPatch is the body of `PATCH /tokens/:id`. Absent fields are left
// alone; Namespace and ExpiresAt also accept null, which clears them — hence
// [Nullable] rather than a pointer.
type TokenPatch struct {
	Name        string           `json:"name,omitempty"`
	Admin       AdminScope       `json:"admin,omitempty"`
	Namespace   Nullable[string] `json:"namespace,omitzero"`
	Deployments []string         `json:"deployments,omitempty"`
	ExpiresAt   Nullable[int64]  `json:"expires_at,omitzero"`
}

// SecretSpec is the body of `POST /secrets` and `PUT /secrets/:id`.
type SecretSpec struct {
	ID string `json:"id"`
	// Namespace defaults to "default".
	Namespace   string            `json:"namespace,omitempty"`
	Description string            `json:"description,omitempty"`
	Data        map[string]string `json:"data"`
}

// SecretPatch is the body of `PATCH /secrets/:id`: a nil value removes
// that key, any other value sets it.
type SecretPatch struct {
	Data        map[string]*string `json:"data"`
	Description string             `json:"description,omitempty"`
}

// NamespaceSpec is the body of `POST /namespaces`.
type NamespaceSpec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Domains (a berth extension) assigns host names to the namespace:
	// "example.com" covers example.com and every subdomain. A namespace
	// token may route only hosts under its namespace's domains, and no
	// other namespace may route hosts under them. Absent keeps the
	// namespace's current domains; [] removes them.
	Domains *[]string `json:"domains,omitempty"`
}
