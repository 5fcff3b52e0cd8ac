package computertype

import "encoding/json"

// Computer is a Computer as the API answers it. Times are Unix milliseconds,
// as everywhere in the contract.
type Computer struct {
	ID              string               `json:"id"`
	Namespace       string               `json:"namespace"`
	Image           string               `json:"image,omitempty"`
	Size            string               `json:"size,omitempty"`
	IdleTimeoutSecs int64                `json:"idleTimeoutSecs"`
	Backings        []HostedBacking      `json:"backings"`
	State           ComputerRuntimeState `json:"state"`
	// Active is the backing the Computer runs on now; absent while it
	// sleeps.
	Active    *HostedBacking `json:"active,omitempty"`
	CreatedAt int64          `json:"createdAt"`
	UpdatedAt int64          `json:"updatedAt"`
}

// NewComputer is the body of POST /computers.
type NewComputer struct {
	// ID names the Computer; empty picks a random one.
	ID        string `json:"id,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Image     string `json:"image,omitempty"`
	Size      string `json:"size,omitempty"`
	// IdleTimeoutSecs is how long the Computer may idle before it sleeps;
	// absent leaves the manager's default.
	IdleTimeoutSecs *int64          `json:"idleTimeoutSecs,omitempty"`
	Backings        []HostedBacking `json:"backings,omitempty"`
	// Start starts the Computer at once rather than at first use.
	Start bool `json:"start,omitempty"`
}

// ComputerList is the body of GET /computers.
type ComputerList struct {
	Computers []Computer `json:"computers"`
}

// Backings is the body of GET and PUT /computers/{id}/backings: exactly
// the contract's computerBackingChangeSchema. The backing the Computer
// runs on now is the Computer's Active (GET /computers/{id}).
type Backings struct {
	// ComputerID, when given in a PUT, must be the Computer of the path;
	// answers always give it.
	ComputerID string `json:"computerId,omitempty"`
	// Backings is the fallback order; null (in a PUT) returns the
	// Computer to the fleet default.
	Backings []HostedBacking `json:"backings"`
}

// NewGrant is the body of POST /computers/{id}/grants. Exactly one of
// ExpiresAt (Unix milliseconds) and ExpiresInSecs is required.
type NewGrant struct {
	Actions       []string        `json:"actions"`
	ExpiresAt     *int64          `json:"expiresAt,omitempty"`
	ExpiresInSecs *int64          `json:"expiresInSecs,omitempty"`
	Egress        json.RawMessage `json:"egress,omitempty"`
	// Provenance is who the grant acts for; absent, the issuing caller.
	Provenance *ComputerProvenance `json:"provenance,omitempty"`
}

// Grant is an issued grant: its id, the grant in the contract's
// shape, and (when just issued) the token, shown once.
type Grant struct {
	ID        string        `json:"id"`
	Grant     ComputerGrant `json:"grant"`
	IssuedAt  int64         `json:"issuedAt"`
	RevokedAt *int64        `json:"revokedAt,omitempty"`
	Token     string        `json:"token,omitempty"`
}

// GrantList is the body of GET /computers/{id}/grants: the unexpired
// grants, revoked ones included, oldest first.
type GrantList struct {
	Grants []Grant `json:"grants"`
}

// PendingUsage is the body of GET /computers/usage/pending: the usage
// intervals the billing host has not acknowledged, oldest first, each an
// interval fact (Kind "interval": the contract's ComputerUsageInterval
// plus the Computer's id and a provenance, as the contract's
// ComputerRuntimeUsage.pendingFacts gives them), since berth's ledger
// spans every Computer of the host.
type PendingUsage struct {
	Intervals []ComputerFact `json:"intervals"`
}

// UsageAck is the body of POST /computers/usage/acknowledge: the
// observations the billing host has recorded, by runtimeId and
// observedAt. The interval facts of [PendingUsage] may be sent back as
// they are.
type UsageAck struct {
	Intervals []AckedInterval `json:"intervals"`
}

// AckedInterval is one acknowledged observation: a ComputerUsageInterval,
// named by RuntimeID and ObservedAt, or an interval fact of
// [PendingUsage] sent back as it came (Kind "interval", the Computer's id
// and the ledger's provenance, which name the same observation).
type AckedInterval struct {
	ComputerUsageInterval
	Kind       string              `json:"kind,omitempty"`
	ComputerID string              `json:"computerId,omitempty"`
	Provenance *ComputerProvenance `json:"provenance,omitempty"`
}

// Capacity is GET /computers/hosts/capacity (berth's own route):
// Hosts is the contract's host capacity registry
// (hostCapacityRegistrySchema, keyed by host id), FleetLimit the number of
// Computers that may start or run at once that follows from it, and
// RecycleAfterSecs the age at which a running sandbox is replaced at a
// quiet moment (0: never).
type Capacity struct {
	Hosts            map[string]HostCapacity `json:"hosts"`
	FleetLimit       int                     `json:"fleetLimit"`
	RecycleAfterSecs int64                   `json:"recycleAfterSecs"`
}
