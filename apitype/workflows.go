package apitype

// WorkflowSpec is the contract's WorkflowSpec.
//
// A repository workflow registered with app-lb.
type WorkflowSpec struct {
	ID      string `json:"id"`
	Repo    string `json:"repo"`
	Ref     string `json:"ref"`
	Path    string `json:"path"`
	Network string `json:"network"`
	// A stored credential reference, never the credential value.
	Auth          *SecretRef `json:"auth,omitempty"`
	SecretsPrefix string     `json:"secrets_prefix,omitempty"`
	Enabled       bool       `json:"enabled"`
}

// WorkflowList is `GET /workflows`.
type WorkflowList struct {
	Workflows []WorkflowSpec `json:"workflows"`
}
