package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/web"
)

// The event stream's bounds.
const (
	// eventEvery is how often a stream pushes a fresh snapshot.
	eventEvery = time.Second
	// eventLifetime ends a stream; the browser's EventSource reconnects
	// (after the retry the stream names), authenticating afresh.
	eventLifetime = 5 * time.Minute
	// eventWriteTimeout bounds each write: a client that stops reading
	// loses its stream.
	eventWriteTimeout = 10 * time.Second
	// maxEventStreams bounds the streams open at once.
	maxEventStreams = 64
)

// events is GET /ui/events (berth's own): a server-sent event stream of
// the MetricsResponse the caller would get from GET /metrics with the same
// query, one `data:` event every second, for the web UI's live pages.
// Every tick authenticates the request again, so a session that ends or a
// token that is revoked ends its stream, and a changed scope narrows it.
func (a *API) events(w http.ResponseWriter, r *http.Request) error {
	q, err := parseMetricsQuery(r)
	if err != nil {
		return err
	}
	select {
	case a.streams <- struct{}{}:
		defer func() { <-a.streams }()
	default:
		return web.Errorf(http.StatusServiceUnavailable, "too many event streams are open (%d); try again later", maxEventStreams)
	}
	rc := http.NewResponseController(w)
	// The request has been read; the listener's read timeout must not end
	// the stream (a read error cancels the request).
	if err := rc.SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(s string) error {
		if err := rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if _, err := fmt.Fprint(w, s); err != nil {
			return err
		}
		return rc.Flush()
	}
	p := caller(r)
	if err := write(fmt.Sprintf("retry: %d\n\n", 2000)); err != nil {
		return nil
	}
	end := time.NewTimer(eventLifetime)
	defer end.Stop()
	tick := time.NewTicker(eventEvery)
	defer tick.Stop()
	for {
		b, err := json.Marshal(a.metricsSnapshot(r, p, q))
		if err != nil {
			return nil
		}
		if write("data: "+string(b)+"\n\n") != nil {
			return nil // the client went away or stopped reading
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-end.C:
			return nil
		case <-tick.C:
		}
		np, err := a.gate().Authenticate(r, false)
		if err != nil || !np.Satisfies(apitype.ScopeView) {
			return nil // signed out, revoked, expired, or no longer allowed
		}
		p = np
	}
}
