package apitype

// MetricsResponse is `GET /metrics`: the host, the fleet and one [DeploymentView] per matched deployment.
type MetricsResponse struct {
	GeneratedAt int64             `json:"generated_at"`
	UptimeSecs  int               `json:"uptime_secs"`
	Host        HostUsage         `json:"host"`
	Fleet       FleetPool         `json:"fleet"`
	Global      DeploymentMetrics `json:"global"`
	Obs         *ObsStats         `json:"obs,omitempty"`
	// Absent when `APP_LB_SIEM=0`.
	Security    *SecuritySummary `json:"security,omitempty"`
	Daemon      DaemonSnapshot   `json:"daemon"`
	Deployments []DeploymentView `json:"deployments"`
	// How many matched before `limit`/`offset`, so you can page.
	Matched            int `json:"matched"`
	TrackedDeployments int `json:"tracked_deployments"`
	// Sandboxes on the host that no deployment owns — created through the heyvm
	// CLI, the cloud API or the desktop rather than by app-lb. They share the
	// host with every pool. Absent from an older app-lb, empty under
	// `summary=true`, and narrowed to the caller's own accounts for a namespace
	// caller.
	HostSandboxes []HostSandboxView `json:"host_sandboxes,omitempty"`
}

// StatusCounts counts responses by status class.
type StatusCounts struct {
	Total  int `json:"total"`
	C2xx   int `json:"c2xx"`
	C3xx   int `json:"c3xx"`
	C4xx   int `json:"c4xx"`
	C5xx   int `json:"c5xx"`
	Errors int `json:"errors"`
}

// Bucket is one histogram bucket: the count of observations at or below Le.
type Bucket struct {
	// `null` is the `+Inf` bucket.
	Le    *float64 `json:"le"`
	Count int      `json:"count"`
}

// Histogram summarises a distribution; the unit is in the field name that holds it (latency_ms, cold_start_s).
type Histogram struct {
	Count   int      `json:"count"`
	Sum     float64  `json:"sum"`
	Mean    float64  `json:"mean"`
	P50     float64  `json:"p50"`
	P90     float64  `json:"p90"`
	P99     float64  `json:"p99"`
	Buckets []Bucket `json:"buckets"`
}

// AutoscaleCounts counts autoscaler events since app-lb started.
type AutoscaleCounts struct {
	VMsCreated        int `json:"vms_created"`
	VMsDrained        int `json:"vms_drained"`
	VMsReaped         int `json:"vms_reaped"`
	ScaleUpEvents     int `json:"scale_up_events"`
	ScaleDownEvents   int `json:"scale_down_events"`
	ColdStartWaits    int `json:"cold_start_waits"`
	ColdStartHits     int `json:"cold_start_hits"`
	ColdStartTimeouts int `json:"cold_start_timeouts"`
	BootTimeouts      int `json:"boot_timeouts"`
	// Creates the daemon refused or that failed client-side, since app-lb started.
	CreateFailures int `json:"create_failures"`
	// What the most recent failed create said; absent until one has failed.
	LastCreateError string `json:"last_create_error,omitempty"`
}

// DeploymentMetrics is the request, latency, cold-start and autoscale figures for one deployment or the whole fleet.
type DeploymentMetrics struct {
	Requests   StatusCounts    `json:"requests"`
	LatencyMs  Histogram       `json:"latency_ms"`
	ColdStartS Histogram       `json:"cold_start_s"`
	Autoscale  AutoscaleCounts `json:"autoscale"`
}

// HostUsage is the LB host's CPU and memory, as last sampled.
type HostUsage struct {
	Available        bool    `json:"available"`
	CPUCount         int     `json:"cpu_count"`
	CPUPercent       float64 `json:"cpu_percent"`
	MemoryTotalBytes int64   `json:"memory_total_bytes"`
	MemoryUsedBytes  int64   `json:"memory_used_bytes"`
	SampledAtMs      int64   `json:"sampled_at_ms"`
}

// FleetPool rolls up every visible deployment's pool.
type FleetPool struct {
	Deployments   int `json:"deployments"`
	Ready         int `json:"ready"`
	Draining      int `json:"draining"`
	Pending       int `json:"pending"`
	TotalInFlight int `json:"total_in_flight"`
}

// PoolStatus is one deployment's pool as the autoscaler sees it.
type PoolStatus struct {
	DesiredReplicas   int `json:"desired_replicas"`
	Ready             int `json:"ready"`
	Draining          int `json:"draining"`
	Pending           int `json:"pending"`
	TotalInFlight     int `json:"total_in_flight"`
	TargetConcurrency int `json:"target_concurrency"`
	MinReplicas       int `json:"min_replicas"`
	MaxReplicas       int `json:"max_replicas"`
	WarmPool          int `json:"warm_pool"`
	// `null` means no capacity to divide by — not zero load.
	Utilization          *float64 `json:"utilization"`
	CPUPercent           *float64 `json:"cpu_percent"`
	MemoryBytes          *int64   `json:"memory_bytes"`
	BootTimeoutSecs      int      `json:"boot_timeout_secs"`
	ColdStartTimeoutSecs int      `json:"cold_start_timeout_secs"`
	// Failed boots in a row since the last VM that passed its health check.
	BootFailures int `json:"boot_failures"`
	// Seconds until the autoscaler may create a VM again while the boot-failure
	// backoff holds it off; `null` when it may create one now. Any spec write
	// clears it.
	BootBackoffSecs *int `json:"boot_backoff_secs"`
}

// VmView is one VM in a [DeploymentView], with its resource use.
type VmView struct {
	SandboxID   string   `json:"sandbox_id"`
	Addr        string   `json:"addr"`
	InFlight    int      `json:"in_flight"`
	Healthy     bool     `json:"healthy"`
	Draining    bool     `json:"draining"`
	UptimeSecs  int      `json:"uptime_secs"`
	CPUPercent  *float64 `json:"cpu_percent"`
	MemoryBytes *int64   `json:"memory_bytes"`
}

// PendingVmView is a VM that has been created but has not yet passed its health check.
type PendingVmView struct {
	SandboxID string `json:"sandbox_id"`
	AgeSecs   int    `json:"age_secs"`
	Status    string `json:"status,omitempty"`
}

// DeploymentView is one deployment's row in [MetricsResponse].
type DeploymentView struct {
	ID string `json:"id"`
	// Absent for the default namespace.
	Namespace string `json:"namespace,omitempty"`
	// The account this deployment's VMs are metered to, when app-lb knows it.
	AccountID string         `json:"account_id,omitempty"`
	Kind      DeploymentKind `json:"kind"`
	Upstreams []string       `json:"upstreams"`
	// Whether at least one data-plane route points at this deployment.
	Routed     bool              `json:"routed"`
	Hosts      []string          `json:"hosts"`
	URLs       []string          `json:"urls,omitempty"`
	SiteRoot   string            `json:"site_root,omitempty"`
	SiteSPA    *bool             `json:"site_spa,omitempty"`
	JobKind    JobAction         `json:"job_kind,omitempty"`
	Pool       PoolStatus        `json:"pool"`
	VMs        []VmView          `json:"vms"`
	PendingVMs []PendingVmView   `json:"pending_vms"`
	Metrics    DeploymentMetrics `json:"metrics"`
}

// ObsStats reports the log shipper's queue.
type ObsStats struct {
	Queued  int  `json:"queued"`
	Dropped int  `json:"dropped"`
	Shipped int  `json:"shipped"`
	Failed  int  `json:"failed"`
	Healthy bool `json:"healthy"`
}

// DaemonSnapshot is the contract's DaemonSnapshot.
//
// Whether app-lb can reach the VM daemon. When it cannot, the autoscaler
// abandons every tick, so nothing scales or boots and every other number in
// the metrics response is frozen at whatever it was when the daemon went away.
type DaemonSnapshot struct {
	Reachable bool `json:"reachable"`
	// What the last failed listing said; absent while it is reachable.
	LastError string `json:"last_error,omitempty"`
}

// HostSandboxView is the contract's HostSandboxView.
//
// One sandbox on the host that app-lb reports but does not manage.
type HostSandboxView struct {
	SandboxID string `json:"sandbox_id"`
	Name      string `json:"name"`
	// The daemon's status string: `running`, `stopped`, `provisioning`, ….
	Status      string   `json:"status"`
	Image       string   `json:"image"`
	SizeClass   string   `json:"size_class,omitempty"`
	GuestIP     string   `json:"guest_ip,omitempty"`
	UptimeSecs  int      `json:"uptime_secs"`
	CPUPercent  *float64 `json:"cpu_percent"`
	MemoryBytes *int64   `json:"memory_bytes"`
	// The heyo account the sandbox is billed to, when the daemon knows.
	AccountID string `json:"account_id,omitempty"`
	// RFC 3339, when the daemon reports it.
	CreatedAt string `json:"created_at,omitempty"`
}

// JobAction says which job button applies to a deployment in the dashboard.
type JobAction string

// The JobAction values the contract names.
const (
	JobActionBuild  JobAction = "build"
	JobActionPull   JobAction = "pull"
	JobActionUpdate JobAction = "update"
)
