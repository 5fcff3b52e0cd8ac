// Package proxy is berth's data plane: one http.Handler that routes every
// request to a deployment and answers it with a redirect, a maintenance page,
// a site's files, or a backend's response.
//
// The routing table is an immutable route.Table swapped atomically on every
// configuration change (Swap). A request loads the table once, so it is served
// entirely by the configuration it arrived under; backends are shared between
// tables, so a config change neither drops in-flight requests nor open
// websockets, and in-flight counts carry over.
//
// Decision order (app-lb.md §3.1): route lookup → no route 404 → redirect →
// maintenance 503 → (berth's own: per-client limit 429 → auth gate) →
// strip_prefix → site | backend. Backends are chosen by least in-flight
// among healthy, non-draining ones, with up to three attempts when a
// connection cannot be made (the failed backend is marked unhealthy until
// a probe readmits it).
//
// Requests are relayed by berth's own HTTP/1.1 forwarder (forward.go), which
// keeps a pool of connections per Backend; protocol upgrades (websockets), and
// everything when Options.Transport is set, go through httputil.ReverseProxy.
//
// The Handler can be served by any http.Server, or by its own HTTP/1.1 front
// end, H1Server (h1server.go), which reads plain HTTP/1.x requests itself and
// hands every other connection to an http.Server, in plaintext or over TLS
// (tls.go: HTTP/2 goes to net/http), and over HTTP/3 by H3Server (h3.go).
package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/berth-dev/berth/internal/netguard"
	"github.com/berth-dev/berth/internal/route"
)

// Response texts, as app-lb writes them.
const (
	textNoRoute     = "no deployment matches this request\n"
	textMaintenance = "deployment is under maintenance\n"
	textNoBackend   = "no healthy backend available for deployment\n"
	textBadGateway  = "bad gateway: the backend could not be reached\n"
	textColdStart   = "no replica became available within cold_start_timeout_secs\n"
	textRateLimited = "rate limit exceeded\n"
)

// Recorder receives one observation per routed request. Implementations must
// be cheap and safe for concurrent use: they run on the request path.
type Recorder interface {
	// Observe records a finished request. failed means no backend response
	// was obtained (status is then what berth answered).
	Observe(status int, elapsed time.Duration, failed bool)
}

// Deployment is the data plane's immutable view of one deployment.
type Deployment struct {
	ID          string
	Namespace   string // "" for the default namespace
	Maintenance bool
	Site        http.Handler // serves a site deployment; nil otherwise
	Pool        *Pool        // backends of a static (or vm) deployment
	Metrics     Recorder     // may be nil
	// Hold, when set, lets a request that finds no available backend wait
	// for one (a vm pool scaling from zero) instead of failing at once.
	Hold Holder
	// Unavailable, for a deployment with no Pool and no Site, is the one
	// line a request is answered with (503, Retry-After 5 s) instead of
	// the generic no-backend text: why it has nothing to serve from yet
	// (a vm deployment whose mounts are being pulled). Public: clients of
	// the data plane read it.
	Unavailable string
	// Forwarded marks a Pool that is another fleet host's hop listener
	// (a vm deployment whose replicas run there): a request that came
	// over the hop (X-Berth-Hop, which only the hop server sets) is not
	// forwarded again; it is answered 503 with Retry-After 5 s and
	// Unavailable (the two hosts disagree on where the deployment runs,
	// as while it moves).
	Forwarded bool
	// Gate, when set, decides on every routed request before the
	// deployment sees it (its auth gate: package gate).
	Gate Gate
	// Limit, when set, admits or refuses every routed request by its
	// client before the gate (berth's own per-client rate and concurrency
	// limits: package ratelimit).
	Limit Limiter
	// Feed, when set, answers the requests for FeedPath (the path the
	// client sent, before any prefix is stripped) after the gate, instead
	// of the site or the backends: the namespace's event feed at the
	// spec's feed.expose.
	Feed     http.Handler
	FeedPath string
}

// Limiter is a deployment's per-client limit. Enter runs on every request
// routed to the deployment, after the maintenance check and before its
// gate, with the client's address: the TCP peer's (never an address from
// X-Forwarded-For, even from a trusted proxy); the invalid Addr when the
// peer is not IP. A refused request is answered 429 with Retry-After (the
// duration in whole seconds rounded up, at least 1). For every Enter that
// returned ok, Leave is called once with the same address when the
// request is done: after its response, or, for a websocket, when the
// connection ends.
type Limiter interface {
	Enter(client netip.Addr) (ok bool, retryAfter time.Duration)
	Leave(client netip.Addr)
}

// Gate is a deployment's sign-in gate. Admit runs on every request routed
// to the deployment, before any prefix is stripped (it sees the path the
// client sent). It answers 0 to let the request through, having removed
// every X-Auth-Request-* header the client sent and set the ones it vouches
// for (and any credential it presents upstream); else it has answered the
// request itself (a refusal, a redirect to sign in, a sign-in callback)
// and returns the status it wrote. secure reports a request that reached
// berth over TLS.
//
// credentialed reports a request admitted on a valid credential (a
// session, a JWT, an app-token) rather than as a public path.
//
// A deployment without a gate has every X-Auth-Request-* header removed by
// the forwarder instead, so an upstream can trust them either way.
type Gate interface {
	Admit(w http.ResponseWriter, r *http.Request, secure bool) (status int, credentialed bool)
}

// authRequestHeader reports an identity header only a gate may set:
// X-Auth-Request-User, -Email, -Name and any other of the family
// (canonical names: both front ends canonicalize).
func authRequestHeader(k string) bool {
	return len(k) > len(authRequestPrefix) && k[:len(authRequestPrefix)] == authRequestPrefix
}

const authRequestPrefix = "X-Auth-Request-"

// Holder is a pool that can grow: the cold-start hold.
type Holder interface {
	// Await waits, counted as demand, until a backend may have become
	// available (nil: pick again) or the request is not held any longer: it
	// has waited its cold-start timeout since it first waited, its context
	// ended, or the pool cannot start a replica now (an error that is a
	// Refusal, answered at once). first marks a request's first wait.
	Await(ctx context.Context, since time.Time, first bool) error
	// RetryAfter is the Retry-After for a request that gave up waiting.
	RetryAfter() time.Duration
}

// Refusal is a Holder's error for a request it will not hold because no
// replica can start now (its creates or boots fail and a backoff holds the
// next attempt off): the request is answered at once with a 503 whose body
// is PublicMessage and whose Retry-After is RetryAfter.
type Refusal interface {
	error
	// PublicMessage is the answer's body, one line. The data plane's
	// clients read it, so it carries nothing they may not see.
	PublicMessage() string
	// RetryAfter is how long until the pool tries again.
	RetryAfter() time.Duration
}

// refusal returns err as a Refusal, or nil.
func refusal(err error) Refusal {
	var r Refusal
	if errors.As(err, &r) {
		return r
	}
	return nil
}

// answerRefusal answers a request a Holder refused to hold.
func answerRefusal(w http.ResponseWriter, r Refusal) {
	setRetryAfter(w, r.RetryAfter())
	plain(w, http.StatusServiceUnavailable, r.PublicMessage()+"\n")
}

// setRetryAfter sets Retry-After to d in whole seconds, rounded up, at
// least 1.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(max(int((d+time.Second-1)/time.Second), 1)))
}

// Phases is how long a request held for a cold start spent in each phase:
// waiting before its replica was created, the create itself, the boot until
// the health probe passed, and from then to the response's first byte.
type Phases struct {
	// Pull is the part of the wait spent pulling the replica's image
	// from its registry; Queue excludes it.
	Queue, Pull, Create, Boot, FirstByte, Total time.Duration
}

// PhaseRecorder is an optional Recorder extension for held requests.
type PhaseRecorder interface {
	ObservePhases(Phases)
}

// Table is the routing table type the proxy serves from.
type Table = route.Table[*Deployment]

// Options configure a Handler.
type Options struct {
	Log *slog.Logger
	// TrustedProxies are peers whose X-Forwarded-For/-Proto/-Host headers are
	// kept (and appended to). From anyone else those headers are replaced.
	TrustedProxies []netip.Prefix
	// Transport, when set, carries every request to backends through
	// httputil.ReverseProxy. When nil (the normal case) berth's own HTTP/1.1
	// forwarder does (see forward.go), and ReverseProxy over NewTransport only
	// carries protocol upgrades such as websockets.
	Transport http.RoundTripper
	// TLSClientConfig configures connections to https backends made by the
	// forwarder (nil: system roots, SNI from the backend address). It does
	// not apply when Transport is set.
	TLSClientConfig *tls.Config
	// BodyReadTimeout ends a request whose body goes this long without a
	// byte arriving (408, or the connection cut when the answer has begun),
	// and cancels the backend's request; default DefaultBodyReadTimeout,
	// negative for none. It applies to both front ends.
	BodyReadTimeout time.Duration
	// Resolve, when set, is asked about every request before the routing
	// table (for example a Computer's exposed port, named by host), so no
	// route can take what it serves; it must answer other hosts quickly.
	// It returns the deployment to serve the request with, and a release
	// func called when the request is done; nil hands the request to the
	// table. It may answer the request itself and return handled (a
	// refusal, say).
	Resolve func(w http.ResponseWriter, r *http.Request, host string) (d *Deployment, release func(), handled bool)
	// Self is the set of berth's own listening addresses (proxy, admin,
	// egress); dials that resolve to one are refused with 502. The server
	// fills it once its listeners are bound. Nil refuses none. Neither
	// this nor AllowLinkLocal applies to a Transport given above.
	Self *netguard.Self
	// AllowLinkLocal lets upstreams be link-local or cloud metadata
	// addresses (169.254.0.0/16, fe80::/10, 100.100.100.200,
	// fd00:ec2::254), which are otherwise refused at dial time.
	AllowLinkLocal bool
	// UpstreamResponseTimeout bounds how long a backend may take to send its
	// response head once the request has been sent (the wait restarts while
	// the request body is still being written); past it the request answers
	// 504. Zero means 60 s; negative means no limit. Response bodies are not
	// bounded: a stream may stay quiet as long as it likes.
	UpstreamResponseTimeout time.Duration

	// Challenge, when set, is offered every plaintext request whose path
	// starts with ACMEChallengePrefix, before anything else (the entry
	// checks, RedirectHTTPS, Resolve, routing): an ACME HTTP-01
	// responder. It returns true when it answered the request; false lets
	// the request go on as any other.
	Challenge func(w http.ResponseWriter, r *http.Request) bool
	// RedirectHTTPS answers every plaintext request (but ACME challenges
	// Challenge answered) with a 308 to the same URL over https, on
	// HTTPSPort.
	RedirectHTTPS bool
	// HTTPSPort is the port of the https URLs RedirectHTTPS sends to;
	// zero or 443 leaves it out of the URL.
	HTTPSPort int
	// HSTS, when set, is the Strict-Transport-Security value of responses
	// sent over TLS (HTTPS and HTTP/3) that carry none of their own; a
	// backend's own field wins. Plaintext responses never get it (RFC
	// 6797 §7.2).
	HSTS string
	// AltSvc, when set, is the Alt-Svc value of responses sent over TLS
	// on TCP (HTTPS, HTTP/2) that carry none of their own: it advertises
	// HTTP/3, for example `h3=":443"; ma=86400`.
	AltSvc string

	// Guard, when set, is asked about every request once its route is
	// known (deployment is empty when none routes it), before the
	// request costs anything more (a Computer woken, a gate, a backend):
	// the operator's guard rules. A GuardBlock is answered 403 `blocked`.
	// It runs on every request: it must be cheap and must not keep the
	// strings it is given.
	Guard func(client netip.Addr, host, deployment, method, path, userAgent string) GuardVerdict
	// Observe, when set, is handed every finished request (the SIEM). It
	// runs on the request path: it must not block, and must copy what it
	// keeps of the Completion.
	Observe func(*Completion)
	// Tracer, when set, traces every request (trace.go): a server span
	// with children for its stages and upstream attempts, and the
	// attempt's span as the upstream's traceparent. Nil traces nothing
	// and leaves traceparent to pass through as any other field.
	Tracer trace.Tracer
}

// ACMEChallengePrefix is the path prefix of ACME HTTP-01 challenges (RFC
// 8555 §8.3), which Options.Challenge is offered.
const ACMEChallengePrefix = "/.well-known/acme-challenge/"

// DefaultUpstreamResponseTimeout is Options.UpstreamResponseTimeout's
// default, nginx's proxy_read_timeout.
const DefaultUpstreamResponseTimeout = 60 * time.Second

// Handler is the data-plane http.Handler.
type Handler struct {
	table   atomic.Pointer[Table]
	log     *slog.Logger
	trusted []netip.Prefix
	rp      *httputil.ReverseProxy
	fast    bool    // use the forwarder for non-upgrade requests
	dial    *dialer // the forwarder's connections
	resolve func(w http.ResponseWriter, r *http.Request, host string) (*Deployment, func(), bool)
	guard   func(client netip.Addr, host, deployment, method, path, userAgent string) GuardVerdict
	observe func(*Completion)
	tracer  trace.Tracer
	nactive atomic.Int64
	// respTimeout is Options.UpstreamResponseTimeout (0: none).
	respTimeout time.Duration
	// bodyTimeout is Options.BodyReadTimeout (0: none).
	bodyTimeout time.Duration

	// What plaintext and TLS requests get besides routing (see
	// Options.Challenge and after, and tls.go). plainHook says a plaintext
	// request has something to check: the fast path pays one test.
	challenge     func(w http.ResponseWriter, r *http.Request) bool
	redirectHTTPS bool
	plainHook     bool
	httpsPort     string   // ":port", or empty for 443
	hsts, altSvc  []string // one value each, shared by every response (cap 1: an append copies)
	tlsHeaders    bool     // hsts or altSvc is set

	// Wait is built on a channel rather than a sync.WaitGroup: requests keep
	// arriving while someone waits (or after a Wait gave up on its context),
	// and a WaitGroup forbids Add from zero concurrently with Wait (it panics
	// with "WaitGroup is reused before previous Wait has returned").
	waiters atomic.Int64  // Wait calls in progress
	idleMu  sync.Mutex    // guards idle
	idle    chan struct{} // closed when nactive drops to 0 with waiters
}

// New returns a Handler serving an empty table.
func New(o Options) *Handler {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.UpstreamResponseTimeout == 0:
		o.UpstreamResponseTimeout = DefaultUpstreamResponseTimeout
	case o.UpstreamResponseTimeout < 0:
		o.UpstreamResponseTimeout = 0
	}
	g := &dialGuard{self: o.Self, allowLinkLocal: o.AllowLinkLocal}
	h := &Handler{log: o.Log, trusted: o.TrustedProxies, fast: o.Transport == nil, dial: newDialer(o.TLSClientConfig, g), resolve: o.Resolve,
		guard: o.Guard, observe: o.Observe, tracer: o.Tracer, respTimeout: o.UpstreamResponseTimeout}
	switch {
	case o.BodyReadTimeout == 0:
		h.bodyTimeout = DefaultBodyReadTimeout
	case o.BodyReadTimeout > 0:
		h.bodyTimeout = o.BodyReadTimeout
	}
	base := o.Transport
	if base == nil {
		t := NewTransport()
		t.TLSClientConfig = o.TLSClientConfig
		d := g.netDialer()
		t.DialContext = d.DialContext
		t.ResponseHeaderTimeout = o.UpstreamResponseTimeout
		base = t
	}
	h.rp = &httputil.ReverseProxy{
		Rewrite:      h.rewrite,
		Transport:    &pickTransport{base: base},
		BufferPool:   bufferPool{},
		ErrorHandler: h.errorHandler,
		ErrorLog:     slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
	}
	h.setTLSOptions(o)
	var empty route.Builder[*Deployment]
	h.table.Store(empty.Build())
	return h
}

// NewTransport returns the transport used for backends: pooled keep-alive
// connections sized for high concurrency, bounded dial time, no overall
// response timeout (responses may stream for as long as they like).
func NewTransport() *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:           d.DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     false,
	}
}

// Swap installs a new routing table. In-flight requests finish on the table
// they started with.
func (h *Handler) Swap(t *Table) { h.table.Store(t) }

// Table returns the current routing table.
func (h *Handler) Table() *Table { return h.table.Load() }

// Active is the number of requests (including upgraded connections) being
// served right now.
func (h *Handler) Active() int64 { return h.nactive.Load() }

// Wait blocks until no request is being served or ctx ends. Used when
// draining: http.Server.Shutdown does not wait for hijacked (websocket)
// connections, which this counts.
func (h *Handler) Wait(ctx context.Context) error {
	h.waiters.Add(1)
	defer h.waiters.Add(-1)
	for {
		h.idleMu.Lock()
		if h.idle == nil {
			h.idle = make(chan struct{})
		}
		idle := h.idle
		h.idleMu.Unlock()
		// Checked after registering as a waiter and taking the channel, so
		// a request finishing in between closes this very channel.
		if h.nactive.Load() == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// leave ends a request and wakes Wait callers when it was the last one. The
// common path (nobody waiting) is one atomic add and one load.
func (h *Handler) leave() {
	if h.nactive.Add(-1) != 0 || h.waiters.Load() == 0 {
		return
	}
	h.idleMu.Lock()
	if h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
	h.idleMu.Unlock()
}

type ctxKey struct{}

// reqState travels with a forwarded request from ServeHTTP to the transport.
type reqState struct {
	dep     *Deployment
	backend *Backend
	body    *releaseBody // returns the backend slot; set with backend
	trace   *reqTrace    // the request's, when traced
	failed  bool
	status  int
}

// ServeHTTP checks, routes and serves one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.nactive.Add(1)
	defer h.leave()
	if h.observe != nil {
		w = h.observed(w)
		defer h.complete(w, r, r.URL.Path, r.URL.RawQuery, requestTime(w))
	}
	if h.tracer != nil {
		var t *reqTrace
		w, r, t = h.startTrace(w, r)
		defer endTrace(w, t)
	}
	if r.TLS == nil {
		if h.plainHook && h.plaintext(w, r) {
			return
		}
	} else if h.tlsHeaders {
		if _, front := w.(*h1Writer); !front {
			h.setTLSHeaders(w, r) // (the front end writes its own: h1Writer.commit)
		}
	}
	if !h.admit(w, r) {
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		if _, ours := r.Body.(*h1Body); !ours {
			h.guardBody(w, r) // read by net/http: see entry.go
			return
		}
	}
	h.route(w, r)
}

// requestTime is the time the request was read: the front end's clock read,
// or now.
func requestTime(w http.ResponseWriter) time.Time {
	if fw, ok := w.(*h1Writer); ok {
		return fw.c.now
	}
	return time.Now()
}

// lookup finds the route of a request, reusing the front end's lookup for
// it when nothing changed since (table, host, path).
func (h *Handler) lookup(w http.ResponseWriter, host, path string) (route.Match[*Deployment], bool) {
	t := h.table.Load()
	if fw, ok := w.(*h1Writer); ok {
		if l := &fw.c.look; l.table == t && l.host == host && l.path == path {
			return l.m, l.ok
		}
	}
	return t.Lookup(host, path)
}

// normalizedHost is route.NormalizeHost(host), reusing the front end's
// for its request's Host.
func normalizedHost(w http.ResponseWriter, host string) string {
	if fw, ok := w.(*h1Writer); ok && fw.c.look.rawHost == host && fw.c.look.table != nil {
		return fw.c.look.host
	}
	return route.NormalizeHost(host)
}

// route routes and serves a request admitted by ServeHTTP.
func (h *Handler) route(w http.ResponseWriter, r *http.Request) {
	start := requestTime(w)
	host := normalizedHost(w, r.Host)
	var t *reqTrace
	var span trace.Span
	if h.tracer != nil {
		if t = traceOf(w, r); t != nil {
			span = t.child("route")
		}
	}
	m, ok := h.lookup(w, host, r.URL.Path)
	if t != nil {
		var d *Deployment
		if ok {
			d = m.Target
		}
		t.routed(span, d)
	}
	if ok && h.observe != nil {
		if o := obsOf(w); o != nil {
			o.dep = m.Target
		}
	}
	if h.guard != nil {
		dep := ""
		if ok {
			dep = m.Target.ID
		}
		if t != nil {
			span = t.child("guard")
		}
		blocked := h.guarded(w, r, host, dep)
		if t != nil {
			guardDone(span, blocked)
		}
		if blocked {
			if ok {
				m.Target.observe(http.StatusForbidden, start, false)
			}
			return
		}
	}
	if h.resolve != nil {
		// Before the table, so that no deployment rule (a catch-all
		// path rule, a host_suffix) can take a host the resolver serves.
		d, release, handled := h.resolve(w, r, host)
		if handled {
			return
		}
		if d != nil {
			// Resolving may have woken a Computer: the request starts
			// over from now.
			defer release()
			if h.observe != nil {
				if o := obsOf(w); o != nil {
					o.dep = d
				}
			}
			if t != nil {
				t.serving(d)
			}
			h.serve(w, r, d, time.Now())
			return
		}
	}
	if !ok {
		if h.observe != nil {
			if o := obsOf(w); o != nil {
				o.unrouted = true
			}
		}
		plain(w, http.StatusNotFound, textNoRoute)
		return
	}
	d := m.Target
	if rd := m.Rule.Redirect; rd != nil {
		status := h.redirect(w, r, rd, m.Strip)
		d.observe(status, start, false)
		return
	}
	if d.Maintenance {
		plain(w, http.StatusServiceUnavailable, textMaintenance)
		d.observe(http.StatusServiceUnavailable, start, false)
		return
	}
	if d.Limit != nil {
		// The client as the guard and the SIEM see it: the socket peer, or
		// past trusted proxies the address they forwarded (else everyone
		// behind a proxy would share one limit).
		ip := h.clientAddr(w, r)
		ok, after := d.Limit.Enter(ip)
		if !ok {
			setRetryAfter(w, after)
			plain(w, http.StatusTooManyRequests, textRateLimited)
			d.observe(http.StatusTooManyRequests, start, false)
			return
		}
		defer d.Limit.Leave(ip)
	}
	if d.Gate != nil {
		if t != nil {
			span = t.child("gate")
		}
		status, cred := d.Gate.Admit(w, r, r.TLS != nil)
		if t != nil {
			gateDone(span, status, cred)
		}
		if status != 0 {
			d.observe(status, start, false)
			return
		}
		if cred && h.observe != nil {
			Credentialed(w)
		}
	}
	if d.Feed != nil && r.URL.Path == d.FeedPath {
		sw := &statusWriter{ResponseWriter: w}
		d.Feed.ServeHTTP(sw, r)
		d.observe(sw.code(), start, false)
		return
	}
	if m.Strip != "" {
		if d.Site != nil && r.URL.Path == m.Strip && !strings.HasSuffix(m.Strip, "/") {
			// /docs on a site routed at /docs: the site's root directory,
			// which (like any directory) is addressed with a trailing
			// slash, so that relative links in its index resolve.
			to := m.Strip + "/"
			if r.URL.RawQuery != "" {
				to += "?" + r.URL.RawQuery
			}
			w.Header().Set("Location", to)
			plain(w, http.StatusMovedPermanently, "redirecting to "+to+"\n")
			d.observe(http.StatusMovedPermanently, start, false)
			return
		}
		stripURL(r, m.Strip)
	}
	h.serve(w, r, d, start)
}

// serve answers a routed request from its deployment's site or backends.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, d *Deployment, start time.Time) {
	hop := 0 // the hop count r arrived with, for a deployment with backends
	if d.Site == nil && d.Pool != nil {
		hop = hops(r)
	}
	switch {
	case d.Site != nil:
		sw := &statusWriter{ResponseWriter: w}
		d.Site.ServeHTTP(sw, r)
		d.observe(sw.code(), start, false)
	case d.Forwarded && r.Header.Get(hopOriginHeader) != "":
		setRetryAfter(w, 5*time.Second)
		plain(w, http.StatusServiceUnavailable, cmp.Or(d.Unavailable, "this deployment is moving between fleet hosts")+"\n")
		d.observe(http.StatusServiceUnavailable, start, true)
	case d.Pool != nil && hop >= maxHops:
		h.log.Warn("request loop cut", "deployment", d.ID, "host", r.Host, "hops", hop)
		plain(w, http.StatusLoopDetected, textLoop)
		d.observe(http.StatusLoopDetected, start, true)
	case d.Pool != nil && h.fast && !isUpgrade(r):
		h.forward(w, r, d, start, hop)
	case d.Pool != nil:
		sw := &statusWriter{ResponseWriter: w}
		st := &reqState{dep: d}
		if h.tracer != nil {
			st.trace = traceOf(w, r)
		}
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, st))
		h.rp.ServeHTTP(sw, r)
		if st.body != nil {
			// ReverseProxy closes an upgraded backend connection from a
			// goroutine after it returns; give the slot back now so the
			// backend's in-flight count is settled when Wait sees Active 0.
			st.body.release()
		}
		d.observe(sw.code(), start, st.failed)
	case d.Unavailable != "":
		setRetryAfter(w, 5*time.Second)
		plain(w, http.StatusServiceUnavailable, d.Unavailable+"\n")
		d.observe(http.StatusServiceUnavailable, start, true)
	default:
		plain(w, http.StatusServiceUnavailable, textNoBackend)
		d.observe(http.StatusServiceUnavailable, start, true)
	}
}

// isUpgrade reports a request to switch protocols (websocket): those go
// through ReverseProxy, which splices the two connections.
func isUpgrade(r *http.Request) bool { return len(r.Header["Upgrade"]) > 0 }

func (d *Deployment) observe(status int, start time.Time, failed bool) {
	if d.Metrics != nil {
		d.Metrics.Observe(status, time.Since(start), failed)
	}
}

func stripURL(r *http.Request, prefix string) {
	r.URL.Path = route.StripPath(r.URL.Path, prefix)
	if r.URL.RawPath != "" {
		// The raw path is only a hint; drop it when the decoded prefix does
		// not line up with it, and let net/url re-encode.
		if strings.HasPrefix(r.URL.RawPath, prefix) {
			r.URL.RawPath = route.StripPath(r.URL.RawPath, prefix)
		} else {
			r.URL.RawPath = ""
		}
	}
}

// redirect answers with rd and returns the status it sent (rd.Status may be
// 0, meaning the default 301).
func (h *Handler) redirect(w http.ResponseWriter, r *http.Request, rd *route.Redirect, strip string) int {
	to := rd.To
	if rd.KeepPath {
		p := r.URL.EscapedPath()
		if strip != "" {
			p = route.StripPath(p, strip)
		}
		to = strings.TrimSuffix(to, "/") + p
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
	}
	status := rd.Status
	if status == 0 {
		status = http.StatusMovedPermanently
	}
	w.Header().Set("Location", to)
	plain(w, status, "redirecting to "+to+"\n")
	return status
}

// rewrite prepares the outbound request. The backend is chosen later, per
// attempt, by pickTransport.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	out, in := pr.Out, pr.In
	out.URL.Scheme = "http"
	out.URL.Host = "backend.invalid" // replaced per attempt
	out.Host = in.Host
	out.Header[hopHeader] = []string{string(appendHop(nil, in))}
	delete(out.Header, hopOriginHeader)
	delete(out.Header, hopAdminHeader)
	delete(out.Header, hopClientHeader)
	delete(out.Header, hopUngatedHeader)
	if st, _ := in.Context().Value(ctxKey{}).(*reqState); st == nil || st.dep.Gate == nil {
		for k := range out.Header {
			if authRequestHeader(k) {
				delete(out.Header, k)
			}
		}
	}
	peer := peerIP(in.RemoteAddr)
	if h.isTrusted(peer) {
		if v := in.Header.Values("X-Forwarded-For"); len(v) > 0 {
			out.Header["X-Forwarded-For"] = []string{strings.Join(v, ", ") + ", " + peer.String()}
		} else {
			out.Header.Set("X-Forwarded-For", peer.String())
		}
		setDefault(out.Header, in.Header, "X-Forwarded-Proto", scheme(in))
		setDefault(out.Header, in.Header, "X-Forwarded-Host", in.Host)
		return
	}
	if peer.IsValid() {
		out.Header.Set("X-Forwarded-For", peer.String())
	}
	out.Header.Set("X-Forwarded-Proto", scheme(in))
	out.Header.Set("X-Forwarded-Host", in.Host)
}

func setDefault(out, in http.Header, key, def string) {
	if v := in.Get(key); v != "" {
		out.Set(key, v)
	} else {
		out.Set(key, def)
	}
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

func peerIP(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func (h *Handler) isTrusted(ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	for _, p := range h.trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func (h *Handler) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	st, _ := r.Context().Value(ctxKey{}).(*reqState)
	if st != nil {
		st.failed = true
	}
	switch {
	case errors.Is(err, errNoBackend):
		plain(w, http.StatusServiceUnavailable, textNoBackend)
	case refusal(err) != nil:
		answerRefusal(w, refusal(err))
	case errors.Is(err, errColdStart):
		if st != nil && st.dep.Hold != nil {
			setRetryAfter(w, st.dep.Hold.RetryAfter())
		}
		plain(w, http.StatusServiceUnavailable, textColdStart)
	case errors.Is(err, context.Canceled):
		// The client went away; nobody is listening for an answer.
		w.WriteHeader(499)
	case isRefusedDial(err):
		h.log.Warn("upstream dial refused", "host", r.Host, "err", err)
		plain(w, http.StatusBadGateway, textRefused)
	case isResponseTimeout(err):
		h.log.Debug("backend response timed out", "host", r.Host, "path", r.URL.Path, "err", err)
		plain(w, http.StatusGatewayTimeout, textTimeout)
	default:
		h.log.Debug("backend request failed", "host", r.Host, "path", r.URL.Path, "err", err)
		plain(w, http.StatusBadGateway, textBadGateway)
	}
}

func plain(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// statusWriter remembers the status code written. Unwrap lets
// http.ResponseController (used by ReverseProxy for flushing and upgrades)
// reach the underlying writer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 || (s.status >= 100 && s.status < 200 && code >= 200) {
		s.status = code
	}
	if code == 499 {
		return // not a real status; the client is gone
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

type bufferPool struct{}

var bufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(bufs.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { bufs.Put(&b) }

// isResponseTimeout reports http.Transport's ResponseHeaderTimeout error (a
// timeout that is not the dial's).
func isResponseTimeout(err error) bool {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}
