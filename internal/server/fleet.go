package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/admin"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/fleet/etcdembed"
	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/hop"
	"github.com/berth-dev/berth/internal/metrics"
)

// FleetOptions join this host to a fleet of berths on etcd (berth serve
// --etcd, --etcd-dev, --host-id, --fleet-slots). The zero value runs no
// etcd code: berth alone, as before.
type FleetOptions struct {
	// Endpoints are the etcd cluster's client URLs (--etcd).
	Endpoints []string
	// CAFile, CertFile and KeyFile are PEM files for TLS to etcd: the CA
	// its certificates are checked with, and this host's client
	// certificate and key (--etcd-ca, --etcd-cert, --etcd-key).
	CAFile, CertFile, KeyFile string
	// Dev embeds a single etcd member in <DataDir>/etcd, its clients on
	// loopback only (--etcd-dev); DevClientURL and DevPeerURL default to
	// http://127.0.0.1:2379 and http://127.0.0.1:2380.
	Dev                      bool
	DevClientURL, DevPeerURL string
	// HostID is this host's id in the fleet; default the id kept in
	// <DataDir>/host-id, made on first use from the host name.
	HostID string
	// Address is the address this host advertises; default the admin
	// listener's.
	Address string
	// Slots is the fleet-wide Computer limit (--fleet-slots); 0: none,
	// the fleet only lists its hosts.
	Slots int
	// LeaseTTL is the registration lease's TTL; default 5 s.
	LeaseTTL time.Duration
	// Prefix is the fleet's key prefix; default etcdfleet.DefaultPrefix.
	Prefix string
	// Listen is the address of the hop listener (--fleet-listen): the
	// other hosts' requests for this host's replicas arrive there over
	// mutual TLS with fleet CA certificates (package fleet/hop) and go
	// to the data plane's handler, and their requests on this host's
	// Computers to its Computer API (fleetcomputers.go). Empty: none. It needs the fleet CA and
	// this host's certificate (CAFile, CertFile, KeyFile, as FromDataDir
	// fills them from fleet.json).
	Listen string

	// member is the embedded etcd member of the fleet's first host, with
	// mutual TLS (FromDataDir: berth fleet init).
	member *etcdembed.Config
}

func (f FleetOptions) enabled() bool { return f.Dev || len(f.Endpoints) > 0 }

// Check refuses fleet settings that would be ignored or contradict.
func (f FleetOptions) Check() error {
	switch {
	case f.Dev && len(f.Endpoints) > 0:
		return errors.New("server: --etcd-dev embeds its own etcd member; give either it or --etcd, not both")
	case !f.enabled() && (f.Slots != 0 || f.HostID != "" || f.CAFile != "" || f.CertFile != "" || f.KeyFile != ""):
		return errors.New("server: --host-id, --fleet-slots and --etcd-ca/--etcd-cert/--etcd-key need a fleet: give --etcd ENDPOINTS or --etcd-dev")
	case f.Slots < 0:
		return fmt.Errorf("server: --fleet-slots %d: want 0 (no fleet limit) or more", f.Slots)
	case (f.CertFile == "") != (f.KeyFile == ""):
		return errors.New("server: --etcd-cert and --etcd-key go together")
	case f.Dev && (f.CAFile != "" || f.CertFile != ""):
		return errors.New("server: the --etcd-dev member serves plain HTTP on loopback; --etcd-ca, --etcd-cert and --etcd-key are for --etcd")
	case f.Listen != "" && !f.enabled():
		return errors.New("server: --fleet-listen needs a fleet: set the data dir up with berth fleet init or join, or give --etcd")
	case f.Listen != "" && (f.CAFile == "" || f.CertFile == ""):
		return errors.New("server: --fleet-listen needs the fleet CA and this host's certificate: set the data dir up with berth fleet init or join, or give --etcd-ca, --etcd-cert and --etcd-key")
	}
	if f.Listen != "" {
		if _, _, err := net.SplitHostPort(f.Listen); err != nil {
			return fmt.Errorf("server: --fleet-listen %q: want HOST:PORT: %w", f.Listen, err)
		}
	}
	if f.HostID != "" {
		if err := etcdfleet.ValidHostID(f.HostID); err != nil {
			return fmt.Errorf("server: --host-id: %w", err)
		}
	}
	return nil
}

// fleetMember is this host in its fleet; nil when berth runs alone.
type fleetMember struct {
	m    *etcdfleet.Member
	cli  *clientv3.Client
	etcd *etcdembed.Server // the --etcd-dev member; nil otherwise
	// stopWatch stops following the fleet tokens (mirrorFleetTokens).
	stopWatch func()
	// computers is the Computer manager, once made: the one a fence
	// stops Computers through.
	computers atomic.Pointer[computer.Manager]
	// placer, once made, is what a fence stops the placed vm
	// deployments' replicas through.
	placer atomic.Pointer[placer]
}

// fenced stops the Computers whose fleet slots this host may have lost
// (etcdfleet.Options.OnFenced): another host may run Computers in those
// slots by now, and the fleet's limit must hold. Their workspaces stay;
// starting one again reserves a slot anew.
func (fm *fleetMember) fenced(log *slog.Logger, ids []string) {
	if p := fm.placer.Load(); p != nil {
		p.fenced()
	}
	m := fm.computers.Load()
	if m == nil {
		return
	}
	// At once and all together: the fence is up before the lease can lapse,
	// and the Computers must be gone by then too.
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := m.Fence(ctx, id); err != nil {
				log.Error("fleet: stopping a Computer whose fleet slot this host lost", "computer", id, "err", err)
			} else {
				log.Warn("fleet: stopped a Computer: this host lost its fleet lease, and with it the Computer's fleet slot", "computer", id)
			}
		})
	}
	wg.Wait()
}

// startFleetMember starts this host's embedded etcd member, if f has one
// (--etcd-dev, or fleet.json's on the first host); nil otherwise.
func startFleetMember(ctx context.Context, f FleetOptions, dataDir string, log *slog.Logger) (*etcdembed.Server, error) {
	switch {
	case f.Dev:
		e, err := etcdembed.Start(ctx, etcdembed.Config{
			Name: "berth", Dir: filepath.Join(dataDir, "etcd"),
			ClientURL: f.DevClientURL, PeerURL: f.DevPeerURL, LogLevel: "error",
		})
		if err != nil {
			return nil, fmt.Errorf("server: --etcd-dev: %w", err)
		}
		log.Info("fleet: embedded etcd member (dev mode)", "dir", filepath.Join(dataDir, "etcd"), "endpoints", strings.Join(e.Endpoints(), ","))
		return e, nil
	case f.member != nil:
		e, err := etcdembed.Start(ctx, *f.member)
		if err != nil {
			return nil, fmt.Errorf("server: the fleet's etcd member (berth fleet init): %w", err)
		}
		log.Info("fleet: embedded etcd member (mutual TLS)", "dir", f.member.Dir, "client_url", f.member.ClientURL, "peer_url", f.member.PeerURL)
		return e, nil
	}
	return nil, nil
}

// openFleet starts the --etcd-dev member, connects to etcd and registers
// this host (its address is filled once the listeners are bound).
func (s *Server) openFleet(ctx context.Context, driverNames []string) (err error) {
	f, err := s.o.Fleet.FromDataDir(s.o.DataDir)
	if err != nil {
		return err
	}
	if err := f.Check(); err != nil {
		return err
	}
	if !f.enabled() {
		return nil
	}
	fm := &fleetMember{}
	defer func() {
		if err != nil {
			fm.close(s)
		}
	}()
	endpoints := f.Endpoints
	// The embedded member may be up already: New starts it before an etcd
	// store, which then owns it (it stops after the store's last write).
	member := s.storeMember()
	if member == nil {
		if fm.etcd, err = startFleetMember(ctx, f, s.o.DataDir, s.log); err != nil {
			return err
		}
		member = fm.etcd
	}
	if f.Dev {
		endpoints = member.Endpoints()
	}
	tlsConf, err := etcdTLS(f)
	if err != nil {
		return err
	}
	if fm.cli, err = clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second, TLS: tlsConf, Logger: zap.NewNop(),
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
	}); err != nil {
		return fmt.Errorf("server: etcd client: %w", err)
	}
	id := f.HostID
	if id == "" {
		if id, err = loadHostID(s.o.DataDir); err != nil {
			return err
		}
	}
	usage, _ := metrics.NewHostSampler("/proc").Sample()
	host := etcdfleet.Host{
		ID: id, Address: f.Address, Drivers: slices.Sorted(slices.Values(driverNames)), Version: s.o.Revision, StartedAt: time.Now().UTC(),
		Capacity: etcdfleet.Capacity{
			MaxActive: s.o.ComputerCapacity.MaxActive, ReservedHeadroom: s.o.ComputerCapacity.ReservedHeadroom,
			CPUs: max(usage.CPUCount, runtime.NumCPU()), MemoryBytes: int64(usage.MemoryTotalBytes),
		},
	}
	jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if fm.m, err = etcdfleet.Join(jctx, fm.cli, host, etcdfleet.Options{
		Prefix: f.Prefix, LeaseTTL: f.LeaseTTL, SlotLimit: f.Slots, RetryAfter: 5 * time.Second,
		OpTimeout: 5 * time.Second, Log: s.log,
		OnFenced: func(ids []string) { fm.fenced(s.log, ids) },
	}); err != nil {
		return fmt.Errorf("server: joining the fleet at %s: %w", strings.Join(endpoints, ","), err)
	}
	s.fleetHost = fm
	s.fleetChanged = make(chan struct{}, 1)
	// The services' members before the deployments load, so that a
	// discovery-backed one starts with its upstreams.
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	defer lcancel()
	if err := s.discovered.load(lctx, fm.m); err != nil {
		s.log.Warn("fleet: reading the services; discovery-backed deployments start without upstreams", "err", err)
	}
	s.log.Info("fleet: joined", "host", id, "endpoints", strings.Join(endpoints, ","), "fleet_slots", f.Slots)
	return nil
}

// advertise fills this host's address, and its hop listener's, once the
// listeners are bound.
func (s *Server) advertise(ctx context.Context) error {
	if s.fleetHost == nil || s.o.Fleet.Address != "" && s.hopLn == nil {
		return nil
	}
	addr := cmp.Or(s.o.Fleet.Address, s.AdminAddr())
	hopAddr := s.HopAddr()
	if err := s.fleetHost.m.Update(ctx, func(h *etcdfleet.Host) { h.Address, h.HopAddress = addr, hopAddr }); err != nil {
		return fmt.Errorf("server: fleet: %w", err)
	}
	return nil
}

// closeFleet leaves the fleet (the lease revoked: the host leaves the list
// and its Computers' fleet slots are freed) and stops the dev member.
func (s *Server) closeFleet() {
	if s.fleetHost != nil {
		s.fleetHost.close(s)
		s.fleetHost = nil
	}
}

func (fm *fleetMember) close(s *Server) {
	if fm.stopWatch != nil {
		fm.stopWatch()
	}
	if fm.m != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := fm.m.Leave(ctx); err != nil {
			s.log.Warn("fleet: leaving", "err", err)
		} else {
			s.log.Info("fleet: left", "host", fm.m.ID())
		}
		cancel()
	}
	if fm.cli != nil {
		fm.cli.Close()
	}
	if fm.etcd != nil {
		fm.etcd.Close()
	}
}

// fleetHostID is this host's fleet id; "" without a fleet.
func (s *Server) fleetHostID() string {
	if s.fleetHost == nil {
		return ""
	}
	return s.fleetHost.m.ID()
}

// computerSlots are the fleet's slots as the Computer manager wants them;
// nil without a fleet limit.
func (s *Server) computerSlots() computer.FleetSlots {
	if s.fleetHost == nil || s.o.Fleet.Slots <= 0 {
		return nil
	}
	return fleetSlots{s.fleetHost.m}
}

// adminFleet is the fleet as the admin API wants it; nil without one.
func (s *Server) adminFleet() admin.FleetHosts {
	if s.fleetHost == nil {
		return nil
	}
	return fleetHosts{s.fleetHost.m}
}

// fleetSlots adapts etcdfleet to computer.FleetSlots.
type fleetSlots struct{ m *etcdfleet.Member }

func (f fleetSlots) Reserve(ctx context.Context, id string) (computer.FleetReservation, error) {
	r, err := f.m.Reserve(ctx, id)
	if err != nil {
		if errors.Is(err, etcdfleet.ErrCordoned) {
			return computer.FleetReservation{}, fmt.Errorf("host %s is cordoned or draining: it starts no Computers until it is uncordoned (berth host uncordon %s)", f.m.ID(), f.m.ID())
		}
		return computer.FleetReservation{}, err
	}
	return computer.FleetReservation{
		Reserved: r.Kind == etcdfleet.Reserved, Running: r.Running, Limit: r.Limit,
		RetryAfter: time.Duration(r.RetryAfterSeconds) * time.Second,
	}, nil
}

func (f fleetSlots) Release(ctx context.Context, id string) error { return f.m.Release(ctx, id) }

// fleetHosts adapts etcdfleet to admin.FleetHosts.
type fleetHosts struct{ m *etcdfleet.Member }

func (f fleetHosts) Hosts(ctx context.Context) (apitype.FleetHosts, error) {
	hs, err := f.m.Hosts(ctx)
	if err != nil {
		return apitype.FleetHosts{}, err
	}
	out := apitype.FleetHosts{Self: f.m.ID(), Hosts: make([]apitype.FleetHost, 0, len(hs)), Slots: apitype.FleetSlots{Limit: f.m.Limit()}}
	for _, h := range hs {
		v := apitype.FleetHost{
			ID: h.ID, Address: h.Address, Drivers: h.Drivers, Version: h.Version, StartedAt: h.StartedAt.Unix(),
			State: string(h.State), Slots: h.Slots,
			Capacity: apitype.FleetHostCapacity{MaxActive: h.Capacity.MaxActive, ReservedHeadroom: h.Capacity.ReservedHeadroom, CPUs: h.Capacity.CPUs, MemoryBytes: h.Capacity.MemoryBytes},
		}
		if v.Drivers == nil {
			v.Drivers = []string{}
		}
		if !h.StateSince.IsZero() {
			v.StateSince = h.StateSince.Unix()
		}
		out.Hosts = append(out.Hosts, v)
		out.Slots.Held += h.Slots
	}
	return out, nil
}

func (f fleetHosts) SetHostState(ctx context.Context, id, state string) error {
	err := f.m.SetState(ctx, id, etcdfleet.State(state))
	if errors.Is(err, etcdfleet.ErrNoHost) {
		return admin.ErrNoFleetHost
	}
	return err
}

// etcdTLS is the TLS configuration of the etcd client; nil without
// --etcd-ca and --etcd-cert.
func etcdTLS(f FleetOptions) (*tls.Config, error) {
	if f.CAFile == "" && f.CertFile == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("server: --etcd-ca: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server: --etcd-ca: %s holds no PEM certificate", f.CAFile)
		}
	}
	if f.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("server: --etcd-cert/--etcd-key: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// loadHostID reads this host's fleet id from <dataDir>/host-id, making one
// on first use: the host name (cut to what a host id may hold) and eight
// random hex digits, so two hosts of one name differ.
func loadHostID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "host-id")
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if err := etcdfleet.ValidHostID(id); err != nil {
			return "", fmt.Errorf("server: %s: %w", path, err)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("server: host id: %w", err)
	}
	name, _ := os.Hostname()
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '-'
	}, name)
	if len(name) > 40 {
		name = name[:40]
	}
	if name == "" {
		name = "host"
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	id := name + "-" + hex.EncodeToString(rnd[:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("server: host id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("server: host id: %w", err)
	}
	return id, nil
}

// openHop binds the hop listener (FleetOptions.Listen) in front of the
// data plane's handler, with the fleet CA and this host's certificate.
func (s *Server) openHop(h http.Handler) error {
	f, err := s.o.Fleet.FromDataDir(s.o.DataDir)
	if err != nil {
		return err
	}
	if s.fleetHost == nil {
		return nil
	}
	if f.Listen == "" {
		// No listener, but a fleet certificate still lets this host's
		// discovery-backed deployments reach the others' hop listeners.
		if f.CAFile != "" && f.CertFile != "" {
			if c, err := hop.ConfigFromFiles(f.CAFile, f.CertFile, f.KeyFile, s.fleetHost.m.ID()); err == nil {
				c.Revoked = &s.revoked
				s.setHopClient(c)
			} else {
				s.log.Info("fleet: no hop client (the etcd certificates are not fleet host certificates); members over the hop are not reachable from here", "err", err)
			}
		}
		return nil
	}
	c, err := hop.ConfigFromFiles(f.CAFile, f.CertFile, f.KeyFile, s.fleetHost.m.ID())
	if err != nil {
		return fmt.Errorf("server: --fleet-listen: %w", err)
	}
	c.Revoked = &s.revoked
	s.setHopClient(c)
	c.ReadHeaderTimeout, c.IdleTimeout = s.o.ReadHeaderTimeout, s.o.IdleTimeout
	admin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := s.hopAdmin.Load(); a != nil {
			(*a).ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		http.Error(w, "starting", http.StatusServiceUnavailable)
	})
	if s.hopSrv, err = hop.NewServer(hop.ServerConfig{Config: c, Handler: h, Admin: admin, Log: s.log}); err != nil {
		return fmt.Errorf("server: --fleet-listen: %w", err)
	}
	if s.hopLn, err = net.Listen("tcp", f.Listen); err != nil {
		return fmt.Errorf("server: --fleet-listen: %w", err)
	}
	s.self.Add(s.hopLn.Addr())
	return nil
}

// HopAddr is the bound address of the hop listener; "" when there is none.
// An unspecified host (0.0.0.0) is replaced by the advertised address's.
func (s *Server) HopAddr() string {
	if s.hopLn == nil {
		return ""
	}
	a := s.hopLn.Addr().(*net.TCPAddr)
	if !a.IP.IsUnspecified() {
		return a.String()
	}
	host, _, err := net.SplitHostPort(cmp.Or(s.o.Fleet.Address, s.AdminAddr()))
	if err != nil || host == "" {
		return a.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// setHopClient makes c this host's hop client and rebuilds the
// discovery-backed deployments, which left hop peers out until now.
func (s *Server) setHopClient(c hop.Config) {
	s.hopClient.Store(&c)
	for _, e := range s.registry.List() {
		if e.Spec.Discovery != nil {
			s.registry.Refresh(e.Spec.ID)
		}
	}
}

// hopTLS is registry.Options.HopTLS: the TLS of the hop to hostID, nil
// without a hop client.
func (s *Server) hopTLS(hostID string) *tls.Config {
	c := s.hopClient.Load()
	if c == nil {
		return nil
	}
	return c.ClientTLS(hostID)
}
