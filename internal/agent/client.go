package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"sync"

	"github.com/coder/websocket"
)

// Error is an error answer of the agent.
type Error struct {
	// Status is the HTTP status (for a session that failed to start, the
	// status the same failure gets from the buffered endpoint).
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("agent: %s (%d)", e.Message, e.Status) }

// Is lets callers test file errors with errors.Is(err, fs.ErrNotExist)
// and friends.
func (e *Error) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Status == http.StatusNotFound
	case fs.ErrExist:
		return e.Status == http.StatusConflict
	case fs.ErrPermission:
		return e.Status == http.StatusForbidden
	}
	return false
}

// Client talks to one agent. It keeps connections alive, so a buffered
// exec on a warm connection is one round trip. Its methods are safe for
// concurrent use.
type Client struct {
	hc *http.Client
	tr *http.Transport
}

// base is the URL every request goes to; the host is a placeholder, since
// dial decides where connections go.
const base = "http://agent"

// NewClient returns a Client whose connections come from dial (a unix
// socket, vsock, a port forwarded into a VM...).
func NewClient(dial func(ctx context.Context) (net.Conn, error)) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx)
		},
		MaxIdleConnsPerHost: 16,
		DisableCompression:  true,
	}
	return &Client{hc: &http.Client{Transport: tr}, tr: tr}
}

// UnixDialer returns a dial function for NewClient that connects to the
// unix socket at path.
func UnixDialer(path string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}

// Close closes the idle connections; the Client remains usable.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// do sends a request and decodes a JSON answer into out (unless nil).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, out any) error {
	resp, err := c.send(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("agent: decoding %s %s answer: %w", method, path, err)
	}
	return nil
}

// send sends a request and returns a 2xx response, or the answer as *Error.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Response, error) {
	return c.sendN(ctx, method, path, q, body, -1)
}

// sendN is send with a body of exactly n bytes, or of a length that
// net/http works out (or sends chunked) when n is negative.
func (c *Client) sendN(ctx context.Context, method, path string, q url.Values, body io.Reader, n int64) (*http.Response, error) {
	u := base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if n >= 0 && body != nil {
		req.ContentLength = n
		if n == 0 {
			req.Body = http.NoBody
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb errorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
		eb.Error = http.StatusText(resp.StatusCode)
	}
	return nil, &Error{Status: resp.StatusCode, Message: eb.Error}
}

// Info returns the agent's identity and protocol version.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var info Info
	err := c.do(ctx, "GET", "/v1/info", nil, nil, &info)
	return info, err
}

// Exec runs a command to completion and returns its outcome. Stdin and the
// output fields of the result carry raw bytes: the client sends and
// receives them base64-encoded, whatever req.Encoding says. A command that
// cannot start is an *Error with Status 422.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	req.Encoding = EncodingBase64
	req.Stdin = base64.StdEncoding.EncodeToString([]byte(req.Stdin))
	b, err := json.Marshal(req)
	if err != nil {
		return ExecResult{}, fmt.Errorf("agent: encoding exec request: %w", err)
	}
	var res ExecResult
	if err := c.do(ctx, "POST", "/v1/exec", nil, bytes.NewReader(b), &res); err != nil {
		return ExecResult{}, err
	}
	if res.Encoding == EncodingBase64 {
		for _, f := range []*string{&res.Stdout, &res.Stderr, &res.Output} {
			b, err := base64.StdEncoding.DecodeString(*f)
			if err != nil {
				return ExecResult{}, fmt.Errorf("agent: decoding exec output: %w", err)
			}
			*f = string(b)
		}
		res.Encoding = ""
	}
	return res, nil
}

// session dials a websocket session on path and sends the request message.
func (c *Client) session(ctx context.Context, path string, req any) (*websocket.Conn, error) {
	conn, resp, err := websocket.Dial(ctx, "ws://agent"+path, &websocket.DialOptions{HTTPClient: c.hc})
	if err != nil {
		if resp != nil && resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, &Error{Status: resp.StatusCode, Message: fmt.Sprintf("session refused: %v", err)}
		}
		return nil, fmt.Errorf("agent: %w", err)
	}
	conn.SetReadLimit(maxMessage)
	b, err := json.Marshal(req)
	if err != nil {
		conn.CloseNow()
		return nil, err
	}
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("agent: sending session request: %w", err)
	}
	return conn, nil
}

// controlMessage decodes a text message; an agent CtlError becomes *Error.
func controlMessage(data []byte) (Control, error) {
	var m Control
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("agent: malformed control message: %w", err)
	}
	if m.Type == CtlError {
		status := m.Status
		if status == 0 {
			status = http.StatusUnprocessableEntity
		}
		return m, &Error{Status: status, Message: m.Error}
	}
	return m, nil
}

// ExecStream runs a command with its streams connected: stdin (nil for
// none) is copied to the command and closed at EOF, and output goes to
// stdout and stderr as it is produced. It returns the exit code, which is
// TimeoutExitCode when req.TimeoutMS killed it. Cancelling ctx closes the
// session, which kills the command's process group. As with os/exec, a
// stdin that blocks keeps a goroutine reading it until it returns.
func (c *Client) ExecStream(ctx context.Context, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if req.Encoding == "" || req.Encoding == EncodingText {
		// Keep inline stdin bytes exact.
		req.Encoding = EncodingBase64
		req.Stdin = base64.StdEncoding.EncodeToString([]byte(req.Stdin))
	}
	conn, err := c.session(ctx, "/v1/exec/stream", req)
	if err != nil {
		return -1, err
	}
	defer conn.CloseNow()
	go sendStdin(ctx, conn, stdin)
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return -1, ctx.Err()
			}
			return -1, fmt.Errorf("agent: session ended before the command: %w", err)
		}
		if typ == websocket.MessageText {
			m, err := controlMessage(data)
			if err != nil {
				return -1, err
			}
			if m.Type == CtlExit {
				conn.Close(websocket.StatusNormalClosure, "")
				return m.ExitCode, nil
			}
			continue
		}
		if len(data) == 0 {
			continue
		}
		w := stdout
		if data[0] == ChanStderr {
			w = stderr
		}
		if _, err := w.Write(data[1:]); err != nil {
			return -1, fmt.Errorf("agent: writing command output: %w", err)
		}
	}
}

// sendStdin copies r to the session as stdin frames, then sends CtlEOF.
func sendStdin(ctx context.Context, conn *websocket.Conn, r io.Reader) {
	if r != nil {
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf[1:])
			if n > 0 {
				buf[0] = ChanStdin
				if conn.Write(ctx, websocket.MessageBinary, buf[:1+n]) != nil {
					return
				}
			}
			if err != nil {
				break
			}
		}
	}
	b, _ := json.Marshal(Control{Type: CtlEOF})
	_ = conn.Write(ctx, websocket.MessageText, b)
}

// PTY starts a command on a terminal. The session's output must be read
// (as with an os/exec pipe) for it to progress and for Wait to return.
func (c *Client) PTY(ctx context.Context, req PTYRequest) (*PTYSession, error) {
	conn, err := c.session(ctx, "/v1/pty", req)
	if err != nil {
		return nil, err
	}
	// The session outlives PTY's ctx; Close ends it.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pr, pw := io.Pipe()
	s := &PTYSession{conn: conn, ctx: sctx, cancel: cancel, out: pr, done: make(chan struct{}), code: -1}
	go s.readLoop(pw)
	return s, nil
}

// PTYSession is a command running on a terminal in the sandbox. Read
// returns what the terminal prints, Write types into it.
type PTYSession struct {
	conn   *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	out    *io.PipeReader

	once sync.Once
	done chan struct{} // closed when code and err are set
	code int
	err  error
}

func (s *PTYSession) readLoop(pw *io.PipeWriter) {
	finish := func(code int, err error) {
		s.code, s.err = code, err
		close(s.done)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}
	for {
		typ, data, err := s.conn.Read(s.ctx)
		if err != nil {
			finish(-1, fmt.Errorf("agent: terminal session ended before the command: %w", err))
			return
		}
		if typ == websocket.MessageText {
			m, err := controlMessage(data)
			if err != nil {
				finish(-1, err)
				return
			}
			if m.Type == CtlExit {
				s.conn.Close(websocket.StatusNormalClosure, "")
				finish(m.ExitCode, nil)
				return
			}
			continue
		}
		if len(data) > 1 {
			if _, err := pw.Write(data[1:]); err != nil {
				// The reader closed the session; keep reading for the exit.
				continue
			}
		}
	}
}

// Read reads terminal output; it returns io.EOF after the command exited
// and all its output was read.
func (s *PTYSession) Read(p []byte) (int, error) { return s.out.Read(p) }

// Write sends p to the terminal as typed input.
func (s *PTYSession) Write(p []byte) (int, error) {
	b := make([]byte, 1+len(p))
	b[0] = ChanStdin
	copy(b[1:], p)
	if err := s.conn.Write(s.ctx, websocket.MessageBinary, b); err != nil {
		return 0, fmt.Errorf("agent: writing to the terminal: %w", err)
	}
	return len(p), nil
}

func (s *PTYSession) control(m Control) error {
	b, _ := json.Marshal(m)
	if err := s.conn.Write(s.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("agent: terminal session: %w", err)
	}
	return nil
}

// Resize sets the terminal size; the command sees SIGWINCH.
func (s *PTYSession) Resize(cols, rows int) error {
	if cols <= 0 || rows <= 0 || cols > 0xffff || rows > 0xffff {
		return fmt.Errorf("agent: bad terminal size %dx%d", cols, rows)
	}
	return s.control(Control{Type: CtlResize, Cols: cols, Rows: rows})
}

// Signal sends a signal ("INT", "TERM", "9"...) to the command's process
// group.
func (s *PTYSession) Signal(sig string) error {
	return s.control(Control{Type: CtlSignal, Signal: sig})
}

// Wait waits for the command to exit and returns its exit code (128+N when
// killed by signal N).
func (s *PTYSession) Wait() (int, error) {
	<-s.done
	return s.code, s.err
}

// Close ends the session; the agent kills the command's process group if
// it is still running.
func (s *PTYSession) Close() error {
	s.once.Do(func() {
		s.out.Close()
		s.conn.Close(websocket.StatusNormalClosure, "")
		s.conn.CloseNow()
		s.cancel()
	})
	return nil
}

// ReadFile returns the content of the file at path.
func (c *Client) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return c.ReadFileRange(ctx, path, 0, -1)
}

// ReadFileRange returns up to limit bytes (all when limit < 0) of the file
// at path, starting at offset.
func (c *Client) ReadFileRange(ctx context.Context, path string, offset, limit int64) ([]byte, error) {
	b, _, err := c.ReadBytes(ctx, path, offset, limit)
	return b, err
}

// WriteFile atomically replaces the file at path with the content of r.
// A zero mode keeps the mode of the file replaced, or 0644 for a new one.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) (FileInfo, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", formatMode(mode))
	}
	var fi FileInfo
	err := c.do(ctx, "PUT", "/v1/files", q, r, &fi)
	return fi, err
}

// WriteFileN is WriteFile for content of exactly n bytes (a request body
// whose Content-Length is known, say), sent with that length rather than
// chunked: the agent reads it in large pieces. A reader that ends before n
// bytes fails the write, and the file is left as it was.
func (c *Client) WriteFileN(ctx context.Context, path string, r io.Reader, n int64, mode fs.FileMode) (FileInfo, error) {
	if n < 0 {
		return FileInfo{}, fmt.Errorf("agent: WriteFileN: negative length %d", n)
	}
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", formatMode(mode))
	}
	resp, err := c.sendN(ctx, "PUT", "/v1/files", q, r, n)
	if err != nil {
		return FileInfo{}, err
	}
	defer resp.Body.Close()
	var fi FileInfo
	if err := json.NewDecoder(resp.Body).Decode(&fi); err != nil {
		return FileInfo{}, fmt.Errorf("agent: decoding PUT /v1/files answer: %w", err)
	}
	return fi, nil
}

// Stat describes the file at path without following a final symlink.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	err := c.do(ctx, "GET", "/v1/files/stat", url.Values{"path": {path}}, nil, &fi)
	return fi, err
}

// List returns the entries of the directory at path, sorted by name.
func (c *Client) List(ctx context.Context, path string) ([]FileInfo, error) {
	var res ListResult
	err := c.do(ctx, "GET", "/v1/files/list", url.Values{"path": {path}}, nil, &res)
	return res.Entries, err
}

// Mkdir creates the directory at path with mode (0 means 0755); with
// parents it creates missing parents and accepts an existing directory.
func (c *Client) Mkdir(ctx context.Context, path string, mode fs.FileMode, parents bool) (FileInfo, error) {
	req := MkdirRequest{Path: path, Parents: parents}
	if mode != 0 {
		req.Mode = formatMode(mode)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return FileInfo{}, fmt.Errorf("agent: encoding mkdir request: %w", err)
	}
	var fi FileInfo
	err = c.do(ctx, "POST", "/v1/files/mkdir", nil, bytes.NewReader(b), &fi)
	return fi, err
}

// Remove removes the file or empty directory at path; with recursive, a
// directory and everything in it.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.do(ctx, "DELETE", "/v1/files", q, nil, nil)
}
