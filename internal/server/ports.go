package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/gate"
	"github.com/berth-dev/berth/internal/grant"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/vm"
)

// portRoutes puts Computers' exposed ports on the data plane: a request for
// <port>-<id>.<domain> that no deployment route matches goes to that port
// inside Computer id, waking it if it sleeps. A port that is not public
// needs a grant for that Computer in Authorization: Bearer, which is
// removed before the request reaches the app — or, when it was exposed
// with a sign_in, a browser signed in with that auth provider of the
// Computer's namespace. The credential is checked before the Computer is
// woken.
type portRoutes struct {
	computers *computer.Manager
	grants    *grant.Issuer

	gates *gate.Manager // compiles the sign-in gates of ports with a sign_in; nil: none

	mu        sync.Mutex                   // guards deps and gateCache
	deps      map[string]*proxy.Deployment // by target address: keeps connection pools and in-flight counts across requests
	gateCache map[portGateKey]*gate.Gate
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
	// The port's credential is checked before the Computer is woken: a
	// stranger's request costs no wake.
	pol, err := p.computers.PortPolicy(r.Context(), id, port)
	switch {
	case errors.Is(err, computer.ErrNotFound):
		return nil, nil, false // the usual 404: no existence oracle
	case err != nil:
		http.Error(w, "this Computer could not be reached", http.StatusServiceUnavailable)
		return nil, nil, true
	}
	var signedIn proxy.Gate // the gate that admitted the request, if one did
	if !pol.Public {
		switch {
		case p.granted(r, id):
			proxy.Credentialed(w) // the grant checked out: not a stranger's probing
		case pol.SignIn != "" && p.gates != nil:
			// A browser signs in with the namespace's provider; a
			// program still presents a grant.
			g := p.gate(id, port, pol)
			status, cred := g.Admit(w, r, r.TLS != nil)
			if status != 0 {
				return nil, nil, true
			}
			signedIn = g
			if cred {
				proxy.Credentialed(w)
			}
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="berth computer port"`)
			http.Error(w, "this port is private: present a grant for the Computer as Authorization: Bearer", http.StatusUnauthorized)
			return nil, nil, true
		}
	}
	t, release, err := p.computers.Port(r.Context(), id, port)
	var capErr *computer.CapacityError
	switch {
	case errors.Is(err, computer.ErrNotFound):
		return nil, nil, false
	case errors.As(err, &capErr):
		w.Header().Set("Retry-After", strconv.Itoa(max(int(capErr.RetryAfter.Seconds()), 1)))
		http.Error(w, "this Computer cannot start now: the fleet is at capacity", http.StatusTooManyRequests)
		return nil, nil, true
	case err != nil:
		http.Error(w, "this Computer could not be woken", http.StatusServiceUnavailable)
		return nil, nil, true
	}
	return p.deployment(id, t.Addr, signedIn), release, false
}

// gate is the sign-in gate of a private port with a sign_in: the
// namespace's provider by reference (resolved live, as a deployment's
// provider_ref), identity forwarded, sessions of their own (named
// computer:<id>:<port>). Compiled once per port and provider.
func (p *portRoutes) gate(id string, port int, pol computer.PortTarget) proxy.Gate {
	key := portGateKey{id, port, pol.Namespace, pol.SignIn}
	p.mu.Lock()
	defer p.mu.Unlock()
	if g, ok := p.gateCache[key]; ok {
		return g
	}
	yes := true
	g, err := p.gates.Compile(&apitype.DeploymentSpec{
		ID: vm.ComputerPrefix + id + ":" + strconv.Itoa(port), Namespace: pol.Namespace,
		Auth: &apitype.AuthGate{ProviderRef: pol.SignIn, ForwardIdentity: &yes},
	})
	if err != nil || g == nil {
		// A reference only: nothing to refuse at compile time. Fail
		// closed all the same.
		return refusingGate{}
	}
	if p.gateCache == nil {
		p.gateCache = map[portGateKey]*gate.Gate{}
	}
	p.gateCache[key] = g
	return g
}

type portGateKey struct {
	id         string
	port       int
	ns, signIn string
}

// refusingGate answers every request 500: a port gate that could not be
// compiled.
type refusingGate struct{}

func (refusingGate) Admit(w http.ResponseWriter, r *http.Request, secure bool) (int, bool) {
	http.Error(w, "this port's sign-in cannot be used", http.StatusInternalServerError)
	return http.StatusInternalServerError, false
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

// deployment is the data plane's deployment for a port at addr. signedIn
// is the gate that admitted the request (nil: a grant, or a public port):
// it vouches for the identity headers it set, which the forwarder then
// passes on; without one every client-sent X-Auth-Request-* is removed.
func (p *portRoutes) deployment(id, addr string, signedIn proxy.Gate) *proxy.Deployment {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deps == nil {
		p.deps = map[string]*proxy.Deployment{}
	}
	key := addr
	if signedIn != nil {
		key += " signed-in"
	}
	d := p.deps[key]
	if d == nil || d.Gate != signedIn {
		d = &proxy.Deployment{ID: vm.ComputerPrefix + id, Pool: proxy.NewPool(proxy.NewBackend(addr, addr, false)), Gate: signedIn}
		p.deps[key] = d
	}
	// A port has one backend and no prober: a failed connect (the app not
	// listening yet) marks it unhealthy for that request only.
	for _, b := range d.Pool.Backends() {
		b.SetHealthy(true)
	}
	return d
}
