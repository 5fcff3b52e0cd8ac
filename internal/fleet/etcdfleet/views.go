package etcdfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The fleet views' keys, under Options.Prefix:
//
//	reports/<host>                 Report (JSON), on the host's lease
//	services/<service>/<peer>      ServiceMember (JSON), on its
//	                               publisher's lease
//	config/control-plane           the control-plane configuration
//	                               (JSON), on no lease; its ModRevision
//	                               is its revision

// ErrStaleRevision is PutConfig's answer when the configuration's revision
// is not the one the caller expected.
var ErrStaleRevision = errors.New("etcdfleet: the configuration changed since the revision given")

// Usage is a host's CPU and memory as last sampled.
type Usage struct {
	Available        bool    `json:"available"`
	CPUCount         int     `json:"cpu_count"`
	CPUPercent       float64 `json:"cpu_percent"`
	MemoryTotalBytes int64   `json:"memory_total_bytes"`
	MemoryUsedBytes  int64   `json:"memory_used_bytes"`
	SampledAtMs      int64   `json:"sampled_at_ms"`
}

// Pool is one deployment's pool numbers on one host.
type Pool struct {
	Ready         int `json:"ready"`
	Draining      int `json:"draining"`
	Pending       int `json:"pending"`
	TotalInFlight int `json:"total_in_flight"`
}

// DeploymentReport is one deployment a host serves.
type DeploymentReport struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Pool      Pool   `json:"pool"`
	// Routes are the deployment's routes as "host/path-prefix" (host
	// empty for any host).
	Routes []string `json:"routes"`
}

// Report is what a host publishes of its gateway: its deployments and
// their pools, its usage, the routes it serves.
type Report struct {
	Host        string             `json:"host"`
	Address     string             `json:"address"`
	At          time.Time          `json:"at"`
	Usage       Usage              `json:"usage"`
	Deployments []DeploymentReport `json:"deployments"`
}

// ServiceMember is one peer of a service, as its publisher put it.
type ServiceMember struct {
	Service  string `json:"service"`
	Peer     string `json:"peer"`
	Draining bool   `json:"draining"`
	InFlight int    `json:"in_flight"`
	// Host is the publishing host.
	Host string `json:"host"`
	// Namespace is the namespace of the deployment the member serves: a
	// discovery-backed deployment takes members of its own namespace only,
	// so a tenant can neither route to another's deployments nor learn
	// whether one exists.
	Namespace string `json:"namespace"`
	// Hop: Peer is the host's hop listener (mutual TLS with fleet
	// certificates, the server named Host); otherwise Peer is its public
	// gateway, plain HTTP, for a host without a hop listener.
	Hop bool `json:"hop"`
}

// Service is a service's members, by peer.
type Service struct {
	ID      string
	Members []ServiceMember
}

func (m *Member) reportKey(id string) string { return m.o.Prefix + "reports/" + id }
func (m *Member) servicesPrefix() string     { return m.o.Prefix + "services/" }
func (m *Member) configKey() string          { return m.o.Prefix + "config/control-plane" }

// currentLease is the member's lease, or an error when it has none (left,
// or registering again).
func (m *Member) currentLease() (clientv3.LeaseID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	if m.lease == 0 {
		return 0, errors.New("etcdfleet: this host has lost its lease and is registering again")
	}
	return m.lease, nil
}

// PublishReport puts this host's report under its lease (the host and At
// are filled in): it goes when the host does.
func (m *Member) PublishReport(ctx context.Context, r Report) error {
	lease, err := m.currentLease()
	if err != nil {
		return err
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	r.Host = m.host.ID
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	if r.Deployments == nil {
		r.Deployments = []DeploymentReport{}
	}
	slices.SortFunc(r.Deployments, func(a, b DeploymentReport) int { return strings.Compare(a.ID, b.ID) })
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := m.cli.Put(ctx, m.reportKey(r.Host), string(body), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("etcdfleet: publishing host %s's report: %w", r.Host, err)
	}
	return nil
}

// Reports lists the live hosts' reports by host id.
func (m *Member) Reports(ctx context.Context) ([]Report, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	g, err := m.cli.Get(ctx, m.o.Prefix+"reports/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdfleet: reading the reports: %w", err)
	}
	out := make([]Report, 0, len(g.Kvs))
	for _, kv := range g.Kvs {
		var r Report
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			m.o.Log.Warn("fleet: unreadable report", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Report) int { return strings.Compare(a.Host, b.Host) })
	return out, nil
}

// ValidServiceID checks a service id: 1–253 characters, none of them '/'
// or a control character.
func ValidServiceID(id string) error {
	if id == "" || len(id) > 253 {
		return fmt.Errorf("etcdfleet: service id %q: want 1 to 253 characters", id)
	}
	for _, c := range id {
		if c == '/' || c < 0x20 || c == 0x7f {
			return fmt.Errorf("etcdfleet: service id %q: no '/' or control characters", id)
		}
	}
	return nil
}

// PublishServices makes ms this host's service memberships, each under
// its lease: members it published before and not now are deleted. A
// member's Host is this host.
func (m *Member) PublishServices(ctx context.Context, ms []ServiceMember) error {
	lease, err := m.currentLease()
	if err != nil {
		return err
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	self := m.host.ID
	want := map[string]string{}
	for _, s := range ms {
		if err := ValidServiceID(s.Service); err != nil {
			return err
		}
		if s.Peer == "" || strings.Contains(s.Peer, "/") {
			return fmt.Errorf("etcdfleet: service %s: peer %q: want host:port", s.Service, s.Peer)
		}
		s.Host = self
		body, _ := json.Marshal(s)
		want[m.servicesPrefix()+s.Service+"/"+s.Peer] = string(body)
	}
	g, err := m.cli.Get(ctx, m.servicesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("etcdfleet: reading the services: %w", err)
	}
	var ops []clientv3.Op
	for _, kv := range g.Kvs {
		var s ServiceMember
		if json.Unmarshal(kv.Value, &s) != nil || s.Host != self {
			continue
		}
		if body, ok := want[string(kv.Key)]; ok && body == string(kv.Value) && clientv3.LeaseID(kv.Lease) == lease {
			delete(want, string(kv.Key)) // unchanged: no write, no watch event
			continue
		} else if !ok {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		ops = append(ops, clientv3.OpPut(k, want[k], clientv3.WithLease(lease)))
	}
	for len(ops) > 0 {
		n := min(len(ops), 64) // etcd's default --max-txn-ops is 128
		if _, err := m.cli.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
			return fmt.Errorf("etcdfleet: publishing host %s's services: %w", self, err)
		}
		ops = ops[n:]
	}
	return nil
}

// Services lists the services with members, by id, each member by peer,
// those after id after only (after "" lists all), at most limit of them
// (limit ≤ 0: all); and the revision read at.
func (m *Member) Services(ctx context.Context, after string, limit int) ([]Service, int64, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	g, err := m.cli.Get(ctx, m.servicesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("etcdfleet: reading the services: %w", err)
	}
	var out []Service
	for _, s := range m.members(g.Kvs) {
		if after != "" && s.Service <= after {
			continue
		}
		if n := len(out); n == 0 || out[n-1].ID != s.Service {
			if limit > 0 && len(out) == limit {
				break
			}
			out = append(out, Service{ID: s.Service})
		}
		out[len(out)-1].Members = append(out[len(out)-1].Members, s)
	}
	return out, g.Header.Revision, nil
}

// members decodes service member keys, sorted by service and peer.
func (m *Member) members(kvs []*mvccpb.KeyValue) []ServiceMember {
	out := make([]ServiceMember, 0, len(kvs))
	for _, kv := range kvs {
		var s ServiceMember
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			m.o.Log.Warn("fleet: unreadable service member", "key", string(kv.Key), "err", err)
			continue
		}
		rest := strings.TrimPrefix(string(kv.Key), m.servicesPrefix())
		svc, peer, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		s.Service, s.Peer = svc, peer
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b ServiceMember) int {
		if c := strings.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		return strings.Compare(a.Peer, b.Peer)
	})
	return out
}

// ServiceMembers lists service id's members by peer and says at which
// revision.
func (m *Member) ServiceMembers(ctx context.Context, id string) ([]ServiceMember, int64, error) {
	if err := ValidServiceID(id); err != nil {
		return nil, 0, err
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	g, err := m.cli.Get(ctx, m.servicesPrefix()+id+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("etcdfleet: reading service %s: %w", id, err)
	}
	return m.members(g.Kvs), g.Header.Revision, nil
}

// ServiceSnapshot is a service's members at a revision.
type ServiceSnapshot struct {
	Members  []ServiceMember
	Revision int64
}

// WatchService sends service id's members after every change until ctx
// ends, the latest only when the reader falls behind; the first at once.
// The channel is closed when ctx ends.
func (m *Member) WatchService(ctx context.Context, id string) <-chan ServiceSnapshot {
	return watchPrefix(ctx, m, m.servicesPrefix()+id+"/", func(ctx context.Context) (ServiceSnapshot, int64, error) {
		ms, rev, err := m.ServiceMembers(ctx, id)
		return ServiceSnapshot{Members: ms, Revision: rev}, rev, err
	})
}

// ServicesSnapshot is every service with members at a revision.
type ServicesSnapshot struct {
	Services []Service
	Revision int64
}

// WatchServices is WatchService for every service at once.
func (m *Member) WatchServices(ctx context.Context) <-chan ServicesSnapshot {
	return watchPrefix(ctx, m, m.servicesPrefix(), func(ctx context.Context) (ServicesSnapshot, int64, error) {
		ss, rev, err := m.Services(ctx, "", 0)
		return ServicesSnapshot{Services: ss, Revision: rev}, rev, err
	})
}

// watchPrefix sends list's answer at once and after every change under
// prefix until ctx ends (retrying a second after a failure), the latest
// only when the reader falls behind; the channel is closed when ctx ends.
func watchPrefix[T any](ctx context.Context, m *Member, prefix string, list func(context.Context) (T, int64, error)) <-chan T {
	out := make(chan T, 1)
	once := func() error {
		v, rev, err := list(ctx)
		if err != nil {
			return err
		}
		sendLatest(out, v)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		for w := range m.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if err := w.Err(); err != nil {
				return err
			}
			v, _, err := list(ctx)
			if err != nil {
				return err
			}
			sendLatest(out, v)
		}
		return ctx.Err()
	}
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			if err := once(); err != nil && ctx.Err() == nil {
				m.o.Log.Warn("fleet: watching", "prefix", prefix, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return out
}

// Config reads the control-plane configuration: its JSON (nil when none
// was ever put) and its revision (0 then).
func (m *Member) Config(ctx context.Context) (json.RawMessage, int64, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	g, err := m.cli.Get(ctx, m.configKey())
	if err != nil {
		return nil, 0, fmt.Errorf("etcdfleet: reading the control-plane configuration: %w", err)
	}
	if len(g.Kvs) == 0 {
		return nil, 0, nil
	}
	return json.RawMessage(g.Kvs[0].Value), g.Kvs[0].ModRevision, nil
}

// PutConfig replaces the control-plane configuration if its revision is
// still expected (0: none was ever put), answering the new revision;
// ErrStaleRevision (and the current revision) otherwise.
func (m *Member) PutConfig(ctx context.Context, expected int64, doc json.RawMessage) (int64, error) {
	if !json.Valid(doc) {
		return 0, errors.New("etcdfleet: the control-plane configuration is not JSON")
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	k := m.configKey()
	r, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", expected)).
		Then(clientv3.OpPut(k, string(doc))).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcdfleet: writing the control-plane configuration: %w", err)
	}
	if !r.Succeeded {
		var cur int64
		if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			cur = kvs[0].ModRevision
		}
		return cur, ErrStaleRevision
	}
	return r.Header.Revision, nil
}
