package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// maxAttempts bounds how many backends one request tries (app-lb: 3).
const maxAttempts = 3

// pickTransport chooses a backend for each attempt of a request and retries on
// another one when the connection cannot be made. Only connect failures are
// retried: nothing has reached the backend then, so even a non-idempotent
// request is safe to send elsewhere.
type pickTransport struct {
	base http.RoundTripper
}

func (t *pickTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	st, _ := req.Context().Value(ctxKey{}).(*reqState)
	if st == nil || st.dep.Pool == nil {
		return nil, errNoBackend
	}
	// Keep the body open across attempts: the transport closes the body it
	// was given on error, and a retry needs it. The server closes the real
	// body when the handler returns.
	var body *retryBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &retryBody{rc: req.Body}
		req.Body = body
	}
	var tried [maxAttempts]*Backend
	var lastErr error = errNoBackend
	var heldSince time.Time
	for attempt := 0; attempt < maxAttempts; attempt++ {
		b := st.dep.Pool.acquire(tried[:attempt], time.Now())
		for b == nil && (attempt == 0 || st.dep.Forwarded) && st.dep.Hold != nil {
			// Cold start: wait, counted as demand, for a replica.
			first := heldSince.IsZero()
			if first {
				heldSince = time.Now()
			}
			if herr := st.dep.Hold.Await(req.Context(), heldSince, first); herr != nil {
				switch {
				case req.Context().Err() != nil:
					return nil, req.Context().Err()
				case refusal(herr) != nil:
					return nil, herr
				}
				return nil, errColdStart
			}
			b = st.dep.Pool.acquire(nil, time.Now())
		}
		if b == nil {
			break
		}
		tried[attempt] = b
		req.URL.Scheme, req.URL.Host = b.Scheme, b.Addr
		var span trace.Span
		if st.trace != nil {
			span = st.trace.attempt(req.Header, req.Method, b, attempt)
		}
		resp, err := t.base.RoundTrip(req)
		if span != nil {
			status := 0
			if err == nil {
				status = resp.StatusCode
			}
			attemptDone(span, status, err != nil, err)
		}
		if err == nil {
			st.backend = b
			resp.Header.Set("X-Vm-Id", b.ID)
			if !heldSince.IsZero() {
				held(st.dep, b, heldSince, resp)
			}
			resp.Body, st.body = releaser(resp.Body, b)
			return resp, nil
		}
		b.release()
		lastErr = err
		if !isConnectError(err) || (body != nil && body.read) {
			break
		}
		if !isRefusedDial(err) {
			b.SetHealthy(false)
		}
	}
	return nil, lastErr
}

// errColdStart means a held request gave up waiting for a replica.
var errColdStart = errors.New("no replica became available within cold_start_timeout_secs")

// held reports a cold start: the phases to the recorder and, to the client,
// how long the request was held.
func held(d *Deployment, b *Backend, since time.Time, resp *http.Response) {
	now := time.Now()
	total := now.Sub(since)
	report := fmt.Sprintf("held=%dms", total.Milliseconds())
	if pull := min(b.Timeline.Pull, total); pull > 0 {
		report += fmt.Sprintf(", pull=%dms", pull.Milliseconds())
	}
	resp.Header.Set("X-Berth-Cold-Start", report)
	pr, ok := d.Metrics.(PhaseRecorder)
	if !ok {
		return
	}
	pr.ObservePhases(phasesOf(b, since, now))
}

// phasesOf is how a request held since then spent its time until now, when
// b (the replica it waited for) answered or became available.
func phasesOf(b *Backend, since, now time.Time) Phases {
	tl := b.Timeline
	ph := Phases{Total: now.Sub(since)}
	if !tl.Ready.IsZero() {
		created := tl.Created
		if created.Before(since) {
			created = since // the replica was already booting when the request arrived
		}
		ph.Queue = created.Sub(since)
		ph.Pull = min(tl.Pull, ph.Queue)
		ph.Queue -= ph.Pull
		if !tl.Started.IsZero() && tl.Started.After(created) {
			ph.Create = tl.Started.Sub(created)
			ph.Boot = tl.Ready.Sub(tl.Started)
		} else {
			ph.Boot = tl.Ready.Sub(created)
		}
		ph.FirstByte = now.Sub(tl.Ready)
	}
	return ph
}

// isConnectError reports whether err means no connection was established.
func isConnectError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

type retryBody struct {
	rc   io.ReadCloser
	read bool
}

func (b *retryBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.read = true
	}
	return n, err
}

func (b *retryBody) Close() error { return nil }

// releaser returns the backend's slot when the response body is closed, which
// ReverseProxy does once the response (or upgraded connection) is done.
func releaser(body io.ReadCloser, b *Backend) (io.ReadCloser, *releaseBody) {
	r := &releaseBody{ReadCloser: body, b: b}
	if rwc, ok := body.(io.ReadWriteCloser); ok {
		return &releaseRWBody{releaseBody: r, w: rwc}, r
	}
	return r, r
}

type releaseBody struct {
	io.ReadCloser
	b    *Backend
	once sync.Once
}

func (r *releaseBody) Close() error {
	err := r.ReadCloser.Close()
	r.release()
	return err
}

// release returns the slot; only the first call counts.
func (r *releaseBody) release() { r.once.Do(r.b.release) }

// releaseRWBody keeps a 101 Switching Protocols body writable, which
// ReverseProxy requires to splice an upgraded connection.
type releaseRWBody struct {
	*releaseBody
	w io.Writer
}

func (r *releaseRWBody) Write(p []byte) (int, error) { return r.w.Write(p) }
