package apitype

import "encoding/json"

// DeploymentStatus is a deployment's spec together with its live state (`GET /deployments/:id`).
type DeploymentStatus struct {
	// Opaque persisted token for conditional service rollout; absent on older servers.
	RolloutRevision string         `json:"rollout_revision,omitempty"`
	Spec            DeploymentSpec `json:"spec"`
	Kind            DeploymentKind `json:"kind"`
	DesiredReplicas int            `json:"desired_replicas"`
	Ready           int            `json:"ready"`
	Pending         int            `json:"pending"`
	TotalInFlight   int            `json:"total_in_flight"`
	VMs             []VmStatus     `json:"vms"`
	// Present when the spec declares `vm.workspace`.
	Workspace *WorkspaceStatus `json:"workspace,omitempty"`
	// Present for a site: whether its root on the LB host can serve.
	Site *SiteRootStatus `json:"site,omitempty"`
}

// VmStatus is one VM backing a deployment, as [DeploymentStatus] reports it.
type VmStatus struct {
	SandboxID string `json:"sandbox_id"`
	Addr      string `json:"addr"`
	InFlight  int    `json:"in_flight"`
	Healthy   bool   `json:"healthy"`
	Draining  bool   `json:"draining"`
}

// WorkspaceStatus reports where a deployment's workspace snapshot stands.
type WorkspaceStatus struct {
	Path  string `json:"path"`
	Store string `json:"store"`
	// The snapshot the pool runs from; `null` is the empty workspace.
	Digest       *string `json:"digest"`
	CapturedAt   *int64  `json:"captured_at"`
	CapturedFrom *string `json:"captured_from"`
	Files        int     `json:"files"`
	Bytes        int64   `json:"bytes"`
	// The snapshot the store is known to hold.
	Pushed      *string        `json:"pushed"`
	PushedAt    *int64         `json:"pushed_at"`
	PushPending bool           `json:"push_pending"`
	Phase       WorkspacePhase `json:"phase"`
	// Why no replica can be created right now, when none can.
	Blocked   string             `json:"blocked,omitempty"`
	Pending   []WorkspacePending `json:"pending,omitempty"`
	LastError string             `json:"last_error,omitempty"`
}

// WorkspacePending is a retiring replica whose workspace still has to be captured before it is killed or suspended.
type WorkspacePending struct {
	SandboxID string       `json:"sandbox_id"`
	Then      RetireAction `json:"then"`
	QueuedAt  int64        `json:"queued_at"`
	Attempts  int          `json:"attempts"`
}

// SiteRootStatus is the contract's SiteRootStatus.
//
// A site's root as the LB host sees it.
type SiteRootStatus struct {
	Root         string        `json:"root"`
	Status       SiteRootState `json:"status"`
	IndexPresent *bool         `json:"index_present,omitempty"`
	// Why it cannot serve, and how to fill it.
	Hint string `json:"hint,omitempty"`
}

// UpstreamTrafficStatus reports whether a static upstream is accepting, draining or drained (`PUT|DELETE …/upstreams/:upstream/drain`).
type UpstreamTrafficStatus struct {
	DeploymentID string       `json:"deployment_id"`
	Upstream     string       `json:"upstream"`
	State        TrafficState `json:"state"`
	Healthy      bool         `json:"healthy"`
	InFlight     int          `json:"in_flight"`
	Reason       *string      `json:"reason"`
	StartedAt    *int64       `json:"started_at"`
}

// ExecOutput is the reply to `POST /deployments/:id/exec`. A non-zero exit code is still a 200.
type ExecOutput struct {
	SandboxID string `json:"sandbox_id"`
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	// stdout and stderr interleaved as the guest wrote them.
	Output string `json:"output"`
}

// EvictOutcome is the reply to `DELETE /deployments/:id/vms/:sandbox_id`.
type EvictOutcome struct {
	SandboxID string `json:"sandbox_id"`
	// `killed` (immediate) or `draining` (still serving what it has).
	Outcome EvictResult `json:"outcome"`
}

// RolloutOperation is the contract's RolloutOperation.
//
// `POST /deployments/:id/rollouts` and `GET …/rollouts/:operation`.
type RolloutOperation struct {
	OperationID string `json:"operation_id"`
	Deployment  string `json:"deployment"`
	// The `rollout_revision` the operation was admitted against.
	SourceRevision   string `json:"source_revision"`
	TargetSpecSHA256 string `json:"target_spec_sha256"`
	// `running`, `succeeded`, `failed` or `reconciliation_required`.
	Status            string  `json:"status"`
	Phase             string  `json:"phase"`
	ReadinessVerified bool    `json:"readiness_verified"`
	PreviousStopped   bool    `json:"previous_stopped"`
	Error             *string `json:"error,omitempty"`
	PreparationStage  *string `json:"preparation_stage,omitempty"`
	// Present once a failed rollout's candidates have been reclaimed.
	FailureSettlement json.RawMessage `json:"failure_settlement,omitempty"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [RolloutOperation.Extra].
func (v RolloutOperation) MarshalJSON() ([]byte, error) {
	type plain RolloutOperation
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [RolloutOperation.Extra].
func (v *RolloutOperation) UnmarshalJSON(data []byte) error {
	type plain RolloutOperation
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// DiscoveryStatus is the contract's DiscoveryStatus.
//
// `GET /deployments/:id/discovery-status`. camelCase on the wire.
type DiscoveryStatus struct {
	ServiceID string  `json:"serviceId"`
	SourceURL *string `json:"sourceUrl,omitempty"`
	Version   *int    `json:"version,omitempty"`
	// The regional discovery state; its shape belongs to the regional protocol.
	Regional  json.RawMessage     `json:"regional,omitempty"`
	Upstreams []DiscoveryUpstream `json:"upstreams"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [DiscoveryStatus.Extra].
func (v DiscoveryStatus) MarshalJSON() ([]byte, error) {
	type plain DiscoveryStatus
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [DiscoveryStatus.Extra].
func (v *DiscoveryStatus) UnmarshalJSON(data []byte) error {
	type plain DiscoveryStatus
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// DiscoveryUpstream is one discovered endpoint of a discovery-backed deployment.
type DiscoveryUpstream struct {
	Peer     string `json:"peer"`
	Draining bool   `json:"draining"`
	InFlight int    `json:"inFlight"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [DiscoveryUpstream.Extra].
func (v DiscoveryUpstream) MarshalJSON() ([]byte, error) {
	type plain DiscoveryUpstream
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [DiscoveryUpstream.Extra].
func (v *DiscoveryUpstream) UnmarshalJSON(data []byte) error {
	type plain DiscoveryUpstream
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// Ingress is the contract's Ingress.
//
// `GET /ingress` — where DNS should point a deployment's hostname. Empty until `APP_LB_PUBLIC_IPS` is set.
type Ingress struct {
	IPv4 []string `json:"ipv4"`
	IPv6 []string `json:"ipv6"`
}

// WorkspacePhase is what the workspace machinery is doing.
type WorkspacePhase string

// The WorkspacePhase values the contract names.
const (
	WorkspaceIdle      WorkspacePhase = "idle"
	WorkspaceRestoring WorkspacePhase = "restoring"
	WorkspaceCapturing WorkspacePhase = "capturing"
	WorkspacePushing   WorkspacePhase = "pushing"
	WorkspaceBlocked   WorkspacePhase = "blocked"
)

// RetireAction is what happens to a retiring replica once its workspace is captured.
type RetireAction string

// The RetireAction values the contract names.
const (
	RetireKill    RetireAction = "kill"
	RetireSuspend RetireAction = "suspend"
)

// SiteRootState says whether a site's root can serve.
type SiteRootState string

// The SiteRootState values the contract names.
const (
	SiteOK            SiteRootState = "ok"
	SiteMissing       SiteRootState = "missing"
	SiteNotADirectory SiteRootState = "not_a_directory"
	SiteUnreadable    SiteRootState = "unreadable"
	SiteEmpty         SiteRootState = "empty"
)

// TrafficState is a static upstream's drain state.
type TrafficState string

// The TrafficState values the contract names.
const (
	TrafficAccepting TrafficState = "accepting"
	TrafficDraining  TrafficState = "draining"
	TrafficDrained   TrafficState = "drained"
)

// EvictResult says whether an evicted VM was killed or is draining.
type EvictResult string

// The EvictResult values the contract names.
const (
	EvictKilled   EvictResult = "killed"
	EvictDraining EvictResult = "draining"
)
