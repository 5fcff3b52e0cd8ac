package apitype

// RateLimit is berth's own `GET|PUT /deployments/:id/rate-limit`: how many
// requests one client may make of a deployment, and how many it may have in
// flight at once. It is not part of app-lb's contract (the contract's
// DeploymentSpec has no room for it), so it lives beside the spec, on a
// route of its own, and no contract type names it.
//
// A client is an address: an IPv4 address, or an IPv6 /64 (a v4-mapped
// IPv6 address counts as its IPv4 address). A request past either limit is
// answered 429 with Retry-After.
//
// At least one of RequestsPerSec and ConcurrentPerClient must be set. The
// server answers with the stored value, defaults filled in (Burst when
// RequestsPerSec is set, MaxClients always); a request may leave out any
// key.
type RateLimit struct {
	// Requests per second each client may make, on average: the refill
	// rate of its token bucket; fractional rates (0.5: one every two
	// seconds) are allowed. 0 or absent: no rate limit (a concurrency
	// limit alone). At most 1e6.
	RequestsPerSec float64 `json:"requests_per_sec"`
	// The bucket's size: how many requests a client may make at once after
	// a quiet spell. 0 or absent: ceil(requests_per_sec). 1 to 1e6; only
	// with requests_per_sec.
	Burst int `json:"burst"`
	// Requests each client may have in flight at once (a websocket is in
	// flight until it closes). 0 or absent: unlimited. At most 1e5.
	ConcurrentPerClient int `json:"concurrent_per_client"`
	// How many clients the server remembers (least recently seen
	// forgotten first; a forgotten client starts with a full bucket).
	// 0 or absent: 65536. At most 1e6.
	MaxClients int `json:"max_clients,omitempty"`
}
