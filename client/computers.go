package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype/computertype"
)

// The Computer API (/computers): persistent sandboxes, the grants that let
// agents use them, and their operations. Its JSON is camelCase and its
// times are Unix milliseconds, as in the Computer contract. The wire types
// are package computertype's, the ones the server encodes; the names here
// are aliases of them, so a client and the server cannot disagree.
type (
	// Computer is a Computer as the API describes it.
	Computer = computertype.Computer
	// ComputerBacking is one place a Computer can run: kind "process",
	// "platform-container" or "on-box-vm" (with HostID).
	ComputerBacking = computertype.HostedBacking
	// ComputerState is running, sleeping, starting, or queued at Position.
	ComputerState = computertype.ComputerRuntimeState
	// NewComputer is the body of [Client.CreateComputer]. Every field is
	// optional: the server picks an id and its defaults.
	NewComputer = computertype.NewComputer
	// ComputerProvenance is who a grant acts for.
	ComputerProvenance = computertype.ComputerProvenance
	// NewComputerGrant is the body of [Client.GrantComputer]: exactly one
	// of ExpiresAt (Unix milliseconds) and ExpiresInSecs.
	NewComputerGrant = computertype.NewGrant
	// ComputerGrant is an issued grant. Token, the bearer credential, is
	// set only in the answer to the issue, once.
	ComputerGrant = computertype.Grant
	// ComputerExec is a command for [Client.ComputerExec]: Argv runs a
	// program (exec), Script a bash script (bash). Cwd is relative to the
	// workspace. [Client.StartComputerProcess] takes its Argv, Script, Cwd
	// and Env.
	ComputerExec = computertype.ExecRequest
	// ComputerPort is an exposed port and where the gateway reaches it.
	ComputerPort = computertype.Port
	// ComputerWrite describes a file written by [Client.WriteComputerFile].
	ComputerWrite = computertype.WriteResult
	// ComputerEdit is one replacement of [Client.EditComputerFile].
	ComputerEdit = computertype.Edit
	// ComputerEdited is the answer of [Client.EditComputerFile].
	ComputerEdited = computertype.EditResult
	// ComputerPatched is one file [Client.PatchComputer] changed.
	ComputerPatched = computertype.PatchedFile
	// ComputerProcess is a background process of a Computer.
	ComputerProcess = computertype.Process
)

// ComputerExit is how a command run by [Client.ComputerExec] ended.
type ComputerExit struct {
	RequestID  string
	ExitCode   int
	DurationMs int64
}

// ComputerFact is one entry of a Computer's facts log
// ([computertype.FactRecord]) with the fact undecoded: a computerFactSchema
// object kept as the server sent it, so a kind newer than this client
// passes through (FactRecord's decoding refuses kinds it does not know).
type ComputerFact struct {
	Seq  int64           `json:"seq"`
	Fact json.RawMessage `json:"fact"`
}

var errNoComputer = errors.New("client: empty Computer id")

func computerPath(id, suffix string) string {
	return "/computers/" + url.PathEscape(id) + suffix
}

// CreateComputer creates a Computer (`POST /computers`).
func (c *Client) CreateComputer(ctx context.Context, req NewComputer) (*Computer, error) {
	var out Computer
	if _, err := c.send(ctx, http.MethodPost, "/computers", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Computers lists the Computers the caller reaches, of one namespace or
// ("") of all.
func (c *Client) Computers(ctx context.Context, namespace string) ([]Computer, error) {
	path := "/computers"
	if namespace != "" {
		path += "?namespace=" + url.QueryEscape(namespace)
	}
	var out computertype.ComputerList
	if _, err := c.send(ctx, http.MethodGet, path, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Computers, nil
}

// Computer returns one Computer.
func (c *Client) Computer(ctx context.Context, id string) (*Computer, error) {
	return c.computerCall(ctx, http.MethodGet, id, "")
}

// StartComputer starts a Computer. With wait, a full fleet queues it
// (State queued) instead of answering 429.
func (c *Client) StartComputer(ctx context.Context, id string, wait bool) (*Computer, error) {
	return c.computerCall(ctx, http.MethodPost, id, "/start?wait="+strconv.FormatBool(wait))
}

// StopComputer puts a Computer to sleep; its workspace stays.
func (c *Client) StopComputer(ctx context.Context, id string) (*Computer, error) {
	return c.computerCall(ctx, http.MethodPost, id, "/stop")
}

func (c *Client) computerCall(ctx context.Context, method, id, suffix string) (*Computer, error) {
	if id == "" {
		return nil, errNoComputer
	}
	var out Computer
	if _, err := c.send(ctx, method, computerPath(id, suffix), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteComputer deletes a Computer, its workspace and its grants.
func (c *Client) DeleteComputer(ctx context.Context, id string) error {
	if id == "" {
		return errNoComputer
	}
	_, err := c.send(ctx, http.MethodDelete, computerPath(id, ""), nil, nil, nil)
	return err
}

// GrantComputer issues a grant on Computer id; the answer's Token is the
// credential to hand to the agent.
func (c *Client) GrantComputer(ctx context.Context, id string, req NewComputerGrant) (*ComputerGrant, error) {
	if id == "" {
		return nil, errNoComputer
	}
	var out ComputerGrant
	if _, err := c.send(ctx, http.MethodPost, computerPath(id, "/grants"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ComputerGrants lists the unexpired grants of Computer id.
func (c *Client) ComputerGrants(ctx context.Context, id string) ([]ComputerGrant, error) {
	if id == "" {
		return nil, errNoComputer
	}
	var out computertype.GrantList
	if _, err := c.send(ctx, http.MethodGet, computerPath(id, "/grants"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Grants, nil
}

// RevokeComputerGrant revokes grant gid of Computer id.
func (c *Client) RevokeComputerGrant(ctx context.Context, id, gid string) error {
	if id == "" || gid == "" {
		return errors.New("client: a Computer id and a grant id are required")
	}
	_, err := c.send(ctx, http.MethodDelete, computerPath(id, "/grants/"+url.PathEscape(gid)), nil, nil, nil)
	return err
}

// ComputerExec runs a command in Computer id (waking it), copying its
// output to stdout and stderr as it comes, and returns how it ended. A
// non-zero exit is not an error. The HTTP client's timeout does not apply;
// ctx and req.TimeoutMs bound the run.
func (c *Client) ComputerExec(ctx context.Context, id string, req ComputerExec, stdout, stderr io.Writer) (*ComputerExit, error) {
	if id == "" {
		return nil, errNoComputer
	}
	route := "/exec"
	if req.Script != "" {
		route = "/bash"
	}
	req.Encoding, req.Stream = "base64", true
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: exec: %w", err)
	}
	path := computerPath(id, route)
	resp, err := c.stream(ctx, http.MethodPost, path, bytes.NewReader(b), http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev computertype.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("client: POST %s: malformed event: %w", path, err)
		}
		switch ev.Type {
		case "stdout", "stderr":
			data, err := base64.StdEncoding.DecodeString(ev.Data)
			if err != nil {
				return nil, fmt.Errorf("client: POST %s: malformed output: %w", path, err)
			}
			w := stdout
			if ev.Type == "stderr" {
				w = stderr
			}
			if _, err := w.Write(data); err != nil {
				return nil, fmt.Errorf("client: writing command output: %w", err)
			}
		case "exit":
			if ev.ExitCode == nil {
				return nil, fmt.Errorf("client: POST %s: exit event without a code", path)
			}
			return &ComputerExit{RequestID: ev.RequestID, ExitCode: *ev.ExitCode, DurationMs: ev.DurationMs}, nil
		case "error":
			return nil, &Error{Status: ev.Status, Message: ev.Error}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("client: POST %s: %w", path, err)
	}
	return nil, fmt.Errorf("client: POST %s: the stream ended before the command did", path)
}

// ComputerTerminal opens an interactive terminal in Computer id over a
// websocket. The session speaks the shell protocol, so it is a
// [ShellSession] (whose SandboxID is empty). opts.NoWake and
// opts.SandboxID do not apply.
func (c *Client) ComputerTerminal(ctx context.Context, id string, opts ShellOptions) (*ShellSession, error) {
	if id == "" {
		return nil, errNoComputer
	}
	q, err := terminalQuery("terminal", opts)
	if err != nil {
		return nil, err
	}
	return c.openTerminal(ctx, "terminal", computerPath(id, "/terminal"), q)
}

// ReadComputerFile copies the file at path in Computer id's workspace to
// w and returns its hex SHA-256.
func (c *Client) ReadComputerFile(ctx context.Context, id, path string, w io.Writer) (string, error) {
	if id == "" {
		return "", errNoComputer
	}
	p := computerPath(id, "/files/readBytes?path="+url.QueryEscape(path))
	resp, err := c.stream(ctx, http.MethodGet, p, nil, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return "", fmt.Errorf("client: GET %s: %w", p, err)
	}
	return resp.Header.Get("X-File-Sha256"), nil
}

// WriteComputerFile atomically replaces (or creates, with missing parent
// directories when parents is set) the file at path in Computer id's
// workspace with the content of r. A zero mode keeps the replaced file's.
func (c *Client) WriteComputerFile(ctx context.Context, id, path string, r io.Reader, mode uint32, parents bool) (*ComputerWrite, error) {
	if id == "" {
		return nil, errNoComputer
	}
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", mode))
	}
	if parents {
		q.Set("parents", "true")
	}
	var out ComputerWrite
	if err := c.upload(ctx, http.MethodPut, computerPath(id, "/files/writeBytes?"+q.Encode()), "application/octet-stream", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ExposeComputerPort makes port inside Computer id reachable through the
// gateway's data plane; public makes it reachable without a credential.
func (c *Client) ExposeComputerPort(ctx context.Context, id string, port int, public bool) (*ComputerPort, error) {
	return c.ExposeComputerPortWith(ctx, id, computertype.PortRequest{Port: port, Public: public})
}

// ExposeComputerPortWith exposes a port as req says: public, or private
// and (with SignIn) open to browsers that sign in with that auth provider
// of the Computer's namespace.
func (c *Client) ExposeComputerPortWith(ctx context.Context, id string, req computertype.PortRequest) (*ComputerPort, error) {
	if id == "" {
		return nil, errNoComputer
	}
	var out ComputerPort
	if _, err := c.send(ctx, http.MethodPost, computerPath(id, "/ports"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ComputerPorts lists the exposed ports of Computer id.
func (c *Client) ComputerPorts(ctx context.Context, id string) ([]ComputerPort, error) {
	if id == "" {
		return nil, errNoComputer
	}
	var out computertype.PortList
	if _, err := c.send(ctx, http.MethodGet, computerPath(id, "/ports"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Ports, nil
}

// UnexposeComputerPort withdraws an exposed port.
func (c *Client) UnexposeComputerPort(ctx context.Context, id string, port int) error {
	if id == "" {
		return errNoComputer
	}
	_, err := c.send(ctx, http.MethodDelete, computerPath(id, "/ports/"+strconv.Itoa(port)), nil, nil, nil)
	return err
}

// ComputerFacts returns up to limit (0: the server's default) facts of
// Computer id after sequence number after, and the cursor for the next
// page.
func (c *Client) ComputerFacts(ctx context.Context, id string, after int64, limit int) ([]ComputerFact, int64, error) {
	if id == "" {
		return nil, 0, errNoComputer
	}
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Facts []ComputerFact `json:"facts"`
		Next  int64          `json:"next"`
	}
	if _, err := c.send(ctx, http.MethodGet, computerPath(id, "/facts?"+q.Encode()), nil, nil, &out); err != nil {
		return nil, 0, err
	}
	return out.Facts, out.Next, nil
}

// followRetry is how long FollowComputerFacts waits before it reconnects
// a stream that broke.
var followRetry = 2 * time.Second

// FollowComputerFacts calls fn with each fact of Computer id after
// sequence number after, as the server-sent event stream delivers them,
// until ctx ends (then it returns nil) or fn fails. A stream that breaks
// is resumed where it stopped (Last-Event-ID); an error answer ends it.
func (c *Client) FollowComputerFacts(ctx context.Context, id string, after int64, fn func(ComputerFact) error) error {
	if id == "" {
		return errNoComputer
	}
	for {
		err := c.followOnce(ctx, id, &after, fn)
		var ae *Error
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &ae), errors.Is(err, errStop):
			return err
		}
		t := time.NewTimer(followRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// errStop marks an error that ends a follow: the caller's fn failed, or
// the stream cannot be resumed.
var errStop = errors.New("client: facts: stopped")

func (c *Client) followOnce(ctx context.Context, id string, after *int64, fn func(ComputerFact) error) error {
	p := computerPath(id, "/facts")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+p, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", errStop, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatInt(*after, 10))
	c.setHeaders(req.Header)
	resp, err := c.untimed().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return newError(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var idLine, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if idLine != "" && data != "" {
				seq, err := strconv.ParseInt(idLine, 10, 64)
				if err != nil {
					return fmt.Errorf("%w: bad event id %q", errStop, idLine)
				}
				if err := fn(ComputerFact{Seq: seq, Fact: json.RawMessage(data)}); err != nil {
					return fmt.Errorf("%w: %w", errStop, err)
				}
				*after = seq
			}
			idLine, data = "", ""
		case strings.HasPrefix(line, "id:"):
			idLine = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
	return sc.Err()
}

// EditComputerFile applies exact-string replacements to the file at path,
// all or none: an edit whose Old is missing, or found more than once
// without ReplaceAll, fails with a 409 ([IsConflict]) and changes nothing.
// A non-empty expectSHA256 makes it fail with a 412 unless the file has
// that hash.
func (c *Client) EditComputerFile(ctx context.Context, id, path string, edits []ComputerEdit, expectSHA256 string) (*ComputerEdited, error) {
	if id == "" {
		return nil, errNoComputer
	}
	body := computertype.EditRequest{Path: path, Edits: edits, ExpectedSHA256: expectSHA256}
	var out ComputerEdited
	if _, err := c.send(ctx, http.MethodPost, computerPath(id, "/files/edit"), nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PatchComputer applies a unified diff of one or more files to Computer
// id's workspace, all or nothing (a hunk that does not apply is a 409 and
// changes no file), and returns the files it changed.
func (c *Client) PatchComputer(ctx context.Context, id, patch string) ([]ComputerPatched, error) {
	if id == "" {
		return nil, errNoComputer
	}
	var out computertype.PatchResult
	if _, err := c.send(ctx, http.MethodPost, computerPath(id, "/files/patch"), nil, computertype.PatchRequest{Patch: patch}, &out); err != nil {
		return nil, err
	}
	return out.Files, nil
}

// StartComputerProcess starts a command in the background in Computer id:
// it outlives the request, keeps the Computer awake while it runs, and its
// output is read with [Client.ComputerProcessOutput].
func (c *Client) StartComputerProcess(ctx context.Context, id string, req ComputerExec) (*ComputerProcess, error) {
	if id == "" {
		return nil, errNoComputer
	}
	body := computertype.ProcessRequest{Argv: req.Argv, Script: req.Script, Cwd: req.Cwd, Env: req.Env}
	var out ComputerProcess
	if _, err := c.send(ctx, http.MethodPost, computerPath(id, "/processes"), nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ComputerProcesses lists the background processes of Computer id.
func (c *Client) ComputerProcesses(ctx context.Context, id string) ([]ComputerProcess, error) {
	if id == "" {
		return nil, errNoComputer
	}
	var out computertype.ProcessList
	if _, err := c.send(ctx, http.MethodGet, computerPath(id, "/processes"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Processes, nil
}

// ComputerProcessOutput copies the output of background process pid from
// byte offset on to w and returns the offset to resume from.
func (c *Client) ComputerProcessOutput(ctx context.Context, id, pid string, offset int64, w io.Writer) (int64, error) {
	if id == "" || pid == "" {
		return 0, errors.New("client: a Computer id and a process id are required")
	}
	p := computerPath(id, "/processes/"+url.PathEscape(pid)+"/output?offset="+strconv.FormatInt(offset, 10))
	resp, err := c.stream(ctx, http.MethodGet, p, nil, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return offset + n, fmt.Errorf("client: GET %s: %w", p, err)
	}
	return offset + n, nil
}

// KillComputerProcess sends sig ("" for TERM) to background process pid.
func (c *Client) KillComputerProcess(ctx context.Context, id, pid, sig string) (*ComputerProcess, error) {
	if id == "" || pid == "" {
		return nil, errors.New("client: a Computer id and a process id are required")
	}
	p := computerPath(id, "/processes/"+url.PathEscape(pid))
	if sig != "" {
		p += "?signal=" + url.QueryEscape(sig)
	}
	var out ComputerProcess
	if _, err := c.send(ctx, http.MethodDelete, p, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
