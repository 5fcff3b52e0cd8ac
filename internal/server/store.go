package server

import (
	"context"

	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/disks"
	"github.com/berth-dev/berth/internal/feed"
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/grant"
	"github.com/berth-dev/berth/internal/guard"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/jobs/artifactpull"
	"github.com/berth-dev/berth/internal/jobs/mountpull"
	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/notify"
	"github.com/berth-dev/berth/internal/obs"
	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/ratelimit"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/rollout"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/sessions"
	"github.com/berth-dev/berth/internal/siem"
	"github.com/berth-dev/berth/internal/store"
)

// Store is what a store backend must offer to run berth: every method the
// server calls itself (serverRecords) and every persistence interface of
// the packages it constructs and hands the store to. The SQLite
// *store.Store is one; *etcdstore.Store is to become one. Its methods
// return the record types of package store and wrap store.ErrNotFound
// for a missing record, as the SQLite store does.
//
// Optional interfaces a consumer checks for with a type assertion are
// listed too (image.PullCatalog, image.ConfigCatalog): a backend without
// them would run with less (no pulled layers' bookkeeping, no built
// images' config), so a backend must offer them to behave the same.
//
// Closing is not part of it: a store the caller passes in Options.Store
// stays the caller's to close; the one New opens in the data directory
// is closed by Run (or by New when it fails).
type Store interface {
	serverRecords

	auth.TokenStore      // app tokens (openAccess)
	secrets.DB           // sealed secrets (openAccess)
	guard.Store          // guard rules (openSecurity)
	siem.Store           // security alerts (openSecurity)
	notify.DB            // alert webhooks
	obs.DB               // telemetry alert rules (openTelemetry)
	ratelimit.Store      // deployments' rate limits
	image.Catalog        // image metadata (openImages)
	image.PullCatalog    // pulled images' layers; image asserts it
	image.ConfigCatalog  // built images' config; image asserts it
	feed.Store           // the namespaces' event feeds
	rollout.Store        // rollout operations
	fleet.ReplicaRecords // replicas' records
	computer.Store       // Computers
	disks.Records        // VM disks' archives (openDisks)
	grant.Store          // Computer grants (openGrants)
	namespaces.DB        // namespaces and their domains, providers
	sessions.Store       // sign-in sessions (openGates)
	jobs.Store           // jobs (openJobs)
	jobs.WorkflowStore   // workflows (openJobs)
	registry.Store       // deployments and upstream drains
	plugin.Records       // plugins' records (openPlugins)
	mountpull.Records    // mounts' pulls (mountPullKind)
	artifactpull.Records // artifacts' pulls (artifactPullKind)
}

// serverRecords are the store methods package server calls itself.
type serverRecords interface {
	// Registry credentials: registryAuth and the admin API's
	// registry-credentials routes (registryCreds).
	RegistryCredential(ctx context.Context, namespace, host string) (store.RegistryCredential, error)
	RegistryCredentials(ctx context.Context, namespace string) ([]store.RegistryCredential, error)
	PutRegistryCredential(ctx context.Context, c store.RegistryCredential) error
	DeleteRegistryCredential(ctx context.Context, namespace, host string) error
	// ComputerPortsSigningInWith is the admin API's PortSignIns.
	ComputerPortsSigningInWith(ctx context.Context, ns, name string) ([]string, error)
	// MountPulls and ArtifactPull: what a deployment's mounts and
	// artifact resolved to (mountPull, siteRoot).
	MountPulls(ctx context.Context, deployment string) ([]store.MountPull, error)
	ArtifactPull(ctx context.Context, deployment string) (store.MountPull, bool, error)
	// Workspace and PutWorkspace: durable workspaces' records
	// (workspaceRecords).
	Workspace(ctx context.Context, deployment string) (store.Workspace, bool, error)
	PutWorkspace(ctx context.Context, w store.Workspace) error
}

var _ Store = (*store.Store)(nil)

// groupCommitter is the SQLite store's group commit (one fsync for the
// writes that arrive together), which no other backend has: it is not
// part of Store, and who uses it (BenchmarkExecParallel) checks for it
// with a type assertion.
type groupCommitter interface {
	// SetGroupCommit turns grouping on (the default) or off.
	SetGroupCommit(on bool)
	// Commits counts the commits so far.
	Commits() int64
}

var _ groupCommitter = (*store.Store)(nil)
