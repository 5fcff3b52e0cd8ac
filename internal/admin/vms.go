package admin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/ptybridge"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
	"github.com/berth-dev/berth/internal/web"
)

// vmEntry returns a vm deployment's pool, or the error app-lb answers.
func (a *API) vmEntry(id, what string) (*registry.Entry, error) {
	e, ok := a.o.Registry.Get(id)
	if !ok {
		return nil, errorFor(registry.ErrNotFound, id)
	}
	if e.Kind != apitype.KindVM || e.VMPool == nil {
		return nil, web.Errorf(http.StatusBadRequest, "deployment %q is a %s deployment; %s needs a vm deployment", id, e.Kind, what)
	}
	return e, nil
}

func (a *API) agentClient(e *registry.Entry, sandbox string) (*agent.Client, error) {
	d, ok := e.VMPool.Driver().(vm.AgentDialer)
	if !ok {
		return nil, web.Errorf(http.StatusNotImplemented, "the %s driver has no in-sandbox agent", e.Spec.VM.Driver)
	}
	return a.agents.get(d, sandbox), nil
}

func pickError(err error, id, sandbox string) error {
	var cannot *fleet.StartError
	switch {
	case errors.Is(err, fleet.ErrNoReplica):
		return web.Errorf(http.StatusNotFound, "no VM %q in deployment %q", sandbox, id)
	case errors.Is(err, fleet.ErrReplicaStarting):
		return web.Errorf(http.StatusConflict, "VM %q of %q has not started serving yet", sandbox, id)
	case errors.Is(err, fleet.ErrReplicaDraining):
		return web.Errorf(http.StatusConflict, "VM %q of %q is draining", sandbox, id)
	case errors.Is(err, fleet.ErrNoRunning):
		return web.Errorf(http.StatusConflict, "deployment %q has no running VM (pass wake=true to start one)", id)
	case errors.As(err, &cannot):
		// An admin API caller may see the whole error, as in
		// last_create_error.
		secs := max(int((cannot.Retry+time.Second-1)/time.Second), 1)
		return &web.Error{Status: http.StatusServiceUnavailable, Message: cannot.Error(), Header: http.Header{"Retry-After": {strconv.Itoa(secs)}}}
	case errors.Is(err, fleet.ErrColdStartTimeout):
		return &web.Error{Status: http.StatusServiceUnavailable, Message: fmt.Sprintf("deployment %q: no VM became available within cold_start_timeout_secs", id), Header: http.Header{"Retry-After": {"5"}}}
	default:
		return web.Errorf(http.StatusServiceUnavailable, "deployment %q: %v", id, err)
	}
}

// exec is POST /deployments/{id}/exec: run a shell command in a replica
// through its agent. A non-zero exit is still a 200.
func (a *API) exec(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var req apitype.ExecRequest
	if err := web.ReadJSON(w, r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.Command) == "" {
		return web.Invalid("command", "must not be empty")
	}
	timeout := 60
	if req.TimeoutSecs != nil {
		timeout = min(max(*req.TimeoutSecs, 1), 3600)
	}
	e, err := a.vmEntry(id, "exec")
	if err != nil {
		return err
	}
	wake := req.Wake == nil || *req.Wake
	sb, release, err := e.VMPool.Pick(r.Context(), req.SandboxID, wake)
	if err != nil {
		return pickError(err, id, req.SandboxID)
	}
	defer release()
	c, err := a.agentClient(e, sb)
	if err != nil {
		return err
	}
	res, err := c.Exec(r.Context(), agent.ExecRequest{
		Command: req.Command, Cwd: req.Cwd, Env: req.Env, TimeoutMS: int64(timeout) * 1000,
	})
	if err != nil {
		return &web.Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("could not run the command in %s: %v", sb, err)}
	}
	web.WriteJSON(w, http.StatusOK, apitype.ExecOutput{
		SandboxID: sb, ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr, Output: res.Output,
	})
	return nil
}

// evict is DELETE /deployments/{id}/vms/{sandbox_id}[?force=true|false].
func (a *API) evict(w http.ResponseWriter, r *http.Request) error {
	id, sb := r.PathValue("id"), r.PathValue("sandbox_id")
	force := false
	switch v := r.URL.Query().Get("force"); v {
	case "", "false":
	case "true":
		force = true
	default:
		return web.Invalid("force", "must be true or false, got %q", v)
	}
	e, err := a.vmEntry(id, "evicting a VM")
	if err != nil {
		return err
	}
	killed, err := e.VMPool.Evict(r.Context(), sb, force)
	if errors.Is(err, fleet.ErrNoReplica) {
		return web.Errorf(http.StatusNotFound, "no VM %q in deployment %q", sb, id)
	}
	if err != nil {
		return &web.Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("could not kill %s: %v", sb, err)}
	}
	if killed {
		web.WriteJSON(w, http.StatusOK, apitype.EvictOutcome{SandboxID: sb, Outcome: "killed"})
	} else {
		web.WriteJSON(w, http.StatusAccepted, apitype.EvictOutcome{SandboxID: sb, Outcome: "draining"})
	}
	return nil
}

// logs is GET /deployments/{id}/logs[?limit=N][&follow=true]: the replicas'
// recent output as text lines "<time> <replica> <stream> <text>". With
// follow, new lines stream until the client goes away.
func (a *API) logs(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 10000 {
			return web.Invalid("limit", "must be an integer from 0 to 10000, got %q", v)
		}
		limit = n
	}
	follow := false
	switch v := r.URL.Query().Get("follow"); v {
	case "", "false":
	case "true":
		follow = true
	default:
		return web.Invalid("follow", "must be true or false, got %q", v)
	}
	e, err := a.vmEntry(id, "logs")
	if err != nil {
		return err
	}
	lr, ok := e.VMPool.Driver().(vm.LogReader)
	if !ok {
		return web.Errorf(http.StatusNotImplemented, "the %s driver keeps no logs", e.Spec.VM.Driver)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	st := e.VMPool.Status()
	for _, rep := range st.Replicas {
		lines, err := lr.Logs(r.Context(), rep.ID, limit)
		if err != nil {
			continue
		}
		for _, l := range lines {
			io.WriteString(w, logLine(rep.ID, l))
		}
	}
	if !follow {
		return nil
	}
	lf, ok := e.VMPool.Driver().(vm.LogFollower)
	if !ok {
		return nil
	}
	rc := http.NewResponseController(w)
	rc.Flush()
	ctx := r.Context()
	lw := &lockedWriter{w: w, rc: rc}
	// The followers may still write once the handler returns, when the
	// ResponseWriter is no longer theirs to touch: close stops them.
	defer lw.close()
	followed := map[string]bool{}
	for {
		for _, rep := range e.VMPool.Status().Replicas {
			if followed[rep.ID] {
				continue
			}
			followed[rep.ID] = true
			go lf.FollowLogs(ctx, rep.ID, &followWriter{w: lw, replica: rep.ID})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// shell is GET /deployments/{id}/shell: a websocket PTY session in a
// replica, framed as app-lb.md §2.6 describes.
func (a *API) shell(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	q := r.URL.Query()
	cols, rows, err := ptybridge.Size(q)
	if err != nil {
		return err
	}
	wake := true
	switch v := q.Get("wake"); v {
	case "", "true":
	case "false":
		wake = false
	default:
		return web.Invalid("wake", "must be true or false, got %q", v)
	}
	e, err := a.vmEntry(id, "a shell")
	if err != nil {
		return err
	}
	sb, release, err := e.VMPool.Pick(r.Context(), q.Get("sandbox_id"), wake)
	if err != nil {
		return pickError(err, id, q.Get("sandbox_id"))
	}
	defer release()
	c, err := a.agentClient(e, sb)
	if err != nil {
		return err
	}
	sess, err := c.PTY(r.Context(), agent.PTYRequest{Cwd: q.Get("cwd"), Cols: cols, Rows: rows})
	if err != nil {
		return &web.Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("could not open a shell in %s: %v", sb, err)}
	}
	ptybridge.Serve(w, r, sess, ptybridge.Options{Ready: map[string]string{"type": "ready", "sandbox_id": sb}})
	return nil
}

// lockedWriter serialises writers of a streamed response and flushes each
// write to the client; after close every write fails.
type lockedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	rc     *http.ResponseController
	closed bool
}

func (l *lockedWriter) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, net.ErrClosed
	}
	n, err := l.w.Write(p)
	if err == nil {
		err = l.rc.Flush()
	}
	return n, err
}

// logLine is one line of GET /deployments/{id}/logs, backlog and follow
// alike: "<RFC 3339 time> <replica> <stream> <text>".
func logLine(replica string, l vm.LogLine) string {
	return fmt.Sprintf("%s %s %s %s\n", l.Time.UTC().Format(time.RFC3339Nano), replica, l.Stream, l.Text)
}

// followWriter turns the agent's log lines a driver's FollowLogs writes
// ({"t","s","m"} JSON) into logLine's format, so that a followed stream
// reads as the backlog before it does. Lines that are not the app's
// output are dropped, as Logs drops them.
type followWriter struct {
	w       io.Writer
	replica string
	buf     []byte
}

func (p *followWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		l, ok := console.AppLine(p.buf[:i])
		p.buf = p.buf[i+1:]
		if !ok {
			continue
		}
		if _, err := io.WriteString(p.w, logLine(p.replica, l)); err != nil {
			return len(b), err
		}
	}
	return len(b), nil
}
