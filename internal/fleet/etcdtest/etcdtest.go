// Package etcdtest starts real etcd members for tests (package etcdembed
// on 127.0.0.1, free ports, t.TempDir data directories): one member, or a
// cluster of several, stopped when the test ends.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/berth-dev/berth/internal/fleet/etcdembed"
)

// Cluster is a running test cluster.
type Cluster struct {
	Members []*etcdembed.Server
}

// Options tune a test cluster.
type Options struct {
	// Fsync keeps etcd's fsyncs (benchmarks of the real write path);
	// tests skip them.
	Fsync bool
	// Host is the address the members listen on; default 127.0.0.1. A
	// test's own network namespaces reach members on their bridge's
	// address (package fleetnet).
	Host string
}

// Start starts a cluster of n members and waits for its quorum. It fails t
// when the cluster does not come up.
func Start(t testing.TB, n int, o ...Options) *Cluster {
	t.Helper()
	var opt Options
	if len(o) > 0 {
		opt = o[0]
	}
	var last error
	for range 3 { // a port taken between picking and binding: try again
		c, err := start(t, n, opt)
		if err == nil {
			return c
		}
		last = err
	}
	t.Fatalf("etcdtest: %v", last)
	return nil
}

func start(t testing.TB, n int, opt Options) (*Cluster, error) {
	host := opt.Host
	if host == "" {
		host = "127.0.0.1"
	}
	ports, err := freePorts(host, 2*n)
	if err != nil {
		return nil, err
	}
	token := fmt.Sprintf("test-%d", ports[0])
	cfgs := make([]etcdembed.Config, n)
	var initial []string
	for i := range n {
		cfgs[i] = etcdembed.Config{
			Name:             fmt.Sprintf("m%d", i),
			Dir:              t.TempDir(),
			ClientURL:        fmt.Sprintf("http://%s:%d", host, ports[2*i]),
			PeerURL:          fmt.Sprintf("http://%s:%d", host, ports[2*i+1]),
			AllowNonLoopback: host != "127.0.0.1",
			ClusterToken:     token,
			NoFsync:          !opt.Fsync,
			StartTimeout:     90 * time.Second,
			LogLevel:         "fatal", // its shutdown and election noise; a failure to start is an error returned
		}
		initial = append(initial, cfgs[i].Name+"="+cfgs[i].PeerURL)
	}
	c := &Cluster{Members: make([]*etcdembed.Server, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range n {
		cfgs[i].InitialCluster = strings.Join(initial, ",")
		wg.Go(func() { c.Members[i], errs[i] = etcdembed.Start(ctx, cfgs[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, m := range c.Members {
				if m != nil {
					m.Close()
				}
			}
			return nil, fmt.Errorf("member %d: %w", i, err)
		}
	}
	t.Cleanup(c.Close)
	return c, nil
}

// Endpoints are every member's client URLs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.Endpoints()...)
	}
	return out
}

// Client opens a client of the whole cluster, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Leader is the index of the member that leads now, or -1.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if m.IsLeader() {
			return i
		}
	}
	return -1
}

// StopMember stops member i and leaves the others running, as a crash of
// that member would (a test of failover stops the Leader). Its data
// directory is kept until the test ends; Close skips it.
func (c *Cluster) StopMember(i int) {
	c.Members[i].Close()
}

// Close stops every member.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		m.Close()
	}
}

func freePorts(host string, n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
