package hop

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"

	"github.com/berth-dev/berth/internal/fleet/fleetca"
	"github.com/berth-dev/berth/internal/web"
)

// AdminForwarder relays admin requests (the Computer API's) to the host
// that serves them, over a Transport: the peer's hop server hands them to
// its admin handler (ServerConfig.Admin), which authenticates the
// original caller's credentials itself. The forwarding host vouches for
// nothing but the client's address.
type AdminForwarder struct {
	t          *Transport
	self       string
	ungated    bool
	log        *slog.Logger
	retryAfter time.Duration
	rp         *httputil.ReverseProxy
}

// NewAdminForwarder makes the admin forwarder of host self over t. A peer
// that does not answer is a 503 with Retry-After retryAfter (default 5 s).
func NewAdminForwarder(t *Transport, self string, retryAfter time.Duration, log *slog.Logger) *AdminForwarder {
	if log == nil {
		log = slog.Default()
	}
	if retryAfter <= 0 {
		retryAfter = 5 * time.Second
	}
	f := &AdminForwarder{t: t, self: self, log: log, retryAfter: retryAfter}
	f.rp = &httputil.ReverseProxy{
		Transport: t,
		Rewrite: func(pr *httputil.ProxyRequest) {
			rewriteToPeer(pr)
			f.mark(pr.Out.Header, pr.In.RemoteAddr)
		},
		// Exec output, facts streams and the terminal are relayed as
		// they come.
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			id, _ := r.Context().Value(peerCtxKey{}).(string)
			f.Unreachable(w, r, id, err)
		},
	}
	return f
}

// SetUngated says whether this host's admin API has no operator
// password (UngatedHeader); call it before the first forward.
func (f *AdminForwarder) SetUngated(ungated bool) { f.ungated = ungated }

func (f *AdminForwarder) mark(h http.Header, client string) {
	h.Del(Header)
	h.Set(AdminHeader, f.self)
	h.Set(ClientHeader, client)
	h.Del(UngatedHeader)
	if f.ungated {
		h.Set(UngatedHeader, "1")
	}
}

// Unreachable answers that host id, which serves the request, cannot be
// reached: a 503 with Retry-After.
func (f *AdminForwarder) Unreachable(w http.ResponseWriter, r *http.Request, id string, err error) {
	web.WriteError(f.log, w, r, &web.Error{
		Status: http.StatusServiceUnavailable, Code: "host_unreachable",
		Message: "the Computer's host " + id + " is unreachable; retry later",
		Header:  http.Header{"Retry-After": {strconv.Itoa(int((f.retryAfter + time.Second - 1) / time.Second))}},
		Err:     err,
	})
}

// ForwardAdmin relays r to the admin API of peer host peerID at its hop
// address peerAddr and writes the peer's answer to w unchanged, the body
// streamed both ways and upgrades (websockets) relayed. A request that
// came over the hop itself is refused (502, ErrLoop): hosts do not bounce
// requests between them.
func (f *AdminForwarder) ForwardAdmin(w http.ResponseWriter, r *http.Request, peerID, peerAddr string) {
	if origin, ok := Origin(r.Context()); ok {
		web.WriteError(f.log, w, r, &web.Error{Status: http.StatusBadGateway, Code: "hop_loop",
			Message: "bad gateway: the request came over the hop from host " + origin + " and is not forwarded again",
			Err:     ErrLoop})
		return
	}
	if err := fleetca.ValidHostID(peerID); err != nil {
		f.Unreachable(w, r, peerID, err)
		return
	}
	if _, _, err := net.SplitHostPort(peerAddr); err != nil {
		f.Unreachable(w, r, peerID, err)
		return
	}
	http.NewResponseController(w).EnableFullDuplex()
	out := r.WithContext(WithPeer(r.Context(), peerID))
	u := *r.URL
	u.Host = peerAddr
	out.URL = &u
	f.rp.ServeHTTP(w, out)
}

// Send sends a copy of r (its method, path, query, headers and the
// context's deadline; no body) to the admin API of peer host peerID at
// peerAddr, marked as ForwardAdmin marks it, and returns the peer's
// answer: the fan-out of a list to every host.
func (f *AdminForwarder) Send(r *http.Request, peerID, peerAddr string) (*http.Response, error) {
	if _, ok := Origin(r.Context()); ok {
		return nil, ErrLoop
	}
	out := r.Clone(WithPeer(r.Context(), peerID))
	out.Body, out.ContentLength, out.GetBody = http.NoBody, 0, nil
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = "https", peerAddr
	f.mark(out.Header, r.RemoteAddr)
	return f.t.RoundTrip(out)
}
