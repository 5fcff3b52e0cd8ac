package apitype

// SecretSummary describes a stored secret without its values.
type SecretSummary struct {
	ID string `json:"id"`
	// The namespace wall the secret sits behind; `default` when unset.
	Namespace   string  `json:"namespace"`
	Description *string `json:"description"`
	// Key *names*. Values never leave app-lb.
	Keys            []string `json:"keys"`
	UpdatedAt       int64    `json:"updated_at"`
	EncryptedAtRest bool     `json:"encrypted_at_rest"`
}

// CertStatus is one TLS certificate app-lb holds (`GET /certs`).
type CertStatus struct {
	Host         string `json:"host"`
	NotAfter     string `json:"not_after"`
	Issuer       string `json:"issuer"`
	NeedsRenewal bool   `json:"needs_renewal"`
}

// CertPending is berth's own `GET /certs/pending`: a host some deployment
// routes that has no certificate yet, and why, which CertStatus (one
// certificate held) cannot say.
type CertPending struct {
	Host string `json:"host"`
	// `pending` (an order is due or under way), `backoff` (the last
	// order failed; the next waits until retry_at) or `wildcard-pending`
	// (covered by a wildcard base whose certificate is not issued yet).
	State string `json:"state"`
	// When the next order may start, unix seconds; 0 when not waiting.
	RetryAt int64 `json:"retry_at"`
	// Consecutive failed orders, and the last one's error.
	Failures  int    `json:"failures"`
	LastError string `json:"last_error,omitempty"`
}
