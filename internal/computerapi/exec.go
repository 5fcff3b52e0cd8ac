package computerapi

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/berth-dev/berth/apitype/computertype"
	"net/http"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/ptybridge"
	"github.com/berth-dev/berth/internal/web"
)

// Exec timeouts: a command with no timeoutMs gets DefaultTimeoutMs; none
// may ask for more than MaxTimeoutMs.
const (
	DefaultTimeoutMs = 10 * 60 * 1000
	MaxTimeoutMs     = 60 * 60 * 1000
)

func (a *API) exec(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.ExecRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return web.Invalid("argv", "must name a program")
	}
	if req.Script != "" {
		return web.Invalid("script", "is for bash; exec takes argv")
	}
	return a.run(w, r, c, req, req.Argv)
}

func (a *API) bash(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.ExecRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Script == "" {
		return web.Invalid("script", "is required")
	}
	if len(req.Argv) > 0 {
		return web.Invalid("argv", "is for exec; bash takes a script")
	}
	return a.run(w, r, c, req, []string{"bash", "-c", req.Script})
}

// run runs argv for exec and bash.
func (a *API) run(w http.ResponseWriter, r *http.Request, c *call, req computertype.ExecRequest, argv []string) error {
	for _, s := range argv {
		if containsNUL(s) {
			return web.Invalid("argv", "must not contain NUL bytes")
		}
	}
	b64 := false
	switch req.Encoding {
	case "", "text":
	case "base64":
		b64 = true
	default:
		return web.Invalid("encoding", "must be text or base64, got %q", req.Encoding)
	}
	stdin := req.Stdin
	if b64 {
		raw, err := base64.StdEncoding.DecodeString(req.Stdin)
		if err != nil {
			return web.Invalid("stdin", "is not base64")
		}
		stdin = string(raw)
	}
	timeout := int64(DefaultTimeoutMs)
	if req.TimeoutMs != 0 {
		if req.TimeoutMs < 0 || req.TimeoutMs > MaxTimeoutMs {
			return web.Invalid("timeoutMs", "must be from 1 to %d", MaxTimeoutMs)
		}
		timeout = req.TimeoutMs
	}
	cwd, err := workPath(req.Cwd, "cwd", true)
	if err != nil {
		return err
	}
	for k := range req.Env {
		if k == "" || containsNUL(k) || containsNUL(req.Env[k]) || containsByte(k, '=') {
			return web.Invalid("env", "%q is not a valid variable", k)
		}
	}
	ag, release, err := a.use(r, c)
	if err != nil {
		return err
	}
	defer release()
	areq := agent.ExecRequest{Argv: argv, Cwd: cwd, Env: a.withEgress(c, req.Env), Stdin: stdin, TimeoutMS: timeout}
	reqID := newRequestID()
	started := time.Now()
	if req.Stream {
		return a.stream(w, r, c, ag, areq, reqID, b64, started)
	}
	res, err := ag.Exec(r.Context(), areq)
	if err != nil {
		a.exited(r, c, reqID, startFailed(err), nil, started)
		return agentError(err, c.id)
	}
	code := res.ExitCode
	a.exited(r, c, reqID, false, &code, started)
	enc := func(s string) string { return s }
	out := computertype.ExecResult{RequestID: reqID, ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut, Truncated: res.Truncated, DurationMs: res.DurationMS}
	if b64 {
		enc = func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
		out.Encoding = "base64"
	}
	out.Stdout, out.Stderr, out.Output = enc(res.Stdout), enc(res.Stderr), enc(res.Output)
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// startFailed reports that err means the command never ran (so no
// process.exited fact is due).
func startFailed(err error) bool {
	var ae *agent.Error
	return errors.As(err, &ae) && (ae.Status == http.StatusUnprocessableEntity || ae.Status == http.StatusBadRequest)
}

// stream runs a command with its output sent as NDJSON events.
func (a *API) stream(w http.ResponseWriter, r *http.Request, c *call, ag *agent.Client, areq agent.ExecRequest, reqID string, b64 bool, started time.Time) error {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	ev := &eventWriter{w: w, rc: http.NewResponseController(w)}
	ev.rc.Flush()
	enc := func(p []byte) string {
		if b64 {
			return base64.StdEncoding.EncodeToString(p)
		}
		return string(p)
	}
	stdout := writerFunc(func(p []byte) (int, error) {
		return len(p), ev.send(computertype.ExecEvent{Type: "stdout", Data: enc(p)})
	})
	stderr := writerFunc(func(p []byte) (int, error) {
		return len(p), ev.send(computertype.ExecEvent{Type: "stderr", Data: enc(p)})
	})
	code, err := ag.ExecStream(r.Context(), areq, nil, stdout, stderr)
	if err != nil {
		a.exited(r, c, reqID, startFailed(err), nil, started)
		status := http.StatusBadGateway
		var ae *agent.Error
		if errors.As(err, &ae) {
			status = ae.Status
		}
		ev.send(computertype.ExecEvent{Type: "error", RequestID: reqID, Error: err.Error(), Status: status})
		return nil
	}
	a.exited(r, c, reqID, false, &code, started)
	ev.send(computertype.ExecEvent{Type: "exit", RequestID: reqID, ExitCode: &code, DurationMs: time.Since(started).Milliseconds()})
	return nil
}

// eventWriter writes NDJSON events, flushing each.
type eventWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (e *eventWriter) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return e.rc.Flush()
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// exited emits the process.exited fact of one run, unless it never
// started. code is nil when the run's end is unknown (the caller went
// away, the agent broke off).
func (a *API) exited(r *http.Request, c *call, reqID string, neverRan bool, code *int, started time.Time) {
	if neverRan {
		return
	}
	a.emit(r.Context(), processExited(c, reqID, code, time.Since(started).Milliseconds()))
}

func newRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// noReadDeadline lifts the server's ReadTimeout from a request whose body
// may take long to arrive (a large files.writeBytes upload), which the
// deadline would otherwise cut off.
func noReadDeadline(w http.ResponseWriter) {
	http.NewResponseController(w).SetReadDeadline(time.Time{})
}

func containsNUL(s string) bool { return containsByte(s, 0) }

func containsByte(s string, b byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return true
		}
	}
	return false
}

// ---- terminal ----

// terminal is GET /computers/{id}/terminal: a websocket PTY session in the
// Computer, framed as the deployments' shell is (app-lb.md §2.6): binary
// 0x01+bytes from the client are keystrokes, 0x02+bytes from the server
// are terminal output, and text messages are JSON control messages
// ({"type":"ready"} first, {"type":"resize","cols":C,"rows":R} from the
// client, {"type":"exit","code":N} or {"type":"error","message":M} last).
func (a *API) terminal(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	cols, rows, err := ptybridge.Size(q)
	if err != nil {
		return err
	}
	cwd, err := workPath(q.Get("cwd"), "cwd", true)
	if err != nil {
		return err
	}
	ag, release, err := a.use(r, c)
	if err != nil {
		return err
	}
	defer release()
	started := time.Now()
	sess, err := ag.PTY(r.Context(), agent.PTYRequest{Cwd: cwd, Cols: cols, Rows: rows, Env: a.withEgress(c, nil)})
	if err != nil {
		return agentError(err, c.id)
	}
	reqID := newRequestID()
	ptybridge.Serve(w, r, sess, ptybridge.Options{
		Ready: map[string]string{"type": "ready", "computerId": c.id, "requestId": reqID},
		Ended: func(code int, err error) {
			if err != nil {
				a.exited(r, c, reqID, false, nil, started)
			} else {
				a.exited(r, c, reqID, false, &code, started)
			}
		},
	})
	return nil
}
