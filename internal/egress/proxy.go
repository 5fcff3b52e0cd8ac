package egress

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Event is one egress request as the proxy saw it: the material of the
// contract's egress fact. Host is the destination host only (never a URL:
// URLs may carry credentials). Method is the HTTP method, or "CONNECT" for
// a tunnel, whose status is the proxy's answer to the CONNECT (200 when
// the tunnel opened), not that of any request inside it.
type Event struct {
	ComputerID string
	Provenance Provenance
	Host       string
	Method     string
	Status     int
}

// Grant is what the proxy needs of a grant: its egress JSON and its
// provenance.
type Grant struct {
	Egress     []byte
	Provenance Provenance
}

// Options configure a Proxy.
type Options struct {
	// Key MACs the proxy credentials: at least 32 bytes, kept across
	// restarts so that processes started earlier keep their credential.
	Key []byte
	// Addr is the host:port sandboxes reach the proxy at, written into
	// their proxy variables (Env).
	Addr string
	// Grant returns grant id of Computer computerID. An error (revoked,
	// expired, unknown) refuses the request; a Grant returned with the
	// error still lends its provenance to the fact.
	Grant func(computerID, id string) (Grant, error)
	// Record receives an Event per request, refusals included. It is
	// called once the answer's status is known and before the client gets
	// it (for a tunnel, once it opened), so it should not block for long.
	Record func(context.Context, Event)
	// Resolver resolves host names; default net.DefaultResolver. Tests
	// map names to loopback.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
	// AllowLoopback exempts 127.0.0.1 (only it) from the platform deny
	// set. For tests, which may only send traffic to loopback; never set
	// it in production: it opens the host's own loopback services.
	AllowLoopback bool
	// DialTimeout bounds a connection to a destination; default 10s.
	DialTimeout time.Duration
	Log         *slog.Logger
}

// Proxy is the egress proxy: an http.Handler serving proxy requests
// (absolute-form HTTP requests and CONNECT). Serve runs it on a listener.
type Proxy struct {
	o        Options
	platform *platform
	tr       *http.Transport
	rp       *httputil.ReverseProxy

	mu      sync.Mutex
	srv     *http.Server
	closed  bool
	tunnels map[net.Conn]struct{} // hijacked client connections, closed by Close
}

// New returns a Proxy.
func New(o Options) (*Proxy, error) {
	if len(o.Key) < 32 {
		return nil, errors.New("egress: the credential key must be at least 32 bytes")
	}
	if o.Addr == "" {
		return nil, errors.New("egress: Options.Addr is required")
	}
	if o.Grant == nil {
		o.Grant = func(string, string) (Grant, error) { return Grant{}, errors.New("no grants") }
	}
	if o.Record == nil {
		o.Record = func(context.Context, Event) {}
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Key = append([]byte(nil), o.Key...)
	p := &Proxy{o: o, platform: &platform{loopbackOK: o.AllowLoopback}}
	p.tr = &http.Transport{
		Proxy:                 nil, // never chain to the host's own proxy
		DialContext:           p.dialChecked,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	p.rp = &httputil.ReverseProxy{
		// The request's URL host is already the checked address (see
		// forward); the Host header keeps the name the client asked for.
		Rewrite:       func(*httputil.ProxyRequest) {},
		Transport:     p.tr,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
		// Facts are recorded as the answer's header arrives, before the
		// client sees it, so a client that got an answer finds its fact.
		ModifyResponse: func(resp *http.Response) error {
			if q, ok := resp.Request.Context().Value(requestKey{}).(*request); ok {
				p.record(resp.Request.Context(), q, resp.StatusCode)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			o.Log.Info("egress: upstream failed", "host", r.Host, "err", err)
			if q, ok := r.Context().Value(requestKey{}).(*request); ok {
				p.record(r.Context(), q, http.StatusBadGateway)
			}
			writeError(w, http.StatusBadGateway, "the destination did not answer")
		},
	}
	return p, nil
}

// Env returns the environment that points a process of Computer
// computerID, working for s, at the proxy: HTTP_PROXY, HTTPS_PROXY and
// their lower-case forms carry a credential naming both, and NO_PROXY
// keeps the process's own loopback direct. The credential is a secret:
// never log it.
func (p *Proxy) Env(computerID string, s Subject) map[string]string {
	u := (&url.URL{Scheme: "http", User: url.UserPassword(computerID, p.secret(computerID, s)), Host: p.o.Addr}).String()
	const noProxy = "localhost,127.0.0.1,::1"
	return map[string]string{
		"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u,
		"NO_PROXY": noProxy, "no_proxy": noProxy,
	}
}

// Serve serves proxy requests on ln until Close.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return http.ErrServerClosed
	}
	if p.srv == nil {
		p.srv = &http.Server{
			Handler:           p,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(p.o.Log.Handler(), slog.LevelDebug),
		}
	}
	srv := p.srv
	p.mu.Unlock()
	return srv.Serve(ln)
}

// Close stops serving and closes open tunnels and idle upstream
// connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	srv := p.srv
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	p.tr.CloseIdleConnections()
	if srv != nil {
		return srv.Close()
	}
	return nil
}

// request is one authorized proxy request.
type request struct {
	computerID string
	prov       Provenance
	policy     *Policy
	host       string // as asked: lower case, no brackets, no trailing dot
	port       uint16
	method     string
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect && !r.URL.IsAbs() {
		writeError(w, http.StatusBadRequest, "this is berth's egress proxy: send proxy requests (absolute URLs or CONNECT)")
		return
	}
	user, pass, ok := proxyAuth(r)
	id, subj, valid := "", Subject{}, false
	if ok {
		id, subj, valid = p.verify(user, pass)
	}
	if !valid {
		p.o.Log.Info("egress: proxy credential refused", "peer", r.RemoteAddr, "present", ok)
		w.Header().Set("Proxy-Authenticate", `Basic realm="berth egress"`)
		writeError(w, http.StatusProxyAuthRequired, "a Computer's proxy credential is required (its HTTP_PROXY variable)")
		return
	}
	q := &request{computerID: id, method: r.Method}
	if subj.GrantID != "" {
		g, err := p.o.Grant(id, subj.GrantID)
		q.prov = g.Provenance
		if q.prov.Actor == "" {
			q.prov = Provenance{Actor: "unknown", Via: "egress"}
		}
		if err != nil {
			q.host, q.port, _ = target(r)
			p.refuse(w, r, q, http.StatusForbidden, fmt.Sprintf("the grant this process works under no longer stands: %v", err))
			return
		}
		if q.policy, err = ParsePolicy(g.Egress); err != nil {
			q.host, q.port, _ = target(r)
			p.refuse(w, r, q, http.StatusForbidden, "the grant's egress policy is invalid: "+err.Error())
			return
		}
	} else {
		// Work an admin credential started: no grant, no egress policy.
		q.prov, q.policy = subj.Provenance, &Policy{}
	}
	host, port, err := target(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	q.host, q.port = host, port
	addrs, status, why := p.check(r.Context(), q)
	if status != 0 {
		p.refuse(w, r, q, status, why)
		return
	}
	if r.Method == http.MethodConnect {
		p.tunnel(w, r, q, addrs)
		return
	}
	p.forward(w, r, q, addrs[0])
}

// proxyAuth returns the Basic credential of Proxy-Authorization.
func proxyAuth(r *http.Request) (user, pass string, ok bool) {
	h := r.Header.Get("Proxy-Authorization")
	scheme, rest, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Basic") || len(h) > 4096 {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(b), ":")
}

// target returns the destination host (normalized) and port of r.
func target(r *http.Request) (string, uint16, error) {
	hostport, defPort := r.Host, uint16(0)
	if r.Method != http.MethodConnect {
		if r.URL.Scheme != "http" {
			return "", 0, fmt.Errorf("the proxy forwards http:// URLs; for %s:// use CONNECT (HTTPS_PROXY)", r.URL.Scheme)
		}
		hostport, defPort = r.URL.Host, 80
	}
	if r.URL.User != nil {
		return "", 0, errors.New("the destination URL must not carry credentials")
	}
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		if defPort == 0 {
			return "", 0, fmt.Errorf("CONNECT needs host:port, got %q", hostport)
		}
		host, ps = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), strconv.Itoa(int(defPort))
	}
	port, err := parsePort(ps)
	if err != nil {
		return "", 0, err
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", 0, fmt.Errorf("destination %q: zones are not allowed", host)
		}
		return a.Unmap().String(), port, nil
	}
	if !validName(host) {
		return "", 0, fmt.Errorf("destination %q is not a host name or address", host)
	}
	return host, port, nil
}

// check applies the platform deny set and the policy, resolving names
// once: the addresses it returns are the only ones the request may be
// sent to. A non-zero status refuses the request with why.
func (p *Proxy) check(ctx context.Context, q *request) ([]netip.Addr, int, string) {
	if why, ok := blockedPorts[q.port]; ok {
		return nil, http.StatusForbidden, why
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(q.host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		if !q.policy.mayAllow(q.host, q.port) {
			return nil, http.StatusForbidden, fmt.Sprintf("the egress policy does not allow %s port %d", q.host, q.port)
		}
		rctx, cancel := context.WithTimeout(ctx, p.o.DialTimeout)
		addrs, err = p.o.Resolver.LookupNetIP(rctx, "ip", q.host)
		cancel()
		if err != nil || len(addrs) == 0 {
			return nil, http.StatusBadGateway, fmt.Sprintf("could not resolve %s", q.host)
		}
	}
	// A name that resolves into the deny set anywhere is refused
	// outright: mixing public and private answers is how rebinding
	// attacks start.
	for _, a := range addrs {
		if why, denied := p.platform.denied(a); denied {
			return nil, http.StatusForbidden, why
		}
	}
	var ok []netip.Addr
	for _, a := range addrs {
		if q.policy.Allows(q.host, a.Unmap(), q.port) {
			ok = append(ok, a.Unmap())
		}
	}
	if len(ok) == 0 {
		return nil, http.StatusForbidden, fmt.Sprintf("the egress policy does not allow %s port %d", q.host, q.port)
	}
	return ok, 0, ""
}

// refuse answers a refused request and records it.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, q *request, status int, why string) {
	p.o.Log.Info("egress refused", "computer", q.computerID, "host", q.host, "port", q.port, "method", q.method, "status", status, "why", why)
	p.record(r.Context(), q, status)
	writeError(w, status, why)
}

func (p *Proxy) record(ctx context.Context, q *request, status int) {
	host := q.host
	if host == "" {
		host = "unknown"
	}
	p.o.Record(context.WithoutCancel(ctx), Event{ComputerID: q.computerID, Provenance: q.prov, Host: host, Method: q.method, Status: status})
}

// dialer dials checked addresses only: its Control hook refuses, at the
// socket, any address in the platform deny set, whatever asked for it.
func (p *Proxy) dialer() *net.Dialer {
	return &net.Dialer{
		Timeout: p.o.DialTimeout,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("egress: dialing %q: not an address", address)
			}
			if why, denied := p.platform.denied(ap.Addr()); denied {
				return fmt.Errorf("egress: %s", why)
			}
			if why, blocked := blockedPorts[ap.Port()]; blocked {
				return fmt.Errorf("egress: %s", why)
			}
			return nil
		},
	}
}

// dialChecked is the Transport's dial: addr is always a checked
// address:port (forward puts it in the URL), never a name, so nothing is
// resolved a second time.
func (p *Proxy) dialChecked(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return nil, fmt.Errorf("egress: refusing to dial unresolved %q", addr)
	}
	return p.dialer().DialContext(ctx, network, addr)
}

// forward sends a plain HTTP request to addr, the checked address of its
// host, and records the answer's status.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, q *request, addr netip.Addr) {
	out := r.Clone(context.WithValue(r.Context(), requestKey{}, q))
	out.URL.Host = netip.AddrPortFrom(addr, q.port).String()
	out.Host = r.Host
	if out.Host == "" {
		out.Host = r.URL.Host
	}
	out.RequestURI = ""
	p.rp.ServeHTTP(w, out)
}

// requestKey carries a forwarded request's *request to the reverse
// proxy's hooks.
type requestKey struct{}

// tunnel opens a CONNECT tunnel to the first checked address that
// answers and splices bytes both ways until either side closes.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, q *request, addrs []netip.Addr) {
	var up net.Conn
	var err error
	for _, a := range addrs {
		up, err = p.dialer().DialContext(r.Context(), "tcp", netip.AddrPortFrom(a, q.port).String())
		if err == nil {
			break
		}
	}
	if err != nil {
		p.o.Log.Info("egress: tunnel dial failed", "computer", q.computerID, "host", q.host, "err", err)
		p.record(r.Context(), q, http.StatusBadGateway)
		writeError(w, http.StatusBadGateway, fmt.Sprintf("could not connect to %s port %d", q.host, q.port))
		return
	}
	defer up.Close()
	rc := http.NewResponseController(w)
	down, brw, err := rc.Hijack()
	if err != nil {
		p.record(r.Context(), q, http.StatusInternalServerError)
		writeError(w, http.StatusInternalServerError, "the tunnel could not be opened")
		return
	}
	defer down.Close()
	if !p.track(down) {
		return
	}
	defer p.untrack(down)
	down.SetDeadline(time.Time{})
	p.record(r.Context(), q, http.StatusOK)
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		// Bytes the client sent after its CONNECT are already buffered.
		if n := brw.Reader.Buffered(); n > 0 {
			b, _ := brw.Reader.Peek(n)
			up.Write(b)
		}
		io.Copy(up, down)
		closeWrite(up)
		done <- struct{}{}
	}()
	go func() {
		io.Copy(down, up)
		closeWrite(down)
		done <- struct{}{}
	}()
	<-done
	<-done
}

// track registers an open tunnel so that Close ends it; false when the
// proxy is closed already.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.tunnels == nil {
		p.tunnels = map[net.Conn]struct{}{}
	}
	p.tunnels[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.tunnels, c)
	p.mu.Unlock()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Berth-Egress", "refused")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}
