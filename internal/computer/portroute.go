package computer

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// PortTarget is where the data plane sends traffic for one exposed port.
type PortTarget struct {
	Addr   string // host:port to dial
	Public bool   // false: the request must carry a grant for the Computer
	// SignIn, on a private port, names the auth provider of the
	// Computer's namespace (Namespace) whose sign-in admits a browser too.
	SignIn    string
	Namespace string
}

// ParsePortHost splits an exposed port's host name, <port>-<id>.<BaseDomain>,
// as exposure builds it. It answers false for any other host.
func (m *Manager) ParsePortHost(host string) (id string, port int, ok bool) {
	base := m.o.BaseDomain
	if base == "" {
		return "", 0, false
	}
	// No "."+base concatenation: the data plane asks about every request.
	if len(host) <= len(base)+1 || !strings.HasSuffix(host, base) || host[len(host)-len(base)-1] != '.' {
		return "", 0, false
	}
	label := host[:len(host)-len(base)-1]
	p, id, ok := strings.Cut(label, "-")
	if !ok || strings.Contains(id, ".") || validateID(id) != nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != p {
		return "", 0, false
	}
	return id, port, true
}

// PortPolicy is what an exposed port asks of its traffic (Public, SignIn
// and the Computer's Namespace), found without waking the Computer, so
// that a caller without the credential costs no wake. An unexposed port
// or an unknown Computer is ErrNotFound.
func (m *Manager) PortPolicy(ctx context.Context, id string, port int) (PortTarget, error) {
	ps, err := m.st.ComputerPorts(ctx, id)
	if err != nil {
		return PortTarget{}, m.storeErr(err)
	}
	var t PortTarget
	found := false
	for _, p := range ps {
		if p.Port == port {
			t.Public, t.SignIn, found = p.Public, p.SignIn, true
		}
	}
	if !found {
		return PortTarget{}, fmt.Errorf("%w: port %d of Computer %q is not exposed", ErrNotFound, port, id)
	}
	if t.SignIn != "" {
		c, err := m.st.Computer(ctx, id)
		if err != nil {
			return PortTarget{}, m.storeErr(err)
		}
		t.Namespace = c.Namespace
	}
	return t, nil
}

// Port resolves traffic to an exposed port: it checks the port is exposed
// (PortPolicy), wakes the Computer if it sleeps (admission applies), and
// holds it awake until release is called — traffic is activity. An
// unexposed port or an unknown Computer is ErrNotFound.
func (m *Manager) Port(ctx context.Context, id string, port int) (PortTarget, func(), error) {
	t, err := m.PortPolicy(ctx, id, port)
	if err != nil {
		return PortTarget{}, nil, err
	}
	_, release, err := m.Use(ctx, id)
	if err != nil {
		return PortTarget{}, nil, err
	}
	l := m.live(id)
	l.mu.Lock()
	d, sandbox := l.driver, l.sandbox
	l.mu.Unlock()
	host := "127.0.0.1"
	if d != nil && sandbox != "" {
		if in, err := d.Inspect(ctx, sandbox); err == nil && in.Addr != "" {
			if h, _, err := net.SplitHostPort(in.Addr); err == nil {
				host = h // the sandbox's own address (isolating drivers); loopback for process sandboxes
			}
		}
	}
	t.Addr = net.JoinHostPort(host, strconv.Itoa(port))
	return t, release, nil
}
