package auth

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/berth-dev/berth/internal/web"
)

// GuardConfig configures Guard.
type GuardConfig struct {
	// Hosts are the names (or addresses) the admin API answers to besides
	// the loopback names and the address a request arrived on: the
	// operator's --admin-hosts. An entry with a port matches that port
	// only; one without matches any port.
	Hosts []string
	Log   *slog.Logger
}

// Messages of the guard's refusals.
const (
	msgDataPlane = "the admin API is not reachable through berth's data plane"
	msgNoHost    = "the admin API needs a Host header naming it"
	msgHost      = "the admin API does not answer to host %q: it answers to localhost, loopback and its own addresses, and the names in --admin-hosts (BERTH_ADMIN_HOSTS)"
	msgOrigin    = "the admin API refuses requests from another origin (Origin %q is not %s://%s)"
)

// Guard returns next behind the checks every request to the admin listener
// passes before any credential is looked at (so a refusal here never counts
// toward the brake):
//
//   - A request carrying berth's hop marker (a Via header naming berth)
//     came through berth's own data plane: whatever its socket peer says
//     (loopback, when the proxy runs on the same host), it is not the
//     operator. 403.
//   - The Host must be one the admin API serves: localhost, a loopback
//     address, the address the request arrived on, or an operator-listed
//     name. A page whose DNS name was rebound to 127.0.0.1 sends its own
//     name, and is answered 421 Misdirected Request.
//   - An Origin header, when present, must be the admin API's own (same
//     host and port as the Host, http or https): a browser page elsewhere
//     gets 403. This applies to every method, not only the state-changing
//     ones: the shell websocket is a GET, and no admin route serves CORS,
//     so a cross-origin browser request has no legitimate use.
//
// Non-browser clients (the berth CLI, package client, curl) send the Host
// they dial and no Origin, and pass.
func Guard(cfg GuardConfig, next http.Handler) http.Handler {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	type hostPort struct{ host, port string }
	var extra []hostPort
	for _, h := range cfg.Hosts {
		if host, port := splitHost(h); host != "" {
			extra = append(extra, hostPort{host, port})
		}
	}
	allowed := func(r *http.Request, host, port string) bool {
		if host == "localhost" {
			return true
		}
		if a, err := netip.ParseAddr(host); err == nil {
			a = a.Unmap()
			if a.IsLoopback() {
				return true
			}
			if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
				if ap, err := netip.ParseAddrPort(la.String()); err == nil && ap.Addr().Unmap().WithZone("") == a.WithZone("") {
					return true
				}
			}
		}
		for _, e := range extra {
			if e.host == host && (e.port == "" || e.port == port) {
				return true
			}
		}
		return false
	}
	refuse := func(w http.ResponseWriter, r *http.Request, err *web.Error) {
		cfg.Log.Info("admin request refused", "peer", r.RemoteAddr, "host", r.Host, "origin", r.Header.Get("Origin"), "method", r.Method, "path", r.URL.Path, "reason", err.Message)
		web.WriteError(cfg.Log, w, r, err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if web.ViaBerth(r.Header) {
			refuse(w, r, web.Errorf(http.StatusForbidden, msgDataPlane))
			return
		}
		host, port := splitHost(r.Host)
		if host == "" {
			refuse(w, r, web.Errorf(http.StatusMisdirectedRequest, msgNoHost))
			return
		}
		if !allowed(r, host, port) {
			refuse(w, r, web.Errorf(http.StatusMisdirectedRequest, msgHost, r.Host))
			return
		}
		if origins := r.Header.Values("Origin"); len(origins) > 0 {
			if len(origins) > 1 || !sameOrigin(origins[0], host, port) {
				scheme := "http"
				if r.TLS != nil {
					scheme = "https"
				}
				refuse(w, r, web.Errorf(http.StatusForbidden, msgOrigin, strings.Join(origins, ", "), scheme, r.Host))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// splitHost splits a Host value (or an --admin-hosts entry) into a
// lowercase host without brackets or a trailing dot, and its port ("" when
// none is given).
func splitHost(hp string) (host, port string) {
	hp = strings.TrimSpace(hp)
	if h, p, err := net.SplitHostPort(hp); err == nil {
		host, port = h, p
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]")
	}
	return strings.TrimSuffix(strings.ToLower(host), "."), port
}

// sameOrigin reports whether origin is scheme://host[:port] for the
// request's host and port, over http or https. A Host without a port
// takes the Origin scheme's default (the request may have come through a
// TLS terminator).
func sameOrigin(origin, host, port string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	def := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	if def == "" {
		return false
	}
	oh, op := splitHost(u.Host)
	if op == "" {
		op = def
	}
	if port == "" {
		port = def
	}
	return oh == host && op == port
}
