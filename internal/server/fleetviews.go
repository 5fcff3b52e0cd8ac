package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/admin"
	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/registry"
)

// reportEvery is how often a fleet host publishes its gateway report and
// its service memberships when nothing changes meanwhile.
const reportEvery = 3 * time.Second

// discoveredPeers is the fleet's services' upstreams: each service's
// members that are not draining, by namespace and service, then peer.
type discoveredPeers struct {
	mu    sync.Mutex
	peers map[string][]registry.Peer // key: serviceKey
}

// serviceKey is a service's key among a namespace's: a member serves
// deployments of its own namespace only.
func serviceKey(namespace, service string) string {
	return nsOrDefault(namespace) + "\x00" + service
}

func nsOrDefault(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// get is registry.Options.Discovered.
func (d *discoveredPeers) get(namespace, service string) []registry.Peer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.peers[serviceKey(namespace, service)])
}

// set replaces the peers from ss, answering the services whose upstreams
// changed (as serviceKeys).
func (d *discoveredPeers) set(ss []etcdfleet.Service) []string {
	next := map[string][]registry.Peer{}
	for _, s := range ss {
		for _, m := range s.Members {
			if !m.Draining {
				k := serviceKey(m.Namespace, s.ID)
				next[k] = append(next[k], registry.Peer{Addr: m.Peer, HostID: m.Host, Hop: m.Hop})
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var changed []string
	for id, ps := range next {
		if !slices.Equal(d.peers[id], ps) {
			changed = append(changed, id)
		}
	}
	for id := range d.peers {
		if _, ok := next[id]; !ok {
			changed = append(changed, id)
		}
	}
	d.peers = next
	return changed
}

func (d *discoveredPeers) load(ctx context.Context, m *etcdfleet.Member) error {
	ss, _, err := m.Services(ctx, "", 0)
	if err != nil {
		return err
	}
	d.set(ss)
	return nil
}

// runFleetViews, on a fleet host, publishes this host's gateway report and
// service memberships every reportEvery and when its routes change, and
// follows the fleet's services into the discovery-backed deployments'
// upstreams. Without a fleet it returns at once.
func (s *Server) runFleetViews(ctx context.Context) error {
	if s.fleetHost == nil {
		return nil
	}
	m := s.fleetHost.m
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for snap := range m.WatchServices(ctx) {
			for _, svc := range s.discovered.set(snap.Services) {
				for _, e := range s.registry.List() {
					if d := e.Spec.Discovery; d != nil && serviceKey(e.Spec.Namespace, d.ServiceID) == svc {
						s.registry.Refresh(e.Spec.ID)
					}
				}
			}
		}
	})
	t := time.NewTicker(reportEvery)
	defer t.Stop()
	for {
		s.publishFleetViews(ctx, m)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.fleetChanged:
		}
	}
}

// gatewayAddress is the address other hosts reach this host's data plane
// at: the proxy listener's port on the host of the advertised address
// (--fleet-address, or the admin listener's), or the proxy listener's
// own address when that names no host.
func (s *Server) gatewayAddress(advertised string) string {
	proxyAddr := s.ProxyAddr()
	phost, port, err := net.SplitHostPort(proxyAddr)
	if err != nil {
		return proxyAddr
	}
	host, _, err := net.SplitHostPort(advertised)
	if ip := net.ParseIP(host); err != nil || host == "" || ip != nil && ip.IsUnspecified() {
		host = phost
	}
	return net.JoinHostPort(host, port)
}

// publishFleetViews publishes this host's report and memberships once:
// every local deployment with ready replicas is a member of service
// "<deployment id>", draining while the host drains. The member's peer is
// this host's hop listener (Hop true: the other hosts reach it over
// mutual TLS with their fleet certificates) when it runs one, and
// otherwise, as a fallback, its public gateway address (Hop false: plain
// HTTP to the proxy listener).
func (s *Server) publishFleetViews(ctx context.Context, m *etcdfleet.Member) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hs, err := m.Hosts(ctx)
	if err != nil {
		s.log.Warn("fleet: reading the hosts for the report", "err", err)
		return
	}
	var self etcdfleet.HostView
	for _, h := range hs {
		if h.ID == m.ID() {
			self = h
		}
	}
	peer, viaHop := s.gatewayAddress(self.Address), false
	if a := s.HopAddr(); a != "" {
		peer, viaHop = a, true
	}
	rep := etcdfleet.Report{Address: self.Address}
	if s.host != nil {
		u := s.host.Latest()
		rep.Usage = etcdfleet.Usage{
			Available: u.Available, CPUCount: u.CPUCount, CPUPercent: u.CPUPercent,
			MemoryTotalBytes: int64(u.MemoryTotalBytes), MemoryUsedBytes: int64(u.MemoryUsedBytes), SampledAtMs: u.SampledAtMs,
		}
	}
	var members []etcdfleet.ServiceMember
	for _, e := range s.registry.List() {
		d := deploymentReport(e)
		rep.Deployments = append(rep.Deployments, d)
		if d.Pool.Ready > 0 && e.Spec.Discovery == nil {
			// A discovery-backed deployment is not a member of its own:
			// a host would route the service back to itself.
			members = append(members, etcdfleet.ServiceMember{
				Service: e.Spec.ID, Peer: peer, Draining: self.State == etcdfleet.Draining, InFlight: d.Pool.TotalInFlight,
				Namespace: d.Namespace, Hop: viaHop,
			})
		}
	}
	if err := m.PublishReport(ctx, rep); err != nil && ctx.Err() == nil {
		s.log.Warn("fleet: publishing this host's report", "err", err)
	}
	if err := m.PublishServices(ctx, members); err != nil && ctx.Err() == nil {
		s.log.Warn("fleet: publishing this host's services", "err", err)
	}
}

// deploymentReport is one local deployment as the fleet report carries it.
func deploymentReport(e *registry.Entry) etcdfleet.DeploymentReport {
	st := admin.Status(e)
	d := etcdfleet.DeploymentReport{
		ID: e.Spec.ID, Namespace: e.Spec.Namespace, Kind: string(e.Kind), Routes: []string{},
		Pool: etcdfleet.Pool{Ready: st.Ready, Pending: st.Pending, TotalInFlight: st.TotalInFlight},
	}
	if d.Namespace == "" {
		d.Namespace = "default"
	}
	for _, vm := range st.VMs {
		if vm.Draining {
			d.Pool.Draining++
		}
	}
	for _, r := range e.Spec.Routes {
		d.Routes = append(d.Routes, r.Host+"/"+trimSlash(r.PathPrefix))
	}
	return d
}

func trimSlash(p string) string {
	for len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	return p
}

// adminFleetViews is the fleet's views as the admin API wants them; nil
// without a fleet.
func (s *Server) adminFleetViews() admin.FleetViews {
	if s.fleetHost == nil {
		return nil
	}
	return fleetViews{s.fleetHost.m, s.fleetPrefix()}
}

func (s *Server) fleetPrefix() string {
	if p := s.o.Fleet.Prefix; p != "" {
		if p[len(p)-1] != '/' {
			p += "/"
		}
		return p
	}
	return etcdfleet.DefaultPrefix
}

// fleetViews adapts etcdfleet to admin.FleetViews.
type fleetViews struct {
	m      *etcdfleet.Member
	prefix string
}

func (f fleetViews) Reports(ctx context.Context) ([]apitype.FleetGatewayMetrics, error) {
	rs, err := f.m.Reports(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]apitype.FleetGatewayMetrics, 0, len(rs))
	for _, r := range rs {
		g := apitype.FleetGatewayMetrics{
			ID: r.Host, Address: r.Address, ReportedAt: r.At.UnixMilli(),
			Host: apitype.HostUsage{
				Available: r.Usage.Available, CPUCount: r.Usage.CPUCount, CPUPercent: r.Usage.CPUPercent,
				MemoryTotalBytes: r.Usage.MemoryTotalBytes, MemoryUsedBytes: r.Usage.MemoryUsedBytes, SampledAtMs: r.Usage.SampledAtMs,
			},
			Deployments: make([]apitype.FleetGatewayDeployment, 0, len(r.Deployments)),
		}
		for _, d := range r.Deployments {
			routes := d.Routes
			if routes == nil {
				routes = []string{}
			}
			g.Deployments = append(g.Deployments, apitype.FleetGatewayDeployment{
				ID: d.ID, Namespace: d.Namespace, Kind: d.Kind, Routes: routes,
				Pool: apitype.FleetDeploymentPool{Ready: d.Pool.Ready, Draining: d.Pool.Draining, Pending: d.Pool.Pending, TotalInFlight: d.Pool.TotalInFlight},
			})
		}
		out = append(out, g)
	}
	return out, nil
}

func members(ms []etcdfleet.ServiceMember) []apitype.FleetServiceMember {
	out := make([]apitype.FleetServiceMember, 0, len(ms))
	for _, m := range ms {
		out = append(out, apitype.FleetServiceMember{Peer: m.Peer, Draining: m.Draining, InFlight: m.InFlight, Host: m.Host, Hop: m.Hop})
	}
	return out
}

func (f fleetViews) Services(ctx context.Context, after string, limit int) (apitype.FleetServices, error) {
	// One more than asked, to know whether a next page exists.
	ss, rev, err := f.m.Services(ctx, after, limit+1)
	if err != nil {
		return apitype.FleetServices{}, err
	}
	out := apitype.FleetServices{Services: []apitype.FleetService{}, Revision: rev}
	if len(ss) > limit {
		ss = ss[:limit]
		out.Next = ss[limit-1].ID
	}
	for _, s := range ss {
		out.Services = append(out.Services, apitype.FleetService{ID: s.ID, Members: members(s.Members)})
	}
	return out, nil
}

func (f fleetViews) DiscoveryStatus(ctx context.Context, namespace, id string) (apitype.DiscoveryStatus, error) {
	ms, rev, err := f.m.ServiceMembers(ctx, id)
	if err != nil {
		return apitype.DiscoveryStatus{}, err
	}
	src, ver := "etcd://"+f.prefix+"services/"+id, int(rev)
	out := apitype.DiscoveryStatus{ServiceID: id, SourceURL: &src, Version: &ver, Upstreams: []apitype.DiscoveryUpstream{}}
	for _, m := range ms {
		if nsOrDefault(m.Namespace) != nsOrDefault(namespace) {
			continue // another namespace's: not this deployment's to see
		}
		// "hop", a key the contract leaves open: whether peer is the
		// host's hop listener or its public gateway.
		out.Upstreams = append(out.Upstreams, apitype.DiscoveryUpstream{Peer: m.Peer, Draining: m.Draining, InFlight: m.InFlight,
			Extra: map[string]json.RawMessage{"hop": json.RawMessage(strconv.FormatBool(m.Hop))}})
	}
	return out, nil
}

func (f fleetViews) ControlPlaneConfig(ctx context.Context) (apitype.ControlPlaneConfig, error) {
	doc, rev, err := f.m.Config(ctx)
	if err != nil {
		return apitype.ControlPlaneConfig{}, err
	}
	return configOf(doc, rev)
}

func configOf(doc json.RawMessage, rev int64) (apitype.ControlPlaneConfig, error) {
	out := apitype.ControlPlaneConfig{Revision: rev, TokenSync: apitype.TokenSync{Source: "etcd"}}
	if doc != nil {
		if err := json.Unmarshal(doc, &out.Config); err != nil {
			return out, err
		}
	}
	if out.Config.Gateways == nil {
		out.Config.Gateways = []apitype.ControlPlaneGateway{}
	}
	if out.Config.ControlPlane == nil {
		out.Config.ControlPlane = []apitype.ControlPlaneService{}
	}
	return out, nil
}

func (f fleetViews) PutControlPlaneConfig(ctx context.Context, expected int64, doc apitype.ControlPlaneDoc) (apitype.ControlPlaneConfig, error) {
	body, err := json.Marshal(doc)
	if err != nil {
		return apitype.ControlPlaneConfig{}, err
	}
	rev, err := f.m.PutConfig(ctx, expected, body)
	if errors.Is(err, etcdfleet.ErrStaleRevision) {
		return apitype.ControlPlaneConfig{Revision: rev}, admin.ErrStaleConfig
	}
	if err != nil {
		return apitype.ControlPlaneConfig{}, err
	}
	return configOf(body, rev)
}
