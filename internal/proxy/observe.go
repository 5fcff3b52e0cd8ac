package proxy

import (
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/web"
)

// Completion is one finished data-plane request, as Options.Observe sees
// it (the SIEM's input). Its strings are the request's own and valid only
// during the call: the front end reuses its buffers for the connection's
// next request, so whatever keeps one must copy it.
type Completion struct {
	Time time.Time // when the request was read
	// Client is the socket peer, or — when the peer is a trusted proxy —
	// the nearest address it forwarded that is not itself trusted; never
	// a forwarded header from anyone else.
	Client    netip.Addr
	Method    string
	Host      string // as sent, port included
	Path      string // as sent, before any route prefix was stripped
	RawQuery  string
	UserAgent string
	Status    int
	Duration  time.Duration
	Bytes     int64 // response body bytes written
	// Deployment and Namespace: the deployment that served it; empty for
	// berth's own answers to an unrouted request (Unrouted) and for a
	// request refused before routing.
	Deployment string
	Namespace  string
	Unrouted   bool
	// Backend is what served it: the replica's sandbox id or the static
	// upstream as written (what X-Vm-Id answered); empty when no backend
	// answered.
	Backend string
	// Credentialed: the request carried a valid credential for its
	// deployment (a sign-in session, a JWT, an app-token, a Computer
	// grant), so none of its misses are an attacker's probing.
	Credentialed bool
	// Exempted: an allow guard rule matched it.
	Exempted bool
	// Blocked: a guard rule refused it (403 blocked), before anything
	// served it.
	Blocked bool
	// Scheme is the Authorization header's scheme: "basic", "bearer", or
	// "none" (no header, or another scheme).
	Scheme string
}

// GuardVerdict is a guard rule set's answer on a request (Options.Guard).
type GuardVerdict uint8

const (
	GuardPass       GuardVerdict = iota // no rule matched
	GuardExempt                         // an allow rule matched: served, and exempt from detection
	GuardBlock                          // a block rule matched: refused with 403
	GuardWouldBlock                     // a block rule matched and the guard does not enforce: served
)

// textBlocked is a guard-blocked request's body (app-lb's).
const textBlocked = "blocked\n"

// reqObs is what the data plane learns about a request while serving it,
// for its Completion.
type reqObs struct {
	dep                                       *Deployment
	unrouted, credentialed, exempted, blocked bool
	comp                                      Completion // handed to Observe (no allocation per request)
}

// obsWriter carries a request's reqObs, status and byte count when the
// front end is not berth's own (HTTP/2, HTTP/3, a site served by net/http),
// whose h1Writer keeps them itself. Unwrap lets http.ResponseController
// (flushes, websocket hijacks) reach the writer underneath.
type obsWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	obs    reqObs
}

func (o *obsWriter) WriteHeader(code int) {
	if o.status == 0 || (o.status < 200 && code >= 200) {
		o.status = code
	}
	o.ResponseWriter.WriteHeader(code)
}

func (o *obsWriter) Write(p []byte) (int, error) {
	if o.status == 0 {
		o.status = http.StatusOK
	}
	n, err := o.ResponseWriter.Write(p)
	o.bytes += int64(n)
	return n, err
}

func (o *obsWriter) Flush() {
	if f, ok := o.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (o *obsWriter) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// obsOf returns the reqObs of the request w answers, or nil when nothing
// observes requests.
func obsOf(w http.ResponseWriter) *reqObs {
	switch w := w.(type) {
	case *h1Writer:
		if w.c.s.h.observe != nil {
			return &w.c.obs
		}
	case *obsWriter:
		return &w.obs
	case *statusWriter:
		return obsOf(w.ResponseWriter)
	}
	return nil
}

// Credentialed marks the request w answers as carrying a valid credential
// for what serves it (Completion.Credentialed). Options.Resolve calls it
// for a Computer grant it accepted; a deployment's Gate says so itself.
func Credentialed(w http.ResponseWriter) {
	if o := obsOf(w); o != nil {
		o.credentialed = true
	}
}

// clientAddr is the address a request came from: the socket peer, or when
// that is a trusted proxy, the right-most X-Forwarded-For address that is
// not itself trusted (the left-most when every one is). A malformed entry
// stops the walk at the last trusted hop before it.
func (h *Handler) clientAddr(w http.ResponseWriter, r *http.Request) netip.Addr {
	peer := peerOf(w, r)
	if len(h.trusted) == 0 || !h.isTrusted(peer) {
		return peer
	}
	vals := r.Header["X-Forwarded-For"]
	client := peer
	for i := len(vals) - 1; i >= 0; i-- {
		v := vals[i]
		for v != "" {
			var item string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				item, v = v[j+1:], v[:j]
			} else {
				item, v = v, ""
			}
			ip, err := netip.ParseAddr(strings.TrimSpace(item))
			if err != nil {
				return client
			}
			client = ip.Unmap()
			if !h.isTrusted(client) {
				return client
			}
		}
	}
	return client
}

// peerOf is r's socket peer: the front end's, parsed once for the
// connection, or r.RemoteAddr parsed.
func peerOf(w http.ResponseWriter, r *http.Request) netip.Addr {
	if fw, ok := w.(*h1Writer); ok && fw.c.peer.IsValid() {
		return fw.c.peer
	}
	return peerIP(r.RemoteAddr)
}

// authScheme names the scheme of r's Authorization header.
func authScheme(r *http.Request) string {
	if v := r.Header["Authorization"]; len(v) > 0 {
		return web.AuthScheme(v[0])
	}
	return "none"
}

// guarded runs the guard rules on r, served (if at all) by deployment dep
// (empty when nothing routes it), and answers a blocked request. It
// reports whether r was answered.
func (h *Handler) guarded(w http.ResponseWriter, r *http.Request, host, dep string) bool {
	v := h.guard(h.clientAddr(w, r), host, dep, r.Method, r.URL.Path, userAgent(r))
	switch v {
	case GuardBlock:
		if o := obsOf(w); o != nil {
			o.blocked = true
		}
		plain(w, http.StatusForbidden, textBlocked)
		return true
	case GuardExempt:
		if o := obsOf(w); o != nil {
			o.exempted = true
		}
	}
	return false
}

func userAgent(r *http.Request) string {
	if v := r.Header["User-Agent"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// observed wraps w for Options.Observe when the front end keeps no
// reqObs of its own, and returns the writer to serve with.
func (h *Handler) observed(w http.ResponseWriter) http.ResponseWriter {
	if fw, ok := w.(*h1Writer); ok {
		fw.c.obs = reqObs{}
		return w
	}
	return &obsWriter{ResponseWriter: w}
}

// complete hands Options.Observe the Completion of r, answered through w
// (a writer observed returned). path and rawQuery are r's before routing
// stripped a prefix.
func (h *Handler) complete(w http.ResponseWriter, r *http.Request, path, rawQuery string, start time.Time) {
	var o *reqObs
	var status int
	var bytes int64
	switch w := w.(type) {
	case *h1Writer:
		o, status, bytes = &w.c.obs, w.status, w.written
	case *obsWriter:
		o, status, bytes = &w.obs, w.status, w.bytes
	default:
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	c := &o.comp
	*c = Completion{
		Time: start, Client: h.clientAddr(w, r), Method: r.Method, Host: r.Host, Path: path, RawQuery: rawQuery,
		UserAgent: userAgent(r), Status: status, Duration: time.Since(start), Bytes: bytes,
		Unrouted: o.unrouted, Credentialed: o.credentialed, Exempted: o.exempted, Blocked: o.blocked, Scheme: authScheme(r),
	}
	if o.dep != nil {
		c.Deployment, c.Namespace = o.dep.ID, o.dep.Namespace
	}
	if v := w.Header()["X-Vm-Id"]; len(v) > 0 { // set by relay, from the backend
		c.Backend = v[0]
	}
	h.observe(c)
	o.comp = Completion{} // keep no reference to the request's strings
}
