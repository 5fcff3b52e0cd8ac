package computertype

// PortRequest is the body of exposePort.
type PortRequest struct {
	Port int `json:"port"`
	// Public makes the port reachable without a credential; otherwise the
	// data plane asks for a grant of the Computer.
	Public bool `json:"public,omitempty"`
	// SignIn names an auth provider of the Computer's namespace (POST
	// /auth-providers): a private port then also admits a browser that
	// signs in with it — the code-server pattern, an IDE for people —
	// besides a grant's bearer. Not with Public.
	SignIn string `json:"sign_in,omitempty"`
}

// Port is an exposed port: the hostname and URL at which the gateway's
// data plane reaches it.
type Port struct {
	Port   int    `json:"port"`
	Host   string `json:"host"`
	URL    string `json:"url"`
	Public bool   `json:"public"`
	SignIn string `json:"sign_in,omitempty"`
}

// PortList is the answer of listPorts.
type PortList struct {
	Ports []Port `json:"ports"`
}
