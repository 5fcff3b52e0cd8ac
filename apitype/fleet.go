package apitype

// FleetHosts is GET /fleet/hosts (berth's own): the live hosts of the fleet
// this berth belongs to (berth serve --etcd), by id, and the fleet's
// Computer slots.
type FleetHosts struct {
	// Self is the id of the host that answered.
	Self  string      `json:"self"`
	Hosts []FleetHost `json:"hosts"`
	Slots FleetSlots  `json:"slots"`
}

// FleetHost is one live host: what it registered, its state and the fleet
// slots its Computers hold.
type FleetHost struct {
	ID string `json:"id"`
	// Address is the host's admin API address as it advertises it.
	Address  string            `json:"address"`
	Drivers  []string          `json:"drivers"`
	Capacity FleetHostCapacity `json:"capacity"`
	Version  string            `json:"version"`
	// StartedAt is when its berth started, in Unix seconds.
	StartedAt int64 `json:"started_at"`
	// State is active, cordoned or draining; StateSince (Unix seconds)
	// is when it was cordoned or drained, absent while active.
	State      string `json:"state"`
	StateSince int64  `json:"state_since,omitempty"`
	// Slots is the fleet slots its Computers hold.
	Slots int `json:"slots"`
}

// FleetHostCapacity is a host's capacity: the Computer contract's
// hostCapacitySchema (maxActive, reservedHeadroom; 0 when the host
// registers none) and its CPUs and memory.
type FleetHostCapacity struct {
	MaxActive        int   `json:"max_active"`
	ReservedHeadroom int   `json:"reserved_headroom"`
	CPUs             int   `json:"cpus"`
	MemoryBytes      int64 `json:"memory_bytes"`
}

// FleetSlots are the fleet's Computer slots: Held across every host, out
// of Limit (0: the fleet has no limit of its own).
type FleetSlots struct {
	Held  int `json:"held"`
	Limit int `json:"limit"`
}

// Host states (FleetHost.State; POST /fleet/hosts/{id}/cordon, /drain,
// /uncordon).
const (
	HostActive   = "active"
	HostCordoned = "cordoned"
	HostDraining = "draining"
)

// FleetTokens is GET /fleet/tokens: the fleet tokens (`fleet: true`,
// valid on every host), by id, each with the hex SHA-256 of its secret
// and never the secret (app-lb.md §7.6's `{tokens:[{name, secret_sha256,
// …}]}`; the contract declares no shape for it).
type FleetTokens struct {
	Tokens []FleetToken `json:"tokens"`
}

// FleetToken is one fleet token as GET /fleet/tokens exports it: its
// grants, the hash of its secret, and Host, the host that minted it.
type FleetToken struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Admin        AdminScope `json:"admin"`
	Namespace    string     `json:"namespace,omitempty"`
	Deployments  []string   `json:"deployments"`
	CreatedAt    int64      `json:"created_at"`
	ExpiresAt    *int64     `json:"expires_at,omitempty"`
	SecretSHA256 string     `json:"secret_sha256"`
	Host         string     `json:"host"`
}

// FleetJoinRequest is POST /fleet/join's body (berth fleet join): the
// one-time join token `berth fleet init` printed, and a PEM certificate
// request for this host's key, which never leaves the host.
type FleetJoinRequest struct {
	Token string `json:"token"`
	CSR   string `json:"csr"`
}

// FleetJoinResponse is what a joining host receives: its client
// certificate signed by the fleet CA, the CA (the joiner checks it
// against the fingerprint it was given before trusting anything else),
// and the etcd endpoints to reach the fleet at.
type FleetJoinResponse struct {
	CA          string   `json:"ca"`
	Certificate string   `json:"certificate"`
	Endpoints   []string `json:"endpoints"`
	HostID      string   `json:"host_id"`
	NotAfter    int64    `json:"not_after"`
}
