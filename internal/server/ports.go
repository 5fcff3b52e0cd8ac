package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/grant"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/vm"
)

// portRoutes puts Computers' exposed ports on the data plane: a request for
// <port>-<id>.<domain> that no deployment route matches goes to that port
// inside Computer id, waking it if it sleeps. A port that is not public
// needs a grant for that Computer in Authorization: Bearer, which is
// removed before the request reaches the app.
type portRoutes struct {
	computers *computer.Manager
	grants    *grant.Issuer

	mu   sync.Mutex                   // guards deps
	deps map[string]*proxy.Deployment // by target address: keeps connection pools and in-flight counts across requests
}

// portHost reports whether host names a Computer's exposed port
// (<port>-<id>.<domain>), exposed or not: no deployment rule may take
// one, so a Computer's port cannot be hijacked by a deployment, nor a
// deployment's host by a Computer exposing a port later.
func (s *Server) portHost(host string) bool {
	_, _, ok := s.computers.ParsePortHost(host)
	return ok
}

// reservedHost says why no deployment may route host (registry.Options'
// Reserved): a Computer's exposed-port host, or the admin API's own ACME
// name, whose certificate berth holds for the admin listener.
func (s *Server) reservedHost(host string) string {
	switch {
	case s.portHost(host):
		return "a Computer's exposed port"
	case s.o.AdminACMEHost != "" && strings.EqualFold(host, strings.TrimSuffix(s.o.AdminACMEHost, ".")):
		return "the admin API (--admin-acme-host)"
	}
	return ""
}

func (p *portRoutes) resolve(w http.ResponseWriter, r *http.Request, host string) (*proxy.Deployment, func(), bool) {
	if p.computers == nil {
		return nil, nil, false
	}
	id, port, ok := p.computers.ParsePortHost(host)
	if !ok {
		return nil, nil, false
	}
	// The request's strings live in the front end's buffers (see
	// proxy.H1Server); the Computer manager keeps the id it is given.
	id = strings.Clone(id)
	t, release, err := p.computers.Port(r.Context(), id, port)
	var capErr *computer.CapacityError
	switch {
	case errors.Is(err, computer.ErrNotFound):
		return nil, nil, false // the usual 404: no existence oracle
	case errors.As(err, &capErr):
		w.Header().Set("Retry-After", strconv.Itoa(max(int(capErr.RetryAfter.Seconds()), 1)))
		http.Error(w, "this Computer cannot start now: the fleet is at capacity", http.StatusTooManyRequests)
		return nil, nil, true
	case err != nil:
		http.Error(w, "this Computer could not be woken", http.StatusServiceUnavailable)
		return nil, nil, true
	}
	if !t.Public && !p.granted(r, id) {
		release()
		w.Header().Set("WWW-Authenticate", `Bearer realm="berth computer port"`)
		http.Error(w, "this port is private: present a grant for the Computer as Authorization: Bearer", http.StatusUnauthorized)
		return nil, nil, true
	}
	if !t.Public {
		proxy.Credentialed(w) // the grant checked out: not a stranger's probing
	}
	return p.deployment(id, t.Addr), release, false
}

// granted checks the request's bearer grant names Computer id and is valid.
// Any action admits traffic to a private port; the header is then removed.
func (p *portRoutes) granted(r *http.Request, id string) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || p.grants == nil {
		return false
	}
	g, err := p.grants.Verify(strings.TrimSpace(tok))
	if err != nil || g.ComputerID != id {
		return false
	}
	r.Header.Del("Authorization")
	return true
}

func (p *portRoutes) deployment(id, addr string) *proxy.Deployment {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deps == nil {
		p.deps = map[string]*proxy.Deployment{}
	}
	d := p.deps[addr]
	if d == nil {
		d = &proxy.Deployment{ID: vm.ComputerPrefix + id, Pool: proxy.NewPool(proxy.NewBackend(addr, addr, false))}
		p.deps[addr] = d
	}
	// A port has one backend and no prober: a failed connect (the app not
	// listening yet) marks it unhealthy for that request only.
	for _, b := range d.Pool.Backends() {
		b.SetHealthy(true)
	}
	return d
}
