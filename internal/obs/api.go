package obs

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/telemetry"
	"github.com/berth-dev/berth/internal/web"
)

// windows are the windows the API offers, each with its step.
var windows = []struct {
	name string
	span time.Duration
	step time.Duration
}{
	{"15m", 15 * time.Minute, 10 * time.Second},
	{"1h", time.Hour, time.Minute},
	{"6h", 6 * time.Hour, 5 * time.Minute},
	{"24h", 24 * time.Hour, 15 * time.Minute},
	{"7d", 7 * 24 * time.Hour, 2 * time.Hour},
}

// DefaultWindow is the window when none is asked for.
const DefaultWindow = "1h"

// Windows are the windows' names, shortest first.
func Windows() []string {
	out := make([]string, len(windows))
	for i, w := range windows {
		out[i] = w.name
	}
	return out
}

func window(r *http.Request) (name string, span, step time.Duration, err error) {
	name = r.URL.Query().Get("window")
	if name == "" {
		name = DefaultWindow
	}
	for _, w := range windows {
		if w.name == name {
			return name, w.span, w.step, nil
		}
	}
	return "", 0, 0, web.Invalid("window", "must be one of %v, got %q", Windows(), name)
}

// frame is what the fleet and deployment answers share.
type frame struct {
	now, from, to time.Time
	step          time.Duration
	window        string
}

func (h *Handler) frame(r *http.Request) (frame, error) {
	name, span, step, err := window(r)
	if err != nil {
		return frame{}, err
	}
	now := h.o.Now()
	to := now.Truncate(step)
	return frame{now: now, from: to.Add(-span + step), to: to, step: step, window: name}, nil
}

func (h *Handler) retainDays() int {
	return int(math.Ceil(h.o.Telemetry.Retention().Hours() / 24))
}

func (h *Handler) freshness() apitype.ObsFreshness {
	st := h.o.Telemetry.Stats()
	// sampled (berth's own key): access records counted in the metrics
	// but not stored as rows (--telemetry-access-rows).
	sampled, _ := json.Marshal(st.Sampled)
	return apitype.ObsFreshness{BufferedRows: st.Buffered, FlushSecs: max(int(math.Ceil(h.o.Telemetry.FlushEvery().Seconds())), 1), Dropped: int(st.Dropped),
		Extra: map[string]json.RawMessage{"sampled": sampled}}
}

// fleet is GET /api/fleet: every deployment of the namespace the caller
// sees, with its buckets.
func (h *Handler) fleet(w http.ResponseWriter, r *http.Request) error {
	ns, err := namespaceOf(r)
	if err != nil {
		return err
	}
	f, err := h.frame(r)
	if err != nil {
		return err
	}
	out := apitype.ObsFleet{
		GeneratedAtMs: f.now.UnixMilli(), FromMs: f.from.UnixMilli(), ToMs: f.to.Add(f.step).UnixMilli(),
		StepSecs: int(f.step.Seconds()), Window: f.window, Windows: Windows(), RetainDays: h.retainDays(),
		Freshness: h.freshness(), Deployments: []apitype.ObsFleetRow{},
	}
	for _, id := range h.o.Deployments(r, ns) {
		s, err := h.o.Telemetry.Series(r.Context(), ns, id, f.from, f.to, f.step)
		if err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the telemetry store could not be read", Err: err}
		}
		out.Deployments = append(out.Deployments, apitype.ObsFleetRow{ID: id, Buckets: s.Buckets, LogBuckets: s.LogBuckets,
			Latest: s.Latest, LogLines: s.LogLines, ErrorLogs: s.ErrorLogs})
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// visibleDeployment is the {id} of r when the caller sees it, else the
// one 404 a deployment that does not exist answers too.
func (h *Handler) visibleDeployment(r *http.Request) (ns, id string, err error) {
	if ns, err = namespaceOf(r); err != nil {
		return "", "", err
	}
	id = r.PathValue("id")
	if !h.o.Visible(r, ns, id) {
		return "", "", web.Errorf(http.StatusNotFound, "no deployment %q in namespace %q", id, ns)
	}
	return ns, id, nil
}

// deployment is GET /api/deployments/{id}.
func (h *Handler) deployment(w http.ResponseWriter, r *http.Request) error {
	ns, id, err := h.visibleDeployment(r)
	if err != nil {
		return err
	}
	f, err := h.frame(r)
	if err != nil {
		return err
	}
	s, err := h.o.Telemetry.Series(r.Context(), ns, id, f.from, f.to, f.step)
	if err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the telemetry store could not be read", Err: err}
	}
	backends, err := h.o.Telemetry.Backends(r.Context(), ns, id, f.from)
	if err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the telemetry store could not be read", Err: err}
	}
	web.WriteJSON(w, http.StatusOK, apitype.ObsDeployment{
		ID: id, GeneratedAtMs: f.now.UnixMilli(), FromMs: f.from.UnixMilli(), ToMs: f.to.Add(f.step).UnixMilli(),
		StepSecs: int(f.step.Seconds()), Window: f.window, Windows: Windows(), RetainDays: h.retainDays(),
		Freshness: h.freshness(), Buckets: s.Buckets, LogBuckets: s.LogBuckets, Latest: s.Latest,
		LogLines: s.LogLines, ErrorLogs: s.ErrorLogs, Backends: backends,
	})
	return nil
}

// Limits of a log query.
const (
	DefaultLimit = 200
	MaxLimit     = 1000
	maxQ         = 256
)

var levels = map[string]bool{"debug": true, "info": true, "warn": true, "error": true}

func msParam(r *http.Request, name string) (int64, bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, web.Invalid(name, "must be epoch milliseconds, got %q", v)
	}
	return n, true, nil
}

// logs is GET /api/deployments/{id}/logs: one page, newest first.
func (h *Handler) logs(w http.ResponseWriter, r *http.Request) error {
	ns, id, err := h.visibleDeployment(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "window", "from", "to", "level", "backend", "q", "limit", "before":
		default:
			return web.Invalid(k, "is not a parameter of the logs query (window, from, to, level, backend, q, limit, before)")
		}
	}
	_, span, _, err := window(r)
	if err != nil {
		return err
	}
	now := h.o.Now().UnixMilli()
	lq := telemetry.LogQuery{Namespace: ns, Deployment: id, From: now - span.Milliseconds(), To: now, Limit: DefaultLimit,
		Level: q.Get("level"), Backend: q.Get("backend"), Q: q.Get("q")}
	if v, ok, err := msParam(r, "from"); err != nil {
		return err
	} else if ok {
		lq.From = v
	}
	if v, ok, err := msParam(r, "to"); err != nil {
		return err
	} else if ok {
		lq.To = v
	}
	if lq.From > lq.To {
		return web.Invalid("from", "must not be after to")
	}
	if v, ok, err := msParam(r, "before"); err != nil {
		return err
	} else if ok {
		lq.To = min(lq.To, v)
	}
	if lq.Level != "" && !levels[lq.Level] {
		return web.Invalid("level", "must be debug, info, warn or error, got %q", lq.Level)
	}
	if len(lq.Q) > maxQ {
		return web.Invalid("q", "longer than %d bytes", maxQ)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return web.Invalid("limit", "must be from 1 to %d, got %q", MaxLimit, v)
		}
		lq.Limit = n
	}
	out := apitype.ObsLogs{ID: id, FromMs: lq.From, ToMs: lq.To, Limit: lq.Limit, Rows: []apitype.ObsLogRow{}}
	if lq.From <= lq.To {
		rows, next, err := h.o.Telemetry.Logs(r.Context(), lq)
		if err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the telemetry store could not be read", Err: err}
		}
		out.Rows, out.NextBeforeMs = rows, next
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}
