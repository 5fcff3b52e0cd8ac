package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// waitDelay bounds how long a command's pipes are read after it exits:
// a background child that inherited them must not hold the answer back.
const waitDelay = time.Second

// firstMessageTimeout bounds the wait for a session's request message.
const firstMessageTimeout = 30 * time.Second

// maxMessage is the websocket read limit: the request message carries
// stdin inline, data frames are far smaller.
const maxMessage = maxJSONBody

var errTimedOut = errors.New("command timed out")

// command validates what to run and builds the exec.Cmd for it in its own
// process group, killed (the whole group) when ctx ends.
func (s *Server) command(ctx context.Context, argv []string, command, cwd string, env map[string]string) (*exec.Cmd, error) {
	switch {
	case len(argv) > 0 && command != "":
		return nil, errorf(http.StatusBadRequest, "set argv or command, not both")
	case len(argv) == 0 && command == "":
		return nil, errorf(http.StatusBadRequest, "set argv or command")
	}
	if command != "" {
		argv = []string{"/bin/sh", "-c", command}
	}
	if argv[0] == "" {
		return nil, errorf(http.StatusBadRequest, "argv[0] is empty")
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, errorf(http.StatusBadRequest, "argv or command contains a NUL byte")
		}
	}
	if strings.IndexByte(cwd, 0) >= 0 {
		return nil, errorf(http.StatusBadRequest, "cwd contains a NUL byte")
	}
	keys := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return nil, errorf(http.StatusBadRequest, "bad environment variable %q", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// exec.Cmd keeps the last of duplicate keys, so appending overrides.
	cmdEnv := os.Environ()
	for _, k := range keys {
		cmdEnv = append(cmdEnv, k+"="+env[k])
	}
	var dir string
	switch {
	case cwd == "":
		dir = s.opts.Dir
	case filepath.IsAbs(cwd) || s.opts.Dir == "":
		dir = cwd
	default:
		dir = filepath.Join(s.opts.Dir, cwd)
	}
	var cmd *exec.Cmd
	if command != "" {
		// A plain command line runs without the shell (shell.go).
		if path, words, ok := shellFree(command, cmdEnv, dir); ok {
			cmd = exec.CommandContext(ctx, path, words[1:]...)
			cmd.Args[0] = words[0]
		}
	}
	if cmd == nil {
		cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	}
	cmd.Env, cmd.Dir = cmdEnv, dir
	setGroup(cmd)
	cmd.Cancel = func() error { return signalGroup(cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	return cmd, nil
}

// decodeBytes decodes s per enc.
func decodeBytes(s, enc string) ([]byte, error) {
	switch enc {
	case "", EncodingText:
		return []byte(s), nil
	case EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "stdin is not valid base64: %v", err)
		}
		return b, nil
	}
	return nil, errorf(http.StatusBadRequest, "unknown encoding %q (want %q or %q)", enc, EncodingText, EncodingBase64)
}

func encodeBytes(b []byte, enc string) string {
	if enc == EncodingBase64 {
		return base64.StdEncoding.EncodeToString(b)
	}
	return string(b)
}

// capture collects a buffered exec's output. One mutex orders stdout and
// stderr writes, which is what makes Output interleaved in read order.
type capture struct {
	mu                     sync.Mutex
	room                   int64
	stdout, stderr, output bytes.Buffer
	truncated              bool
}

// captureWriter is one stream of a capture. It never fails, so the command
// is drained (not blocked, not SIGPIPEd) past the cap.
type captureWriter struct {
	c   *capture
	buf *bytes.Buffer
}

func (w captureWriter) Write(p []byte) (int, error) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	q := p
	if int64(len(q)) > c.room {
		q = q[:c.room]
		c.truncated = true
	}
	c.room -= int64(len(q))
	w.buf.Write(q)
	c.output.Write(q)
	return len(p), nil
}

// execContext derives the command's context: cancelled with the request,
// and after timeoutMS with errTimedOut as cause.
func execContext(parent context.Context, timeoutMS int64) (context.Context, context.CancelFunc, error) {
	switch {
	case timeoutMS < 0:
		return nil, nil, errorf(http.StatusBadRequest, "timeout_ms is negative")
	case timeoutMS > 0:
		ctx, cancel := context.WithTimeoutCause(parent, time.Duration(timeoutMS)*time.Millisecond, errTimedOut)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithCancel(parent)
	return ctx, cancel, nil
}

func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	var req ExecRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	res, err := s.execBuffered(r.Context(), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) execBuffered(parent context.Context, req ExecRequest) (ExecResult, error) {
	stdin, err := decodeBytes(req.Stdin, req.Encoding)
	if err != nil {
		return ExecResult{}, err
	}
	if req.MaxOutput < 0 {
		return ExecResult{}, errorf(http.StatusBadRequest, "max_output is negative")
	}
	ctx, cancel, err := execContext(parent, req.TimeoutMS)
	if err != nil {
		return ExecResult{}, err
	}
	defer cancel()
	cmd, err := s.command(ctx, req.Argv, req.Command, req.Cwd, req.Env)
	if err != nil {
		return ExecResult{}, err
	}
	c := &capture{room: DefaultMaxOutput}
	if req.MaxOutput > 0 && req.MaxOutput < c.room {
		c.room = req.MaxOutput
	}
	cmd.Stdout = captureWriter{c, &c.stdout}
	cmd.Stderr = captureWriter{c, &c.stderr}
	if req.Stdin != "" {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	start := time.Now()
	if err := children.start(cmd); err != nil {
		s.opts.Logf("exec %q: %v", cmd.Args, err)
		return ExecResult{}, errorf(http.StatusUnprocessableEntity, "cannot start command: %v", err)
	}
	werr := children.wait(cmd)
	if cmd.ProcessState == nil {
		return ExecResult{}, errorf(http.StatusInternalServerError, "waiting for command: %v", werr)
	}
	res := ExecResult{DurationMS: time.Since(start).Milliseconds()}
	res.ExitCode, res.Signal = exitStatus(cmd.ProcessState)
	if context.Cause(ctx) == errTimedOut {
		res.TimedOut, res.ExitCode = true, TimeoutExitCode
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.Encoding == EncodingBase64 {
		res.Encoding = EncodingBase64
	}
	res.Stdout = encodeBytes(c.stdout.Bytes(), req.Encoding)
	res.Stderr = encodeBytes(c.stderr.Bytes(), req.Encoding)
	res.Output = encodeBytes(c.output.Bytes(), req.Encoding)
	res.Truncated = c.truncated
	return res, nil
}

// session is the agent's end of a websocket session (streaming exec or
// PTY): a connection whose messages follow the package's framing.
type session struct {
	c *websocket.Conn
}

// accept upgrades r and reads the session's request message into v. On
// failure it has answered the client and returns nil.
func (s *Server) accept(w http.ResponseWriter, r *http.Request, v any) *session {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept answered the client.
	}
	c.SetReadLimit(maxMessage)
	ss := &session{c: c}
	ctx, cancel := context.WithTimeout(r.Context(), firstMessageTimeout)
	defer cancel()
	typ, data, err := c.Read(ctx)
	if err != nil {
		c.CloseNow()
		return nil
	}
	if typ != websocket.MessageText {
		ss.fail(r.Context(), errorf(http.StatusBadRequest, "first message must be the JSON request as text"))
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		ss.fail(r.Context(), errorf(http.StatusBadRequest, "malformed JSON request: %v", err))
		return nil
	}
	return ss
}

// fail ends the session with a CtlError message.
func (ss *session) fail(ctx context.Context, err error) {
	status := http.StatusInternalServerError
	var he *httpError
	if errors.As(err, &he) {
		status = he.status
	}
	_ = ss.control(ctx, Control{Type: CtlError, Error: err.Error(), Status: status})
	ss.c.Close(websocket.StatusNormalClosure, "")
}

func (ss *session) control(ctx context.Context, m Control) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return ss.c.Write(ctx, websocket.MessageText, b)
}

// exit sends CtlExit for the finished cmd and closes the session.
func (ss *session) exit(ctx context.Context, cmd *exec.Cmd, timedOut bool) {
	m := Control{Type: CtlExit, ExitCode: -1}
	if cmd.ProcessState != nil {
		m.ExitCode, m.Signal = exitStatus(cmd.ProcessState)
	}
	if timedOut {
		m.ExitCode, m.TimedOut = TimeoutExitCode, true
	}
	if ss.control(ctx, m) == nil {
		ss.c.Close(websocket.StatusNormalClosure, "")
	}
	ss.c.CloseNow()
}

// frameWriter sends what is written to it as binary messages on channel ch.
type frameWriter struct {
	ctx context.Context
	c   *websocket.Conn
	ch  byte
}

func (f frameWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	b := make([]byte, 1+len(p))
	b[0] = f.ch
	copy(b[1:], p)
	if err := f.c.Write(f.ctx, websocket.MessageBinary, b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// readLoop reads the client's messages until the connection ends, then
// calls cancel (which kills the command). It first writes prefix (the
// request's inline stdin) to stdin; stdin frames follow it, control
// messages go to ctl. A nil stdin drops stdin frames.
func (ss *session) readLoop(ctx context.Context, cancel context.CancelFunc, stdin io.WriteCloser, prefix []byte, ctl func(Control) error) {
	defer cancel()
	if len(prefix) > 0 && stdin != nil {
		_, _ = stdin.Write(prefix)
	}
	for {
		typ, data, err := ss.c.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if len(data) == 0 || data[0] != ChanStdin {
				ss.c.Close(websocket.StatusUnsupportedData, "binary messages must start with channel 0 (stdin)")
				return
			}
			if stdin != nil {
				// A command that no longer reads stdin is not an error of
				// the session.
				_, _ = stdin.Write(data[1:])
			}
			continue
		}
		var m Control
		if err := json.Unmarshal(data, &m); err != nil {
			ss.c.Close(websocket.StatusUnsupportedData, "malformed control message")
			return
		}
		if m.Type == CtlEOF {
			if stdin != nil {
				stdin.Close()
			}
			continue
		}
		if err := ctl(m); err != nil {
			ss.c.Close(websocket.StatusPolicyViolation, truncateReason(err.Error()))
			return
		}
	}
}

// truncateReason fits a close reason into a control frame's 123 bytes.
func truncateReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

func signalControl(cmd *exec.Cmd, m Control) error {
	if m.Type != CtlSignal {
		return errors.New("unknown control message type " + m.Type)
	}
	sig, err := parseSignal(m.Signal)
	if err != nil {
		return err
	}
	_ = signalGroup(cmd.Process.Pid, sig)
	return nil
}

func (s *Server) handleExecStream(w http.ResponseWriter, r *http.Request) {
	s.sessions.Add(1)
	defer s.sessions.Done()
	var req ExecRequest
	ss := s.accept(w, r, &req)
	if ss == nil {
		return
	}
	defer ss.c.CloseNow()
	stdin, err := decodeBytes(req.Stdin, req.Encoding)
	if err != nil {
		ss.fail(r.Context(), err)
		return
	}
	ctx, cancel, err := execContext(r.Context(), req.TimeoutMS)
	if err != nil {
		ss.fail(r.Context(), err)
		return
	}
	defer cancel()
	cmd, err := s.command(ctx, req.Argv, req.Command, req.Cwd, req.Env)
	if err != nil {
		ss.fail(r.Context(), err)
		return
	}
	pipe, err := cmd.StdinPipe()
	if err != nil {
		ss.fail(r.Context(), err)
		return
	}
	// Reads and writes use the session's context, not the command's:
	// cancelling a websocket operation's context closes the connection,
	// and a timed-out command still owes the client its exit message.
	sctx := r.Context()
	cmd.Stdout = frameWriter{sctx, ss.c, ChanStdout}
	cmd.Stderr = frameWriter{sctx, ss.c, ChanStderr}
	if err := children.start(cmd); err != nil {
		s.opts.Logf("exec %q: %v", cmd.Args, err)
		ss.fail(sctx, errorf(http.StatusUnprocessableEntity, "cannot start command: %v", err))
		return
	}
	go ss.readLoop(sctx, cancel, pipe, stdin, func(m Control) error { return signalControl(cmd, m) })
	_ = children.wait(cmd)
	// The exit message goes out even when the timeout cancelled ctx.
	ss.exit(r.Context(), cmd, context.Cause(ctx) == errTimedOut)
}
