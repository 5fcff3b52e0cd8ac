package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessRequest is the body of POST /v1/processes: a command started in
// the background, detached from the request that started it.
type ProcessRequest struct {
	// Argv or Command, Cwd and Env as in ExecRequest.
	Argv    []string          `json:"argv,omitempty"`
	Command string            `json:"command,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Tag is opaque to the agent and echoed in listings, so the caller can
	// remember who started the process (a Computer records provenance in
	// it) without a table of its own.
	Tag string `json:"tag,omitempty"`
}

// ProcessStarted is the answer to POST /v1/processes.
type ProcessStarted struct {
	ID  string `json:"id"`
	PID int    `json:"pid"`
}

// ProcessInfo describes a background process in GET /v1/processes.
type ProcessInfo struct {
	ID      string `json:"id"`
	PID     int    `json:"pid"`
	Command string `json:"command"` // the command line, argv quoted for sh
	Tag     string `json:"tag,omitempty"`
	Running bool   `json:"running"`
	// ExitCode is set once the process ended: its status, or 128+N when
	// signal N killed it (Signal names it).
	ExitCode  *int       `json:"exit_code"`
	Signal    string     `json:"signal,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	// CPUTimeMS is the user plus system CPU time of the process and the
	// descendants it waited for, from the kernel's rusage; null while it
	// runs and where the platform does not measure it (never a fake 0).
	CPUTimeMS *int64 `json:"cpu_time_ms"`
}

// ProcessList is the body of GET /v1/processes.
type ProcessList struct {
	Processes []ProcessInfo `json:"processes"`
}

// maxEndedProcesses bounds how many ended processes (and their output
// files) the agent keeps; the oldest ended ones are forgotten first.
const maxEndedProcesses = 256

// procTable is the agent's background processes.
type procTable struct {
	dirOpt string // Options.StateDir

	mu    sync.Mutex
	dir   string // created on first use
	procs map[string]*bgProc
	order []string // ids in start order
}

type bgProc struct {
	info ProcessInfo // guarded by procTable.mu
	out  string      // output file
	done chan struct{}
}

// stateDir returns the directory holding output files, creating it.
func (t *procTable) stateDir() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dir != "" {
		return t.dir, nil
	}
	if t.dirOpt != "" {
		if err := os.MkdirAll(t.dirOpt, 0o700); err != nil {
			return "", err
		}
		t.dir = t.dirOpt
		return t.dir, nil
	}
	d, err := os.MkdirTemp("", "berth-agent-processes-")
	if err != nil {
		return "", err
	}
	t.dir = d
	return d, nil
}

func newProcessID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "p" + hex.EncodeToString(b[:])
}

// shellQuote renders argv as a command line for display.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func (s *Server) handleStartProcess(w http.ResponseWriter, r *http.Request) {
	var req ProcessRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	started, err := s.startProcess(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, started)
}

// startProcess starts req detached: in its own process group, with stdin
// /dev/null and stdout and stderr appended to a file in the state dir, and
// bound to the server's lifetime rather than the request's, so it survives
// the client going away. Close kills it; Shutdown stops it politely.
func (s *Server) startProcess(req ProcessRequest) (ProcessStarted, error) {
	cmd, err := s.command(s.ctx, req.Argv, req.Command, req.Cwd, req.Env)
	if err != nil {
		return ProcessStarted{}, err
	}
	dir, err := s.procs.stateDir()
	if err != nil {
		return ProcessStarted{}, errorf(http.StatusInternalServerError, "process state directory: %v", err)
	}
	id := newProcessID()
	outPath := filepath.Join(dir, id+".out")
	out, err := os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL, 0o600)
	if err != nil {
		return ProcessStarted{}, errorf(http.StatusInternalServerError, "process output file: %v", err)
	}
	defer out.Close()
	// An *os.File is handed to the child as is: no copying goroutine, so
	// output keeps flowing whatever happens to the request.
	cmd.Stdout, cmd.Stderr = out, out
	display := req.Command
	if display == "" {
		display = shellQuote(req.Argv)
	}
	if err := children.start(cmd); err != nil {
		os.Remove(outPath)
		s.opts.Logf("process %q: %v", cmd.Args, err)
		return ProcessStarted{}, errorf(http.StatusUnprocessableEntity, "cannot start command: %v", err)
	}
	p := &bgProc{
		info: ProcessInfo{
			ID: id, PID: cmd.Process.Pid, Command: display, Tag: req.Tag,
			Running: true, StartedAt: time.Now().UTC(),
		},
		out:  outPath,
		done: make(chan struct{}),
	}
	t := &s.procs
	t.mu.Lock()
	t.procs[id] = p
	t.order = append(t.order, id)
	t.mu.Unlock()
	go func() {
		_ = children.wait(cmd)
		ended := time.Now().UTC()
		t.mu.Lock()
		p.info.Running = false
		p.info.EndedAt = &ended
		if ps := cmd.ProcessState; ps != nil {
			code, sig := exitStatus(ps)
			p.info.ExitCode, p.info.Signal = &code, sig
			if ps.SysUsage() != nil {
				ms := (ps.UserTime() + ps.SystemTime()).Milliseconds()
				p.info.CPUTimeMS = &ms
			}
		}
		t.pruneLocked()
		t.mu.Unlock()
		close(p.done)
	}()
	return ProcessStarted{ID: id, PID: p.info.PID}, nil
}

// pruneLocked forgets the oldest ended processes beyond
// maxEndedProcesses, with their output files.
func (t *procTable) pruneLocked() {
	ended := 0
	for _, id := range t.order {
		if !t.procs[id].info.Running {
			ended++
		}
	}
	for i := 0; ended > maxEndedProcesses && i < len(t.order); {
		p := t.procs[t.order[i]]
		if p.info.Running {
			i++
			continue
		}
		os.Remove(p.out)
		delete(t.procs, p.info.ID)
		t.order = slices.Delete(t.order, i, i+1)
		ended--
	}
}

func (t *procTable) get(id string) (*bgProc, ProcessInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.procs[id]
	if !ok {
		return nil, ProcessInfo{}, false
	}
	return p, p.info, true
}

func (t *procTable) list() []ProcessInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ProcessInfo, 0, len(t.order))
	for _, id := range t.order {
		out = append(out, t.procs[id].info)
	}
	return out
}

// stopAll sends SIGTERM to every running process group and waits until
// they ended or ctx is done.
func (t *procTable) stopAll(ctx context.Context) {
	t.mu.Lock()
	var running []*bgProc
	for _, p := range t.procs {
		if p.info.Running {
			running = append(running, p)
			_ = signalGroup(p.info.PID, syscall.SIGTERM)
		}
	}
	t.mu.Unlock()
	for _, p := range running {
		select {
		case <-p.done:
		case <-ctx.Done():
			return
		}
	}
}

func (s *Server) handleListProcesses(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, ProcessList{Processes: s.procs.list()})
}

// processPath splits /v1/processes/{id}[/output].
func processPath(path string) (id, sub string, err error) {
	rest := strings.TrimPrefix(path, "/v1/processes/")
	id, sub, _ = strings.Cut(rest, "/")
	if id == "" || (sub != "" && sub != "output") {
		return "", "", errorf(http.StatusNotFound, "no endpoint %s", path)
	}
	return id, sub, nil
}

func (s *Server) handleProcessGet(w http.ResponseWriter, r *http.Request) {
	id, sub, err := processPath(r.URL.Path)
	if err != nil {
		writeErr(w, err)
		return
	}
	p, info, ok := s.procs.get(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no process %q", id))
		return
	}
	if sub == "" {
		writeJSON(w, http.StatusOK, info)
		return
	}
	offset, _, err := queryInt(r, "offset")
	if err != nil {
		writeErr(w, err)
		return
	}
	limit, hasLimit, err := queryInt(r, "limit")
	if err != nil {
		writeErr(w, err)
		return
	}
	if !hasLimit {
		limit = -1
	}
	f, err := os.Open(p.out)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("process output: %v", err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("process output: %v", err))
		return
	}
	// The size is read before the bytes: what follows is at least that
	// much, and the client resumes from offset + bytes received.
	size := fi.Size()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-File-Size", strconv.FormatInt(size, 10))
	w.Header().Set("X-Process-Running", strconv.FormatBool(info.Running))
	if offset >= size {
		w.WriteHeader(http.StatusOK)
		return
	}
	n := size - offset
	if limit >= 0 && limit < n {
		n = limit
	}
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, io.NewSectionReader(f, offset, n))
}

// handleKillProcess signals a process's group (default SIGTERM) and
// answers its state. Signalling an ended process does nothing, so a
// retried kill succeeds.
func (s *Server) handleKillProcess(w http.ResponseWriter, r *http.Request) {
	id, sub, err := processPath(r.URL.Path)
	if err == nil && sub != "" {
		err = errorf(http.StatusMethodNotAllowed, "method DELETE not allowed on %s", r.URL.Path)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	sig := syscall.SIGTERM
	if v := r.URL.Query().Get("signal"); v != "" {
		if sig, err = parseSignal(v); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	t := &s.procs
	t.mu.Lock()
	p, ok := t.procs[id]
	if ok && p.info.Running {
		// Under the lock, so a process marked ended is never signalled
		// (its group id may be reused once it is reaped).
		if err := signalGroup(p.info.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.mu.Unlock()
			writeError(w, http.StatusInternalServerError, fmt.Sprintf("signalling process %s: %v", id, err))
			return
		}
	}
	var info ProcessInfo
	if ok {
		info = p.info
	}
	t.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no process %q", id))
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// StartProcess starts a background process and returns its id and pid. The
// process outlives the request (and the Client): list it with Processes,
// read its output with ProcessOutput, end it with KillProcess.
func (c *Client) StartProcess(ctx context.Context, req ProcessRequest) (ProcessStarted, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return ProcessStarted{}, fmt.Errorf("agent: encoding process request: %w", err)
	}
	var res ProcessStarted
	err = c.do(ctx, "POST", "/v1/processes", nil, bytes.NewReader(b), &res)
	return res, err
}

// Processes lists the background processes, in start order.
func (c *Client) Processes(ctx context.Context) ([]ProcessInfo, error) {
	var res ProcessList
	err := c.do(ctx, "GET", "/v1/processes", nil, nil, &res)
	return res.Processes, err
}

// Process describes one background process; an unknown id is an *Error
// with Status 404.
func (c *Client) Process(ctx context.Context, id string) (ProcessInfo, error) {
	var res ProcessInfo
	err := c.do(ctx, "GET", "/v1/processes/"+url.PathEscape(id), nil, nil, &res)
	return res, err
}

// ProcessOutput returns the output (stdout and stderr, interleaved) a
// background process wrote from offset on, at most limit bytes (all when
// limit < 0), and the output's size when it was read. Resume from offset +
// len(returned bytes).
func (c *Client) ProcessOutput(ctx context.Context, id string, offset, limit int64) ([]byte, int64, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if limit >= 0 {
		q.Set("limit", strconv.FormatInt(limit, 10))
	}
	resp, err := c.send(ctx, "GET", "/v1/processes/"+url.PathEscape(id)+"/output", q, nil)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, fmt.Errorf("agent: reading output of process %s: %w", id, err)
	}
	size, _ := strconv.ParseInt(resp.Header.Get("X-File-Size"), 10, 64)
	return b, size, nil
}

// KillProcess sends sig ("TERM", "KILL", "9"...; "" means TERM) to a
// background process's group and returns its state. Killing an ended
// process is not an error.
func (c *Client) KillProcess(ctx context.Context, id, sig string) (ProcessInfo, error) {
	var q url.Values
	if sig != "" {
		q = url.Values{"signal": {sig}}
	}
	var res ProcessInfo
	err := c.do(ctx, "DELETE", "/v1/processes/"+url.PathEscape(id), q, nil, &res)
	return res, err
}
