package apitype

// JobKind says what a background job does.
type JobKind string

// The JobKind values the contract names.
const (
	JobImageBuild   JobKind = "image-build"
	JobArtifactPull JobKind = "artifact-pull"
	JobMountPull    JobKind = "mount-pull"
	JobHostUpdate   JobKind = "host-update"
)

// JobStatus is where a background job stands.
type JobStatus string

// The JobStatus values the contract names.
const (
	JobRunning   JobStatus = "running"
	JobSucceeded JobStatus = "succeeded"
	JobFailed    JobStatus = "failed"
)

// JobRecord is one background job (`GET /jobs/:id`). Fields that do not apply to the kind are omitted, not null.
type JobRecord struct {
	ID         string    `json:"id"`
	Deployment string    `json:"deployment"`
	Kind       JobKind   `json:"kind"`
	Status     JobStatus `json:"status"`
	StartedAt  int64     `json:"started_at"`
	FinishedAt *int64    `json:"finished_at,omitempty"`
	Error      *string   `json:"error,omitempty"`
	Log        []string  `json:"log"`
	Repo       string    `json:"repo,omitempty"`
	Ref        string    `json:"ref,omitempty"`
	Commit     string    `json:"commit,omitempty"`
	Dockerfile string    `json:"dockerfile,omitempty"`
	Image      string    `json:"image,omitempty"`
	RolledOut  *bool     `json:"rolled_out,omitempty"`
	Store      string    `json:"store,omitempty"`
	Artifact   string    `json:"artifact,omitempty"`
	Digest     string    `json:"digest,omitempty"`
	Bytes      *int64    `json:"bytes,omitempty"`
	Reused     *bool     `json:"reused,omitempty"`
	// Site pulls only: the directory the bundle was unpacked into.
	SiteRoot string `json:"site_root,omitempty"`
	// Site pulls only: regular files unpacked.
	Files *int `json:"files,omitempty"`
	// Mount pulls only: one entry per guest mount, in spec order. A mount pull
	// covers every mount on the deployment, so the single `store`/`digest` fields
	// above stay empty on this kind.
	Mounts        []MountOutcome `json:"mounts,omitempty"`
	WorkingDir    string         `json:"working_dir,omitempty"`
	CommandsTotal *int           `json:"commands_total,omitempty"`
	CommandsRun   *int           `json:"commands_run,omitempty"`
	Verified      *bool          `json:"verified,omitempty"`
}

// MountOutcome is the contract's MountOutcome.
//
// What one guest mount's pull did.
type MountOutcome struct {
	// The guest path, which identifies the mount within the deployment.
	Path   string `json:"path"`
	Store  string `json:"store"`
	Ref    string `json:"ref"`
	Digest string `json:"digest,omitempty"`
	// The tree on the app-lb host the guests mount.
	Tree string `json:"tree,omitempty"`
	// Regular files unpacked. Absent on a reuse, where nothing was unpacked.
	Files *int `json:"files,omitempty"`
	// Bytes transferred. `0` with `reused` means the tree was already there.
	Bytes *int64 `json:"bytes,omitempty"`
	// Uncompressed size of the tree — what the mount costs the host's disk.
	Unpacked *int64 `json:"unpacked,omitempty"`
	Reused   *bool  `json:"reused,omitempty"`
	// Whether this mount's digest changed, which is what recycles the pool.
	Changed *bool `json:"changed,omitempty"`
}
