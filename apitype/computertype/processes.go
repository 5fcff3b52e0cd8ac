package computertype

// ProcessRequest is the body of processStart: a command started in the
// background. It survives the caller disconnecting; its output is read
// with GET .../processes/{pid}/output.
type ProcessRequest struct {
	// Argv is the program and its arguments; Script, a bash script.
	// Exactly one is given.
	Argv   []string          `json:"argv,omitempty"`
	Script string            `json:"script,omitempty"`
	Cwd    string            `json:"cwd,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
}

// Process is a background process as listed.
type Process struct {
	ID      string `json:"id"`
	PID     int    `json:"pid"`
	Command string `json:"command"`
	Running bool   `json:"running"`
	// ExitCode is set once the process ended (128+N when signal N killed
	// it).
	ExitCode  *int   `json:"exitCode"`
	Signal    string `json:"signal,omitempty"`
	StartedAt int64  `json:"startedAt"`
	EndedAt   *int64 `json:"endedAt"`
	CPUTimeMs *int64 `json:"cpuTimeMs"`
	// Provenance is who started it.
	Provenance *ComputerProvenance `json:"provenance,omitempty"`
}

// ProcessList is the answer of processList.
type ProcessList struct {
	Processes []Process `json:"processes"`
}
