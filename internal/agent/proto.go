package agent

import (
	"fmt"
	"io/fs"
	"strconv"
	"time"
)

// ProtocolVersion is the version of the wire protocol described in the
// package documentation. It is reported by GET /v1/info and is also the
// number in the path prefix; an incompatible change starts /v2 and keeps
// /v1 for older clients.
const ProtocolVersion = 1

// DefaultMaxOutput caps the stdout plus stderr bytes a buffered exec keeps.
// The cap exists because the result is held in memory on both ends; output
// past it is read and discarded so the command never blocks on a full pipe.
const DefaultMaxOutput = 16 << 20

// TimeoutExitCode is the exit code reported for a command killed because
// its timeout_ms elapsed, the same code coreutils timeout(1) uses.
const TimeoutExitCode = 124

// Encodings of ExecRequest.Stdin and of ExecResult's output fields.
const (
	// EncodingText (the default, also spelled "") carries bytes as a JSON
	// string; bytes that are not valid UTF-8 become U+FFFD in results.
	EncodingText = "text"
	// EncodingBase64 carries bytes as standard base64, losslessly.
	EncodingBase64 = "base64"
)

// Info is the body of GET /v1/info.
type Info struct {
	// Version is the berth build that runs the agent.
	Version string `json:"version"`
	// Protocol is ProtocolVersion of the agent, for feature checks.
	Protocol int `json:"protocol"`
	// PID is the agent's process id (1 when it is a namespace's init).
	PID int `json:"pid"`
	// Hostname is the sandbox's host name.
	Hostname string `json:"hostname"`
	// StartedAt is when the agent started, in UTC.
	StartedAt time.Time `json:"started_at"`
}

// ExecRequest is the body of POST /v1/exec and the first (text) message of
// a /v1/exec/stream session.
type ExecRequest struct {
	// Argv is the program and its arguments, run without a shell; the
	// program is looked up in PATH. Exactly one of Argv and Command is set.
	Argv []string `json:"argv,omitempty"`
	// Command is a shell command line, run as /bin/sh -c Command.
	Command string `json:"command,omitempty"`
	// Cwd is the working directory; empty means the agent's directory.
	Cwd string `json:"cwd,omitempty"`
	// Env is added to (and overrides) the agent's own environment.
	Env map[string]string `json:"env,omitempty"`
	// Stdin is written to the command's standard input, which is then
	// closed. Without it (buffered exec) stdin is /dev/null. In a streaming
	// session it is written before any stdin frames.
	Stdin string `json:"stdin,omitempty"`
	// Encoding is how Stdin and the result's Stdout, Stderr and Output are
	// carried: EncodingText (default) or EncodingBase64.
	Encoding string `json:"encoding,omitempty"`
	// TimeoutMS, when positive, kills the command's process group with
	// SIGKILL after that many milliseconds and reports TimedOut.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// MaxOutput, when positive and below DefaultMaxOutput, lowers the
	// buffered-exec output cap. It cannot raise it.
	MaxOutput int64 `json:"max_output,omitempty"`
}

// ExecResult is the body answered by POST /v1/exec.
type ExecResult struct {
	// ExitCode is the command's exit status; 128+N when it was killed by
	// signal N; TimeoutExitCode when it timed out.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the command ("SIGKILL"), if any.
	Signal string `json:"signal,omitempty"`
	// Stdout and Stderr are the two streams, each complete up to the cap.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Output is stdout and stderr interleaved in the order the agent read
	// them, which is write order for writes that do not race each other.
	Output string `json:"output"`
	// Encoding echoes the request's encoding of the three fields above.
	// The Go Client decodes base64 itself and returns raw bytes here with
	// Encoding empty.
	Encoding string `json:"encoding,omitempty"`
	// TimedOut reports that the timeout killed the command.
	TimedOut bool `json:"timed_out"`
	// Truncated reports that output past the cap was dropped.
	Truncated bool `json:"truncated"`
	// DurationMS is the wall time from start to exit.
	DurationMS int64 `json:"duration_ms"`
}

// PTYRequest is the first (text) message of a /v1/pty session.
type PTYRequest struct {
	// Argv or Command as in ExecRequest; with neither, the agent runs
	// $SHELL, or /bin/sh.
	Argv    []string `json:"argv,omitempty"`
	Command string   `json:"command,omitempty"`
	// Cwd and Env as in ExecRequest. TERM defaults to xterm-256color.
	Cwd string            `json:"cwd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// Cols and Rows are the initial terminal size; zero means 80x24.
	Cols int `json:"cols,omitempty"`
	Rows int `json:"rows,omitempty"`
}

// Frame channels: the first byte of every binary websocket message.
const (
	ChanStdin  = 0 // client to agent: bytes for the command's stdin / the terminal
	ChanStdout = 1 // agent to client: stdout, or everything a PTY prints
	ChanStderr = 2 // agent to client: stderr (never used by PTY sessions)
)

// Control message types, sent as text websocket messages.
const (
	CtlEOF    = "eof"    // client: close the command's stdin
	CtlResize = "resize" // client: set the terminal size (PTY only)
	CtlSignal = "signal" // client: send Signal to the process group
	CtlExit   = "exit"   // agent: the command ended; last message
	CtlError  = "error"  // agent: the command could not start; last message
)

// Control is a text websocket message. Type says which other fields count.
type Control struct {
	Type string `json:"type"`
	// Cols and Rows for CtlResize.
	Cols int `json:"cols,omitempty"`
	Rows int `json:"rows,omitempty"`
	// Signal for CtlSignal: a name ("TERM", "SIGINT") or a number ("9").
	Signal string `json:"signal,omitempty"`
	// ExitCode, Signal and TimedOut for CtlExit, with ExecResult's meaning.
	ExitCode int  `json:"exit_code"`
	TimedOut bool `json:"timed_out,omitempty"`
	// Error and Status for CtlError: the message, and the HTTP status the
	// same failure gets from the buffered endpoint (400, 422...).
	Error  string `json:"error,omitempty"`
	Status int    `json:"status,omitempty"`
}

// FileInfo describes a file in answers of the files endpoints. It is the
// lstat view: a symlink is reported as a symlink, with its target.
type FileInfo struct {
	// Name is the base name; Path is the path as the client names it.
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode is the permission bits in octal, e.g. "0644".
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
	// LinkTarget is the symlink's target, for Type "symlink".
	LinkTarget string `json:"link_target,omitempty"`
	// SHA256 is the hex SHA-256 of the content written, in the answer
	// of PUT /v1/files (only there: hashing is not free).
	SHA256 string `json:"sha256,omitempty"`
}

// Perm parses Mode; it is 0 when Mode is malformed.
func (fi FileInfo) Perm() fs.FileMode {
	m, err := strconv.ParseUint(fi.Mode, 8, 32)
	if err != nil {
		return 0
	}
	return fs.FileMode(m) & fs.ModePerm
}

// MkdirRequest is the body of POST /v1/files/mkdir.
type MkdirRequest struct {
	Path string `json:"path"`
	// Mode is octal permission bits; empty means "0755".
	Mode string `json:"mode,omitempty"`
	// Parents creates missing parents and accepts an existing directory,
	// like mkdir -p.
	Parents bool `json:"parents,omitempty"`
}

// ListResult is the body answered by GET /v1/files/list.
type ListResult struct {
	Path    string     `json:"path"`
	Entries []FileInfo `json:"entries"`
}

// errorBody is the JSON body of every error answer.
type errorBody struct {
	Error string `json:"error"`
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

func formatMode(m fs.FileMode) string { return fmt.Sprintf("%04o", uint32(m.Perm())) }

func parseMode(s string, def fs.FileMode) (fs.FileMode, error) {
	if s == "" {
		return def, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %q is not octal permission bits like 0644", s)
	}
	return fs.FileMode(m) & fs.ModePerm, nil
}
