package computertype

// ExecRequest is the body of POST /computers/{id}/exec. Bash takes the
// same fields with Script instead of Argv.
type ExecRequest struct {
	// Argv is the program and its arguments, run without a shell.
	Argv []string `json:"argv,omitempty"`
	// Script is bash's script, run as bash -c Script (bash only).
	Script string `json:"script,omitempty"`
	// Cwd is the working directory, relative to the workspace (an
	// absolute path is taken with the workspace as /).
	Cwd string            `json:"cwd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// Stdin is written to the command's standard input, then closed.
	Stdin string `json:"stdin,omitempty"`
	// Encoding is how Stdin and the output are carried: "text" (the
	// default; bytes that are not UTF-8 become U+FFFD) or "base64".
	Encoding string `json:"encoding,omitempty"`
	// TimeoutMs kills the command after that many milliseconds; default
	// DefaultTimeoutMs, at most MaxTimeoutMs.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// Stream answers with output events as they happen
	// (application/x-ndjson, one ExecEvent a line) rather than one
	// ExecResult when the command ends.
	Stream bool `json:"stream,omitempty"`
}

// ExecResult is the buffered answer of exec and bash.
type ExecResult struct {
	// RequestID names this run in its process.exited fact.
	RequestID string `json:"requestId"`
	// ExitCode is the exit status: 128+N when killed by signal N, 124
	// when the timeout killed it.
	ExitCode   int    `json:"exitCode"`
	Signal     string `json:"signal,omitempty"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	Output     string `json:"output"` // both streams interleaved
	Encoding   string `json:"encoding,omitempty"`
	TimedOut   bool   `json:"timedOut"`
	Truncated  bool   `json:"truncated"`
	DurationMs int64  `json:"durationMs"`
}

// ExecEvent is one line of a streamed exec: "stdout" and "stderr" carry
// Data (in the request's encoding), then "exit" (ExitCode, DurationMs) or
// "error" (Error, Status) ends the stream.
type ExecEvent struct {
	Type       string `json:"type"`
	Data       string `json:"data,omitempty"`
	RequestID  string `json:"requestId,omitempty"`
	ExitCode   *int   `json:"exitCode,omitempty"`
	DurationMs int64  `json:"durationMs,omitempty"`
	Error      string `json:"error,omitempty"`
	Status     int    `json:"status,omitempty"`
}
