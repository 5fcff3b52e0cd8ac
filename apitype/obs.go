package apitype

import "encoding/json"

// ObsFreshness is the contract's ObsFreshness.
//
// Whether recently ingested telemetry is queryable yet.
type ObsFreshness struct {
	BufferedRows int `json:"buffered_rows"`
	FlushSecs    int `json:"flush_secs"`
	Dropped      int `json:"dropped"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [ObsFreshness.Extra].
func (v ObsFreshness) MarshalJSON() ([]byte, error) {
	type plain ObsFreshness
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [ObsFreshness.Extra].
func (v *ObsFreshness) UnmarshalJSON(data []byte) error {
	type plain ObsFreshness
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// ObsMetricBucket is the contract's ObsMetricBucket. Its measures are
// float64 because a bucket aggregates samples (an average of ready VMs can be
// 1.5); T is an integer, epoch milliseconds.
//
// One time bucket. A `null` measure means nothing was sampled, not zero.
type ObsMetricBucket struct {
	// Bucket start, epoch milliseconds UTC.
	T              int64    `json:"t"`
	RequestsPerSec *float64 `json:"requests_per_sec,omitempty"`
	ErrorsPerSec   *float64 `json:"errors_per_sec,omitempty"`
	MeanLatencyMs  *float64 `json:"mean_latency_ms,omitempty"`
	P50Ms          *float64 `json:"p50_ms,omitempty"`
	P90Ms          *float64 `json:"p90_ms,omitempty"`
	P99Ms          *float64 `json:"p99_ms,omitempty"`
	CPUPercent     *float64 `json:"cpu_percent,omitempty"`
	MemoryBytes    *float64 `json:"memory_bytes,omitempty"`
	InFlight       *float64 `json:"in_flight,omitempty"`
	Ready          *float64 `json:"ready,omitempty"`
	Pending        *float64 `json:"pending,omitempty"`
	Draining       *float64 `json:"draining,omitempty"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [ObsMetricBucket.Extra].
func (v ObsMetricBucket) MarshalJSON() ([]byte, error) {
	type plain ObsMetricBucket
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [ObsMetricBucket.Extra].
func (v *ObsMetricBucket) UnmarshalJSON(data []byte) error {
	type plain ObsMetricBucket
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// ObsLogBucket counts log lines in one time bucket (T is epoch milliseconds UTC).
type ObsLogBucket struct {
	T      int64 `json:"t"`
	Lines  int   `json:"lines"`
	Errors int   `json:"errors"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [ObsLogBucket.Extra].
func (v ObsLogBucket) MarshalJSON() ([]byte, error) {
	type plain ObsLogBucket
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [ObsLogBucket.Extra].
func (v *ObsLogBucket) UnmarshalJSON(data []byte) error {
	type plain ObsLogBucket
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// ObsFleetRow is one deployment's telemetry in [ObsFleet].
type ObsFleetRow struct {
	ID         string            `json:"id"`
	Buckets    []ObsMetricBucket `json:"buckets"`
	LogBuckets []ObsLogBucket    `json:"log_buckets"`
	Latest     ObsMetricBucket   `json:"latest"`
	LogLines   int               `json:"log_lines"`
	ErrorLogs  int               `json:"error_logs"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [ObsFleetRow.Extra].
func (v ObsFleetRow) MarshalJSON() ([]byte, error) {
	type plain ObsFleetRow
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [ObsFleetRow.Extra].
func (v *ObsFleetRow) UnmarshalJSON(data []byte) error {
	type plain ObsFleetRow
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// ObsFleet is the contract's ObsFleet.
//
// `…/plugins/obs/api/fleet` — a namespace's telemetry overview.
type ObsFleet struct {
	GeneratedAtMs int64        `json:"generated_at_ms"`
	FromMs        int64        `json:"from_ms"`
	ToMs          int64        `json:"to_ms"`
	StepSecs      int          `json:"step_secs"`
	Window        string       `json:"window"`
	Windows       []string     `json:"windows"`
	RetainDays    int          `json:"retain_days"`
	Freshness     ObsFreshness `json:"freshness"`
	// Operator view only; absent in a namespace's.
	Host        []ObsMetricBucket `json:"host,omitempty"`
	Deployments []ObsFleetRow     `json:"deployments"`
	// Operator view only.
	HostSandboxes json.RawMessage `json:"host_sandboxes,omitempty"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [ObsFleet.Extra].
func (v ObsFleet) MarshalJSON() ([]byte, error) {
	type plain ObsFleet
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [ObsFleet.Extra].
func (v *ObsFleet) UnmarshalJSON(data []byte) error {
	type plain ObsFleet
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// ObsDeployment is the contract's ObsDeployment.
//
// `…/plugins/obs/api/deployments/:id`.
type ObsDeployment struct {
	ID            string            `json:"id"`
	GeneratedAtMs int64             `json:"generated_at_ms"`
	FromMs        int64             `json:"from_ms"`
	ToMs          int64             `json:"to_ms"`
	StepSecs      int               `json:"step_secs"`
	Window        string            `json:"window"`
	Windows       []string          `json:"windows"`
	RetainDays    int               `json:"retain_days"`
	Freshness     ObsFreshness      `json:"freshness"`
	Buckets       []ObsMetricBucket `json:"buckets"`
	LogBuckets    []ObsLogBucket    `json:"log_buckets"`
	Latest        ObsMetricBucket   `json:"latest"`
	LogLines      int               `json:"log_lines"`
	ErrorLogs     int               `json:"error_logs"`
	// Backends that logged in the window.
	Backends []string `json:"backends"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [ObsDeployment.Extra].
func (v ObsDeployment) MarshalJSON() ([]byte, error) {
	type plain ObsDeployment
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [ObsDeployment.Extra].
func (v *ObsDeployment) UnmarshalJSON(data []byte) error {
	type plain ObsDeployment
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// ObsLogRow is the contract's ObsLogRow.
//
// One stored log line.
type ObsLogRow struct {
	// Epoch milliseconds UTC.
	Ts    int64   `json:"ts"`
	Level *string `json:"level,omitempty"`
	// `stdout`, `stderr`, `console`, `access`, `security`, …
	Source  string  `json:"source"`
	Message string  `json:"message"`
	Backend *string `json:"backend,omitempty"`
	Host    *string `json:"host,omitempty"`
	// The structured payload, still a JSON string.
	Fields *string `json:"fields,omitempty"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [ObsLogRow.Extra].
func (v ObsLogRow) MarshalJSON() ([]byte, error) {
	type plain ObsLogRow
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [ObsLogRow.Extra].
func (v *ObsLogRow) UnmarshalJSON(data []byte) error {
	type plain ObsLogRow
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// ObsLogs is the contract's ObsLogs.
//
// `…/plugins/obs/api/deployments/:id/logs` — one page, newest first.
type ObsLogs struct {
	ID     string      `json:"id"`
	FromMs int64       `json:"from_ms"`
	ToMs   int64       `json:"to_ms"`
	Rows   []ObsLogRow `json:"rows"`
	// Pass back as `before` for the next page; `null` at the end. Inclusive, so
	// the next page may repeat lines from the same millisecond.
	NextBeforeMs *int64 `json:"next_before_ms"`
	Limit        int    `json:"limit"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [ObsLogs.Extra].
func (v ObsLogs) MarshalJSON() ([]byte, error) {
	type plain ObsLogs
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [ObsLogs.Extra].
func (v *ObsLogs) UnmarshalJSON(data []byte) error {
	type plain ObsLogs
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}

// ObsAlert is the contract's ObsAlert.
//
// An alert rule, from `…/plugins/obs/api/alerts`.
type ObsAlert struct {
	ID         string  `json:"id"`
	Deployment string  `json:"deployment"`
	Namespace  *string `json:"namespace,omitempty"`
	// `errors` — errors over the trailing minute.
	Metric     string  `json:"metric"`
	Threshold  float64 `json:"threshold"`
	WebhookURL string  `json:"webhook_url"`

	// Extra holds keys the contract does not name, kept so they survive a
	// decode and re-encode unchanged.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes the known fields followed by [ObsAlert.Extra].
func (v ObsAlert) MarshalJSON() ([]byte, error) {
	type plain ObsAlert
	return marshalExtra(plain(v), v.Extra)
}

// UnmarshalJSON decodes the known fields and keeps the rest in [ObsAlert.Extra].
func (v *ObsAlert) UnmarshalJSON(data []byte) error {
	type plain ObsAlert
	return unmarshalExtra(data, (*plain)(v), &v.Extra)
}
