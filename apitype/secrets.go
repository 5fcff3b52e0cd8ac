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
