package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/admin"
	"github.com/berth-dev/berth/internal/certs"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/secrets"
)

// The HTTPS edge's certificates (Options.Certs): the server makes the
// certificate manager once its listeners are bound (certmagic's challenge
// answerers must find their ports taken), serves its TLSConfig on the TLS
// listeners and its HTTP-01 answers on the plaintext one, keeps its routed
// hosts current (feedHosts), and shows it on GET /certs and in
// /metrics/prometheus.

// certsWanted reports whether the options ask for the certificate manager:
// ACME, or a static pair (one half of one is an error certs.New names).
func certsWanted(o Options) bool {
	return o.TLSConfig == nil && (o.Certs.Email != "" || o.Certs.StaticCert != "" || o.Certs.StaticKey != "")
}

// openCerts makes the certificate manager (see above) and the TLS
// configuration of the data plane's TLS listeners.
func (s *Server) openCerts(key secrets.Key) error {
	co := s.o.Certs
	if co.Dir == "" {
		co.Dir = filepath.Join(s.o.DataDir, "acme")
	}
	co.Key, co.Log = key, s.log
	co.HTTPPort = s.proxyLn.Addr().(*net.TCPAddr).Port
	co.TLSPort = s.tlsLn.Addr().(*net.TCPAddr).Port
	m, err := certs.New(co)
	if err != nil {
		return err
	}
	s.certs = m
	s.o.TLSConfig = m.TLSConfig()
	return nil
}

// adminTLSConfig is the admin listener's TLS configuration: the operator's own
// pair (AdminTLSCert and AdminTLSKey), or, with AdminACMEHost, the data
// plane's manager's certificate for that host, which it then orders as if
// a deployment routed it. nil: plain HTTP.
func (s *Server) adminTLSConfig(key secrets.Key) (*tls.Config, error) {
	o := s.o
	if o.AdminTLSCert != "" || o.AdminTLSKey != "" {
		if o.AdminACMEHost != "" {
			return nil, errors.New("server: --admin-tls-cert/--admin-tls-key and --admin-acme-host are two ways of giving the admin API a certificate: choose one")
		}
		m, err := certs.New(certs.Options{
			Dir: filepath.Join(o.DataDir, "acme"), Key: key, Log: s.log,
			StaticCert: o.AdminTLSCert, StaticKey: o.AdminTLSKey,
		})
		if err != nil {
			return nil, adminFlag(err)
		}
		conf := m.TLSConfig()
		conf.NextProtos = []string{"h2", "http/1.1"}
		return conf, nil
	}
	if o.AdminACMEHost == "" {
		return nil, nil
	}
	if s.certs == nil || o.Certs.Email == "" {
		return nil, errors.New("server: --admin-acme-host needs ACME on the data plane (--acme-email)")
	}
	host := strings.ToLower(strings.TrimSuffix(o.AdminACMEHost, "."))
	conf := s.certs.TLSConfig()
	get := conf.GetCertificate
	conf.NextProtos = []string{"h2", "http/1.1"}
	// The admin listener answers for its own name only: a handshake for
	// another routed host does not get that host's certificate here.
	conf.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if hello.ServerName != "" && !strings.EqualFold(hello.ServerName, host) {
			return nil, errors.New("this listener serves the admin API's host only")
		}
		h := *hello
		h.ServerName = host
		return get(&h)
	}
	return conf, nil
}

// adminFlag renames the data plane's flags in a certs error about the
// admin pair.
func adminFlag(err error) error {
	msg := strings.NewReplacer(certs.FlagTLSCert, "--admin-tls-cert", certs.FlagTLSKey, "--admin-tls-key").Replace(err.Error())
	return errors.New(msg)
}

// feedHosts keeps the manager's routed hosts current until ctx ends: at
// start, and after every routing change (bursts coalesced for 100 ms, so
// registering thousands of deployments costs a handful of passes).
func (s *Server) feedHosts(ctx context.Context) error {
	for {
		hosts := s.registry.Hosts()
		if h := s.o.AdminACMEHost; h != "" {
			hosts = append(hosts, strings.ToLower(strings.TrimSuffix(h, ".")))
		}
		s.certs.SetHosts(hosts)
		select {
		case <-ctx.Done():
			return nil
		case <-s.routesChanged:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// publisher hands each routing table to the proxy and tells feedHosts.
type publisher struct {
	proxy   *proxy.Handler
	changed chan struct{} // to feedHosts; nil: none
	fleet   chan struct{} // to the fleet report's publisher; nil: none
}

func (p publisher) Swap(t *proxy.Table) {
	p.proxy.Swap(t)
	for _, c := range []chan struct{}{p.changed, p.fleet} {
		if c == nil {
			continue
		}
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// certSource is the manager as the admin API shows it.
type certSource struct{ m *certs.Manager }

func (c certSource) Certs() []apitype.CertStatus { return c.m.Certs() }

func (c certSource) Pending() []apitype.CertPending {
	states := c.m.Pending()
	out := make([]apitype.CertPending, len(states))
	for i, st := range states {
		out[i] = apitype.CertPending{Host: st.Host, State: st.State, Failures: st.Failures, LastError: st.LastError}
		if !st.RetryAt.IsZero() {
			out[i].RetryAt = st.RetryAt.Unix()
		}
	}
	return out
}

// publisher is what the registry publishes routing tables to: the proxy,
// and with the certificate manager feedHosts too.
func (s *Server) publisher() registry.Publisher {
	if s.routesChanged == nil && s.fleetChanged == nil {
		return s.proxy
	}
	return publisher{s.proxy, s.routesChanged, s.fleetChanged}
}

// certSource is the admin API's view of the manager; nil without one.
func (s *Server) certSource() admin.CertSource {
	if s.certs == nil {
		return nil
	}
	return certSource{s.certs}
}

// collectors are the Prometheus collectors besides the metrics registry's.
func (s *Server) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{s.gates.Collector(), s.siem.Collector(), s.notifier}
	if s.certs != nil {
		cs = append(cs, s.certs.Collector())
	}
	if t := s.tracing; t != nil {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "berth_trace_spans_exported_total",
				Help: "Spans of the data plane's traces the OTLP collector took."}, func() float64 { return float64(t.Exported()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "berth_trace_spans_dropped_total",
				Help: "Spans of the data plane's traces dropped because the OTLP collector did not take their batch (down, refusing, or past the export timeout)."}, func() float64 { return float64(t.Dropped()) }))
	}
	return cs
}

// runCerts and runFeedHosts are the manager's loops (none without it).
func (s *Server) runCerts(ctx context.Context) error {
	if s.certs == nil {
		return nil
	}
	return s.certs.Run(ctx)
}

func (s *Server) runFeedHosts(ctx context.Context) error {
	if s.certs == nil {
		return nil
	}
	return s.feedHosts(ctx)
}
