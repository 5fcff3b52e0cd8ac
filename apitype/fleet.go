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

// FleetJoinRequest is POST /fleet/join's body (berth fleet join; berth's
// own shape, the contract declares none). The one-time join token berth
// fleet init printed never crosses the wire: TokenID names it (hex of
// HKDF-SHA256 of the token, info "berth fleet join token id v1", 16
// bytes), Nonce is 32 fresh random bytes (base64), CSR a PEM certificate
// request for this host's key (which never leaves the host), and MAC
// (base64) is HMAC-SHA256 over the three under a key derived from the
// token (package fleetca, joinproto.go, has the exact derivations). The
// first host spends the token only once the MAC verifies; a wrong MAC is
// answered as an unknown token is.
type FleetJoinRequest struct {
	TokenID string `json:"token_id"`
	Nonce   string `json:"nonce"`
	CSR     string `json:"csr"`
	MAC     string `json:"mac"`
}

// FleetRenewRequest is POST /fleet/renew's body (berth fleet renew, and
// berth serve on a joined host when its certificate nears its expiry):
// the host's current certificate (PEM; the leaf first), a PEM certificate
// request for a new key with the same common name, and proof that the
// sender holds the current certificate's key: Signature, base64 of an
// ASN.1 ECDSA signature with SHA-256 by that key over "berth fleet renew
// v1\n", Timestamp in decimal, "\n" and the request's DER. Timestamp is
// Unix seconds; the first host refuses one more than 5 minutes old or
// ahead of its clock. The answer is a FleetCertificate.
type FleetRenewRequest struct {
	Chain     string `json:"chain"`
	CSR       string `json:"csr"`
	Timestamp int64  `json:"timestamp"`
	Signature string `json:"signature"`
}

// FleetCertificate is a host certificate the fleet CA signed: the answer
// of POST /fleet/renew, and part of a joining host's FleetJoinGrant. The
// certificate (PEM) is for a key only the host holds, CA is the fleet CA
// (PEM; a joining host checks it against the fingerprint it was given
// before trusting anything else, a renewing host against the one it
// holds), Endpoints the etcd endpoints to reach the fleet at, NotAfter the
// certificate's expiry in Unix seconds.
type FleetCertificate struct {
	CA          string   `json:"ca"`
	Certificate string   `json:"certificate"`
	Endpoints   []string `json:"endpoints"`
	HostID      string   `json:"host_id"`
	NotAfter    int64    `json:"not_after"`
}

// FleetJoinResponse is POST /fleet/join's answer (berth's own shape):
// Sealed is base64 of a 12-byte nonce and the AES-256-GCM sealing of a
// FleetJoinGrant's JSON, under a key derived from the join token and the
// request's nonce, so that only the holder of the token opens it, and
// only as the answer to that request (a tampered or replayed answer does
// not open).
type FleetJoinResponse struct {
	Sealed string `json:"sealed"`
}

// FleetJoinGrant is what a FleetJoinResponse opens to: the host's
// certificate, and SecretKey, the fleet's secret key (hex of the first
// host's 32 key bytes, which seal the secret store), which the joining
// host keeps as its own so that what one host seals every host opens.
type FleetJoinGrant struct {
	FleetCertificate
	SecretKey string `json:"secret_key"`
}

// FleetSummary is GET /fleet (berth's own shape; the contract declares
// none): every live host of the fleet with what its last report said, and
// Pool, the contract's FleetPool rolled up over every host's
// deployments (a deployment served by two hosts counts once in
// Deployments; its replicas count on each host).
type FleetSummary struct {
	// Self is the id of the host that answered.
	Self        string         `json:"self"`
	GeneratedAt int64          `json:"generated_at"`
	Gateways    []FleetGateway `json:"gateways"`
	Pool        FleetPool      `json:"pool"`
}

// FleetGateway is one live host in GET /fleet: its registration's id,
// address and state, and what its last report said (ReportedAt, in Unix
// milliseconds, is 0 and Host and Pool are zero until it reports).
type FleetGateway struct {
	ID         string    `json:"id"`
	Address    string    `json:"address"`
	State      string    `json:"state"`
	ReportedAt int64     `json:"reported_at_ms"`
	Host       HostUsage `json:"host"`
	Pool       FleetPool `json:"pool"`
}

// FleetDeploymentPool is a deployment's pool numbers, on one host or
// summed over the hosts that serve it.
type FleetDeploymentPool struct {
	Ready         int `json:"ready"`
	Draining      int `json:"draining"`
	Pending       int `json:"pending"`
	TotalInFlight int `json:"total_in_flight"`
}

// FleetDeployments is GET /fleet/deployments?namespace=&offset=&limit=
// (berth's own shape): the deployments the fleet's hosts serve, by id,
// Matched counting those the query matched before Offset and Limit
// (default 100) cut the page, as /metrics pages.
type FleetDeployments struct {
	Deployments []FleetDeployment `json:"deployments"`
	Matched     int               `json:"matched"`
	Offset      int               `json:"offset"`
}

// FleetDeployment is one deployment across the fleet: Hosts are the ids
// of the hosts serving it, Pool its pool numbers summed over them, and
// Gateways each host's own numbers.
type FleetDeployment struct {
	ID        string                `json:"id"`
	Namespace string                `json:"namespace"`
	Kind      string                `json:"kind"`
	Hosts     []string              `json:"hosts"`
	Pool      FleetDeploymentPool   `json:"pool"`
	Gateways  []FleetDeploymentHost `json:"gateways"`
}

// FleetDeploymentHost is one host's share of a [FleetDeployment].
type FleetDeploymentHost struct {
	Host string              `json:"host"`
	Pool FleetDeploymentPool `json:"pool"`
}

// FleetGatewayMetrics is GET /fleet/gateways/{id}/metrics (berth's own
// shape): host id's last report. Host is the contract's HostUsage (zero
// for a namespace-confined caller), Fleet its FleetPool over the
// deployments listed before paging; Matched and Offset page Deployments
// as /fleet/deployments does.
type FleetGatewayMetrics struct {
	ID          string                   `json:"id"`
	Address     string                   `json:"address"`
	ReportedAt  int64                    `json:"reported_at_ms"`
	Host        HostUsage                `json:"host"`
	Fleet       FleetPool                `json:"fleet"`
	Deployments []FleetGatewayDeployment `json:"deployments"`
	Matched     int                      `json:"matched"`
	Offset      int                      `json:"offset"`
}

// FleetGatewayDeployment is one deployment a host reports: its pool there
// and its routes as "host/path-prefix" ("" host: any).
type FleetGatewayDeployment struct {
	ID        string              `json:"id"`
	Namespace string              `json:"namespace"`
	Kind      string              `json:"kind"`
	Pool      FleetDeploymentPool `json:"pool"`
	Routes    []string            `json:"routes"`
}

// FleetNetwork is GET /fleet/network (berth's own shape): each live
// host's address and what it serves.
type FleetNetwork struct {
	Gateways []FleetNetworkGateway `json:"gateways"`
}

// FleetNetworkGateway is one host of [FleetNetwork]: the routes it serves
// ("host/path-prefix"), the route hosts among them, and its deployments'
// ids.
type FleetNetworkGateway struct {
	ID          string   `json:"id"`
	Address     string   `json:"address"`
	State       string   `json:"state"`
	Routes      []string `json:"routes"`
	RouteHosts  []string `json:"route_hosts"`
	Deployments []string `json:"deployments"`
}

// FleetServices is GET /services?after=&limit= (berth's own shape): the
// services with members in the fleet, by id, after the id given; Next is
// the after= of the next page, absent on the last; Revision the etcd
// revision read at.
type FleetServices struct {
	Services []FleetService `json:"services"`
	Next     string         `json:"next,omitempty"`
	Revision int64          `json:"revision"`
}

// FleetService is one service and its members, by peer.
type FleetService struct {
	ID      string               `json:"id"`
	Members []FleetServiceMember `json:"members"`
}

// FleetServiceMember is one member of a service: its peer ("host:port"),
// whether it drains, its requests in flight, and the host that
// publishes it.
type FleetServiceMember struct {
	Peer     string `json:"peer"`
	Draining bool   `json:"draining"`
	InFlight int    `json:"in_flight"`
	Host     string `json:"host"`
	// Hop: Peer is the host's hop listener (mutual TLS with fleet
	// certificates); false: its public gateway, plain HTTP.
	Hop bool `json:"hop"`
}

// ControlPlaneConfig is GET /control-plane/config and PUT's answer
// (app-lb.md §2.3's `{revision, config, externally_managed,
// token_sync}`): the fleet's configuration as kept in etcd, at Revision
// (0 before the first PUT).
type ControlPlaneConfig struct {
	Revision int64           `json:"revision"`
	Config   ControlPlaneDoc `json:"config"`
	// ExternallyManaged is false: berth keeps the configuration in etcd
	// and this API writes it.
	ExternallyManaged bool      `json:"externally_managed"`
	TokenSync         TokenSync `json:"token_sync"`
}

// ControlPlaneDoc is the configuration itself (berth's own fields under
// app-lb's two keys): the gateways the fleet knows of beyond its live
// hosts, and the services the control plane names.
type ControlPlaneDoc struct {
	Gateways     []ControlPlaneGateway `json:"gateways"`
	ControlPlane []ControlPlaneService `json:"control_plane"`
}

// ControlPlaneGateway is a gateway the configuration names: its id (a
// host id) and its admin URL (http or https).
type ControlPlaneGateway struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// ControlPlaneService is a service the configuration names, and the
// description operators give it.
type ControlPlaneService struct {
	ServiceID   string `json:"service_id"`
	Description string `json:"description,omitempty"`
}

// TokenSync says how fleet tokens reach every host: in berth, through
// etcd (Source "etcd"), each host following them as they change.
type TokenSync struct {
	Source string `json:"source"`
}

// ControlPlaneConfigPut is PUT /control-plane/config's body: the new
// configuration, written only while the stored one is still at
// ExpectedRevision (0: none stored yet), else 409.
type ControlPlaneConfigPut struct {
	ExpectedRevision *int64           `json:"expected_revision"`
	Config           *ControlPlaneDoc `json:"config"`
}

// FleetRevokeRequest is POST /fleet/hosts/{id}/revoke's optional body.
type FleetRevokeRequest struct {
	// Reason is kept with the revocation.
	Reason string `json:"reason,omitempty"`
}

// FleetRevocation is what POST /fleet/hosts/{id}/revoke (and berth fleet
// revoke) did: every certificate the fleet CA issued to the host is
// revoked and the CRL rewritten.
type FleetRevocation struct {
	Host string `json:"host"`
	// Serials are the host's revoked certificates (decimal), those
	// revoked before included; Newly counts the ones this call revoked.
	Serials []string `json:"serials"`
	Newly   int      `json:"newly"`
	// Published is true once the CRL is in etcd, for the other hosts.
	Published bool `json:"published"`
}
