package apitype

import "encoding/json"

// SecurityResponse is the contract's SecurityResponse.
//
// `GET /security`.
type SecurityResponse struct {
	GeneratedAt int64 `json:"generated_at"`
	// `false` with an empty list when `APP_LB_SIEM=0` — not a 404.
	Enabled bool `json:"enabled"`
	// Seconds each rate-based rule counts over.
	WindowSecs int `json:"window_secs"`
	// Newest first.
	Alerts []SecurityAlert `json:"alerts"`
	Totals SeverityTotals  `json:"totals"`
	// The block rules in force. Served here so a console renders findings and
	// interventions from one fetch. Narrowed for a deployment-scoped token.
	Rules []RuleView `json:"rules"`
	Guard GuardStats `json:"guard"`
	// Withheld from a deployment-scoped token, for whom it would describe
	// traffic it cannot see.
	Stats *SiemStats `json:"stats,omitempty"`
}

// SecuritySummary is the contract's SecuritySummary.
//
// The alert counts carried on `/metrics`, for a status tile.
type SecuritySummary struct {
	// Alerts currently held in app-lb's in-memory ring.
	Open int `json:"open"`
	// How many of those are `high` or `critical`.
	Urgent int `json:"urgent"`
	// Observations dropped because the analysis queue was full. Non-zero means
	// detection is sampling rather than complete — the figure to watch, since a
	// SIEM that has stopped looking is indistinguishable from a quiet network.
	Dropped int `json:"dropped"`
	// Whether the per-source table is full, which means the same for addresses.
	ClientsAtCapacity bool `json:"clients_at_capacity"`
	// Guard rules currently in force.
	Rules int `json:"rules"`
	// Requests those rules have refused since app-lb started.
	Blocked int `json:"blocked"`
}

// Severity ranks a security alert.
type Severity string

// The Severity values the contract names.
const (
	SeverityInfo     Severity = "info"
	SeverityLow      Severity = "low"
	SeverityMedium   Severity = "medium"
	SeverityHigh     Severity = "high"
	SeverityCritical Severity = "critical"
)

// SecurityAlert is one finding of the SIEM, with what to do about it.
type SecurityAlert struct {
	ID int64 `json:"id"`
	// Epoch millis of the first occurrence folded into this alert.
	Ts     int64 `json:"ts"`
	LastTs int64 `json:"last_ts"`
	// e.g. `auth.brute-force`, `web.sqli`, `traffic.scanner`.
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	Title    string   `json:"title"`
	Client   string   `json:"client,omitempty"`
	// Absent for admin-plane and unrouted findings.
	Deployment string `json:"deployment,omitempty"`
	// Never carries a query string.
	Path string `json:"path,omitempty"`
	// MITRE ATT&CK technique id, e.g. `T1110`.
	Technique string `json:"technique,omitempty"`
	// Occurrences folded into this alert. A scanner produces one alert whose
	// count climbs, not ten thousand alerts.
	Count int `json:"count"`
	// The triggering event in ECS field names (`source.ip`, `url.path`, …). A
	// free-form map: app-lb may add fields, and `url.query` is never among them.
	ECS map[string]json.RawMessage `json:"ecs,omitempty"`
	// What to do about it. Derived server-side, so a client renders rather than
	// reasons.
	Response AlertResponse `json:"response"`
}

// AlertResponse is the contract's AlertResponse.
//
// The runbook half of an alert: what to check, and what can be applied.
type AlertResponse struct {
	// Ordered, short. What to check before refusing anyone's traffic.
	Investigate []string `json:"investigate"`
	// Rules that would mitigate this, ready to `POST /security/rules`.
	Actions []SuggestedAction `json:"actions"`
	// Present where the obvious action does not do what it looks like it does —
	// notably that guard rules are never applied to app-lb's own admin API.
	Caveat string `json:"caveat,omitempty"`
}

// SuggestedAction is a guard rule that would mitigate an alert, ready to post.
type SuggestedAction struct {
	// `block-client`, `block-client-deployment`, `block-path`, `exempt-client`.
	Kind  string `json:"kind"`
	Label string `json:"label"`
	// What it stops and what it leaves alone. Show this next to the button.
	Effect string `json:"effect"`
	// Post verbatim to `/security/rules`.
	Rule RuleSpec `json:"rule"`
}

// RuleAction says whether a guard rule refuses or exempts what it matches.
type RuleAction string

// The RuleAction values the contract names.
const (
	RuleBlock RuleAction = "block"
	RuleAllow RuleAction = "allow"
)

// RuleMatch is the contract's RuleMatch.
//
// Conditions on a request. Every field present must match; absent fields are
// not checked. All literal — app-lb runs no regular expressions on the request
// path.
type RuleMatch struct {
	// An address or CIDR: `203.0.113.9`, `203.0.113.0/24`, `2001:db8::/32`.
	Client            string `json:"client,omitempty"`
	Host              string `json:"host,omitempty"`
	Deployment        string `json:"deployment,omitempty"`
	PathPrefix        string `json:"path_prefix,omitempty"`
	PathContains      string `json:"path_contains,omitempty"`
	Method            string `json:"method,omitempty"`
	UserAgentContains string `json:"user_agent_contains,omitempty"`
}

// RuleSpec is the contract's RuleSpec.
//
// The body of `POST /security/rules`.
type RuleSpec struct {
	Action RuleAction `json:"action"`
	// At least one condition — an empty match is refused, since it would apply
	// to every request to the data plane.
	Match RuleMatch `json:"match"`
	// Seconds from now. Omitted means permanent.
	ExpiresInSecs *int64 `json:"expires_in_secs,omitempty"`
	Note          string `json:"note,omitempty"`
}

// RuleView is the contract's RuleView.
//
// One rule in force.
type RuleView struct {
	ID     string     `json:"id"`
	Action RuleAction `json:"action"`
	Match  RuleMatch  `json:"match"`
	// The conditions as a phrase, so a client need not render them.
	Summary   string `json:"summary"`
	Note      string `json:"note,omitempty"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt *int64 `json:"expires_at,omitempty"`
	// Cumulative since this rule was created. The number to trust.
	Hits    int    `json:"hits"`
	LastHit *int64 `json:"last_hit,omitempty"`
	// `false` under `APP_LB_GUARD_ENFORCE=0`: matched and counted, not refused.
	Enforcing bool `json:"enforcing"`
	// Hits per bucket over the last window, oldest first — see
	// [GuardStats.hits_bucket_secs]. In-memory on the LB, so it is absent
	// from the persisted rule file and starts empty after a restart. All-zero
	// means "no hits", not "no data": a rule that has never fired is exactly what
	// this is for spotting.
	//
	// Approximate at bucket boundaries by design — the LB will not take a lock on
	// the request path to make a chart exact. Use `hits` for anything that has to
	// add up.
	HitsRecent []int `json:"hits_recent,omitempty"`
}

// GuardStats reports the guard rules in force and what they refused.
type GuardStats struct {
	Rules   int `json:"rules"`
	Blocked int `json:"blocked"`
	// Requests an `allow` rule exempted from a block.
	Exempted  int  `json:"exempted"`
	Enforcing bool `json:"enforcing"`
	// Requests refused per bucket over the last window, oldest first.
	BlockedRecent []int `json:"blocked_recent,omitempty"`
	// The same for requests an `allow` rule exempted.
	ExemptedRecent []int `json:"exempted_recent,omitempty"`
	// Seconds each entry of the `*_recent` series covers.
	HitsBucketSecs int `json:"hits_bucket_secs"`
	// Total seconds the `*_recent` series spans.
	HitsWindowSecs int `json:"hits_window_secs"`
}

// SeverityTotals counts alerts by severity.
type SeverityTotals struct {
	Info     int `json:"info"`
	Low      int `json:"low"`
	Medium   int `json:"medium"`
	High     int `json:"high"`
	Critical int `json:"critical"`
}

// SiemStats reports the detection pipeline's throughput.
type SiemStats struct {
	Observed          int  `json:"observed"`
	Dropped           int  `json:"dropped"`
	Analyzed          int  `json:"analyzed"`
	Raised            int  `json:"raised"`
	Suppressed        int  `json:"suppressed"`
	TrackedClients    int  `json:"tracked_clients"`
	ClientsAtCapacity bool `json:"clients_at_capacity"`
}
