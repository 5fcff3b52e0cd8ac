package computerapi

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/berth-dev/berth/apitype/computertype"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/web"
)

// Facts pages: a page holds at most MaxFactsPage facts, DefaultFactsPage
// when the request names no limit.
const (
	DefaultFactsPage = 100
	MaxFactsPage     = 1000
)

// processExited is the process.exited fact of one run. cpuTimeMs is null:
// the agent does not measure it.
func processExited(c *call, reqID string, code *int, wallMs int64) computer.Fact {
	return computer.Fact{Kind: computer.FactProcessExited, ComputerID: c.id, Provenance: c.prov, RequestID: reqID, ExitCode: code, WallTimeMs: wallMs}
}

// filesWritten is the files.written fact of one changed file.
func filesWritten(c *call, path string, bytes int64) computer.Fact {
	return computer.Fact{Kind: computer.FactFilesWritten, ComputerID: c.id, Provenance: c.prov, Path: path, Bytes: bytes}
}

// emit records a fact. It outlives the request: the operation happened
// whether or not its caller is still there. A fact that cannot be
// recorded is logged; the operation's answer stands.
func (a *API) emit(ctx context.Context, f computer.Fact) {
	if err := a.o.Manager.Emit(context.WithoutCancel(ctx), f); err != nil {
		a.o.Log.Error("could not record a Computer fact", "computer", f.ComputerID, "kind", f.Kind, "err", err)
	}
}

// facts is GET /computers/{id}/facts[?after=N][&limit=M]: a JSON page, or
// with Accept: text/event-stream a stream of SSE events (id: the
// sequence, event: the fact's kind, data: the fact) that resumes after
// the Last-Event-ID header or ?after= and runs until the client leaves.
func (a *API) facts(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	after, err := int64Param(q.Get("after"), "after")
	if err != nil {
		return err
	}
	sse := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	if last := r.Header.Get("Last-Event-ID"); sse && last != "" {
		if after, err = int64Param(last, "Last-Event-ID"); err != nil {
			return err
		}
	}
	limit := DefaultFactsPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxFactsPage {
			return web.Invalid("limit", "must be an integer from 1 to %d, got %q", MaxFactsPage, v)
		}
		limit = n
	}
	if !sse {
		recs, err := a.o.Manager.Facts(r.Context(), c.id, after, limit)
		if err != nil {
			return managerError(err, c.id)
		}
		page := computertype.FactsPage{Facts: []computertype.FactRecord{}, Next: after}
		for _, rec := range recs {
			page.Facts = append(page.Facts, rec)
			page.Next = rec.Seq
		}
		web.WriteJSON(w, http.StatusOK, page)
		return nil
	}
	return a.factStream(w, r, c, after)
}

func (a *API) factStream(w http.ResponseWriter, r *http.Request, c *call, after int64) error {
	// The first read fails here, as an envelope, rather than mid-stream.
	recs, err := a.o.Manager.Facts(r.Context(), c.id, after, MaxFactsPage)
	if err != nil {
		return managerError(err, c.id)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// Tell EventSource clients how soon to reconnect.
	fmt.Fprint(w, "retry: 2000\n\n")
	rc.Flush()
	ctx := r.Context()
	keep := time.NewTicker(a.o.FactsKeepAlive)
	defer keep.Stop()
	for {
		for _, rec := range recs {
			b, err := json.Marshal(rec.Fact)
			if err != nil {
				return nil
			}
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", rec.Seq, rec.Fact.Kind, b); err != nil {
				return nil
			}
			after = rec.Seq
		}
		if len(recs) > 0 {
			if rc.Flush() != nil {
				return nil
			}
		}
		if len(recs) < MaxFactsPage {
			// Caught up: wait for the next fact.
			wait := a.o.Manager.WaitFacts(ctx, c.id, after)
		waiting:
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-wait:
					break waiting
				case <-keep.C:
					if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
						return nil
					}
				}
			}
		}
		if recs, err = a.o.Manager.Facts(ctx, c.id, after, MaxFactsPage); err != nil {
			if ctx.Err() == nil {
				a.o.Log.Error("facts stream ended", "computer", c.id, "err", err)
			}
			return nil
		}
	}
}

func int64Param(v, name string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, web.Invalid(name, "must be a non-negative integer, got %q", v)
	}
	return n, nil
}
