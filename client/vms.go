package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/apitype"
)

// Exec runs req.Command in one VM of a vm deployment
// (`POST /deployments/:id/exec`) and returns its output. A command that
// exits non-zero is not an error: its code is in ExitCode. With Wake false
// (see [apitype.ExecRequest]) and no VM running, the error is a 409
// ([IsConflict]).
//
// The HTTP client's timeout does not apply: the reply comes only when the
// command ends, which the server bounds by req.TimeoutSecs (60 s by
// default, at most an hour) plus, when it has to start a VM, the
// deployment's cold_start_timeout_secs. ctx bounds the call from this side.
func (c *Client) Exec(ctx context.Context, id string, req apitype.ExecRequest) (*apitype.ExecOutput, error) {
	if id == "" {
		return nil, errNoID
	}
	if strings.TrimSpace(req.Command) == "" {
		return nil, errors.New("client: exec: empty command")
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: exec: %w", err)
	}
	path := deploymentPath(id, "/exec")
	resp, err := c.stream(ctx, http.MethodPost, path, bytes.NewReader(b), http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("client: POST %s: reading response: %w", path, err)
	}
	if int64(len(body)) > maxResponseBytes {
		return nil, fmt.Errorf("client: POST %s: response body exceeds %d bytes", path, maxResponseBytes)
	}
	var out apitype.ExecOutput
	if err := decodeBody(body, &out); err != nil {
		return nil, fmt.Errorf("client: POST %s: decoding %d response: %w", path, resp.StatusCode, err)
	}
	return &out, nil
}

// terminalQuery is the query of a terminal's size and directory: what
// (shell or terminal) names it in an error.
func terminalQuery(what string, opts ShellOptions) (url.Values, error) {
	if opts.Cols < 0 || opts.Cols > 1000 || opts.Rows < 0 || opts.Rows > 1000 {
		return nil, fmt.Errorf("client: %s size %d×%d out of range (1 to 1000 each)", what, opts.Cols, opts.Rows)
	}
	q := url.Values{}
	if opts.Cols > 0 {
		q.Set("cols", strconv.Itoa(opts.Cols))
	}
	if opts.Rows > 0 {
		q.Set("rows", strconv.Itoa(opts.Rows))
	}
	if opts.Cwd != "" {
		q.Set("cwd", opts.Cwd)
	}
	return q, nil
}

// stream sends a request whose reply takes as long as the work it reports
// on (see untimed), with body as it is, header's fields and the client's
// own. A reply that is not 2xx comes back as [*Error]; otherwise the
// caller reads and closes resp.Body.
func (c *Client) stream(ctx context.Context, method, p string, body io.Reader, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+p, body)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, p, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	c.setHeaders(req.Header)
	resp, err := c.untimed().Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return nil, newError(resp.StatusCode, b)
	}
	return resp, nil
}

// upload sends body, of contentType, as it is (see stream) and decodes the
// JSON reply into out.
func (c *Client) upload(ctx context.Context, method, p, contentType string, body io.Reader, out any) error {
	resp, err := c.stream(ctx, method, p, body, http.Header{"Content-Type": {contentType}, "Accept": {"application/json"}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	if err := decodeBody(b, out); err != nil {
		return fmt.Errorf("client: %s %s: %w", method, p, err)
	}
	return nil
}

// untimed returns the HTTP client without its overall timeout, for calls
// whose reply takes as long as the work it reports on (exec, followed
// logs). Everything else about it — transport, TLS, redirects — is kept.
func (c *Client) untimed() *http.Client {
	if c.hc.Timeout == 0 {
		return c.hc
	}
	hc := *c.hc
	hc.Timeout = 0
	return &hc
}

// EvictVM removes one VM from a vm deployment
// (`DELETE /deployments/:id/vms/:sandbox_id`). Without force the VM stops
// taking new requests and is killed once its in-flight ones finish: the
// outcome is "draining" (or "killed" when it was idle). With force it is
// killed at once. An unknown VM is a 404 ([IsNotFound]).
func (c *Client) EvictVM(ctx context.Context, id, sandbox string, force bool) (*apitype.EvictOutcome, error) {
	if id == "" {
		return nil, errNoID
	}
	if sandbox == "" {
		return nil, errors.New("client: empty sandbox id")
	}
	path := deploymentPath(id, "/vms/"+url.PathEscape(sandbox)) + "?force=" + strconv.FormatBool(force)
	var out apitype.EvictOutcome
	if _, err := c.send(ctx, http.MethodDelete, path, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Logs copies a vm deployment's recent VM output to w
// (`GET /deployments/:id/logs`): text lines of the form
// "<time> <replica> <stream> <text>", oldest first per replica. limit is
// the most lines per replica (0 to 10000); a negative limit leaves it to
// the server, which sends 100.
//
// With follow, Logs keeps copying the lines the VMs write from then on,
// until ctx is done, which is how a caller stops it; the HTTP client's
// timeout does not apply. berth writes followed lines in the backlog's
// format; Logs treats every line as opaque text either way. When ctx ends
// a follow, Logs returns nil.
func (c *Client) Logs(ctx context.Context, id string, limit int, follow bool, w io.Writer) error {
	if id == "" {
		return errNoID
	}
	if limit > 10000 {
		return fmt.Errorf("client: logs limit %d is over 10000", limit)
	}
	q := url.Values{}
	if limit >= 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	q.Set("follow", strconv.FormatBool(follow))
	path := deploymentPath(id, "/logs") + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return fmt.Errorf("client: GET %s: %w", path, err)
	}
	req.Header.Set("Accept", "text/plain")
	c.setHeaders(req.Header)
	hc := c.hc
	if follow {
		hc = c.untimed()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return newError(resp.StatusCode, b)
	}
	var body io.Reader = resp.Body
	if !follow {
		body = io.LimitReader(resp.Body, maxResponseBytes+1)
	}
	n, err := io.Copy(w, body)
	switch {
	case err != nil && follow && ctx.Err() != nil:
		return nil // the caller stopped following
	case err != nil:
		return fmt.Errorf("client: GET %s: reading logs: %w", path, err)
	case !follow && n > maxResponseBytes:
		return fmt.Errorf("client: GET %s: logs exceed %d bytes", path, maxResponseBytes)
	}
	return nil
}

// ShellOptions configures [Client.Shell]. The zero value opens an 80×24
// shell in any running VM, starting one if none runs.
type ShellOptions struct {
	// Cols and Rows are the terminal's initial size; 0 leaves it to the
	// server (80×24). Each must be at most 1000.
	Cols, Rows int
	// Cwd is the shell's working directory inside the VM.
	Cwd string
	// NoWake fails with a 409 ([IsConflict]) instead of starting a VM when
	// none runs.
	NoWake bool
	// SandboxID picks one VM; empty picks any ready one.
	SandboxID string
}

// Frame tags of the shell protocol (app-lb.md §2.6): the first byte of
// every binary message.
const (
	shellStdin  = 0x01 // client → server: keystrokes
	shellOutput = 0x02 // server → client: terminal output
)

// maxShellChunk is the most stdin bytes sent in one message. The server
// reads messages with coder/websocket's default 32 KiB limit, and a larger
// one would end the session.
const maxShellChunk = 16 << 10

// shellReadLimit is the largest message accepted from the server: its
// output frames are at most 32 KiB, and anything far larger is not berth.
const shellReadLimit = 1 << 20

// ShellSession is an interactive shell in a VM, opened by [Client.Shell].
// Read returns the terminal's output and Write sends keystrokes; the
// remote side is a PTY, so output already carries "\r\n" and echoes what is
// typed. Read, Write and Resize may be called from different goroutines.
//
// The output must be read (until Read returns [io.EOF]) for the session to
// make progress, as with a pipe: unread output holds up the exit status
// that [ShellSession.Wait] returns.
type ShellSession struct {
	conn    *websocket.Conn
	ctx     context.Context
	sandbox string

	out *io.PipeReader

	done chan struct{} // closed when the exit status (or failure) is known
	code int
	err  error

	closeOnce sync.Once
}

// Shell opens an interactive shell in a VM of a vm deployment over a
// websocket (`GET /deployments/:id/shell`), with the same credentials as
// every other request. It returns once the server reports the session
// ready, so [ShellSession.SandboxID] names the VM. Errors before the
// session starts (no such deployment, no running VM with NoWake) come back
// as [*Error].
//
// ctx bounds the whole session: when it is done the connection is closed.
// Call [ShellSession.Close] when finished with the session.
func (c *Client) Shell(ctx context.Context, id string, opts ShellOptions) (*ShellSession, error) {
	if id == "" {
		return nil, errNoID
	}
	q, err := terminalQuery("shell", opts)
	if err != nil {
		return nil, err
	}
	if opts.NoWake {
		q.Set("wake", "false")
	}
	if opts.SandboxID != "" {
		q.Set("sandbox_id", opts.SandboxID)
	}
	return c.openTerminal(ctx, "shell", deploymentPath(id, "/shell"), q)
}

// openTerminal opens a websocket session of the shell protocol at path?q;
// what (shell or terminal) names it in an error.
func (c *Client) openTerminal(ctx context.Context, what, path string, q url.Values) (*ShellSession, error) {
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	h := http.Header{}
	c.setHeaders(h)
	conn, resp, err := websocket.Dial(ctx, c.base+path, &websocket.DialOptions{
		HTTPClient: c.hc, // Dial applies its Timeout to the handshake only
		HTTPHeader: h,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			var b []byte
			if resp.Body != nil {
				b, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
			}
			return nil, newError(resp.StatusCode, b)
		}
		return nil, fmt.Errorf("client: GET %s: %w", path, err)
	}
	conn.SetReadLimit(shellReadLimit)

	// The first message says which VM the shell runs in (a Computer's
	// names none), or why none does.
	sandbox, err := readReady(ctx, conn)
	if err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("client: %s: %w", what, err)
	}
	pr, pw := io.Pipe()
	s := &ShellSession{conn: conn, ctx: ctx, sandbox: sandbox, out: pr, done: make(chan struct{})}
	go s.readLoop(pw)
	return s, nil
}

// shellControl is a text message of the shell protocol.
type shellControl struct {
	Type      string `json:"type"`
	SandboxID string `json:"sandbox_id,omitempty"`
	Code      *int   `json:"code,omitempty"`
	Message   string `json:"message,omitempty"`
	Cols      int    `json:"cols,omitempty"`
	Rows      int    `json:"rows,omitempty"`
}

// readReady reads the server's first message, which must be "ready".
func readReady(ctx context.Context, conn *websocket.Conn) (string, error) {
	typ, msg, err := conn.Read(ctx)
	if err != nil {
		return "", fmt.Errorf("waiting for the session to start: %w", err)
	}
	var m shellControl
	if typ != websocket.MessageText || json.Unmarshal(msg, &m) != nil {
		return "", errors.New("the server did not start the session with a ready message")
	}
	switch m.Type {
	case "ready":
		return m.SandboxID, nil
	case "error":
		return "", errors.New(m.Message)
	}
	return "", fmt.Errorf("the server started the session with %q instead of ready", m.Type)
}

// readLoop moves output frames into the pipe behind Read until the server
// reports the exit status or the connection ends.
func (s *ShellSession) readLoop(pw *io.PipeWriter) {
	code, err := -1, error(nil)
	defer func() {
		s.code, s.err = code, err
		close(s.done)
		if err != nil {
			pw.CloseWithError(err)
		} else {
			pw.Close()
		}
		s.conn.Close(websocket.StatusNormalClosure, "")
	}()
	for {
		typ, msg, rerr := s.conn.Read(s.ctx)
		if rerr != nil {
			if s.ctx.Err() != nil {
				err = s.ctx.Err()
			} else {
				err = fmt.Errorf("client: shell: connection ended without an exit status: %w", rerr)
			}
			return
		}
		if typ == websocket.MessageBinary {
			if len(msg) > 1 && msg[0] == shellOutput {
				if _, werr := pw.Write(msg[1:]); werr != nil {
					err = fmt.Errorf("client: shell: %w", werr) // Close was called
					return
				}
			}
			continue
		}
		var m shellControl
		if json.Unmarshal(msg, &m) != nil {
			continue // not ours to interpret; a newer server may send more
		}
		switch m.Type {
		case "exit":
			if m.Code == nil {
				err = errors.New("client: shell: exit message without a code")
				return
			}
			code = *m.Code
			return
		case "error":
			err = fmt.Errorf("client: shell: %s", m.Message)
			return
		}
	}
}

// SandboxID returns the VM the shell runs in.
func (s *ShellSession) SandboxID() string { return s.sandbox }

// Read reads terminal output. It returns [io.EOF] once the shell has
// exited and all its output has been read, and the session's failure if it
// ended otherwise.
func (s *ShellSession) Read(p []byte) (int, error) { return s.out.Read(p) }

// Write sends keystrokes (bytes for the remote terminal's input). It fails
// once the session has ended.
func (s *ShellSession) Write(p []byte) (int, error) {
	select {
	case <-s.done:
		// The remote shell has exited; the connection may linger until the
		// server closes it, but nothing reads the input any more.
		return 0, errors.New("client: shell: the remote shell has exited")
	default:
	}
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), maxShellChunk)]
		msg := make([]byte, 1+len(chunk))
		msg[0] = shellStdin
		copy(msg[1:], chunk)
		if err := s.conn.Write(s.ctx, websocket.MessageBinary, msg); err != nil {
			return n, fmt.Errorf("client: shell: %w", err)
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// Resize tells the remote terminal its new size, as a local terminal
// reports on SIGWINCH.
func (s *ShellSession) Resize(cols, rows int) error {
	if cols < 1 || cols > 1000 || rows < 1 || rows > 1000 {
		return fmt.Errorf("client: shell size %d×%d out of range (1 to 1000 each)", cols, rows)
	}
	b, _ := json.Marshal(shellControl{Type: "resize", Cols: cols, Rows: rows})
	if err := s.conn.Write(s.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("client: shell: %w", err)
	}
	return nil
}

// Wait blocks until the session ends and returns the shell's exit code. The
// error is not nil when no exit code came: the server reported a failure,
// the connection broke, ctx ended or Close was called. Output not yet read
// must be read for Wait to return (see [ShellSession]).
func (s *ShellSession) Wait() (code int, err error) {
	<-s.done
	return s.code, s.err
}

// Close ends the session, closing the connection, which ends the remote
// shell too. It is safe to call more than once and after the shell exited.
func (s *ShellSession) Close() error {
	s.closeOnce.Do(func() {
		s.out.CloseWithError(errors.New("client: shell: session closed"))
		s.conn.CloseNow()
	})
	return nil
}
