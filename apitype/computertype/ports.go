package computertype

// PortRequest is the body of exposePort.
type PortRequest struct {
	Port int `json:"port"`
	// Public makes the port reachable without a credential; otherwise the
	// data plane asks for a grant of the Computer.
	Public bool `json:"public,omitempty"`
}

// Port is an exposed port: the hostname and URL at which the gateway's
// data plane reaches it.
type Port struct {
	Port   int    `json:"port"`
	Host   string `json:"host"`
	URL    string `json:"url"`
	Public bool   `json:"public"`
}

// PortList is the answer of listPorts.
type PortList struct {
	Ports []Port `json:"ports"`
}
