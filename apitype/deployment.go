package apitype

import "encoding/json"

// DeploymentKind says how a deployment serves: a pool of VMs, fixed upstreams, or files from disk.
type DeploymentKind string

// The DeploymentKind values the contract names.
const (
	KindVM     DeploymentKind = "vm"
	KindStatic DeploymentKind = "static"
	KindSite   DeploymentKind = "site"
)

// DeploymentSpec is what a client registers: routes plus one of vm, upstreams, discovery, build, artifact or site. Keys this build does not know are kept in Extra so a spec from a newer client survives a read-modify-write.
type DeploymentSpec struct {
	ID string `json:"id"`
	// The namespace this deployment belongs to. Absent means `"default"`.
	// Namespaces segregate use: a namespace-confined token reaches only the
	// deployments in it, and the event feed is kept per namespace.
	Namespace string `json:"namespace,omitempty"`
	// The heyo account this deployment's VMs are metered to, and the user who
	// registered it. The managed service stamps both from the caller's
	// credential (the namespace's owning account) and ignores what the body
	// says; a self-hosted app-lb keeps what it was sent, usually nothing.
	AccountID string      `json:"account_id,omitempty"`
	UserID    string      `json:"user_id,omitempty"`
	Routes    []RouteRule `json:"routes"`
	// Return HTTP 503 for routed proxy traffic while admin management remains available.
	Maintenance *bool          `json:"maintenance,omitempty"`
	VM          *VmSpec        `json:"vm,omitempty"`
	Scaling     *ScalingPolicy `json:"scaling,omitempty"`
	Health      *HealthCheck   `json:"health,omitempty"`
	Upstreams   []string       `json:"upstreams,omitempty"`
	Discovery   *DiscoverySpec `json:"discovery,omitempty"`
	Build       *BuildSpec     `json:"build,omitempty"`
	Artifact    *ArtifactSpec  `json:"artifact,omitempty"`
	Site        *SiteSpec      `json:"site,omitempty"`
	Update      *UpdateSpec    `json:"update,omitempty"`
	Auth        *AuthGate      `json:"auth,omitempty"`
	Feed        *FeedSpec      `json:"feed,omitempty"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [DeploymentSpec.Extra].
func (v DeploymentSpec) MarshalJSON() ([]byte, error) {
	type plain DeploymentSpec
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [DeploymentSpec.Extra].
func (v *DeploymentSpec) UnmarshalJSON(data []byte) error {
	type plain DeploymentSpec
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// RouteRule is one way a request reaches a deployment: a host, a host suffix and/or a path prefix. Every field present must match.
type RouteRule struct {
	Host        string `json:"host,omitempty"`
	HostSuffix  string `json:"host_suffix,omitempty"`
	PathPrefix  string `json:"path_prefix,omitempty"`
	StripPrefix *bool  `json:"strip_prefix,omitempty"`
	// Answer matched requests with a redirect instead of serving them.
	Redirect *RouteRedirect `json:"redirect,omitempty"`
}

// RouteRedirect answers a matched request with an HTTP redirect instead of proxying it.
type RouteRedirect struct {
	// Absolute http(s) URL.
	To string `json:"to"`
	// 301 (default), 302, 303, 307 or 308.
	Status *int `json:"status,omitempty"`
	// Append the request path and query to `to`. Defaults to true.
	KeepPath *bool `json:"keep_path,omitempty"`
}

// ScalingPolicy bounds the autoscaler for a vm deployment. Absent fields take app-lb's defaults (min 0, max 5, warm 0, target 10, scale-to-zero 300 s, cold start 120 s, drain 30 s, boot 300 s, destroy).
type ScalingPolicy struct {
	MinReplicas          *int `json:"min_replicas,omitempty"`
	MaxReplicas          *int `json:"max_replicas,omitempty"`
	WarmPool             *int `json:"warm_pool,omitempty"`
	TargetConcurrency    *int `json:"target_concurrency,omitempty"`
	ScaleToZeroAfterSecs *int `json:"scale_to_zero_after_secs,omitempty"`
	ColdStartTimeoutSecs *int `json:"cold_start_timeout_secs,omitempty"`
	DrainTimeoutSecs     *int `json:"drain_timeout_secs,omitempty"`
	// `destroy` kills an idle VM; `retain` stops it, keeping its data disk.
	IdleAction      IdleAction `json:"idle_action,omitempty"`
	BootTimeoutSecs *int       `json:"boot_timeout_secs,omitempty"`
}

// ExpectedHeader is one exact response header a health probe must see.
type ExpectedHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HealthCheck says how a backend is probed. Path distinguishes absent (default `/`) from null (a bare TCP connect), which is why it is a [Nullable].
type HealthCheck struct {
	// Require 2xx and one exact response header; rollout requires x-heyo-revision.
	ExpectedHeader *ExpectedHeader `json:"expected_header,omitempty"`
	// `null` means a bare TCP connect rather than an HTTP probe.
	Path        Nullable[string] `json:"path,omitzero"`
	Port        *int             `json:"port,omitempty"`
	TimeoutSecs *int             `json:"timeout_secs,omitempty"`
}

// VmSpec describes the microVMs a vm deployment runs.
type VmSpec struct {
	Driver           Driver            `json:"driver"`
	Image            string            `json:"image,omitempty"`
	Port             int               `json:"port"`
	StartCommand     string            `json:"start_command,omitempty"`
	SizeClass        SizeClass         `json:"size_class,omitempty"`
	DiskSizeGB       *int              `json:"disk_size_gb,omitempty"`
	WorkingDirectory string            `json:"working_directory,omitempty"`
	EnvVars          map[string]string `json:"env_vars,omitempty"`
	SetupHooks       []string          `json:"setup_hooks,omitempty"`
	OpenPorts        []int             `json:"open_ports,omitempty"`
	// Directories every replica boots with, unpacked from tarballs in an artifact
	// store. Attached at boot, so editing this list recycles the pool.
	Mounts []MountSpec `json:"mounts,omitempty"`
	// A writable directory owned by the deployment rather than by any one VM:
	// captured when a replica retires (rollout, restart, eviction, idle
	// suspend) and seeded into its replacement, with every snapshot pushed to
	// `store`. Requires `scaling.max_replicas: 1`, `warm_pool: 0` and the
	// firecracker driver.
	Workspace *WorkspaceSpec `json:"workspace,omitempty"`
	// Secret values exported to every replica as environment variables,
	// resolved when the VM is created. The spec carries the reference and the
	// store the value — the reason `env_vars` is the wrong place for a token.
	// Resolved in the deployment's own namespace.
	EnvFrom []SecretEnv `json:"env_from,omitempty"`
	// A gzipped tarball every replica's `/workspace` is unpacked from at boot.
	// Name it by `archive_id` through the Heyo cloud API, which checks the
	// caller owns it and fills in `s3_key`; app-lb refuses the id alone.
	// Unlike `workspace` nothing is captured back, so it composes with a pool of
	// any size. Mutually exclusive with `workspace`.
	WorkspaceArchive *WorkspaceArchive `json:"workspace_archive,omitempty"`
	// Where the daemon may fetch `image` from when it does not hold it — a
	// public-image catalog URL with the size and digest the download is
	// verified against. Filled in by cloud from its catalog; leave unset when
	// posting to app-lb directly against a daemon that already has the image.
	ImageDownloadURL string `json:"image_download_url,omitempty"`
	ImageSizeBytes   *int64 `json:"image_size_bytes,omitempty"`
	ImageSHA256      string `json:"image_sha256,omitempty"`
	TTLSeconds       *int   `json:"ttl_seconds,omitempty"`
}

// WorkspaceArchive names a tarball every replica's `/workspace` is unpacked from at boot.
type WorkspaceArchive struct {
	// The cloud archive id (`ar-…`).
	ArchiveID string `json:"archive_id,omitempty"`
	// The object key the daemon fetches; resolved by cloud, never guessed.
	S3Key     string `json:"s3_key,omitempty"`
	SizeBytes *int64 `json:"size_bytes,omitempty"`
}

// WorkspaceSpec declares a deployment-owned writable directory that outlives its VMs.
type WorkspaceSpec struct {
	// Guest path. Defaults to `/workspace`, which `disk_size_gb` then sizes.
	Path string `json:"path,omitempty"`
	// `s3://bucket[/prefix]`, an `http(s)://` artifact store, or a local store root.
	Store string `json:"store"`
	// Tag the newest snapshot is published under (artifact stores). Defaults to `workspace-<id>`.
	Ref  string     `json:"ref,omitempty"`
	Auth *SecretRef `json:"auth,omitempty"`
}

// MountSpec is the contract's MountSpec.
//
// One directory handed to every replica of a managed deployment, unpacked from a
// tarball in an artifact store.
//
// The counterpart of `ArtifactSpec` for *data* rather than for the image: the
// rootfs decides what the guests run, this decides what they hold. A mount whose
// `digest` is absent has not been pulled on the target host, and a deployment
// with one has no pool at all — app-lb refuses to boot a guest that would be
// missing its data. `POST /deployments/:id/mounts/pull` is what fills it in, and
// registering or editing the deployment starts one of those automatically.
type MountSpec struct {
	// Absolute path inside the guest. Unique within the deployment, and never
	// nested inside another mount.
	Path string `json:"path"`
	// An `art serve` URL, or an absolute store root on the app-lb host.
	Store string `json:"store"`
	// A tag or a 64-hex digest naming a `tar`/`tar.gz` of the directory.
	Ref  string     `json:"ref"`
	Auth *SecretRef `json:"auth,omitempty"`
	// Leading path components to drop while unpacking, as
	// `tar --strip-components` does.
	StripComponents *int `json:"strip_components,omitempty"`
	// Whether the guest mounts it read-only. Defaults to `true`, and is **refused
	// on the `kvm` driver** when false: that driver syncs a writable mount back
	// into the host tree every other replica boots from.
	ReadOnly *bool `json:"read_only,omitempty"`
	// What `ref` resolved to on the last pull — which bytes the guests hold.
	Digest string `json:"digest,omitempty"`
}

// SecretRef names a value in the secret store; specs carry references, never values.
type SecretRef struct {
	Secret   string `json:"secret"`
	Key      string `json:"key,omitempty"`
	Username string `json:"username,omitempty"`
	// The namespace the secret lives in. Stamped by app-lb from the
	// deployment's own namespace on register/edit; a value sent by a client is
	// overwritten, so a spec can only ever name secrets behind its own wall.
	Namespace string `json:"namespace,omitempty"`
}

// BuildSpec is the contract's BuildSpec.
//
// Where a managed deployment's guest image is built from. Exactly one of `repo`
// and `store` is set — both name the Dockerfile, and a build with two recipes
// has no answer to which one produced the image.
type BuildSpec struct {
	// Git remote. Absent when the recipe comes from `store`.
	Repo string `json:"repo,omitempty"`
	// An artifact store holding a Dockerfile manifest (`heyvm.dockerfile.v1`):
	// an `art serve` URL, or an absolute store root on the app-lb host.
	Store string `json:"store,omitempty"`
	// Which version of the source to build: a branch, tag or commit for `repo`
	// (absent follows the remote's default branch), or the tag or digest of a
	// Dockerfile manifest for `store`, where it is required.
	Ref string `json:"ref,omitempty"`
	// Git source only — a Dockerfile manifest already names its own recipe.
	Dockerfile string `json:"dockerfile,omitempty"`
	// Git source only.
	Context     string `json:"context,omitempty"`
	ImageName   string `json:"image_name,omitempty"`
	ImageSizeMB *int   `json:"image_size_mb,omitempty"`
	// A git token for `repo`, or the store's API key for `store`.
	Auth *SecretRef `json:"auth,omitempty"`
}

// ArtifactSpec names a prebuilt image or site bundle in an artifact store.
type ArtifactSpec struct {
	Store     string     `json:"store"`
	Ref       string     `json:"ref"`
	Auth      *SecretRef `json:"auth,omitempty"`
	GrowGB    *int       `json:"grow_gb,omitempty"`
	ImageName string     `json:"image_name,omitempty"`
	// Site bundles only: leading path components to drop while unpacking.
	StripComponents *int `json:"strip_components,omitempty"`
}

// SiteSpec describes a static site served from a directory on the LB host.
type SiteSpec struct {
	Root         string `json:"root"`
	Index        string `json:"index,omitempty"`
	NotFound     string `json:"not_found,omitempty"`
	SPA          *bool  `json:"spa,omitempty"`
	CacheControl string `json:"cache_control,omitempty"`
}

// SecretEnv exports one secret value to a replica as an environment variable.
type SecretEnv struct {
	Secret string `json:"secret"`
	Key    string `json:"key,omitempty"`
	As     string `json:"as,omitempty"`
	// Stamped from the deployment's namespace, as on [SecretRef].
	Namespace string `json:"namespace,omitempty"`
}

// UpdateSpec describes a host-update job: commands run in a directory on the LB host.
type UpdateSpec struct {
	WorkingDir        string            `json:"working_dir"`
	Commands          []string          `json:"commands"`
	Env               map[string]string `json:"env,omitempty"`
	EnvFrom           []SecretEnv       `json:"env_from,omitempty"`
	Auth              *SecretRef        `json:"auth,omitempty"`
	TimeoutSecs       *int              `json:"timeout_secs,omitempty"`
	VerifyTimeoutSecs *int              `json:"verify_timeout_secs,omitempty"`
}

// DiscoverySpec is the contract's DiscoverySpec.
//
// Orchestrator-owned endpoint membership for a static deployment.
type DiscoverySpec struct {
	ServiceID string `json:"service_id"`
}

// FeedSpec is the contract's FeedSpec.
//
// A deployment's opt-in hooks into its namespace's event feed. Everything
// defaults to off — a deployment publishes nothing its spec did not ask for.
type FeedSpec struct {
	// Publish lifecycle events (registered, updated, removed).
	Announce *bool `json:"announce,omitempty"`
	// Publish operational issues (boot failures, cold-start timeouts, …).
	Issues *bool `json:"issues,omitempty"`
	// Serve the namespace's feed as RSS at this path on this deployment's own
	// routes — the only way a feed becomes reachable outside the admin listener.
	// Runs behind the deployment's `auth` gate, if it has one.
	Expose string `json:"expose,omitempty"`
}

// IdleAction says what happens to a VM that has been idle for scale_to_zero_after_secs.
type IdleAction string

// The IdleAction values the contract names.
const (
	IdleDestroy IdleAction = "destroy"
	IdleRetain  IdleAction = "retain"
)

// Driver is the VM driver. It is a plain string type so that any value decodes; the constants list the ones the contract names plus berth's own.
type Driver string

// The Driver values the contract names.
const (
	DriverFirecracker Driver = "firecracker"
	DriverKVM         Driver = "kvm"
	DriverLibvirt     Driver = "libvirt"

	// DriverProcess and DriverContainer are berth's own drivers, which the
	// contract does not name yet: a replica is a host process or a
	// container rather than a microVM.
	DriverProcess   Driver = "process"
	DriverContainer Driver = "container"
)

// SizeClass is a VM size preset.
type SizeClass string

// The SizeClass values the contract names.
const (
	SizeMicro  SizeClass = "micro"
	SizeMini   SizeClass = "mini"
	SizeSmall  SizeClass = "small"
	SizeMedium SizeClass = "medium"
	SizeLarge  SizeClass = "large"
	SizeXLarge SizeClass = "xlarge"
)
