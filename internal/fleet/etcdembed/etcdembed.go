// Package etcdembed runs an etcd member inside berth, with
// go.etcd.io/etcd/server/v3/embed: the single member of `berth serve
// --etcd-dev` (<data-dir>/etcd, clients on loopback only), and the members
// of the fleet tests' clusters (package etcdtest). A production fleet runs
// its own etcd cluster and gives berth its endpoints (--etcd).
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config is one member.
type Config struct {
	// Name is the member's name; default "berth".
	Name string
	// Dir is its data directory (created 0700 by etcd).
	Dir string
	// ClientURL and PeerURL are where it listens, http://host:port; the
	// defaults are http://127.0.0.1:2379 and http://127.0.0.1:2380. Both
	// must be loopback addresses unless AllowNonLoopback.
	ClientURL, PeerURL string
	AllowNonLoopback   bool
	// TLS, when set, serves clients and peers over https with mutual
	// TLS: a client or peer must present a certificate of TLS.CAFile
	// (ClientURL and PeerURL are then https://, and need not be
	// loopback: without a certificate of the fleet CA nothing connects).
	TLS *TLSFiles
	// InitialCluster is name=peerURL,… for every member of a new cluster;
	// empty: this member alone.
	InitialCluster string
	// ClusterToken tells clusters apart; default "berth-fleet".
	ClusterToken string
	// LogLevel is etcd's own log level; default "error".
	LogLevel string
	// NoFsync skips fsync (tests only: a crash may lose acknowledged
	// writes).
	NoFsync bool
	// StartTimeout bounds the wait for the member to be ready (for a
	// cluster: for a quorum to form); default 60s.
	StartTimeout time.Duration
}

// TLSFiles are the member's certificate, its key and the CA clients and
// peers are checked with.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
	// CRLFile, when set and the file exists at Start, is the CA's
	// certificate revocation list (DER) the member checks every new
	// client and peer connection against: etcd reads the file again at
	// each handshake, so a CRL rewritten later (atomically: a missing or
	// torn file fails every handshake) applies to the next connections.
	CRLFile string
}

// Server is a running member.
type Server struct {
	e    *embed.Etcd
	cfg  Config
	once sync.Once
	logs *gatedWriter
}

// Start starts a member and waits until it serves clients.
func Start(ctx context.Context, c Config) (*Server, error) {
	c.Name = defaultString(c.Name, "berth")
	c.ClientURL = defaultString(c.ClientURL, "http://127.0.0.1:2379")
	c.PeerURL = defaultString(c.PeerURL, "http://127.0.0.1:2380")
	c.ClusterToken = defaultString(c.ClusterToken, "berth-fleet")
	c.LogLevel = defaultString(c.LogLevel, "error")
	if c.StartTimeout <= 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.Dir == "" {
		return nil, errors.New("etcdembed: a data directory is required")
	}
	scheme := "http"
	if c.TLS != nil {
		scheme = "https"
	}
	cu, err := parseURL(c.ClientURL, scheme, c.AllowNonLoopback || c.TLS != nil)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: client URL: %w", err)
	}
	pu, err := parseURL(c.PeerURL, scheme, c.AllowNonLoopback || c.TLS != nil)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: peer URL: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = c.Name, c.Dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{listenURL(cu)}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{listenURL(pu)}, []url.URL{*pu}
	if c.TLS != nil {
		for _, ti := range []*transport.TLSInfo{&cfg.ClientTLSInfo, &cfg.PeerTLSInfo} {
			ti.CertFile, ti.KeyFile, ti.TrustedCAFile, ti.ClientCertAuth = c.TLS.CertFile, c.TLS.KeyFile, c.TLS.CAFile, true
		}
		if c.TLS.CRLFile != "" {
			switch _, err := os.Stat(c.TLS.CRLFile); {
			case err == nil:
				cfg.ClientTLSInfo.CRLFile, cfg.PeerTLSInfo.CRLFile = c.TLS.CRLFile, c.TLS.CRLFile
			case !errors.Is(err, os.ErrNotExist):
				return nil, fmt.Errorf("etcdembed: CRL file: %w", err)
			}
		}
	}
	cfg.InitialCluster = c.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = c.Name + "=" + pu.String()
	}
	cfg.InitialClusterToken = c.ClusterToken
	// etcd's own log, on stderr, silenced while Close runs: its listeners
	// report being closed as errors.
	var level zapcore.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("etcdembed: log level: %w", err)
	}
	logs := &gatedWriter{w: os.Stderr}
	lg := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), level))
	cfg.Logger, cfg.LogLevel, cfg.ZapLoggerBuilder = "zap", c.LogLevel, embed.NewZapLoggerBuilder(lg)
	cfg.UnsafeNoFsync = c.NoFsync
	// No metrics listener, no gateway: clients and peers only.
	cfg.ListenMetricsUrls = nil
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: %w", err)
	}
	t := time.NewTimer(c.StartTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return &Server{e: e, cfg: c, logs: logs}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdembed: %s: %w", c.Name, err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("etcdembed: %s: %w", c.Name, ctx.Err())
	case <-t.C:
		e.Close()
		return nil, fmt.Errorf("etcdembed: %s: not ready after %s", c.Name, c.StartTimeout)
	}
}

// Name is the member's name.
func (s *Server) Name() string { return s.cfg.Name }

// Endpoints are its client URLs.
func (s *Server) Endpoints() []string { return []string{s.cfg.ClientURL} }

// IsLeader reports whether this member is the cluster's leader now.
func (s *Server) IsLeader() bool { return s.e.Server.Leader() == s.e.Server.MemberID() }

// Close stops the member; it is safe to call twice.
func (s *Server) Close() {
	s.once.Do(func() {
		s.logs.closed.Store(true)
		s.e.Close()
	})
}

// gatedWriter writes to w until closed.
type gatedWriter struct {
	w      io.Writer
	closed atomic.Bool
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	if g.closed.Load() {
		return len(p), nil
	}
	return g.w.Write(p)
}

func parseURL(s, scheme string, allowNonLoopback bool) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != scheme || u.Port() == "" || u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%q: want %s://host:port", s, scheme)
	}
	u.Path = ""
	if !allowNonLoopback {
		ip := net.ParseIP(u.Hostname())
		if ip == nil && !strings.EqualFold(u.Hostname(), "localhost") || ip != nil && !ip.IsLoopback() {
			return nil, fmt.Errorf("%q: an embedded etcd member listens on loopback addresses only", s)
		}
	}
	return u, nil
}

// listenURL is where a member advertised at u listens: u itself when it
// names an IP address, every address at its port when it names a host
// (etcd binds IP addresses only; a host name other than localhost is
// allowed only with TLS, whose client certificates guard every address).
func listenURL(u *url.URL) url.URL {
	l := *u
	switch {
	case strings.EqualFold(u.Hostname(), "localhost"):
		l.Host = net.JoinHostPort("127.0.0.1", u.Port())
	case net.ParseIP(u.Hostname()) == nil:
		l.Host = net.JoinHostPort("0.0.0.0", u.Port())
	}
	return l
}

func defaultString(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
