package computerapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/berth-dev/berth/apitype/computertype"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/web"
)

func processView(pi agent.ProcessInfo) computertype.Process {
	p := computertype.Process{ID: pi.ID, PID: pi.PID, Command: pi.Command, Running: pi.Running, ExitCode: pi.ExitCode, Signal: pi.Signal, StartedAt: pi.StartedAt.UnixMilli(), CPUTimeMs: pi.CPUTimeMS}
	if pi.EndedAt != nil {
		at := pi.EndedAt.UnixMilli()
		p.EndedAt = &at
	}
	var prov computer.Provenance
	if json.Unmarshal([]byte(pi.Tag), &prov) == nil && prov.Actor != "" {
		p.Provenance = &prov
	}
	return p
}

func (a *API) processStart(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.ProcessRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	argv := req.Argv
	switch {
	case len(req.Argv) > 0 && req.Script != "":
		return web.Invalid("argv", "give argv or script, not both")
	case req.Script != "":
		argv = []string{"bash", "-c", req.Script}
	case len(argv) == 0 || argv[0] == "":
		return web.Invalid("argv", "must name a program (or give a script)")
	}
	for _, s := range argv {
		if containsNUL(s) {
			return web.Invalid("argv", "must not contain NUL bytes")
		}
	}
	cwd, err := workPath(req.Cwd, "cwd", true)
	if err != nil {
		return err
	}
	var pi agent.ProcessInfo
	st, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) (agent.ProcessStarted, error) {
		st, err := ag.StartProcess(ctx, agent.ProcessRequest{Argv: argv, Cwd: cwd, Env: a.withEgress(c, req.Env), Tag: computer.ProcessTag(c.prov)})
		if err != nil {
			return st, err
		}
		if pi, err = ag.Process(ctx, st.ID); err != nil {
			pi = agent.ProcessInfo{ID: st.ID, PID: st.PID, Running: true, StartedAt: time.Now()}
		}
		return st, nil
	})
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/computers/"+c.id+"/processes/"+st.ID)
	web.WriteJSON(w, http.StatusCreated, processView(pi))
	return nil
}

func (a *API) processList(w http.ResponseWriter, r *http.Request, c *call) error {
	ps, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) ([]agent.ProcessInfo, error) {
		return ag.Processes(ctx)
	})
	if err != nil {
		return err
	}
	out := computertype.ProcessList{Processes: make([]computertype.Process, 0, len(ps))}
	for _, p := range ps {
		out.Processes = append(out.Processes, processView(p))
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// offsetLimit reads a byte window's ?offset= (default 0) and ?limit=
// (default -1: to the end).
func offsetLimit(q url.Values) (offset, limit int64, err error) {
	if offset, err = int64Param(q.Get("offset"), "offset"); err != nil {
		return 0, 0, err
	}
	limit = -1
	if v := q.Get("limit"); v != "" {
		if limit, err = int64Param(v, "limit"); err != nil {
			return 0, 0, err
		}
	}
	return offset, limit, nil
}

// processOutput answers a background process's output (stdout and stderr
// interleaved) from byte ?offset= on, at most ?limit= bytes; the
// X-Output-Size header is the output's size when read, so a poller
// resumes at offset + the bytes it got.
func (a *API) processOutput(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	offset, limit, err := offsetLimit(q)
	if err != nil {
		return err
	}
	var size int64
	b, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) (b []byte, err error) {
		b, size, err = ag.ProcessOutput(ctx, r.PathValue("pid"), offset, limit)
		return b, err
	})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Output-Size", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	return nil
}

func (a *API) processKill(w http.ResponseWriter, r *http.Request, c *call) error {
	sig := r.URL.Query().Get("signal")
	if len(sig) > 16 || containsNUL(sig) {
		return web.Invalid("signal", "is not a signal name or number")
	}
	pi, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) (agent.ProcessInfo, error) {
		return ag.KillProcess(ctx, r.PathValue("pid"), sig)
	})
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, processView(pi))
	return nil
}
